// RDMA WRITE into the memory of another process: a child process owns the
// responder QP and an MR on page-aligned anonymous memory (the kind a
// bandwidth test registers); the parent's QP writes into it. Checks that the
// data lands, that the message takes its PSNs (a SEND after it is received),
// and that the remote access rules hold across processes as they do within
// one.

#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <signal.h>
#include <linux/capability.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "conformance/lib/backend_profile.h"
#include "conformance/lib/blocking_call.h"
#include "conformance/lib/errno_capture.h"
#include "conformance/lib/event_wait.h"
#include "conformance/lib/fd_poll.h"
#include "conformance/lib/pipe.h"
#include "conformance/lib/qp_pair.h"
#include "conformance/lib/sim_control.h"
#include "conformance/lib/skip_if.h"
#include "conformance/lib/timeouts.h"
#include "conformance/lib/userfault_buffer.h"
#include "conformance/lib/watchdog.h"

namespace conformance {
namespace {

// Several path MTUs: the message is segmented on the wire.
constexpr size_t kLength = 65536;
// A READ long enough that simverbs has the requester read it itself, where it may
// (sim/src/qp.h, kMinPlacedReadBytes).
constexpr size_t kLargeRead = size_t{1} << 20;
// SENDs long enough that simverbs has the responder read them from the requester's buffer, where
// it may (sim/src/qp.h, kMinPulledSendBytes: 16 KiB): one of exactly that, one of 64 KiB + 5 into a
// receive of three SGEs, one of 1 MiB with immediate data.
constexpr size_t kLargeSends[] = {16384, 65536 + 5, size_t{1} << 20};
constexpr size_t kLargeSendBytes = 16384 + 65536 + 5 + (size_t{1} << 20);

// What the child tells the parent: its QP and the buffer to write into.
struct Target {
  uint32_t qpn = 0;
  uint32_t rkey = 0;
  uint64_t addr = 0;
  pid_t pid = 0;  // the child process
};

// The bytes at p, read while another process may be writing them.
std::vector<uint8_t> Read(const uint8_t* p, size_t length) {
  std::vector<uint8_t> bytes(length);
  for (size_t i = 0; i < length; ++i) bytes[i] = __atomic_load_n(p + i, __ATOMIC_ACQUIRE);
  return bytes;
}

// [p, p + want.size()) holds `want` within `timeout` (polled, bounded).
bool HoldsWithin(const uint8_t* p, const std::vector<uint8_t>& want, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (Read(p, want.size()) != want) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

// [p, p + length) is still zero after `window` (a bounded wait for a
// negative: it cannot prove "never", only "not within this window").
bool StaysZero(const uint8_t* p, size_t length, std::chrono::milliseconds window) {
  const std::vector<uint8_t> zero(length, 0);
  const auto until = std::chrono::steady_clock::now() + window;
  do {
    if (Read(p, length) != zero) return false;
    std::this_thread::yield();
  } while (std::chrono::steady_clock::now() < until);
  return true;
}

// Every thread of `pid` is stopped (SIGSTOP takes effect when each thread next
// enters the kernel, after kill() returned), within `timeout` (polled).
bool StoppedWithin(pid_t pid, std::chrono::milliseconds timeout) {
  const std::string tasks = "/proc/" + std::to_string(pid) + "/task";
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    bool all = true;
    bool any = false;
    if (DIR* dir = opendir(tasks.c_str())) {
      while (const dirent* d = readdir(dir)) {
        if (d->d_name[0] == '.') continue;
        std::ifstream stat(tasks + "/" + d->d_name + "/stat");
        std::string line;
        std::getline(stat, line);
        const size_t paren = line.rfind(") ");
        if (paren == std::string::npos || paren + 2 >= line.size()) continue;
        any = true;
        const char state = line[paren + 2];
        all &= state == 'T' || state == 't';
      }
      closedir(dir);
    }
    if (any && all) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::yield();
  }
}

// The bytes at `addr` in process `pid` (process_vm_readv(2): the test may read
// the memory of its own child), or an empty vector when that is refused.
std::vector<uint8_t> ReadOf(pid_t pid, uint64_t addr, size_t length) {
  std::vector<uint8_t> bytes(length);
  iovec local = {bytes.data(), length};
  iovec remote = {reinterpret_cast<void*>(static_cast<uintptr_t>(addr)), length};
  if (process_vm_readv(pid, &local, 1, &remote, 1, 0) != static_cast<ssize_t>(length)) return {};
  return bytes;
}

// As ReadOf, but read `piece` bytes at a time from the last piece to the first: in a stream whose
// pieces land in order, a piece read here was there before every piece in front of it was read,
// so a reader that is slow or preempted cannot see a later piece landed and an earlier one not
// (read from the front, the earlier piece may land just after it was read, the later one before).
std::vector<uint8_t> ReadBackwardsOf(pid_t pid, uint64_t addr, size_t length, size_t piece) {
  std::vector<uint8_t> bytes(length);
  std::vector<iovec> local;
  std::vector<iovec> remote;
  for (size_t end = length; end > 0;) {
    const size_t start = end > piece ? end - piece : 0;
    local.push_back({bytes.data() + start, end - start});
    remote.push_back({reinterpret_cast<void*>(static_cast<uintptr_t>(addr + start)), end - start});
    end = start;
  }
  constexpr size_t kIovMax = 1024;  // IOV_MAX: each call takes at most this many
  for (size_t first = 0; first < local.size(); first += kIovMax) {
    const size_t n = std::min(kIovMax, local.size() - first);
    size_t want = 0;
    for (size_t k = first; k < first + n; ++k) want += local[k].iov_len;
    if (process_vm_readv(pid, &local[first], n, &remote[first], n, 0) != static_cast<ssize_t>(want)) return {};
  }
  return bytes;
}

// What the child's buffer is.
enum class Memory {
  kAnonymous,  // private anonymous pages
  kMemfd,      // a memfd mapped shared (its descriptor kept open)
  kShmFile,    // a file in /dev/shm mapped shared, its descriptor closed (as `ib_write_bw --mmap` does)
};

// Whether this process maps a file whose /proc/self/maps name contains `name`.
bool MapsFileNamed(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find(name) != std::string::npos) return true;
  }
  return false;
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14
#endif

// Whether the kernel populates a range on request (MADV_POPULATE_WRITE, Linux 5.14): simverbs
// publishes a shared file only after it has populated the MR's pages.
bool KernelPopulatesWrite() {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* p = mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return false;
  const bool populates = madvise(p, page, MADV_POPULATE_WRITE) == 0;
  munmap(p, page);
  return populates;
}

// The name /proc/<pid>/maps gives the file MapMemory maps for `memory` in process `pid`.
std::string ChildFileName(Memory memory, pid_t pid) {
  return (memory == Memory::kMemfd ? "memfd:cross-process-write-" : "/dev/shm/conformance-write-") +
         std::to_string(pid);
}

// A file name removed when this goes.
struct UnlinkAtEnd {
  std::string path;
  ~UnlinkAtEnd() {
    if (!path.empty()) unlink(path.c_str());
  }
};

// `length` bytes of zeroed memory of the kind `memory` names, or MAP_FAILED (errno). A memfd's
// descriptor stays open; the /dev/shm file's name goes with *name.
void* MapMemory(Memory memory, size_t length, UnlinkAtEnd* name) {
  if (memory == Memory::kAnonymous) {
    return mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  }
  int fd = -1;
  if (memory == Memory::kMemfd) {
    fd = memfd_create(("cross-process-write-" + std::to_string(getpid())).c_str(), MFD_CLOEXEC);
  } else {
    name->path = ChildFileName(memory, getpid());
    fd = open(name->path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  }
  if (fd < 0) return MAP_FAILED;
  void* mem = ftruncate(fd, static_cast<off_t>(length)) == 0
                  ? mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                  : MAP_FAILED;
  if (memory == Memory::kShmFile) {
    const int err = errno;
    close(fd);
    errno = err;
  }
  return mem;
}

// How RunWithChild sets the two ends up, beyond access rights.
struct ChildSetup {
  size_t length = kLength;  // of the child's buffer
  Memory memory = Memory::kAnonymous;
  bool post_recv = true;
  ibv_qp_type type = IBV_QPT_RC;
  uint8_t rd_atomic = 1;       // max_rd_atomic of a_, max_dest_rd_atomic of the child's QP
  int dest_rd_atomic = -1;     // max_dest_rd_atomic of the child's QP instead, if >= 0
  uint32_t max_send_wr = 16;   // of both QPs
  uint32_t max_send_sge = 1;   // of both QPs
  uint32_t max_recv_sge = 1;   // of both QPs
  uint32_t max_inline_data = 0;  // asked for both QPs (the QP may give more)
  uint8_t retry_cnt = 7;       // of a_
  uint8_t rnr_retry = 7;       // of a_
  uint32_t sq_psn = 0;         // of a_ (the child's QP expects PSN 0 first)
  bool stay_in_rtr = false;    // the child's QP is not moved to RTS
  ibv_comp_channel* parent_recv_channel = nullptr;  // of a_'s receive CQ (a channel of the parent's context)
  bool parent_qp_before_fork = false;  // a_ is made before the child is forked (the child inherits a copy)
};

// Links `wrs` into one list and posts it; returns ibv_post_send's value.
int PostList(ibv_qp* qp, std::vector<ibv_send_wr>* wrs) {
  for (size_t k = 0; k + 1 < wrs->size(); ++k) (*wrs)[k].next = &(*wrs)[k + 1];
  ibv_send_wr* bad = nullptr;
  return ibv_post_send(qp, wrs->data(), &bad);
}

class CrossProcessWriteTest : public QpTest {
 protected:
  void SetUp() override {
    QpTest::SetUp();
    if (HasFatalFailure() || IsSkipped()) return;
    ASSERT_TRUE(src_.Register(pd(), kLength));
  }

  // What the child's body works with: its buffer and MR, its QP and that
  // QP's receive CQ, and the pipe ends to wait for and to tell the parent.
  struct Child {
    uint8_t* buf;
    ibv_mr* mr;
    ibv_qp* qp;
    ibv_cq* recv_cq;
    int from_parent;
    int to_parent;
  };

  // The child: opens its own context, registers setup.length bytes of fresh
  // anonymous memory with `access`, connects a QP of setup.type (`qp_access`) to a_, posts one
  // receive (wr_id 7, the first 64 bytes; unless setup.post_recv is false), tells the
  // parent, then runs `body`.
  // The parent creates a_ after the fork (before it with setup.parent_qp_before_fork),
  // connects it to the child's QP and runs
  // `parent` with the child's target. Each side gets the pipe ends to wait
  // for the other.
  void RunWithChild(unsigned access, unsigned qp_access, const std::function<void(const Child&)>& body,
                    const std::function<void(const Target&, int to_child, int from_child)>& parent,
                    const ChildSetup& setup = {}) {
    EndConfig config;
    config.type = setup.type;
    config.caps.max_send_wr = setup.max_send_wr;
    config.caps.max_send_sge = setup.max_send_sge;
    config.caps.max_recv_sge = setup.max_recv_sge;
    config.caps.max_inline_data = setup.max_inline_data;
    config.send_cqe = static_cast<int>(std::max<uint32_t>(64, setup.max_send_wr));
    Pipe to_parent;
    Pipe to_child;
    ASSERT_GE(to_parent.fds[0], 0);
    ASSERT_GE(to_child.fds[0], 0);
    const ibv_ah_attr address = LocalAddress();
    EndConfig parent_config = config;
    parent_config.recv_channel = setup.parent_recv_channel;
    if (setup.parent_qp_before_fork) {
      ASSERT_TRUE(CreateEnd(&a_, parent_config));
    }
    ChildResult result;
    std::thread runner([&] {
      result = RunChecksInChild(
          [&] {
            ContextPtr context = OpenAnotherContext();
            ASSERT_NE(context, nullptr);
            PdPtr pd(ibv_alloc_pd(context.get()));
            ASSERT_NE(pd, nullptr);
            QpEnd end;
            ASSERT_TRUE(CreateEndOn(context.get(), pd.get(), &end, config));
            UnlinkAtEnd name;
            void* mem = MapMemory(setup.memory, setup.length, &name);
            ASSERT_NE(mem, MAP_FAILED) << std::strerror(errno);
            auto* buf = static_cast<uint8_t*>(mem);
            ibv_mr* mr = ibv_reg_mr(pd.get(), buf, setup.length, static_cast<int>(access));
            ASSERT_NE(mr, nullptr);
            // The name is not needed any more (a child killed at its timeout leaves nothing).
            if (!name.path.empty()) unlink(name.path.c_str());
            name.path.clear();
            const Target target{end.qp_num(), mr->rkey, reinterpret_cast<uintptr_t>(buf), getpid()};
            ASSERT_EQ(write(to_parent.fds[1], &target, sizeof target), static_cast<ssize_t>(sizeof target));
            uint32_t parent_qpn = 0;
            ASSERT_TRUE(WaitReadable(to_child.fds[0], kChildTimeout / 2));
            ASSERT_EQ(read(to_child.fds[0], &parent_qpn, sizeof parent_qpn), static_cast<ssize_t>(sizeof parent_qpn));
            ConnectParams params;
            params.access = qp_access;
            params.max_dest_rd_atomic =
                setup.dest_rd_atomic >= 0 ? static_cast<uint8_t>(setup.dest_rd_atomic) : setup.rd_atomic;
            if (setup.stay_in_rtr) {
              ASSERT_TRUE(ModifyToInit(end.get(), port(), params));
              ASSERT_TRUE(ModifyToRtr(end.get(), parent_qpn, address, params));
            } else {
              ASSERT_TRUE(BringUp(end.get(), port(), parent_qpn, address, params));
            }
            if (setup.post_recv) {
              ibv_sge rsge = {reinterpret_cast<uintptr_t>(buf), 64, mr->lkey};
              ASSERT_EQ(PostRecv(end.get(), 7, &rsge, 1), 0);
            }
            ASSERT_EQ(write(to_parent.fds[1], "r", 1), 1);
            body(Child{buf, mr, end.get(), end.recv_cq.get(), to_child.fds[0], to_parent.fds[1]});
          },
          kChildTimeout, "the responder in a child process");
    });
    Target target;
    const bool got_target =
        WaitReadable(to_parent.fds[0], kChildTimeout) &&
        read(to_parent.fds[0], &target, sizeof target) == static_cast<ssize_t>(sizeof target);
    bool child_ready = false;
    ConnectParams parent_params;
    parent_params.max_rd_atomic = setup.rd_atomic;
    parent_params.retry_cnt = setup.retry_cnt;
    parent_params.rnr_retry = setup.rnr_retry;
    parent_params.sq_psn = setup.sq_psn;
    if (got_target && (setup.parent_qp_before_fork || CreateEnd(&a_, parent_config)) &&
        BringUp(a_.get(), port(), target.qpn, address, parent_params)) {
      const uint32_t qpn = a_.qp_num();
      char ready = 0;
      child_ready = write(to_child.fds[1], &qpn, sizeof qpn) == static_cast<ssize_t>(sizeof qpn) &&
                    WaitReadable(to_parent.fds[0], kChildTimeout) && read(to_parent.fds[0], &ready, 1) == 1;
    }
    if (child_ready) parent(target, to_child.fds[1], to_parent.fds[0]);
    runner.join();
    EXPECT_TRUE(got_target) << "the child never sent its QP and buffer";
    EXPECT_TRUE(child_ready) << "the two QPs were not connected";
    EXPECT_TRUE(Passed(result));
  }

  // A child whose buffer READs read: fills it with Pattern(seed, length), tells the parent
  // (WaitForChild), and answers until the parent writes to it.
  static std::function<void(const Child&)> ServePattern(uint8_t seed, size_t length) {
    return [seed, length](const Child& c) {
      const std::vector<uint8_t> pattern = Pattern(seed, length);
      std::memcpy(c.buf, pattern.data(), pattern.size());
      ASSERT_EQ(write(c.to_parent, "p", 1), 1);
      EXPECT_TRUE(WaitReadable(c.from_parent, kChildTimeout - 1000ms));
    };
  }
  // The parent's side: waits until the child has written one byte to say it is done with a
  // step (ServePattern: its buffer is filled).
  static void WaitForChild(int from_child) {
    char step = 0;
    ASSERT_TRUE(WaitReadable(from_child, kChildTimeout / 2));
    ASSERT_EQ(read(from_child, &step, 1), 1);
  }

  // Posts a signaled WRITE of src_ to the child's buffer and waits for its completion.
  ibv_wc Write(const Target& target) {
    ibv_sge sge = src_.Sge(0, kLength);
    ibv_wc wc = {};
    EXPECT_EQ(PostOne(a_.get(), RdmaWr(1, IBV_WR_RDMA_WRITE, &sge, 1, target.addr, target.rkey)), 0);
    EXPECT_TRUE(PollOneCompletion(a_.send_cq.get(), &wc, kChildTimeout / 2));
    return wc;
  }

  // Posts a signaled 16-byte SEND of src_ on a_ and waits for its completion.
  ibv_wc Send(uint64_t wr_id) {
    ibv_sge sge = src_.Sge(0, 16);
    ibv_wc wc = {};
    EXPECT_EQ(PostOne(a_.get(), SendWr(wr_id, &sge, 1)), 0);
    EXPECT_TRUE(PollOneCompletion(a_.send_cq.get(), &wc, kChildTimeout / 2));
    return wc;
  }
  // The child's side: the receive RunWithChild posted completes with success.
  static void ReceiveFirst(const Child& c) {
    ibv_wc wc = {};
    ASSERT_TRUE(PollOneCompletion(c.recv_cq, &wc, kChildTimeout / 2));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
  }
  // The child's side: posts `more` receives after the first, wr_id 8, 9, ..., of 64 bytes each
  // at buf + 64, buf + 128, ...
  static void PostMoreReceives(const Child& c, uint64_t more) {
    for (uint64_t k = 1; k <= more; ++k) {
      ibv_sge rsge = {reinterpret_cast<uintptr_t>(c.buf) + 64 * k, 64, c.mr->lkey};
      ASSERT_EQ(PostRecv(c.qp, 7 + k, &rsge, 1), 0);
    }
  }
  // The child's side: its receives `wcs` (wr_id 7 on, each into its own 64 bytes of the buffer)
  // completed in order with success, each with the next `length` bytes of `sent`.
  static void ExpectSendsReceived(const Child& c, const std::vector<ibv_wc>& wcs, const std::vector<uint8_t>& sent,
                                  size_t length) {
    for (size_t k = 0; k < wcs.size(); ++k) {
      EXPECT_EQ(wcs[k].wr_id, 7 + k);
      EXPECT_EQ(wcs[k].status, IBV_WC_SUCCESS) << DescribeWc(wcs[k]);
      EXPECT_EQ(wcs[k].byte_len, length) << "receive " << 7 + k;
      EXPECT_EQ(Read(c.buf + 64 * k, length), std::vector<uint8_t>(sent.begin() + static_cast<long>(length * k),
                                                                   sent.begin() + static_cast<long>(length * (k + 1))))
          << "receive " << 7 + k;
    }
  }
  // The child's side: ReceiveFirst, then posts another receive (wr_id 8, the next 64 bytes) for a
  // SEND that should not come, and tells the parent (WaitForChild).
  static void ReceiveFirstAndPostAnother(const Child& c) {
    ASSERT_NO_FATAL_FAILURE(ReceiveFirst(c));
    ibv_sge rsge = {reinterpret_cast<uintptr_t>(c.buf) + 64, 64, c.mr->lkey};
    ASSERT_EQ(PostRecv(c.qp, 8, &rsge, 1), 0);
    ASSERT_EQ(write(c.to_parent, "r", 1), 1);
  }

  // A WRITE the child's side refuses (MR `access`, QP `qp_access`): it
  // completes with `status`, and the child's buffer is still zero.
  void ExpectWriteRefused(unsigned access, unsigned qp_access, ibv_wc_status status) {
    RunWithChild(
        access, qp_access,
        [](const Child& c) {
          ASSERT_TRUE(WaitReadable(c.from_parent, kChildTimeout / 2));
          EXPECT_EQ(std::vector<uint8_t>(c.buf, c.buf + kLength), std::vector<uint8_t>(kLength, 0));
        },
        [&](const Target& target, int to_child, int) {
          src_.FillPattern(4);
          const ibv_wc wc = Write(target);
          EXPECT_EQ(wc.status, status) << DescribeWc(wc);
          EXPECT_EQ(write(to_child, "x", 1), 1);
        });
  }

  // The child's buffer holds a pattern, its MR registered with `access` and its QP with
  // `qp_access`; the parent's READ of 64 bytes, and then one of kLargeRead (on the simulator, one
  // the requester reads itself when allowed: Qp::PlaceReadLocked), each with a child of its own,
  // complete with `status`, and the parent's buffer keeps what it held.
  void ExpectReadRefused(unsigned access, unsigned qp_access, ibv_wc_status status, ChildSetup setup = {}) {
    Buffer sink;
    ASSERT_TRUE(sink.Register(pd(), kLargeRead));
    setup.length = kLargeRead;
    for (const size_t length : {size_t{64}, kLargeRead}) {
      SCOPED_TRACE("a READ of " + std::to_string(length) + " bytes");
      RunWithChild(
          access, qp_access, ServePattern(6, kLargeRead),
          [&](const Target& target, int to_child, int from_child) {
            ASSERT_NO_FATAL_FAILURE(WaitForChild(from_child));
            sink.FillPattern(7);
            ibv_sge sge = sink.Sge(0, length);
            ibv_wc wc = {};
            ASSERT_EQ(PostOne(a_.get(), RdmaWr(1, IBV_WR_RDMA_READ, &sge, 1, target.addr, target.rkey)), 0);
            EXPECT_TRUE(PollOneCompletion(a_.send_cq.get(), &wc, kChildTimeout / 2)) << "the READ did not complete";
            EXPECT_EQ(wc.status, status) << DescribeWc(wc);
            EXPECT_EQ(Read(sink.data(), length), Pattern(7, length))
                << "the refused READ wrote into the parent's buffer";
            EXPECT_EQ(write(to_child, "x", 1), 1);
          },
          setup);
      a_.reset();  // the next child connects to a new QP
      if (HasFailure()) return;
    }
  }

  // Posts the linked `wrs` while the child `pid` is stopped, so that its side takes them all at
  // once when it runs again (a kernel or hardware responder does not stop with the process).
  // Returns ibv_post_send's value; a child that did not stop fails the test.
  int PostWhileStopped(pid_t pid, ibv_send_wr* wrs) {
    if (kill(pid, SIGSTOP) != 0) {
      ADD_FAILURE() << "could not stop the child: " << std::strerror(errno);
      return -1;
    }
    const bool stopped = StoppedWithin(pid, kReturnWindow);
    ibv_send_wr* bad = nullptr;
    const int posted = ibv_post_send(a_.get(), wrs, &bad);
    EXPECT_EQ(kill(pid, SIGCONT), 0);
    EXPECT_TRUE(stopped) << "the child did not stop";
    return posted;
  }

  // simverbs: the writer's mapping of a file whose MR the child withdrew goes (see the tests).
  void ExpectWriterUnmapsAWithdrawnFile(bool write_again);

  // a_'s next two completions are wr_id 1 with `first` and wr_id 2 with `second`.
  void ExpectTwoCompletions(ibv_wc_status first, ibv_wc_status second) {
    std::vector<ibv_wc> wcs;
    EXPECT_TRUE(PollCompletions(a_.send_cq.get(), 2, &wcs, kChildTimeout / 2));
    if (wcs.size() != 2) return;
    EXPECT_EQ(wcs[0].wr_id, 1u);
    EXPECT_EQ(wcs[0].status, first) << DescribeWc(wcs[0]);
    EXPECT_EQ(wcs[1].wr_id, 2u);
    EXPECT_EQ(wcs[1].status, second) << DescribeWc(wcs[1]);
  }

  // The SGEs of kLargeSends' messages back to back in `source`, then one of 16 bytes.
  static std::vector<ibv_sge> LargeMessageSges(const Buffer& source) {
    std::vector<ibv_sge> sges;
    size_t at = 0;
    for (const size_t length : kLargeSends) {
      sges.push_back(source.Sge(at, static_cast<uint32_t>(length)));
      at += length;
    }
    sges.push_back(source.Sge(at, 16));
    return sges;
  }

  // a_'s next `count` completions are wr_id 1, 2, ... with success.
  void ExpectSuccessesInOrder(size_t count, const char* what) {
    std::vector<ibv_wc> wcs;
    EXPECT_TRUE(PollCompletions(a_.send_cq.get(), static_cast<int>(count), &wcs, kChildTimeout / 2))
        << what << " did not complete";
    for (size_t k = 0; k < wcs.size(); ++k) {
      EXPECT_EQ(wcs[k].wr_id, k + 1);
      EXPECT_EQ(wcs[k].status, IBV_WC_SUCCESS) << DescribeWc(wcs[k]);
    }
  }

  Buffer src_;
};

// The same checks with the child's buffer in each kind of memory: a program may register pages it
// mapped shared from a file (a memfd, a tmpfs file, `ib_write_bw --mmap`), and a WRITE must land in
// them, keep its PSNs and obey the access rules as it does in private memory.
class CrossProcessWriteMemoryTest : public CrossProcessWriteTest, public ::testing::WithParamInterface<Memory> {
 protected:
  ChildSetup WithMemory() const {
    ChildSetup setup;
    setup.memory = GetParam();
    return setup;
  }

  // On the simulator, a WRITE into a file the child maps shared (or a READ of 256 KiB or more from
  // it) is placed through the parent's own mapping of that file (sim/src/fabric/file_window.h),
  // unless the kernel does not let this process at the child's memory at all (then the copying path
  // takes it).
  void ExpectWriterMapsTheChildsFile(const Target& target) {
    if (!Sim() || GetParam() == Memory::kAnonymous || ReadOf(target.pid, target.addr, 1).empty() ||
        !KernelPopulatesWrite()) {
      return;
    }
    EXPECT_TRUE(MapsFileNamed(ChildFileName(GetParam(), target.pid)))
        << "the parent did not copy through its own mapping of the child's file";
  }
};

INSTANTIATE_TEST_SUITE_P(Memory, CrossProcessWriteMemoryTest,
                         ::testing::Values(Memory::kAnonymous, Memory::kMemfd, Memory::kShmFile),
                         [](const ::testing::TestParamInfo<Memory>& info) {
                           switch (info.param) {
                             case Memory::kAnonymous: return std::string("Anonymous");
                             case Memory::kMemfd: return std::string("Memfd");
                             case Memory::kShmFile: return std::string("ShmFile");
                           }
                           return std::string("Unknown");
                         });

// Rule: ibv_post_send(3): RDMA WRITE writes the local buffers into the remote memory at remote_addr
//   (rkey); IBTA 9.7.1: every packet of a message takes a PSN, and the responder expects the next
//   message at the PSN after its last packet.
// Checks: a WRITE of 64 KiB into an MR of another process completes with success and the child reads
//   the bytes; a SEND posted after it reaches the child's receive (the PSNs stayed in step).
TEST_P(CrossProcessWriteMemoryTest, WriteLandsInAnotherProcess) {
  RunWithChild(
      kFullMrAccess, kRcRemoteAccess,
      [](const Child& c) {
        ibv_wc wc = {};
        ASSERT_TRUE(PollOneCompletion(c.recv_cq, &wc, kChildTimeout / 2));
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
        // The SEND put the same first 64 bytes again.
        EXPECT_EQ(std::vector<uint8_t>(c.buf, c.buf + kLength), Pattern(3, kLength));
      },
      [&](const Target& target, int, int) {
        src_.FillPattern(3);
        const ibv_wc wc = Write(target);
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
        ExpectWriterMapsTheChildsFile(target);
        ibv_sge sge = src_.Sge(0, 64);
        ASSERT_EQ(PostOne(a_.get(), SendWr(2, &sge, 1)), 0);
        ibv_wc send_wc = {};
        EXPECT_TRUE(PollOneCompletion(a_.send_cq.get(), &send_wc, kChildTimeout / 2));
        EXPECT_EQ(send_wc.status, IBV_WC_SUCCESS) << DescribeWc(send_wc);
      },
      WithMemory());
}

// A stream of small WRITEs (a message rate test's) into the child's buffer: WRITE i writes a
// record of eight copies of the stamp i + 1 after the records of the WRITEs before it.
constexpr uint32_t kStreamWrites = 4096;
constexpr uint32_t kStreamDepth = 64;  // WRITEs in flight
constexpr size_t kStreamWords = 8;
constexpr size_t kStreamRecord = kStreamWords * sizeof(uint64_t);
constexpr size_t kStreamBase = 4096;  // past the receive's 64 bytes at the start of the buffer

// Of the records in `bytes` (the first `count` of the stream), how many are written whole from the
// start (the prefix of the stream that has landed), or -1 when a record past the one after that
// prefix (which may be landing as it is read) has bytes already: a later WRITE's bytes are there
// while an earlier one's are not.
int64_t LandedPrefix(const std::vector<uint8_t>& bytes, uint32_t count) {
  const auto record = [&](uint32_t i, size_t k) {
    uint64_t word;
    std::memcpy(&word, bytes.data() + i * kStreamRecord + k * sizeof word, sizeof word);
    return word;
  };
  uint32_t landed = 0;
  for (; landed < count; ++landed) {
    size_t k = 0;
    while (k < kStreamWords && record(landed, k) == landed + 1) ++k;
    if (k < kStreamWords) break;
  }
  for (uint32_t i = landed + 1; i < count; ++i) {
    for (size_t k = 0; k < kStreamWords; ++k) {
      if (record(i, k) != 0) return -1;
    }
  }
  return landed;
}

// Rule: IBTA Vol 1 ch. 9 (responder): an RC responder executes requests in PSN order, so the
//   memory of a WRITE is written before that of a WRITE posted after it; ibv_poll_cq(3): the
//   completions of a send queue come in the order its WRs were posted.
// Checks: while the child waits (it does not poll), the parent streams kStreamWrites WRITEs of 64
//   bytes (kStreamDepth in flight), each after the one before in the child's buffer; each completes
//   with success, in order. Between its polls the parent reads the child's buffer
//   (process_vm_readv, where the kernel allows it): whenever a WRITE's bytes are there, so are
//   those of every WRITE before it. A SEND behind the stream reaches the child's receive, and every
//   WRITE's bytes are then in the child's buffer.
//   (simverbs: a one-packet WRITE to a process that does not poll goes through that process's
//   packet ring while its progress thread looks at the ring, and is placed with process_vm_writev
//   otherwise; this stream takes both, switching as that thread starts and stops looking.)
TEST_P(CrossProcessWriteMemoryTest, StreamOfSmallWritesLandsInOrder) {
  ChildSetup setup = WithMemory();
  setup.max_send_wr = kStreamDepth;
  setup.length = kStreamBase + kStreamWrites * kStreamRecord;
  RunWithChild(
      kFullMrAccess, kRcRemoteAccess,
      [](const Child& c) {
        ASSERT_TRUE(WaitReadable(c.from_parent, kChildTimeout / 2)) << "the parent never finished its stream";
        char verdict = 0;
        ASSERT_EQ(read(c.from_parent, &verdict, 1), 1);
        if (verdict != 'x') return;  // the parent failed (and says why): nothing was sent to look for
        ibv_wc wc = {};
        ASSERT_TRUE(PollOneCompletion(c.recv_cq, &wc, kChildTimeout / 2));
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
        const std::vector<uint8_t> stream(c.buf + kStreamBase, c.buf + kStreamBase + kStreamWrites * kStreamRecord);
        EXPECT_EQ(LandedPrefix(stream, kStreamWrites), kStreamWrites)
            << "the WRITEs' bytes are not all in the buffer once the SEND behind them was received";
      },
      [&](const Target& target, int to_child, int) {
        // The child waits for a verdict byte: 'x' once the stream and the SEND behind it completed.
        struct Verdict {
          int fd;
          ~Verdict() { EXPECT_EQ(write(fd, ::testing::Test::HasFatalFailure() ? "f" : "x", 1), 1); }
        } verdict{to_child};
        const auto deadline = std::chrono::steady_clock::now() + kChildTimeout / 2;
        // A source record per WRITE in flight: one is filled again only after its WRITE completed.
        constexpr size_t kSources = kLength / kStreamRecord;
        static_assert(kSources >= kStreamDepth);
        uint32_t posted = 0;
        uint32_t completed = 0;
        while (completed < kStreamWrites) {
          for (; posted < kStreamWrites && posted - completed < kStreamDepth; ++posted) {
            const size_t source = (posted % kSources) * kStreamRecord;
            auto* words = reinterpret_cast<uint64_t*>(src_.data() + source);
            std::fill(words, words + kStreamWords, uint64_t{posted} + 1);
            ibv_sge sge = src_.Sge(source, kStreamRecord);
            const uint64_t place = target.addr + kStreamBase + posted * kStreamRecord;
            ASSERT_EQ(PostOne(a_.get(), RdmaWr(posted, IBV_WR_RDMA_WRITE, &sge, 1, place, target.rkey)), 0)
                << "WRITE " << posted;
          }
          ibv_wc wcs[16];
          const int n = ibv_poll_cq(a_.send_cq.get(), 16, wcs);
          ASSERT_GE(n, 0) << "ibv_poll_cq";
          for (int k = 0; k < n; ++k, ++completed) {
            ASSERT_EQ(wcs[k].status, IBV_WC_SUCCESS) << DescribeWc(wcs[k]);
            ASSERT_EQ(wcs[k].wr_id, completed) << "completions out of posting order";
          }
          const std::vector<uint8_t> stream =
              ReadBackwardsOf(target.pid, target.addr + kStreamBase, posted * kStreamRecord, kStreamRecord);
          if (!stream.empty()) {
            ASSERT_GE(LandedPrefix(stream, posted), 0)
                << "a WRITE's bytes are in the child's buffer while those of a WRITE posted before it are not ("
                << completed << " of " << posted << " posted WRITEs completed)";
          }
          ASSERT_LT(std::chrono::steady_clock::now(), deadline)
              << completed << " of " << kStreamWrites << " WRITEs completed within " << (kChildTimeout / 2).count()
              << " ms";
        }
        ibv_sge sge = src_.Sge(0, 64);
        ASSERT_EQ(PostOne(a_.get(), SendWr(kStreamWrites, &sge, 1)), 0);
        ibv_wc send_wc = {};
        ASSERT_TRUE(PollOneCompletion(a_.send_cq.get(), &send_wc, kChildTimeout / 2));
        ASSERT_EQ(send_wc.status, IBV_WC_SUCCESS) << DescribeWc(send_wc);
      },
      setup);
}

// Rule: libibverbs' verbs are thread safe: one thread may post while another waits for completion events
//   (ibv_req_notify_cq(3), ibv_get_cq_event(3): the event comes when a completion is added to the armed
//   CQ); an HCA takes an RC SEND in without the receiving program's CPU.
// Checks: in the parent, a thread posts receives to a QP in INIT every 100 us and never polls, while
//   the main thread arms a_'s receive CQ (on a channel) and waits on the channel's fd; the child
//   sends one SEND to a_: the fd becomes readable within the return window, the event is for that
//   CQ, and the receive completes with success.
TEST_F(CrossProcessWriteTest, CompletionEventComesWhileAnotherThreadOnlyPosts) {
  // (The fixture's channel: it goes after a_, whose CQ uses it.)
  channel_.reset(ibv_create_comp_channel(context()));
  ASSERT_NE(channel_, nullptr) << ErrnoName(errno);
  ibv_comp_channel* channel = channel_.get();
  ChildSetup setup;
  setup.post_recv = false;
  setup.parent_recv_channel = channel;
  RunWithChild(
      IBV_ACCESS_LOCAL_WRITE, 0,
      [](const Child& c) {
        ASSERT_TRUE(WaitReadable(c.from_parent, kChildTimeout / 2));
        ibv_sge sge = {reinterpret_cast<uintptr_t>(c.buf), 16, c.mr->lkey};
        ASSERT_EQ(PostOne(c.qp, SendWr(5, &sge, 1)), 0);
        EXPECT_TRUE(WaitReadable(c.from_parent, kChildTimeout - 1000ms));  // until the parent is done
      },
      [&](const Target&, int to_child, int) {
        ibv_sge rsge = src_.Sge(0, 64);
        ASSERT_EQ(PostRecv(a_.get(), 9, &rsge, 1), 0);
        ASSERT_EQ(ibv_req_notify_cq(a_.recv_cq.get(), 0), 0);
        EndConfig other_config;
        other_config.caps.max_recv_wr = 64;
        QpEnd other;
        ASSERT_TRUE(CreateEnd(&other, other_config));
        ASSERT_TRUE(ModifyToInit(other.get(), port(), ConnectParams{}));
        std::atomic<bool> stop{false};
        std::thread poster([&] {
          // Posts until its queue is full, then keeps trying: a thread that only posts.
          while (!stop.load()) {
            ibv_sge sge = src_.Sge(0, 64);
            PostRecv(other.get(), 1, &sge, 1);
            std::this_thread::sleep_for(std::chrono::microseconds(100));
          }
        });
        // (Joined on every way out of this function: a joinable thread's destructor ends the program.)
        struct StopAndJoin {
          std::atomic<bool>& stop;
          std::thread& thread;
          ~StopAndJoin() {
            stop = true;
            if (thread.joinable()) thread.join();
          }
        } stop_poster{stop, poster};
        ASSERT_EQ(write(to_child, "s", 1), 1);
        ibv_cq* cq = nullptr;
        void* cq_context = nullptr;
        ASSERT_TRUE(GetCqEventWithin(channel, &cq, &cq_context, kReturnWindow)) << "while another thread kept posting";
        ibv_ack_cq_events(cq, 1);
        EXPECT_EQ(cq, a_.recv_cq.get());
        ibv_wc wc = {};
        ASSERT_TRUE(PollOneCompletion(a_.recv_cq.get(), &wc));
        EXPECT_EQ(wc.wr_id, 9u);
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
        ASSERT_EQ(write(to_child, "d", 1), 1);
      },
      setup);
}

// Rule: IBTA C9-222 / ibv_post_send(3): a WRITE through an R_Key whose MR does not allow
//   IBV_ACCESS_REMOTE_WRITE is a remote access error; the requester's WR completes with
//   IBV_WC_REM_ACCESS_ERR and the memory is not written.
// Checks: the child's MR allows local write only; the parent's WRITE completes with
//   IBV_WC_REM_ACCESS_ERR and the child's buffer is still zero.
TEST_F(CrossProcessWriteTest, WriteWithoutRemoteWriteAccessFails) {
  ExpectWriteRefused(IBV_ACCESS_LOCAL_WRITE, kRcRemoteAccess, IBV_WC_REM_ACCESS_ERR);
}

// Rule: ibv_modify_qp(3): qp_access_flags without IBV_ACCESS_REMOTE_WRITE disables incoming RDMA
//   WRITEs; IBTA 9.7.5.2.3: such a request is an invalid request, the requester's WR completes with
//   IBV_WC_REM_INV_REQ_ERR, and the memory is not written.
// Checks: the child's MR allows remote write but its QP only remote read; the parent's WRITE
//   completes with IBV_WC_REM_INV_REQ_ERR and the child's buffer is still zero.
TEST_F(CrossProcessWriteTest, WriteToQpWithoutRemoteWriteFails) {
  ExpectWriteRefused(kFullMrAccess, IBV_ACCESS_REMOTE_READ, IBV_WC_REM_INV_REQ_ERR);
}

// Rule: IBTA C9-222.1.1 / ibv_post_send(3): a READ through an R_Key whose MR does not allow
//   IBV_ACCESS_REMOTE_READ is a remote access error; the requester's WR completes with
//   IBV_WC_REM_ACCESS_ERR and its buffer is not written.
// Checks: the child's MR allows local and remote write only; the parent's READ of 64 bytes, and
//   one of 1 MiB, complete with IBV_WC_REM_ACCESS_ERR and the parent's buffer keeps its pattern.
TEST_F(CrossProcessWriteTest, ReadWithoutRemoteReadAccessFails) {
  ExpectReadRefused(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, kRcRemoteAccess, IBV_WC_REM_ACCESS_ERR);
}

// Rule: ibv_modify_qp(3): qp_access_flags without IBV_ACCESS_REMOTE_READ disables incoming RDMA
//   READs; IBTA 9.7.5.2.3: such a request is an invalid request, and the requester's WR completes
//   with IBV_WC_REM_INV_REQ_ERR.
// Checks: the child's MR allows remote read but its QP only remote write; the parent's READ of 64
//   bytes, and one of 1 MiB, complete with IBV_WC_REM_INV_REQ_ERR and the parent's buffer keeps
//   its pattern.
TEST_F(CrossProcessWriteTest, ReadFromQpWithoutRemoteReadFails) {
  ExpectReadRefused(kFullMrAccess, IBV_ACCESS_REMOTE_WRITE, IBV_WC_REM_INV_REQ_ERR);
}

// Rule: ibv_modify_qp(3): max_dest_rd_atomic is the "Number of responder resources for handling
//   incoming RDMA reads & atomics operations"; with none, an incoming READ is an invalid request
//   (rxe_resp.c check_resource: RESPST_ERR_TOO_MANY_RDMA_ATM_REQ), IBV_WC_REM_INV_REQ_ERR.
// Checks: the child's QP has max_dest_rd_atomic 0; the parent's READ of 64 bytes, and one of 1 MiB,
//   complete with IBV_WC_REM_INV_REQ_ERR and the parent's buffer keeps its pattern.
TEST_F(CrossProcessWriteTest, ReadFromQpWithoutResponderResourcesFails) {
  ExpectReadRefused(kFullMrAccess, kRcRemoteAccess, IBV_WC_REM_INV_REQ_ERR, ChildSetup{.dest_rd_atomic = 0});
}

// Rule: ibv_post_send(3): an RDMA READ reads length bytes at remote_addr of the remote MR into the
//   local SGEs; the bytes are those of the remote memory, whatever kind of memory the program
//   registered.
//   IBTA 9.7.1: a READ takes one PSN per response packet, and the responder expects the next
//   request at the PSN after them.
// Checks: the child's buffer (of each kind) holds a pattern; the parent's READ of all 1 MiB of it
//   completes with success, with byte_len 1 MiB, and the parent's buffer holds the pattern; a
//   16-byte SEND posted after it reaches the child's receive (the PSNs stayed in step).
TEST_P(CrossProcessWriteMemoryTest, LargeReadReturnsTheChildsBytes) {
  Buffer sink;
  ASSERT_TRUE(sink.Register(pd(), kLargeRead));
  ChildSetup setup = WithMemory();
  setup.length = kLargeRead;
  RunWithChild(
      kFullMrAccess, kRcRemoteAccess,
      [](const Child& c) {
        const std::vector<uint8_t> pattern = Pattern(8, kLargeRead);
        std::memcpy(c.buf, pattern.data(), pattern.size());
        ASSERT_EQ(write(c.to_parent, "p", 1), 1);
        ibv_wc wc = {};
        ASSERT_TRUE(PollOneCompletion(c.recv_cq, &wc, kChildTimeout / 2)) << "the SEND after the READ did not come";
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
        EXPECT_EQ(wc.byte_len, 16u);
        EXPECT_EQ(Read(c.buf, 16), Pattern(3, 16));
      },
      [&](const Target& target, int, int from_child) {
        ASSERT_NO_FATAL_FAILURE(WaitForChild(from_child));
        ibv_sge sge = sink.Sge(0, kLargeRead);
        ibv_wc wc = {};
        ASSERT_EQ(PostOne(a_.get(), RdmaWr(1, IBV_WR_RDMA_READ, &sge, 1, target.addr, target.rkey)), 0);
        EXPECT_TRUE(PollOneCompletion(a_.send_cq.get(), &wc, kChildTimeout / 2)) << "the READ did not complete";
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
        EXPECT_EQ(wc.byte_len, kLargeRead);
        EXPECT_TRUE(Read(sink.data(), kLargeRead) == Pattern(8, kLargeRead)) << "the READ returned other bytes";
        ExpectWriterMapsTheChildsFile(target);
        src_.FillPattern(3);
        const ibv_wc send_wc = Send(2);
        EXPECT_EQ(send_wc.status, IBV_WC_SUCCESS) << DescribeWc(send_wc);
      },
      setup);
}

// Rule: IBTA Vol 1 ch. 9 (responder): an RC responder executes the requests of a QP in PSN order,
//   so a READ posted after an atomic operation on the same memory reads what the atomic left
//   (ibv_post_send(3): the WRs of a send queue are processed in order).
// Checks: the child's buffer holds a pattern; the parent posts, in one list, a FETCH_AND_ADD of 5
//   to the child's first 8 bytes and a READ of all 1 MiB of the buffer; both complete with
//   success, in order; the atomic fetched the pattern's first 8 bytes, and the READ returned them
//   plus 5, followed by the rest of the pattern.
TEST_F(CrossProcessWriteTest, ReadBehindAnAtomicReadsItsResult) {
  SKIP_IF(!HasAtomics()) << "(atomic_cap is IBV_ATOMIC_NONE)";
  const int outstanding = std::min({device_attr().max_qp_rd_atom, device_attr().max_qp_init_rd_atom, 2});
  SKIP_IF(outstanding < 1) << "(the device takes no outstanding READ)";
  Buffer sink;
  ASSERT_TRUE(sink.Register(pd(), kLargeRead));
  ChildSetup setup;
  setup.length = kLargeRead;
  setup.rd_atomic = static_cast<uint8_t>(outstanding);
  RunWithChild(
      kFullMrAccess, kRcRemoteAccess, ServePattern(10, kLargeRead),
      [&](const Target& target, int to_child, int from_child) {
        ASSERT_NO_FATAL_FAILURE(WaitForChild(from_child));
        const std::vector<uint8_t> pattern = Pattern(10, kLargeRead);
        uint64_t before = 0;
        std::memcpy(&before, pattern.data(), sizeof before);
        std::vector<ibv_sge> sges = {src_.Sge(0, 8), sink.Sge(0, kLargeRead)};
        std::vector<ibv_send_wr> wrs = {
            AtomicWr(1, IBV_WR_ATOMIC_FETCH_AND_ADD, &sges[0], target.addr, target.rkey, 5, 0),
            RdmaWr(2, IBV_WR_RDMA_READ, &sges[1], 1, target.addr, target.rkey)};
        ASSERT_EQ(PostList(a_.get(), &wrs), 0);
        ExpectTwoCompletions(IBV_WC_SUCCESS, IBV_WC_SUCCESS);
        uint64_t fetched = 0;
        std::memcpy(&fetched, src_.data(), sizeof fetched);
        EXPECT_EQ(fetched, before) << "the atomic fetched other bytes than the child's";
        std::vector<uint8_t> want = pattern;
        const uint64_t after = before + 5;
        std::memcpy(want.data(), &after, sizeof after);
        const std::vector<uint8_t> got = Read(sink.data(), kLargeRead);
        EXPECT_EQ(std::vector<uint8_t>(got.begin(), got.begin() + 8), std::vector<uint8_t>(want.begin(), want.begin() + 8))
            << "the READ did not see the atomic's result";
        EXPECT_TRUE(got == want) << "the READ returned other bytes than the child's after the first 8";
        EXPECT_EQ(write(to_child, "x", 1), 1);
      },
      setup);
}

// Rule: ibv_dereg_mr(3) releases the MR: its R_Key no longer grants access, and a WRITE through it
//   completes with IBV_WC_REM_ACCESS_ERR without touching the memory (even when another MR still
//   covers it).
// Checks: a first WRITE lands; the child registers a second MR over the same buffer and deregisters
//   the first; a second WRITE with other bytes through the first rkey completes with
//   IBV_WC_REM_ACCESS_ERR and the child still reads the first WRITE's bytes.
TEST_P(CrossProcessWriteMemoryTest, WriteAfterDeregistrationDoesNotLand) {
  RunWithChild(
      kFullMrAccess, kRcRemoteAccess,
      [](const Child& c) {
        char step = 0;
        ASSERT_TRUE(WaitReadable(c.from_parent, kChildTimeout / 2));
        ASSERT_EQ(read(c.from_parent, &step, 1), 1);
        MrPtr keep(ibv_reg_mr(c.mr->pd, c.buf, kLength, static_cast<int>(kFullMrAccess)));
        ASSERT_NE(keep, nullptr);
        ASSERT_EQ(ibv_dereg_mr(c.mr), 0);
        ASSERT_EQ(write(c.to_parent, "d", 1), 1);
        ASSERT_TRUE(WaitReadable(c.from_parent, kChildTimeout / 2));
        ASSERT_EQ(read(c.from_parent, &step, 1), 1);
        EXPECT_EQ(std::vector<uint8_t>(c.buf, c.buf + kLength), Pattern(5, kLength));
      },
      [&](const Target& target, int to_child, int from_child) {
        src_.FillPattern(5);
        const ibv_wc first = Write(target);
        EXPECT_EQ(first.status, IBV_WC_SUCCESS) << DescribeWc(first);
        ExpectWriterMapsTheChildsFile(target);
        EXPECT_EQ(write(to_child, "d", 1), 1);
        ASSERT_NO_FATAL_FAILURE(WaitForChild(from_child));
        src_.FillPattern(6);
        const ibv_wc second = Write(target);
        EXPECT_EQ(second.status, IBV_WC_REM_ACCESS_ERR) << DescribeWc(second);
        EXPECT_EQ(write(to_child, "c", 1), 1);
      },
      WithMemory());
}

// Rule: ibv_modify_qp(3) moves the QP to the state asked for; IBTA Vol 1 10.3.1: a QP in the Error
//   state executes no more requests it receives (they are dropped), so no WRITE lands through it
//   once the transition is made.
// Checks: the parent writes 4 MiB WRITEs into the child's buffer, one after another, each all of
//   one byte value (1, 2, 3, 4 in turn); once one has begun to land (and, if seen within 200 ms,
//   while one is landing) the child moves its QP to ERR and then copies its buffer, from its end;
//   the parent stops, moves its own QP to ERR and collects every completion; the child's buffer
//   still holds what it copied.
TEST_P(CrossProcessWriteMemoryTest, WriteAfterTheResponderEnteredErrorDoesNotLand) {
  constexpr size_t kWriteBytes = size_t{4} << 20;
  constexpr int kValues = 4;
  Buffer sources;
  ASSERT_TRUE(sources.Register(pd(), kWriteBytes * kValues));
  for (int v = 0; v < kValues; ++v) std::memset(sources.data() + kWriteBytes * v, v + 1, kWriteBytes);
  ChildSetup setup = WithMemory();
  setup.length = kWriteBytes;
  RunWithChild(
      kFullMrAccess, kRcRemoteAccess,
      [&](const Child& c) {
        const auto deadline = std::chrono::steady_clock::now() + kChildTimeout / 2;
        while (__atomic_load_n(c.buf, __ATOMIC_ACQUIRE) == 0 && std::chrono::steady_clock::now() < deadline) {
          std::this_thread::yield();
        }
        ASSERT_NE(__atomic_load_n(c.buf, __ATOMIC_ACQUIRE), 0) << "no WRITE landed";
        // Better still while one is landing (its first byte in, its last not yet), if that is seen soon.
        const auto landing = std::chrono::steady_clock::now() + 200ms;
        const uint8_t* last = c.buf + kWriteBytes - 1;
        while (__atomic_load_n(c.buf, __ATOMIC_ACQUIRE) == __atomic_load_n(last, __ATOMIC_ACQUIRE) &&
               std::chrono::steady_clock::now() < landing) {
          std::this_thread::yield();
        }
        std::vector<uint8_t> at_error(kWriteBytes);  // (its pages faulted in before, not while it is read into)
        ASSERT_TRUE(ModifyToState(c.qp, IBV_QPS_ERR));
        // From the last byte to the first: a WRITE still landing (front to back) shows up as a change.
        for (size_t i = kWriteBytes; i-- > 0;) at_error[i] = __atomic_load_n(c.buf + i, __ATOMIC_ACQUIRE);
        ASSERT_EQ(write(c.to_parent, "e", 1), 1);
        ASSERT_TRUE(WaitReadable(c.from_parent, kChildTimeout / 2));
        EXPECT_TRUE(Read(c.buf, kWriteBytes) == at_error)
            << "a WRITE landed after ibv_modify_qp(IBV_QPS_ERR) returned in the responder's process";
      },
      [&](const Target& target, int to_child, int from_child) {
        const auto deadline = std::chrono::steady_clock::now() + kChildTimeout / 2;
        uint64_t posted = 0;
        uint64_t completed = 0;
        // One WRITE at a time, the next as soon as the last completes, until the child says its
        // QP is in ERR.
        while (!WaitReadable(from_child, 0ms) && std::chrono::steady_clock::now() < deadline) {
          if (posted == completed) {
            ibv_sge sge = sources.Sge(kWriteBytes * (posted % kValues), kWriteBytes);
            ASSERT_EQ(PostOne(a_.get(), RdmaWr(posted, IBV_WR_RDMA_WRITE, &sge, 1, target.addr, target.rkey)), 0);
            ++posted;
          }
          ibv_wc wc = {};
          completed += static_cast<uint64_t>(std::max(0, ibv_poll_cq(a_.send_cq.get(), 1, &wc)));
        }
        ASSERT_NO_FATAL_FAILURE(WaitForChild(from_child));
        ASSERT_TRUE(ModifyToState(a_.get(), IBV_QPS_ERR));
        std::vector<ibv_wc> rest;
        EXPECT_TRUE(PollCompletions(a_.send_cq.get(), static_cast<int>(posted - completed), &rest, kReturnWindow))
            << "a WRITE did not complete once the parent's QP was in ERR";
        EXPECT_EQ(write(to_child, "c", 1), 1);
      },
      setup);
}

// Rule: IBTA Vol 1 ch. 9 (responder): a request whose PSN is ahead of the one the responder expects
//   is not executed (a sequence NAK; the requester's retries run out: IBV_WC_RETRY_EXC_ERR), so a
//   requester whose sq_psn is not its responder's rq_psn gets nothing through.
// Checks: the parent's QP starts at sq_psn 5000, the child's expects 0 (retry_cnt 1); a 64 KiB WRITE
//   into the child's buffer completes with IBV_WC_RETRY_EXC_ERR and the buffer is still all zero.
TEST_P(CrossProcessWriteMemoryTest, WriteWithAPsnTheResponderDoesNotExpectDoesNotLand) {
  ChildSetup setup = WithMemory();
  setup.sq_psn = 5000;
  setup.retry_cnt = 1;
  RunWithChild(
      kFullMrAccess, kRcRemoteAccess,
      [](const Child& c) {
        ASSERT_TRUE(WaitReadable(c.from_parent, kChildTimeout / 2));
        EXPECT_EQ(Read(c.buf, kLength), std::vector<uint8_t>(kLength, 0)) << "the WRITE landed";
      },
      [&](const Target& target, int to_child, int) {
        src_.FillPattern(8);
        const ibv_wc wc = Write(target);
        EXPECT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR) << DescribeWc(wc);
        EXPECT_EQ(write(to_child, "x", 1), 1);
      },
      setup);
}

// Rule: IBTA Vol 1 ch. 9 (responder): requests are executed in PSN order, and a remote access error
//   (class C: NAK Remote Access Error) puts an RC responder in the error state, where it executes
//   nothing more; the requester completes that WR with IBV_WC_REM_ACCESS_ERR and flushes the WRs
//   behind it (IBV_WC_WR_FLUSH_ERR), which never reach the remote memory.
// Checks: two WRITEs posted in one list into the child's buffer, the first (64 bytes) through an
//   R_Key that names no MR, the second (4 KiB) through the MR's own: they complete with
//   IBV_WC_REM_ACCESS_ERR and IBV_WC_WR_FLUSH_ERR, in order, and the child's buffer is still all
//   zero.
TEST_P(CrossProcessWriteMemoryTest, WriteBehindRemoteAccessErrorDoesNotLand) {
  RunWithChild(
      kFullMrAccess, kRcRemoteAccess,
      [](const Child& c) {
        ASSERT_TRUE(WaitReadable(c.from_parent, kChildTimeout / 2));
        EXPECT_EQ(Read(c.buf, kLength), std::vector<uint8_t>(kLength, 0)) << "the flushed WRITE landed";
      },
      [&](const Target& target, int to_child, int) {
        src_.FillPattern(7);
        ibv_sge sges[2] = {src_.Sge(0, 64), src_.Sge(4096, 4096)};
        ibv_send_wr wrs[2] = {
            RdmaWr(1, IBV_WR_RDMA_WRITE, &sges[0], 1, target.addr, target.rkey ^ 0x80),
            RdmaWr(2, IBV_WR_RDMA_WRITE, &sges[1], 1, target.addr + 4096, target.rkey),
        };
        wrs[0].next = &wrs[1];
        // The second is sent before the responder has seen the first, as on a wire where the
        // NAK takes a round trip.
        ASSERT_EQ(PostWhileStopped(target.pid, wrs), 0);
        ExpectTwoCompletions(IBV_WC_REM_ACCESS_ERR, IBV_WC_WR_FLUSH_ERR);
        EXPECT_EQ(write(to_child, "x", 1), 1);
      },
      WithMemory());
}

// Rule: IBTA Vol 1 ch. 9 (unreliable connection): a UC responder silently drops a request it
//   refuses (an R_Key violation: no NAK, no error state) and goes on with the next message; the
//   requester completes every WR once sent.
// Checks: two UC WRITEs posted in one list into the child's buffer, the first (64 bytes) through an
//   R_Key that names no MR, the second (4 KiB) through the MR's own, both complete with success; the
//   second's bytes arrive at the child and the first 64 bytes stay zero.
TEST_F(CrossProcessWriteTest, UcWriteBehindDroppedWriteLands) {
  RunWithChild(
      kFullMrAccess, kRcRemoteAccess,
      [](const Child& c) {
        ASSERT_TRUE(WaitReadable(c.from_parent, kChildTimeout / 2));
        const std::vector<uint8_t> pattern = Pattern(9, kLength);
        const std::vector<uint8_t> want(pattern.begin() + 4096, pattern.begin() + 8192);
        EXPECT_TRUE(HoldsWithin(c.buf + 4096, want, kChildTimeout / 2)) << "the second WRITE never landed";
        EXPECT_EQ(Read(c.buf, 64), std::vector<uint8_t>(64, 0)) << "the dropped WRITE landed";
      },
      [&](const Target& target, int to_child, int) {
        src_.FillPattern(9);
        ibv_sge sges[2] = {src_.Sge(0, 64), src_.Sge(4096, 4096)};
        ibv_send_wr wrs[2] = {
            RdmaWr(1, IBV_WR_RDMA_WRITE, &sges[0], 1, target.addr, target.rkey ^ 0x80),
            RdmaWr(2, IBV_WR_RDMA_WRITE, &sges[1], 1, target.addr + 4096, target.rkey),
        };
        wrs[0].next = &wrs[1];
        // As in WriteBehindRemoteAccessErrorDoesNotLand: the second is sent before the
        // responder has seen the first.
        ASSERT_EQ(PostWhileStopped(target.pid, wrs), 0);
        std::vector<ibv_wc> wcs;
        EXPECT_TRUE(PollCompletions(a_.send_cq.get(), 2, &wcs, kChildTimeout / 2));
        for (const ibv_wc& wc : wcs) EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
        EXPECT_EQ(write(to_child, "x", 1), 1);
      },
      ChildSetup{.type = IBV_QPT_UC});
}

// Rule: IBTA Vol 1 ch. 9 (Unreliable Connection): the responder takes the messages of a connection
//   in order, so the memory of a WRITE is written before that of a WRITE posted after it.
// Checks: the child has a second MR of 64 bytes inside a heap buffer; with the child stopped, two UC
//   WRITEs are posted in one list, 64 bytes into that MR, then 4 KiB into the page-aligned buffer;
//   while the child is stopped, whenever the child's memory (read with process_vm_readv) holds the
//   second WRITE's bytes it also holds the first's; after the child resumes both arrive.
TEST_F(CrossProcessWriteTest, UcWritesLandInOrder) {
  struct Second {
    uint64_t addr = 0;
    uint32_t rkey = 0;
  };
  RunWithChild(
      kFullMrAccess, kRcRemoteAccess,
      [](const Child& c) {
        // Shares its pages with other heap data: a peer cannot write into it directly.
        std::vector<uint8_t> heap(256, 0);
        MrPtr mr(ibv_reg_mr(c.mr->pd, heap.data() + 16, 64, static_cast<int>(kFullMrAccess)));
        ASSERT_NE(mr, nullptr);
        const Second second{reinterpret_cast<uintptr_t>(heap.data() + 16), mr->rkey};
        ASSERT_EQ(write(c.to_parent, &second, sizeof second), static_cast<ssize_t>(sizeof second));
        ASSERT_TRUE(WaitReadable(c.from_parent, kChildTimeout / 2));
        const std::vector<uint8_t> pattern = Pattern(10, kLargeRead);
        EXPECT_TRUE(HoldsWithin(heap.data() + 16, std::vector<uint8_t>(pattern.begin(), pattern.begin() + 64),
                                kChildTimeout / 2))
            << "the first WRITE never landed";
        EXPECT_TRUE(HoldsWithin(c.buf + 4096, std::vector<uint8_t>(pattern.begin() + 4096, pattern.begin() + 8192),
                                kChildTimeout / 2))
            << "the second WRITE never landed";
      },
      [&](const Target& target, int to_child, int from_child) {
        Second second;
        ASSERT_TRUE(WaitReadable(from_child, kChildTimeout / 2));
        ASSERT_EQ(read(from_child, &second, sizeof second), static_cast<ssize_t>(sizeof second));
        if (ReadOf(target.pid, target.addr, 1).empty()) {
          EXPECT_EQ(write(to_child, "x", 1), 1);
          GTEST_SKIP() << "skipped: process_vm_readv of the child is refused here";
        }
        src_.FillPattern(10);
        const std::vector<uint8_t> pattern = Pattern(10, kLargeRead);
        ibv_sge sges[2] = {src_.Sge(0, 64), src_.Sge(4096, 4096)};
        ibv_send_wr wrs[2] = {
            RdmaWr(1, IBV_WR_RDMA_WRITE, &sges[0], 1, second.addr, second.rkey),
            RdmaWr(2, IBV_WR_RDMA_WRITE, &sges[1], 1, target.addr + 4096, target.rkey),
        };
        wrs[0].next = &wrs[1];
        ibv_send_wr* bad = nullptr;
        ASSERT_EQ(kill(target.pid, SIGSTOP), 0);
        const bool stopped = StoppedWithin(target.pid, kReturnWindow);
        const int posted = ibv_post_send(a_.get(), wrs, &bad);
        // The later WRITE first: if its bytes are there, the earlier's must be too.
        const std::vector<uint8_t> later = ReadOf(target.pid, target.addr + 4096, 4096);
        const std::vector<uint8_t> earlier = ReadOf(target.pid, second.addr, 64);
        ASSERT_EQ(kill(target.pid, SIGCONT), 0);
        EXPECT_TRUE(stopped) << "the child did not stop";
        ASSERT_EQ(posted, 0);
        if (later == std::vector<uint8_t>(pattern.begin() + 4096, pattern.begin() + 8192)) {
          EXPECT_EQ(earlier, std::vector<uint8_t>(pattern.begin(), pattern.begin() + 64))
              << "the second WRITE landed before the first";
        }
        std::vector<ibv_wc> wcs;
        EXPECT_TRUE(PollCompletions(a_.send_cq.get(), 2, &wcs, kChildTimeout / 2));
        for (const ibv_wc& wc : wcs) EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
        EXPECT_EQ(write(to_child, "x", 1), 1);
      },
      ChildSetup{.type = IBV_QPT_UC});
}

// Rule: IBTA Vol 1 9.7.5.2.8 (RNR NAK) and ch. 9 (responder): a SEND that finds no receive is
//   answered with an RNR NAK and nothing behind it is executed; the requester sends again from that
//   SEND when the RNR timer expires (rnr_retry 7: for ever), and the responder executes requests in
//   PSN order, so a WRITE posted behind the SEND lands only once the SEND was accepted.
// Checks: the child has no receive posted; the parent posts a SEND and then a WRITE of 4 KiB into
//   the child's buffer; the WRITE's bytes stay zero for 200 ms (a bounded wait for a negative); the
//   child posts its receive, the SEND's receive completes with success and then the WRITE's bytes
//   arrive; both WRs complete with success at the parent, in order.
TEST_F(CrossProcessWriteTest, WriteBehindRnrNakedSendWaitsForIt) {
  constexpr size_t kWriteOffset = 4096;
  constexpr size_t kWriteLength = 4096;
  RunWithChild(
      kFullMrAccess, kRcRemoteAccess,
      [](const Child& c) {
        char step = 0;
        ASSERT_TRUE(WaitReadable(c.from_parent, kChildTimeout / 2));
        ASSERT_EQ(read(c.from_parent, &step, 1), 1);
        const uint8_t* written = c.buf + kWriteOffset;
        EXPECT_TRUE(StaysZero(written, kWriteLength, kBlockWindow))
            << "the WRITE landed while the SEND in front of it could not be accepted";
        ibv_sge rsge = {reinterpret_cast<uintptr_t>(c.buf), 64, c.mr->lkey};
        ASSERT_EQ(PostRecv(c.qp, 7, &rsge, 1), 0);
        ibv_wc wc = {};
        ASSERT_TRUE(PollOneCompletion(c.recv_cq, &wc, kChildTimeout / 2));
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
        const std::vector<uint8_t> pattern = Pattern(8, kLength);
        const std::vector<uint8_t> want(pattern.begin() + kWriteOffset, pattern.begin() + kWriteOffset + kWriteLength);
        EXPECT_TRUE(HoldsWithin(written, want, kChildTimeout / 2)) << "the WRITE never landed";
      },
      [&](const Target& target, int to_child, int) {
        src_.FillPattern(8);
        ibv_sge send_sge = src_.Sge(0, 64);
        ibv_sge write_sge = src_.Sge(kWriteOffset, kWriteLength);
        ibv_send_wr wrs[2] = {
            SendWr(1, &send_sge, 1),
            RdmaWr(2, IBV_WR_RDMA_WRITE, &write_sge, 1, target.addr + kWriteOffset, target.rkey),
        };
        wrs[0].next = &wrs[1];
        ibv_send_wr* bad = nullptr;
        ASSERT_EQ(ibv_post_send(a_.get(), wrs, &bad), 0);
        EXPECT_EQ(write(to_child, "p", 1), 1);
        std::vector<ibv_wc> wcs;
        EXPECT_TRUE(PollCompletions(a_.send_cq.get(), 2, &wcs, kChildTimeout / 2));
        if (wcs.size() == 2) {
          EXPECT_EQ(wcs[0].wr_id, 1u);
          EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS) << DescribeWc(wcs[0]);
          EXPECT_EQ(wcs[1].wr_id, 2u);
          EXPECT_EQ(wcs[1].status, IBV_WC_SUCCESS) << DescribeWc(wcs[1]);
        }
      },
      ChildSetup{.post_recv = false});
}

// Rule: ibv_dereg_mr(3) releases the MR at once: the HCA does not wait for a remote process that is
//   writing into it (the IBTA has no such wait; a peer may be stopped or slow for any time), and the
//   owner's other verbs go on meanwhile.
// Checks: (simulator only) the parent's WRITE into the child's MR is held in the middle of its copy
//   (its source buffer is guarded by userfaultfd, so the copy waits on the first page, as a writer
//   SIGSTOPped mid-copy would); the child then calls ibv_dereg_mr on one thread and ibv_poll_cq and
//   ibv_post_recv on another: those return within kReturnWindow while the writer is held, and
//   ibv_dereg_mr returns 0 within kChildTimeout / 2.
TEST_F(CrossProcessWriteTest, DeregistrationDoesNotWaitForAStalledWriter) {
  SKIP_IF(!Sim()) << "(a kernel driver pins the userfaultfd-guarded source at ibv_reg_mr and would wait there; "
                     "the hold is in the simulator's one-copy WRITE)";
  UserfaultBuffer held(kLength);
  SKIP_IF(!held.error().empty()) << held.error();
  MrPtr held_mr(ibv_reg_mr(pd(), held.addr(), kLength, IBV_ACCESS_LOCAL_WRITE));
  ASSERT_NE(held_mr, nullptr);
  RunWithChild(
      kFullMrAccess, kRcRemoteAccess,
      [](const Child& c) {
        char step = 0;
        ASSERT_TRUE(WaitReadable(c.from_parent, kChildTimeout / 2)) << "the parent never said its WRITE is held";
        ASSERT_EQ(read(c.from_parent, &step, 1), 1);
        BlockingCall dereg([&] { return ibv_dereg_mr(c.mr); });
        BlockingCall others([&] {
          ibv_wc wc = {};
          if (ibv_poll_cq(c.recv_cq, 1, &wc) < 0) return -1;
          ibv_sge sge = {reinterpret_cast<uintptr_t>(c.buf), 64, 0};
          ibv_recv_wr wr = {};
          wr.sg_list = &sge;
          wr.num_sge = 1;
          ibv_recv_wr* bad = nullptr;
          return ibv_post_recv(c.qp, &wr, &bad);
        });
        EXPECT_TRUE(others.WaitFor(kReturnWindow))
            << "ibv_poll_cq / ibv_post_recv waited " << others.elapsed().count()
            << " ms while ibv_dereg_mr waited for a writer that makes no progress";
        EXPECT_TRUE(dereg.WaitFor(kChildTimeout / 2))
            << "ibv_dereg_mr waited " << dereg.elapsed().count() << " ms for a writer that makes no progress";
        if (dereg.returned()) {
          EXPECT_EQ(dereg.result(), 0);
        }
        ASSERT_EQ(write(c.to_parent, "d", 1), 1);
        // Stay until the parent's WRITE is done with this process.
        EXPECT_TRUE(WaitReadable(c.from_parent, kChildTimeout / 2));
      },
      [&](const Target& target, int to_child, int from_child) {
        ibv_sge sge = {reinterpret_cast<uintptr_t>(held.addr()), static_cast<uint32_t>(kLength), held_mr->lkey};
        BlockingCall post([&] { return PostOne(a_.get(), RdmaWr(1, IBV_WR_RDMA_WRITE, &sge, 1, target.addr, target.rkey)); });
        const bool held_now = held.WaitForAccess(kReturnWindow);
        EXPECT_TRUE(held_now) << "the WRITE never read its source buffer";
        if (held_now) {
          EXPECT_EQ(write(to_child, "s", 1), 1);
          char step = 0;
          EXPECT_TRUE(WaitReadable(from_child, kChildTimeout)) << "the child did not finish deregistering";
          EXPECT_EQ(read(from_child, &step, 1), 1);
        }
        held.Release();
        EXPECT_TRUE(post.WaitFor(kReturnWindow)) << "ibv_post_send still held after the source was released";
        // The WRITE's completion, whatever it is (its MR is gone): drained before the QP goes.
        ibv_wc wc = {};
        PollOneCompletion(a_.send_cq.get(), &wc, kReturnWindow);
        EXPECT_EQ(write(to_child, "e", 1), 1);
      });
}

// Rule: ibv_post_send(3): a WR's buffers are the program's again once its completion is polled;
//   ibv_modify_qp(3) to IBV_QPS_ERR flushes outstanding WRs (IBV_WC_WR_FLUSH_ERR). What the program
//   writes into the buffer after that completion is never sent: no byte of it reaches the peer's
//   memory, and the peer completes no receive for the flushed message.
// Checks: (simulator only) the child's MR holds 0xEE and a receive is posted; the parent posts a
//   64 KiB WRITE with immediate data whose source is guarded by userfaultfd, so the child's read of
//   it (a pull: sim/src/fabric/fabric.h) waits on its first page. The parent moves its QP to ERR
//   (ibv_modify_qp returns once it stops waiting for that read), polls the WRITE's
//   IBV_WC_WR_FLUSH_ERR, releases the source (its pages read as zero) and writes 0x42 over it. Then
//   the child completes no receive within kBlockWindow and every byte of its MR is still 0xEE.
TEST_F(CrossProcessWriteTest, WriteWithImmediateReadAfterItsFlushDoesNotLand) {
  SKIP_IF(!Sim()) << "(a kernel driver pins the userfaultfd-guarded source at ibv_reg_mr; the held read is the "
                     "simulator's pull)";
  UserfaultBuffer held(kLength);
  SKIP_IF(!held.error().empty()) << held.error();
  MrPtr held_mr(ibv_reg_mr(pd(), held.addr(), kLength, IBV_ACCESS_LOCAL_WRITE));
  ASSERT_NE(held_mr, nullptr);
  RunWithChild(
      kFullMrAccess, kRcRemoteAccess,
      [](const Child& c) {
        std::memset(c.buf, 0xee, kLength);
        ASSERT_EQ(write(c.to_parent, "r", 1), 1);
        char step = 0;
        ASSERT_TRUE(WaitReadable(c.from_parent, kChildTimeout / 2)) << "the parent never flushed its WRITE";
        ASSERT_EQ(read(c.from_parent, &step, 1), 1);
        ibv_wc wc = {};
        EXPECT_FALSE(PollOneCompletion(c.recv_cq, &wc, kBlockWindow))
            << "a receive completed for the flushed WRITE: " << DescribeWc(wc);
        EXPECT_TRUE(Read(c.buf, kLength) == std::vector<uint8_t>(kLength, 0xee))
            << "bytes the parent wrote after the WRITE's flush completion reached the MR";
        ASSERT_EQ(write(c.to_parent, "d", 1), 1);
      },
      [&](const Target& target, int to_child, int from_child) {
        ASSERT_NO_FATAL_FAILURE(WaitForChild(from_child));
        ibv_sge sge = {reinterpret_cast<uintptr_t>(held.addr()), static_cast<uint32_t>(kLength), held_mr->lkey};
        ibv_send_wr wr = RdmaWr(1, IBV_WR_RDMA_WRITE_WITH_IMM, &sge, 1, target.addr, target.rkey);
        wr.imm_data = htonl(0x5eed);
        ASSERT_EQ(PostOne(a_.get(), wr), 0);
        const bool held_now = held.WaitForAccess(kReturnWindow);
        EXPECT_TRUE(held_now) << "nothing read the WRITE's source buffer";
        ibv_qp_attr attr = {};
        attr.qp_state = IBV_QPS_ERR;
        BlockingCall flush([&] { return ibv_modify_qp(a_.get(), &attr, IBV_QP_STATE); });
        EXPECT_TRUE(flush.WaitFor(kChildTimeout / 2)) << "ibv_modify_qp(ERR) waited for the held read for good";
        ibv_wc wc = {};
        EXPECT_TRUE(PollOneCompletion(a_.send_cq.get(), &wc, kReturnWindow)) << "the WRITE was not flushed";
        EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR) << DescribeWc(wc);
        held.Release();
        std::memset(held.addr(), 0x42, kLength);
        EXPECT_EQ(write(to_child, "f", 1), 1);
        char step = 0;
        EXPECT_TRUE(WaitReadable(from_child, kChildTimeout)) << "the child did not finish its checks";
        EXPECT_EQ(read(from_child, &step, 1), 1);
      });
}

// Rule: ibv_modify_qp(3): max_rd_atomic READs may be outstanding at once (max_dest_rd_atomic at the
//   responder); IBTA 9.4.3 / 9.7.5.1.6: the responder answers each READ with its data in MTU-sized
//   response packets, one PSN each, and the link's flow control holds packets back rather than
//   losing them: however many response packets are in flight, none counts as lost.
// Checks: for READs of 192 KiB and of 1 MiB in turn (on the simulator, the first are answered
//   through the rings, the others read by the requester itself: sim/src/qp.h,
//   kMinPlacedReadBytes), each with a child of its own: the child's buffer of 8 such chunks holds a
//   pattern; the parent posts 48 READs (chunk k % 8 into slice k of its own buffer) with as many
//   outstanding as the device allows (up to 64), in one list; every one completes with success, in
//   posting order, and every slice holds the child's bytes.
TEST_F(CrossProcessWriteTest, ManyOutstandingLargeReadsReturnTheirBytes) {
  constexpr size_t kChunks = 8;
  constexpr int kReads = 48;
  const int outstanding = std::min({device_attr().max_qp_rd_atom, device_attr().max_qp_init_rd_atom, 64});
  SKIP_IF(outstanding < 1) << "(the device takes no outstanding READ)";
  Buffer sink;
  ASSERT_TRUE(sink.Register(pd(), kLargeRead * kReads));
  for (const size_t chunk : {size_t{192} << 10, kLargeRead}) {
    SCOPED_TRACE("READs of " + std::to_string(chunk) + " bytes");
    ChildSetup setup;
    setup.length = chunk * kChunks;
    setup.rd_atomic = static_cast<uint8_t>(outstanding);
    setup.max_send_wr = kReads;
    RunWithChild(
        kFullMrAccess, kRcRemoteAccess, ServePattern(9, chunk * kChunks),
        [&](const Target& target, int to_child, int from_child) {
          ASSERT_NO_FATAL_FAILURE(WaitForChild(from_child));
          std::vector<ibv_sge> sges(kReads);
          std::vector<ibv_send_wr> wrs(kReads);
          for (int k = 0; k < kReads; ++k) {
            sges[k] = sink.Sge(k * chunk, chunk);
            wrs[k] = RdmaWr(k, IBV_WR_RDMA_READ, &sges[k], 1, target.addr + (k % kChunks) * chunk, target.rkey);
          }
          ASSERT_EQ(PostList(a_.get(), &wrs), 0);
          std::vector<ibv_wc> wcs;
          EXPECT_TRUE(PollCompletions(a_.send_cq.get(), kReads, &wcs, kChildTimeout - 2000ms));
          for (size_t k = 0; k < wcs.size(); ++k) {
            EXPECT_EQ(wcs[k].wr_id, k);
            EXPECT_EQ(wcs[k].status, IBV_WC_SUCCESS) << DescribeWc(wcs[k]);
          }
          const std::vector<uint8_t> pattern = Pattern(9, chunk * kChunks);
          int wrong = 0;
          std::string first_wrong;
          for (int k = 0; k < static_cast<int>(wcs.size()); ++k) {
            const uint8_t* got = sink.data() + k * chunk;
            const uint8_t* want = pattern.data() + (k % kChunks) * chunk;
            if (std::memcmp(got, want, chunk) == 0) continue;
            if (wrong++ == 0) {
              size_t at = 0;
              while (got[at] == want[at]) ++at;
              first_wrong = "READ " + std::to_string(k) + " differs from byte " + std::to_string(at) + " (" +
                            std::to_string(got[at]) + " instead of " + std::to_string(want[at]) + ")";
              size_t n = 0;
              for (size_t i = 0; i < chunk; ++i) n += got[i] != want[i];
              first_wrong += ", " + std::to_string(n) + " bytes differ; got";
              for (int i = 0; i < 8; ++i) first_wrong += " " + std::to_string(got[i]);
              first_wrong += ", want";
              for (int i = 0; i < 8; ++i) first_wrong += " " + std::to_string(want[i]);
            }
          }
          EXPECT_EQ(wrong, 0) << wrong << " of " << wcs.size() << " READs returned other bytes than the child's; "
                              << first_wrong;
          EXPECT_EQ(write(to_child, "e", 1), 1);
        },
        setup);
    a_.reset();  // the next child connects to a new QP
    if (HasFailure()) return;
  }
}

// Rule: ibv_post_send(3): an RDMA READ reads length bytes at remote_addr of the remote MR into the
//   local SGEs; IBTA 9.4.3: the responder answers with one response packet (RDMA READ Response Only)
//   when the READ fits in one path MTU, and with First, Middle and Last packets otherwise.
// Checks: the child's buffer holds a pattern; the parent posts, in one list with as many
//   outstanding as the device allows (up to 16), READs of 0, 1, 63, 64, MTU - 1, MTU, MTU + 1 and
//   2 MTU bytes (the QP's path MTU), each from its own offset of the child's buffer into its own
//   slice of a local buffer; every one completes with success, in posting order, with the length
//   asked for, and every slice holds the child's bytes from that offset, the bytes after it
//   untouched.
TEST_F(CrossProcessWriteTest, ReadsOfOneAndTwoPacketsReturnTheirBytes) {
  const int outstanding = std::min({device_attr().max_qp_rd_atom, device_attr().max_qp_init_rd_atom, 16});
  SKIP_IF(outstanding < 1) << "(the device takes no outstanding READ)";
  constexpr uint8_t kUntouched = 0xa5;
  ChildSetup setup;
  setup.rd_atomic = static_cast<uint8_t>(outstanding);
  RunWithChild(
      kFullMrAccess, kRcRemoteAccess,
      ServePattern(11, kLength),
      [&](const Target& target, int to_child, int from_child) {
        ASSERT_NO_FATAL_FAILURE(WaitForChild(from_child));
        ibv_qp_attr attr{};
        ibv_qp_init_attr init{};
        ASSERT_EQ(ibv_query_qp(a_.get(), &attr, IBV_QP_PATH_MTU, &init), 0);
        const uint32_t mtu = 128u << attr.path_mtu;
        const std::vector<uint32_t> lengths = {0, 1, 63, 64, mtu - 1, mtu, mtu + 1, 2 * mtu};
        const size_t slice = 4 * mtu;  // room for the longest READ and untouched bytes behind it
        ASSERT_LE(slice * lengths.size(), kLength);
        // Each READ from its own odd offset of the child's buffer, into its own slice.
        const auto from = [&](size_t k) { return k * slice + 3 * k + 1; };
        std::memset(src_.data(), kUntouched, kLength);
        std::vector<ibv_sge> sges(lengths.size());
        std::vector<ibv_send_wr> wrs(lengths.size());
        for (size_t k = 0; k < lengths.size(); ++k) {
          sges[k] = src_.Sge(k * slice, lengths[k]);
          wrs[k] = RdmaWr(k, IBV_WR_RDMA_READ, &sges[k], 1, target.addr + from(k), target.rkey);
        }
        ASSERT_EQ(PostList(a_.get(), &wrs), 0);
        std::vector<ibv_wc> wcs;
        EXPECT_TRUE(PollCompletions(a_.send_cq.get(), static_cast<int>(lengths.size()), &wcs, kChildTimeout - 2000ms));
        for (size_t k = 0; k < wcs.size(); ++k) {
          EXPECT_EQ(wcs[k].wr_id, k);
          EXPECT_EQ(wcs[k].status, IBV_WC_SUCCESS) << DescribeWc(wcs[k]);
          EXPECT_EQ(wcs[k].opcode, IBV_WC_RDMA_READ) << DescribeWc(wcs[k]);
        }
        const std::vector<uint8_t> pattern = Pattern(11, kLength);
        for (size_t k = 0; k < wcs.size(); ++k) {
          const uint8_t* got = src_.data() + k * slice;
          const auto want = pattern.begin() + static_cast<std::ptrdiff_t>(from(k));
          EXPECT_EQ(std::vector<uint8_t>(got, got + lengths[k]), std::vector<uint8_t>(want, want + lengths[k]))
              << "READ of " << lengths[k] << " bytes (path MTU " << mtu << ") returned other bytes than the child's";
          EXPECT_EQ(std::vector<uint8_t>(got + lengths[k], got + lengths[k] + 64), std::vector<uint8_t>(64, kUntouched))
              << "READ of " << lengths[k] << " bytes wrote past its length";
        }
        EXPECT_EQ(write(to_child, "e", 1), 1);
      },
      setup);
}

// Rule: IBTA 9.7.5.1 and 9.4.3: a responder answers each SEND with an ACK and each READ with its
//   response; ibv_post_send(3): a READ reads length bytes at remote_addr of the remote MR, and a
//   SEND's message goes to the next receive. A responder that has answered its requester in
//   another process before (later ACKs and one-packet READ responses are written another way by
//   the simulator) keeps this, whichever kind of answer it sent first.
// Checks: the child fills its buffer from byte 1024 on with a pattern and posts a second receive;
//   the parent posts, one at a time, each once the one before has completed: a READ of 64 bytes,
//   a SEND of 16, a READ of 0, a READ of 32, a SEND of 16, a READ of the path MTU and one of two
//   path MTUs and 5 bytes, each READ from its own offset of the pattern. Each completes with success and its own opcode, each
//   READ's slice holds the child's bytes, and the child's two receives get the two SENDs in order.
TEST_F(CrossProcessWriteTest, ReadsAndSendsInTurnGetTheirAnswers) {
  constexpr size_t kPatternAt = 1024;
  RunWithChild(
      kFullMrAccess, kRcRemoteAccess,
      [&](const Child& c) {
        const std::vector<uint8_t> pattern = Pattern(31, kLength - kPatternAt);
        std::memcpy(c.buf + kPatternAt, pattern.data(), pattern.size());
        ASSERT_NO_FATAL_FAILURE(PostMoreReceives(c, 1));
        ASSERT_EQ(write(c.to_parent, "r", 1), 1);
        std::vector<ibv_wc> wcs;
        ASSERT_TRUE(PollCompletions(c.recv_cq, 2, &wcs, kChildTimeout / 2)) << "the child did not receive both SENDs";
        ExpectSendsReceived(c, wcs, Pattern(32, 32), 16);
        // Stay until the parent has its completions.
        EXPECT_TRUE(WaitReadable(c.from_parent, kChildTimeout / 2));
      },
      [&](const Target& target, int to_child, int from_child) {
        ASSERT_NO_FATAL_FAILURE(WaitForChild(from_child));
        ibv_qp_attr attr{};
        ibv_qp_init_attr init{};
        ASSERT_EQ(ibv_query_qp(a_.get(), &attr, IBV_QP_PATH_MTU, &init), 0);
        const uint32_t mtu = 128u << attr.path_mtu;
        const std::vector<uint8_t> pattern = Pattern(31, kLength - kPatternAt);
        const std::vector<uint8_t> sent = Pattern(32, 32);
        std::memcpy(src_.data(), sent.data(), sent.size());
        struct Step {
          ibv_wr_opcode opcode;
          uint32_t length;
        };
        const Step steps[] = {{IBV_WR_RDMA_READ, 64}, {IBV_WR_SEND, 16}, {IBV_WR_RDMA_READ, 0},
                              {IBV_WR_RDMA_READ, 32}, {IBV_WR_SEND, 16}, {IBV_WR_RDMA_READ, mtu},
                              {IBV_WR_RDMA_READ, 2 * mtu + 5}};
        size_t sends = 0;
        for (size_t k = 0; k < std::size(steps); ++k) {
          const Step& step = steps[k];
          const bool read = step.opcode == IBV_WR_RDMA_READ;
          const size_t into = 4096 * (k + 1);  // each READ into its own slice of src_
          const size_t from = 512 * k + 3;     // from its own offset of the pattern
          ibv_sge sge = read ? src_.Sge(into, step.length) : src_.Sge(16 * sends++, step.length);
          const ibv_send_wr wr =
              read ? RdmaWr(k, IBV_WR_RDMA_READ, &sge, 1, target.addr + kPatternAt + from, target.rkey)
                   : SendWr(k, &sge, 1);
          ASSERT_EQ(PostOne(a_.get(), wr), 0) << "step " << k;
          ibv_wc wc = {};
          ASSERT_TRUE(PollOneCompletion(a_.send_cq.get(), &wc, kChildTimeout / 4)) << "step " << k << " did not complete";
          EXPECT_EQ(wc.wr_id, k);
          EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << "step " << k << ": " << DescribeWc(wc);
          EXPECT_EQ(wc.opcode, read ? IBV_WC_RDMA_READ : IBV_WC_SEND) << "step " << k << ": " << DescribeWc(wc);
          if (read) {
            EXPECT_EQ(Read(src_.data() + into, step.length),
                      std::vector<uint8_t>(pattern.begin() + static_cast<long>(from),
                                           pattern.begin() + static_cast<long>(from + step.length)))
                << "the READ of step " << k << " (" << step.length << " bytes) returned other bytes";
          }
        }
        EXPECT_EQ(write(to_child, "e", 1), 1);
      });
}

// Rule: ibv_modify_qp(3): a QP moved to RESET and through INIT, RTR and RTS again with another
//   dest_qp_num is connected to that QP; IBTA Vol 1 9.7.5.1: the responder acknowledges its
//   requester's messages.
// Checks: the child's QP answers a SEND from a_ (its receive completes), then is moved to RESET
//   and connected to b_ (another QP of the parent); two SENDs from b_ then complete with
//   IBV_WC_SUCCESS, the child receives them, and a_ gets no completion: the child's ACKs went to
//   b_, not to the QP it answered before.
TEST_F(CrossProcessWriteTest, ResponderConnectedAgainAcksItsNewRequester) {
  RunWithChild(
      IBV_ACCESS_LOCAL_WRITE, 0,
      [&](const Child& c) {
        ASSERT_NO_FATAL_FAILURE(ReceiveFirst(c));
        uint32_t second_qpn = 0;
        ASSERT_TRUE(WaitReadable(c.from_parent, kChildTimeout / 2));
        ASSERT_EQ(read(c.from_parent, &second_qpn, sizeof second_qpn), static_cast<ssize_t>(sizeof second_qpn));
        ASSERT_TRUE(ModifyToState(c.qp, IBV_QPS_RESET));
        ASSERT_TRUE(BringUp(c.qp, port(), second_qpn, LocalAddress(), ConnectParams{}));
        for (uint64_t wr_id : {8, 9}) {
          ibv_sge rsge = {reinterpret_cast<uintptr_t>(c.buf) + 64 * wr_id, 64, c.mr->lkey};
          ASSERT_EQ(PostRecv(c.qp, wr_id, &rsge, 1), 0);
        }
        ASSERT_EQ(write(c.to_parent, "r", 1), 1);
        std::vector<ibv_wc> wcs;
        EXPECT_TRUE(PollCompletions(c.recv_cq, 2, &wcs, kChildTimeout / 2));
        for (size_t k = 0; k < wcs.size(); ++k) {
          EXPECT_EQ(wcs[k].wr_id, 8 + k);
          EXPECT_EQ(wcs[k].status, IBV_WC_SUCCESS) << DescribeWc(wcs[k]);
        }
        EXPECT_TRUE(WaitReadable(c.from_parent, kChildTimeout / 2));
      },
      [&](const Target& target, int to_child, int from_child) {
        const ibv_wc wc = Send(1);
        ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << "the SEND of the first connection: " << DescribeWc(wc);
        ASSERT_TRUE(CreateEnd(&b_));
        ASSERT_TRUE(BringUp(b_.get(), port(), target.qpn, LocalAddress(), ConnectParams{}));
        const uint32_t second_qpn = b_.qp_num();
        ASSERT_EQ(write(to_child, &second_qpn, sizeof second_qpn), static_cast<ssize_t>(sizeof second_qpn));
        ASSERT_NO_FATAL_FAILURE(WaitForChild(from_child));
        ibv_sge sge = src_.Sge(0, 16);
        for (uint64_t wr_id : {2, 3}) ASSERT_EQ(PostOne(b_.get(), SendWr(wr_id, &sge, 1)), 0);
        std::vector<ibv_wc> wcs;
        EXPECT_TRUE(PollCompletions(b_.send_cq.get(), 2, &wcs, kChildTimeout / 2));
        for (const ibv_wc& done : wcs) {
          EXPECT_EQ(done.status, IBV_WC_SUCCESS) << "a SEND of the second connection: " << DescribeWc(done);
        }
        EXPECT_TRUE(NoCompletionWithin(a_.send_cq.get())) << "the first requester heard an answer";
        EXPECT_EQ(write(to_child, "x", 1), 1);
      });
}

// Rule: ibv_modify_qp(3): a QP moved to RESET and through INIT, RTR and RTS again with another
//   dest_qp_num and address vector is connected to that QP: its messages go there.
// Checks: a_ sends to the child's QP (its receive completes), is moved to RESET and connected to b_,
//   a QP of its own process; two SENDs from a_ then complete with IBV_WC_SUCCESS, b_ receives both
//   with their bytes, a WRITE from a_ into b_'s memory completes with IBV_WC_SUCCESS and lands, and
//   the child, with a receive posted, receives nothing more. (On the
//   simulator, a requester that kept the way to its first peer's process, or the packet it built
//   for it, sends there instead.)
TEST_F(CrossProcessWriteTest, RequesterConnectedAgainSendsToItsNewResponder) {
  RunWithChild(
      IBV_ACCESS_LOCAL_WRITE, 0,
      [&](const Child& c) {
        ASSERT_NO_FATAL_FAILURE(ReceiveFirstAndPostAnother(c));
        EXPECT_TRUE(WaitReadable(c.from_parent, kChildTimeout / 2));
        EXPECT_TRUE(NoCompletionWithin(c.recv_cq)) << "a SEND of the second connection reached the first responder";
      },
      [&](const Target&, int to_child, int from_child) {
        const ibv_wc first = Send(1);
        ASSERT_EQ(first.status, IBV_WC_SUCCESS) << "the SEND of the first connection: " << DescribeWc(first);
        ASSERT_NO_FATAL_FAILURE(WaitForChild(from_child));
        ASSERT_TRUE(CreateEnd(&b_));
        Buffer received;
        ASSERT_TRUE(received.Register(pd(), 4096));
        ASSERT_TRUE(ModifyToState(a_.get(), IBV_QPS_RESET));
        ASSERT_TRUE(BringUp(b_.get(), port(), a_.qp_num(), LocalAddress(), ConnectParams{}));
        for (uint64_t wr_id : {4, 5}) {
          ibv_sge rsge = received.Sge(64 * wr_id, 64);
          ASSERT_EQ(PostRecv(b_.get(), wr_id, &rsge, 1), 0);
        }
        ASSERT_TRUE(BringUp(a_.get(), port(), b_.qp_num(), LocalAddress(), ConnectParams{}));
        src_.FillPattern(9);
        std::vector<ibv_sge> sges;
        for (uint64_t wr_id : {2, 3}) sges.push_back(src_.Sge(16 * wr_id, 16));
        for (size_t k = 0; k < sges.size(); ++k) ASSERT_EQ(PostOne(a_.get(), SendWr(2 + k, &sges[k], 1)), 0);
        std::vector<ibv_wc> sent;
        EXPECT_TRUE(PollCompletions(a_.send_cq.get(), 2, &sent, kChildTimeout / 2));
        for (const ibv_wc& done : sent) {
          EXPECT_EQ(done.status, IBV_WC_SUCCESS) << "a SEND of the second connection: " << DescribeWc(done);
        }
        std::vector<ibv_wc> got;
        EXPECT_TRUE(PollCompletions(b_.recv_cq.get(), 2, &got, kChildTimeout / 2)) << "b_ received too little";
        for (size_t k = 0; k < got.size(); ++k) {
          EXPECT_EQ(got[k].wr_id, 4 + k);
          EXPECT_EQ(got[k].status, IBV_WC_SUCCESS) << DescribeWc(got[k]);
          const uint8_t* want = src_.data() + 16 * (2 + k);
          const uint8_t* landed = received.data() + 64 * (4 + k);
          EXPECT_EQ(std::vector<uint8_t>(landed, landed + 16), std::vector<uint8_t>(want, want + 16))
              << "b_'s receive " << 4 + k << " holds other bytes than the SEND's";
        }
        ibv_sge wsge = src_.Sge(64, 16);
        ASSERT_EQ(PostOne(a_.get(), RdmaWr(6, IBV_WR_RDMA_WRITE, &wsge, 1, received.addr(1024), received.mr()->rkey)), 0);
        ibv_wc written = {};
        EXPECT_TRUE(PollOneCompletion(a_.send_cq.get(), &written, kChildTimeout / 2));
        EXPECT_EQ(written.status, IBV_WC_SUCCESS) << "a WRITE of the second connection: " << DescribeWc(written);
        EXPECT_EQ(std::vector<uint8_t>(received.data() + 1024, received.data() + 1040),
                  std::vector<uint8_t>(src_.data() + 64, src_.data() + 80))
            << "the WRITE to b_'s memory did not land";
        EXPECT_EQ(write(to_child, "x", 1), 1);
      });
}

// Takes the link of `port` down in this process through the simulator's control API, and up again
// when it goes (a test that fails midway leaves the port as it found it); both events are read and
// acknowledged.
class LinkDownHere {
 public:
  LinkDownHere(ibv_context* context, uint8_t port) : context_(context), port_(port) {
    down_ = SimControl::Get().RaisePortEvent(context_, port_, IBV_EVENT_PORT_ERR) == 0;
    Acknowledge();
  }
  ~LinkDownHere() {
    if (!down_) return;
    EXPECT_EQ(SimControl::Get().RaisePortEvent(context_, port_, IBV_EVENT_PORT_ACTIVE), 0);
    Acknowledge();
  }
  bool down() const { return down_; }

 private:
  void Acknowledge() {
    ibv_async_event event = {};
    if (GetAsyncEventWithin(context_, &event, kReturnWindow)) ibv_ack_async_event(&event);
  }
  ibv_context* context_;
  uint8_t port_;
  bool down_ = false;
};

// Rule: ibv_query_port(3): a port that is not ACTIVE passes no packets; IBTA Vol 1 ch. 9 (transport
//   timer and retries): a requester that gets no response after retry_cnt retries completes the WR
//   with IBV_WC_RETRY_EXC_ERR.
// Checks: (simulator only: its control API takes the link down, in this process alone) a SEND to a
//   QP of another process completes with success and arrives; with the link of our port down, the
//   next SEND (retry_cnt 1) completes with IBV_WC_RETRY_EXC_ERR and the child receives nothing.
TEST_F(CrossProcessWriteTest, SendToAnotherProcessIsLostWhileTheLinkIsDown) {
  SKIP_IF(!Sim()) << "takes the link down through the simulator's control API";
  ChildSetup setup;
  setup.retry_cnt = 1;
  RunWithChild(
      IBV_ACCESS_LOCAL_WRITE, 0,
      [&](const Child& c) {
        ASSERT_NO_FATAL_FAILURE(ReceiveFirstAndPostAnother(c));
        ASSERT_TRUE(WaitReadable(c.from_parent, kChildTimeout / 2));
        ibv_wc second = {};
        EXPECT_EQ(ibv_poll_cq(c.recv_cq, 1, &second), 0)
            << "received while the sender's link was down: " << DescribeWc(second);
      },
      [&](const Target&, int to_child, int from_child) {
        const ibv_wc before = Send(1);
        ASSERT_EQ(before.status, IBV_WC_SUCCESS) << "the SEND before the link went down: " << DescribeWc(before);
        ASSERT_NO_FATAL_FAILURE(WaitForChild(from_child));
        {
          const LinkDownHere link(context(), port());
          ASSERT_TRUE(link.down()) << "simverbs_raise_port_event(IBV_EVENT_PORT_ERR) failed";
          const ibv_wc lost = Send(2);
          EXPECT_EQ(lost.status, IBV_WC_RETRY_EXC_ERR) << "the SEND while the link was down: " << DescribeWc(lost);
        }
        EXPECT_EQ(write(to_child, "x", 1), 1);
      },
      setup);
}

// Rule: IBTA Vol 1 9.7.5.2 (responder PSN sequence error): after a NAK-sequence the responder NAKs
//   no other out-of-sequence request until the expected PSN arrives (rxe_resp.c check_psn:
//   sent_psn_nak), and an RNR NAK makes the requester wait and resend from that PSN without
//   counting a transport retry (ibv_modify_qp(3): retry_cnt counts timeouts and sequence errors).
// Checks: (simulator only) the child's QP has no receive posted; the parent, with retry_cnt 1 and
//   rnr_retry 7, posts 16 SENDs in one list, so the child sees the first (RNR) and 15 behind it;
//   no send completion comes within kBlockWindow (one NAK-sequence per gap: no
//   IBV_WC_RETRY_EXC_ERR); once the child posts 16 receives, all 16 complete with success.
TEST_F(CrossProcessWriteTest, PipelinedSendsBehindRnrDoNotExhaustRetries) {
  constexpr int kSends = 16;  // the QPs' max_send_wr and max_recv_wr
  SKIP_IF(!Sim()) << "(how many retries a sequence NAK after an RNR NAK costs on hardware is not settled here)";
  ChildSetup setup;
  setup.post_recv = false;
  setup.retry_cnt = 1;
  RunWithChild(
      kFullMrAccess, kRcRemoteAccess,
      [](const Child& c) {
        char step = 0;
        ASSERT_TRUE(WaitReadable(c.from_parent, kChildTimeout / 2));
        ASSERT_EQ(read(c.from_parent, &step, 1), 1);
        for (int k = 0; k < kSends; ++k) {
          ibv_sge sge = {reinterpret_cast<uintptr_t>(c.buf) + 64 * k, 64, c.mr->lkey};
          ASSERT_EQ(PostRecv(c.qp, k, &sge, 1), 0);
        }
        // Stay until the parent has its completions.
        EXPECT_TRUE(WaitReadable(c.from_parent, kChildTimeout / 2));
      },
      [&](const Target&, int to_child, int) {
        std::vector<ibv_sge> sges(kSends);
        std::vector<ibv_send_wr> wrs(kSends);
        for (int k = 0; k < kSends; ++k) {
          sges[k] = src_.Sge(64 * k, 64);
          wrs[k] = SendWr(k, &sges[k], 1);
        }
        ASSERT_EQ(PostList(a_.get(), &wrs), 0);
        EXPECT_TRUE(NoCompletionWithin(a_.send_cq.get(), kBlockWindow))
            << "a SEND completed while the responder had no receive (RNR only)";
        EXPECT_EQ(write(to_child, "r", 1), 1);
        std::vector<ibv_wc> wcs;
        EXPECT_TRUE(PollCompletions(a_.send_cq.get(), kSends, &wcs, kReturnWindow));
        for (const ibv_wc& wc : wcs) EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
        EXPECT_EQ(write(to_child, "e", 1), 1);
      },
      setup);
}

// Rule: IBTA 9.7.5.1: a responder may coalesce its ACKs (one ACK covers every message up to its
//   PSN), but the requester sees its answers in the order the responder made them; ibv_modify_qp(3):
//   with rnr_retry 0 the first RNR NAK completes that message with IBV_WC_RNR_RETRY_EXC_ERR.
// Checks: the child (one receive posted) is stopped while the parent posts two SENDs in one list, so
//   its side takes both at once: the first is received and ACKed, the second finds no receive and is
//   RNR NAKed. The first completes with success and the second with RNR_RETRY_EXC_ERR (an ACK held
//   back behind the NAK would make the NAK fail the first); the child's receive holds the first's bytes.
TEST_F(CrossProcessWriteTest, AckOfABurstReachesRequesterBeforeItsRnrNak) {
  ChildSetup setup;
  setup.rnr_retry = 0;
  RunWithChild(
      kFullMrAccess, kRcRemoteAccess,
      [](const Child& c) {
        ASSERT_TRUE(WaitReadable(c.from_parent, kChildTimeout / 2));
        std::vector<uint8_t> want(64);
        for (size_t i = 0; i < want.size(); ++i) want[i] = static_cast<uint8_t>(i * 3 + 1);
        EXPECT_EQ(Read(c.buf, want.size()), want) << "the first SEND's bytes are not in the receive buffer";
      },
      [&](const Target& target, int to_child, int) {
        uint8_t* bytes = src_.data();
        for (size_t i = 0; i < 128; ++i) bytes[i] = static_cast<uint8_t>(i * 3 + 1);
        ibv_sge sges[2] = {src_.Sge(0, 64), src_.Sge(64, 64)};
        ibv_send_wr wrs[2] = {SendWr(1, &sges[0], 1), SendWr(2, &sges[1], 1)};
        wrs[0].next = &wrs[1];
        ASSERT_EQ(PostWhileStopped(target.pid, wrs), 0);
        ExpectTwoCompletions(IBV_WC_SUCCESS, IBV_WC_RNR_RETRY_EXC_ERR);
        EXPECT_EQ(write(to_child, "x", 1), 1);
      },
      setup);
}

// Rule: ibv_post_send(3): IBV_SEND_FENCE: "Set the fence indicator. Valid only for QPs with
//   Transport Service Type IBV_QPT_RC": the WR is processed only after every RDMA READ and atomic
//   posted before it has completed (IBTA 10.8.3.3), so a SEND fenced behind a READ into its own
//   gather buffer sends what the READ brought.
// Checks: the child's buffer holds a pattern; the parent posts, in one list, a 64-byte READ of the
//   child's bytes at 1024 into its source buffer and a fenced SEND of that same source buffer. Both
//   complete with success, and the child's receive holds the bytes the READ read (not what the
//   source buffer held before).
TEST_F(CrossProcessWriteTest, FencedSendWaitsForTheReadBeforeIt) {
  RunWithChild(
      kFullMrAccess, kRcRemoteAccess,
      [](const Child& c) {
        const std::vector<uint8_t> pattern = Pattern(6, 2048);
        std::memcpy(c.buf, pattern.data(), pattern.size());
        ASSERT_EQ(write(c.to_parent, "p", 1), 1);
        ibv_wc wc = {};
        ASSERT_TRUE(PollOneCompletion(c.recv_cq, &wc, kChildTimeout / 2)) << "the fenced SEND did not arrive";
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
        EXPECT_EQ(Read(c.buf, 64), std::vector<uint8_t>(pattern.begin() + 1024, pattern.begin() + 1088))
            << "the fenced SEND did not carry what the READ before it read";
        EXPECT_TRUE(WaitReadable(c.from_parent, kChildTimeout / 2));
      },
      [&](const Target& target, int to_child, int from_child) {
        ASSERT_NO_FATAL_FAILURE(WaitForChild(from_child));
        src_.FillPattern(3);
        ibv_sge read_sge = src_.Sge(0, 64);
        ibv_sge send_sge = src_.Sge(0, 64);
        std::vector<ibv_send_wr> wrs = {
            RdmaWr(1, IBV_WR_RDMA_READ, &read_sge, 1, target.addr + 1024, target.rkey),
            SendWr(2, &send_sge, 1, IBV_SEND_SIGNALED | IBV_SEND_FENCE)};
        ASSERT_EQ(PostList(a_.get(), &wrs), 0);
        ExpectTwoCompletions(IBV_WC_SUCCESS, IBV_WC_SUCCESS);
        EXPECT_EQ(write(to_child, "x", 1), 1);
      });
}

// Rule: IBTA 9.7.5.2.8 (RNR NAK): an RDMA WRITE with immediate needs a receive WQE, and a
//   responder without one answers it with an RNR NAK and executes none of it; IBTA 9.7.5.1: the
//   requests behind it are executed only once it has been, in PSN order; ibv_modify_qp(3): with
//   rnr_retry 0 the first RNR NAK completes that WR with IBV_WC_RNR_RETRY_EXC_ERR, and the QP
//   then flushes the rest.
// Checks: the child posts no receive; the parent posts, in one list, a 64-byte WRITE with
//   immediate to the child's buffer at 0 and a 64-byte WRITE at 1024. They complete with
//   IBV_WC_RNR_RETRY_EXC_ERR and IBV_WC_WR_FLUSH_ERR, and neither range of the child's buffer
//   changed. (On the simulator, a requester that copied either WRITE into the child's memory before
//   the child's side had accepted the first leaves its bytes there.)
TEST_F(CrossProcessWriteTest, WritesBehindAnRnrNakedWriteWithImmediateDoNotLand) {
  ChildSetup setup;
  setup.post_recv = false;
  setup.rnr_retry = 0;
  RunWithChild(
      kFullMrAccess, kRcRemoteAccess,
      [](const Child& c) {
        ASSERT_TRUE(WaitReadable(c.from_parent, kChildTimeout / 2));
        EXPECT_EQ(Read(c.buf, 64), std::vector<uint8_t>(64, 0)) << "the refused WRITE with immediate landed";
        EXPECT_EQ(Read(c.buf + 1024, 64), std::vector<uint8_t>(64, 0)) << "the WRITE behind it landed";
      },
      [&](const Target& target, int to_child, int) {
        src_.FillPattern(8);
        ibv_sge sges[2] = {src_.Sge(0, 64), src_.Sge(64, 64)};
        std::vector<ibv_send_wr> wrs = {
            RdmaWr(1, IBV_WR_RDMA_WRITE_WITH_IMM, &sges[0], 1, target.addr, target.rkey),
            RdmaWr(2, IBV_WR_RDMA_WRITE, &sges[1], 1, target.addr + 1024, target.rkey)};
        wrs[0].imm_data = htonl(0x5eed);
        ASSERT_EQ(PostList(a_.get(), &wrs), 0);
        ExpectTwoCompletions(IBV_WC_RNR_RETRY_EXC_ERR, IBV_WC_WR_FLUSH_ERR);
        EXPECT_EQ(write(to_child, "x", 1), 1);
      },
      setup);
}

// Rule: ibv_poll_cq(3): a receive that a SEND took completes with IBV_WC_RECV and byte_len the
//   SEND's length; one that a SEND with immediate took has IBV_WC_WITH_IMM in wc_flags and the
//   immediate data as the sender posted it (network order); IBTA 9.5: messages complete in order.
// Checks: the child has two receives posted (64 bytes each); the parent sends 48 bytes with
//   immediate data, then 40 bytes without. The first receive holds the first SEND's bytes and
//   completes with IBV_WC_WITH_IMM and its immediate data, the second the other's, without the flag.
TEST_F(CrossProcessWriteTest, SendsWithAndWithoutImmediateCompleteTheirReceives) {
  constexpr uint32_t kImm = 0x12345678;
  RunWithChild(
      kFullMrAccess, kRcRemoteAccess,
      [&](const Child& c) {
        ibv_sge second = {reinterpret_cast<uintptr_t>(c.buf) + 64, 64, c.mr->lkey};
        ASSERT_EQ(PostRecv(c.qp, 8, &second, 1), 0);
        ASSERT_EQ(write(c.to_parent, "r", 1), 1);
        std::vector<ibv_wc> wcs;
        ASSERT_TRUE(PollCompletions(c.recv_cq, 2, &wcs, kChildTimeout / 2)) << "the child did not receive both";
        EXPECT_EQ(wcs[0].wr_id, 7u);
        EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS) << DescribeWc(wcs[0]);
        EXPECT_EQ(wcs[0].opcode, IBV_WC_RECV);
        EXPECT_EQ(wcs[0].byte_len, 48u);
        EXPECT_TRUE(wcs[0].wc_flags & IBV_WC_WITH_IMM) << DescribeWc(wcs[0]);
        EXPECT_EQ(wcs[0].imm_data, htonl(kImm));
        EXPECT_EQ(wcs[1].wr_id, 8u);
        EXPECT_EQ(wcs[1].status, IBV_WC_SUCCESS) << DescribeWc(wcs[1]);
        EXPECT_EQ(wcs[1].opcode, IBV_WC_RECV);
        EXPECT_EQ(wcs[1].byte_len, 40u);
        EXPECT_FALSE(wcs[1].wc_flags & IBV_WC_WITH_IMM) << DescribeWc(wcs[1]);
        const std::vector<uint8_t> pattern = Pattern(6, 128);
        EXPECT_EQ(Read(c.buf, 48), std::vector<uint8_t>(pattern.begin(), pattern.begin() + 48));
        EXPECT_EQ(Read(c.buf + 64, 40), std::vector<uint8_t>(pattern.begin() + 64, pattern.begin() + 104));
      },
      [&](const Target&, int, int from_child) {
        ASSERT_NO_FATAL_FAILURE(WaitForChild(from_child));
        src_.FillPattern(6);
        ibv_sge sges[2] = {src_.Sge(0, 48), src_.Sge(64, 40)};
        std::vector<ibv_send_wr> wrs = {SendWr(1, &sges[0], 1, IBV_SEND_SIGNALED, IBV_WR_SEND_WITH_IMM),
                                        SendWr(2, &sges[1], 1)};
        wrs[0].imm_data = htonl(kImm);
        ASSERT_EQ(PostList(a_.get(), &wrs), 0);
        ExpectTwoCompletions(IBV_WC_SUCCESS, IBV_WC_SUCCESS);
      });
}

// Rule: ibv_post_send(3): a SEND's message is its gather list, delivered into the receive WQE's
//   scatter list, end to end; ibv_poll_cq(3): the receive completes with byte_len the SEND's
//   length (and IBV_WC_WITH_IMM and the immediate data for a SEND with immediate); IBTA 9.5:
//   messages complete in order, and a message takes one PSN per path MTU.
// Checks: the parent sends kLargeSends (16 KiB, 64 KiB + 5 into a receive of three SGEs, 1 MiB
//   with immediate data), then 16 bytes, in one list: all four complete with success, in order;
//   the child's four receives complete in order with those lengths and bytes.
TEST_F(CrossProcessWriteTest, LargeSendsLandInTheChildsReceives) {
  constexpr uint32_t kImm = 0x0badcafe;
  Buffer source;
  ASSERT_TRUE(source.Register(pd(), kLargeSendBytes + 16));
  ChildSetup setup;
  setup.length = kLargeSendBytes + 64;
  setup.post_recv = false;
  setup.max_recv_sge = 3;
  RunWithChild(
      kFullMrAccess, kRcRemoteAccess,
      [](const Child& c) {
        const uintptr_t base = reinterpret_cast<uintptr_t>(c.buf);
        size_t at = 0;
        for (size_t k = 0; k < std::size(kLargeSends); ++k) {
          const uint32_t length = static_cast<uint32_t>(kLargeSends[k]);
          if (k == 1) {
            ibv_sge three[3] = {{base + at, 1000, c.mr->lkey},
                                {base + at + 1000, 30000, c.mr->lkey},
                                {base + at + 31000, length - 31000, c.mr->lkey}};
            ASSERT_EQ(PostRecv(c.qp, 7 + k, three, 3), 0);
          } else {
            ibv_sge one = {base + at, length, c.mr->lkey};
            ASSERT_EQ(PostRecv(c.qp, 7 + k, &one, 1), 0);
          }
          at += length;
        }
        ibv_sge tail = {base + at, 64, c.mr->lkey};
        ASSERT_EQ(PostRecv(c.qp, 10, &tail, 1), 0);
        ASSERT_EQ(write(c.to_parent, "r", 1), 1);
        std::vector<ibv_wc> wcs;
        ASSERT_TRUE(PollCompletions(c.recv_cq, 4, &wcs, kChildTimeout / 2)) << "the child did not receive all four";
        const std::vector<uint8_t> sent = Pattern(5, kLargeSendBytes + 16);
        at = 0;
        for (size_t k = 0; k < 4; ++k) {
          const size_t length = k < 3 ? kLargeSends[k] : 16;
          SCOPED_TRACE("receive " + std::to_string(7 + k) + " (" + std::to_string(length) + " bytes)");
          EXPECT_EQ(wcs[k].wr_id, 7 + k);
          EXPECT_EQ(wcs[k].status, IBV_WC_SUCCESS) << DescribeWc(wcs[k]);
          EXPECT_EQ(wcs[k].opcode, IBV_WC_RECV);
          EXPECT_EQ(wcs[k].byte_len, length);
          EXPECT_EQ(static_cast<bool>(wcs[k].wc_flags & IBV_WC_WITH_IMM), k == 2) << DescribeWc(wcs[k]);
          if (k == 2) {
            EXPECT_EQ(wcs[k].imm_data, htonl(kImm));
          }
          EXPECT_TRUE(Read(c.buf + at, length) ==
                      std::vector<uint8_t>(sent.begin() + static_cast<long>(at),
                                           sent.begin() + static_cast<long>(at + length)))
              << "the receive holds other bytes than the SEND's";
          at += length;
        }
      },
      [&](const Target&, int, int from_child) {
        ASSERT_NO_FATAL_FAILURE(WaitForChild(from_child));
        source.FillPattern(5);
        std::vector<ibv_sge> sges = LargeMessageSges(source);
        std::vector<ibv_send_wr> wrs;
        for (size_t k = 0; k < sges.size(); ++k) wrs.push_back(SendWr(k + 1, &sges[k], 1, IBV_SEND_SIGNALED));
        wrs[2].opcode = IBV_WR_SEND_WITH_IMM;
        wrs[2].imm_data = htonl(kImm);
        ASSERT_EQ(PostList(a_.get(), &wrs), 0);
        ExpectSuccessesInOrder(4, "the SENDs");
      },
      setup);
}

// Rule: ibv_post_send(3): an RDMA WRITE with immediate writes its gather list at remote_addr and
//   consumes a receive WQE; ibv_poll_cq(3): that receive completes with IBV_WC_RECV_RDMA_WITH_IMM,
//   IBV_WC_WITH_IMM and the immediate data (byte_len is the WRITE's length on the providers we
//   match: rxe_resp.c do_complete); IBTA 9.5: messages complete in order.
// Checks: the parent writes kLargeSends' lengths (16 KiB, 64 KiB + 5, 1 MiB) with immediate data
//   k + 1, then 16 bytes, into the child's MR back to back, in one list: all four complete with
//   success, in order; the child's four receives (of no SGE) complete in order with
//   IBV_WC_RECV_RDMA_WITH_IMM and their immediate data, and its MR holds every byte.
TEST_F(CrossProcessWriteTest, LargeWritesWithImmediateLandAndCompleteTheirReceives) {
  Buffer source;
  ASSERT_TRUE(source.Register(pd(), kLargeSendBytes + 16));
  ChildSetup setup;
  setup.length = kLargeSendBytes + 64;
  setup.post_recv = false;
  RunWithChild(
      kFullMrAccess, kRcRemoteAccess,
      [](const Child& c) {
        for (uint64_t k = 0; k < 4; ++k) ASSERT_EQ(PostRecv(c.qp, 7 + k, nullptr, 0), 0);
        ASSERT_EQ(write(c.to_parent, "r", 1), 1);
        std::vector<ibv_wc> wcs;
        ASSERT_TRUE(PollCompletions(c.recv_cq, 4, &wcs, kChildTimeout / 2)) << "the child did not receive all four";
        for (size_t k = 0; k < 4; ++k) {
          SCOPED_TRACE("receive " + std::to_string(7 + k));
          EXPECT_EQ(wcs[k].wr_id, 7 + k);
          EXPECT_EQ(wcs[k].status, IBV_WC_SUCCESS) << DescribeWc(wcs[k]);
          EXPECT_EQ(wcs[k].opcode, IBV_WC_RECV_RDMA_WITH_IMM);
          EXPECT_EQ(wcs[k].byte_len, k < 3 ? kLargeSends[k] : 16u);
          EXPECT_TRUE(wcs[k].wc_flags & IBV_WC_WITH_IMM) << DescribeWc(wcs[k]);
          EXPECT_EQ(wcs[k].imm_data, htonl(static_cast<uint32_t>(k + 1)));
        }
        EXPECT_TRUE(Read(c.buf, kLargeSendBytes + 16) == Pattern(9, kLargeSendBytes + 16))
            << "the MR holds other bytes than the WRITEs'";
      },
      [&](const Target& target, int, int from_child) {
        ASSERT_NO_FATAL_FAILURE(WaitForChild(from_child));
        source.FillPattern(9);
        std::vector<ibv_sge> sges = LargeMessageSges(source);
        std::vector<ibv_send_wr> wrs;
        size_t at = 0;
        for (size_t k = 0; k < sges.size(); ++k) {
          wrs.push_back(RdmaWr(k + 1, IBV_WR_RDMA_WRITE_WITH_IMM, &sges[k], 1, target.addr + at, target.rkey));
          wrs[k].imm_data = htonl(static_cast<uint32_t>(k + 1));
          at += sges[k].length;
        }
        ASSERT_EQ(PostList(a_.get(), &wrs), 0);
        ExpectSuccessesInOrder(4, "the WRITEs");
      },
      setup);
}

// Rule: ibv_modify_qp(3): rnr_retry 0 means no retry after an RNR NAK; IBTA 9.7.5.2.8: the
//   responder answers the packet that needs a receive WQE (a WRITE with immediate's last) with an RNR
//   NAK when none is posted, and executes nothing of that packet. The packets before it may have
//   landed (rxe: rxe_resp.c takes the WQE at the packet marked RXE_RWR_MASK, the last; the simulator
//   refuses the whole message at its first).
// Checks: the child posts no receive; the parent (rnr_retry 0) writes 1 MiB of a pattern with
//   immediate data into the child's zeroed MR: it completes with IBV_WC_RNR_RETRY_EXC_ERR; once the
//   parent has seen that, every byte of the child's MR is zero or the WRITE's byte at that offset,
//   and its last 256 bytes (within the last packet at any path MTU) are zero.
TEST_F(CrossProcessWriteTest, LargeWriteWithImmediateWithoutAReceiveLandsNothingOfItsLastPacket) {
  constexpr size_t kBytes = size_t{1} << 20;
  Buffer source;
  ASSERT_TRUE(source.Register(pd(), kBytes));
  ChildSetup setup;
  setup.length = kBytes;
  setup.post_recv = false;
  setup.rnr_retry = 0;
  RunWithChild(
      kFullMrAccess, kRcRemoteAccess,
      [](const Child& c) {
        ASSERT_TRUE(WaitReadable(c.from_parent, kChildTimeout / 2));
        const std::vector<uint8_t> got = Read(c.buf, kBytes);
        const std::vector<uint8_t> sent = Pattern(10, kBytes);
        size_t foreign = 0;
        for (size_t i = 0; i < kBytes; ++i) foreign += got[i] != 0 && got[i] != sent[i];
        EXPECT_EQ(foreign, 0u) << "bytes that are neither zero nor the WRITE's";
        EXPECT_TRUE(std::vector<uint8_t>(got.end() - 256, got.end()) == std::vector<uint8_t>(256, 0))
            << "the packet that needed a receive landed";
      },
      [&](const Target& target, int to_child, int) {
        source.FillPattern(10);
        ibv_sge sge = source.Sge(0, kBytes);
        ibv_send_wr wr = RdmaWr(1, IBV_WR_RDMA_WRITE_WITH_IMM, &sge, 1, target.addr, target.rkey);
        wr.imm_data = htonl(0x5eed);
        ASSERT_EQ(PostOne(a_.get(), wr), 0);
        std::vector<ibv_wc> wcs;
        ASSERT_TRUE(PollCompletions(a_.send_cq.get(), 1, &wcs, kChildTimeout / 2)) << "the WRITE did not complete";
        EXPECT_EQ(wcs[0].status, IBV_WC_RNR_RETRY_EXC_ERR) << DescribeWc(wcs[0]);
        EXPECT_EQ(write(to_child, "x", 1), 1);
      },
      setup);
}

// Rule: ibv_post_send(3): the buffers of a WR may be reused once its completion has been polled;
//   ibv_modify_qp(3) to IBV_QPS_ERR flushes the outstanding WRs (IBV_WC_WR_FLUSH_ERR). A SEND that
//   completed flushed is not delivered, least of all with bytes written into its buffer after that.
// Checks: (simulator only) the parent stops the child (its receives of 1 MiB and 64 bytes posted),
//   posts a 1 MiB SEND of pattern A, moves its QP to ERR and polls the SEND's completion
//   (IBV_WC_WR_FLUSH_ERR), writes pattern B into the buffer and lets the child run: no receive
//   completes within kBlockWindow. Then the parent connects its QP to the child again from RESET
//   (same PSNs) and sends 16 bytes from another buffer: the child's first receive holds them.
TEST_F(CrossProcessWriteTest, FlushedLargeSendIsNotReadAfterItsCompletion) {
  SKIP_IF(!Sim()) << "(a kernel or hardware responder does not stop with its process: the SEND is answered "
                     "while the child is stopped)";
  constexpr size_t kSend = size_t{1} << 20;
  Buffer source;
  ASSERT_TRUE(source.Register(pd(), kSend));
  Buffer marker;
  ASSERT_TRUE(marker.Register(pd(), 16));
  ChildSetup setup;
  setup.length = kSend + 64;
  setup.post_recv = false;
  RunWithChild(
      kFullMrAccess, kRcRemoteAccess,
      [](const Child& c) {
        ibv_sge large = {reinterpret_cast<uintptr_t>(c.buf), static_cast<uint32_t>(kSend), c.mr->lkey};
        ASSERT_EQ(PostRecv(c.qp, 7, &large, 1), 0);
        ibv_sge small = {reinterpret_cast<uintptr_t>(c.buf) + kSend, 64, c.mr->lkey};
        ASSERT_EQ(PostRecv(c.qp, 8, &small, 1), 0);
        ASSERT_EQ(write(c.to_parent, "r", 1), 1);
        // Resumed after the parent's flush, with pattern B in the SEND's buffer.
        char step = 0;
        ASSERT_TRUE(WaitReadable(c.from_parent, kChildTimeout / 2));
        ASSERT_EQ(read(c.from_parent, &step, 1), 1);
        const bool quiet = NoCompletionWithin(c.recv_cq, kBlockWindow);
        ASSERT_EQ(write(c.to_parent, "q", 1), 1);
        ibv_wc wc = {};
        if (quiet) {
          ASSERT_TRUE(PollOneCompletion(c.recv_cq, &wc, kChildTimeout / 2)) << "nothing was received";
        } else {
          ASSERT_EQ(ibv_poll_cq(c.recv_cq, 1, &wc), 1);
        }
        EXPECT_TRUE(quiet) << "a receive completed after the SEND was flushed: " << DescribeWc(wc) << ", "
                           << (Read(c.buf, 16) == Pattern(12, 16) ? "with the bytes written after the flush"
                                                                  : "with other bytes");
        EXPECT_EQ(wc.wr_id, 7u);
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
        EXPECT_EQ(wc.byte_len, 16u);
        EXPECT_EQ(Read(c.buf, 16), Pattern(13, 16));
      },
      [&](const Target& target, int to_child, int from_child) {
        ASSERT_NO_FATAL_FAILURE(WaitForChild(from_child));
        source.FillPattern(11);
        ibv_sge sge = source.Sge(0, kSend);
        ASSERT_EQ(kill(target.pid, SIGSTOP), 0) << std::strerror(errno);
        const bool stopped = StoppedWithin(target.pid, kReturnWindow);
        const int sent = PostOne(a_.get(), SendWr(1, &sge, 1));
        const bool in_error = ModifyToState(a_.get(), IBV_QPS_ERR);
        ibv_wc wc = {};
        const bool completed = PollOneCompletion(a_.send_cq.get(), &wc, kChildTimeout / 4);
        source.FillPattern(12);
        EXPECT_EQ(kill(target.pid, SIGCONT), 0);
        ASSERT_TRUE(stopped) << "the child did not stop";
        ASSERT_EQ(sent, 0);
        ASSERT_TRUE(in_error);
        ASSERT_TRUE(completed) << "the SEND did not complete after ibv_modify_qp to ERR";
        EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR) << DescribeWc(wc);
        EXPECT_EQ(write(to_child, "f", 1), 1);
        ASSERT_NO_FATAL_FAILURE(WaitForChild(from_child));
        ASSERT_TRUE(ModifyToState(a_.get(), IBV_QPS_RESET));
        ASSERT_TRUE(BringUp(a_.get(), port(), target.qpn, LocalAddress(), ConnectParams{}));
        marker.FillPattern(13);
        ibv_sge small = marker.Sge(0, 16);
        ASSERT_EQ(PostOne(a_.get(), SendWr(2, &small, 1)), 0);
        ibv_wc small_wc = {};
        EXPECT_TRUE(PollOneCompletion(a_.send_cq.get(), &small_wc, kChildTimeout / 2));
        EXPECT_EQ(small_wc.status, IBV_WC_SUCCESS) << DescribeWc(small_wc);
      },
      setup);
}

namespace {

// Gives up CAP_SYS_PTRACE (effective and permitted; a process without it has nothing to give up):
// the kernel then lets this process read another's memory only as ptrace rules allow.
bool DropPtraceCapability() {
  __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (syscall(SYS_capget, &header, data) != 0) return false;
  data[0].effective &= ~(1u << CAP_SYS_PTRACE);
  data[0].permitted &= ~(1u << CAP_SYS_PTRACE);
  return syscall(SYS_capset, &header, data) == 0;
}

// Something of the parent's memory for the child to try to read (the same address in both after fork).
const uint64_t kProbe = 0x5eed;

}  // namespace

// Rule: IBTA 9.7.5.1 (RC is reliable): a SEND to a responder with a receive posted is delivered
//   and completes with success, on a path that loses nothing, with retry_cnt 0 (no retry needed),
//   whatever the processes may do to each other's memory (ptrace rules do not apply to RDMA).
// Checks: the parent makes itself not dumpable (prctl PR_SET_DUMPABLE 0) and the child gives up
//   CAP_SYS_PTRACE, so the kernel refuses the child's process_vm_readv of the parent. The parent,
//   with retry_cnt 0, then sends 64 KiB: it completes with success, and the child's 64 KiB receive
//   holds its bytes with byte_len 64 KiB. The child tells whether its own process_vm_readv of the
//   parent was refused; if it was not, the test is skipped (nothing refused).
TEST_F(CrossProcessWriteTest, LargeSendArrivesWhenTheResponderMayNotReadTheRequester) {
  ChildSetup setup;
  setup.post_recv = false;
  setup.retry_cnt = 0;
  char refused = 0;
  RunWithChild(
      kFullMrAccess, kRcRemoteAccess,
      [](const Child& c) {
        ASSERT_TRUE(DropPtraceCapability()) << std::strerror(errno);
        ibv_sge all = {reinterpret_cast<uintptr_t>(c.buf), static_cast<uint32_t>(kLength), c.mr->lkey};
        ASSERT_EQ(PostRecv(c.qp, 7, &all, 1), 0);
        ASSERT_EQ(write(c.to_parent, "r", 1), 1);
        char step = 0;
        ASSERT_TRUE(WaitReadable(c.from_parent, kChildTimeout / 2));
        ASSERT_EQ(read(c.from_parent, &step, 1), 1);  // the parent is not dumpable now
        uint64_t probe = 0;
        iovec local = {&probe, sizeof probe};
        iovec remote = {const_cast<uint64_t*>(&kProbe), sizeof kProbe};
        const bool read_refused = process_vm_readv(getppid(), &local, 1, &remote, 1, 0) < 0;
        ASSERT_EQ(write(c.to_parent, read_refused ? "y" : "n", 1), 1);
        ibv_wc wc = {};
        ASSERT_TRUE(PollOneCompletion(c.recv_cq, &wc, kChildTimeout / 2)) << "the SEND did not arrive";
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
        EXPECT_EQ(wc.byte_len, kLength);
        EXPECT_TRUE(Read(c.buf, kLength) == Pattern(14, kLength)) << "the receive holds other bytes than the SEND's";
      },
      [&](const Target&, int to_child, int from_child) {
        ASSERT_NO_FATAL_FAILURE(WaitForChild(from_child));
        ASSERT_EQ(prctl(PR_SET_DUMPABLE, 0), 0) << std::strerror(errno);
        EXPECT_EQ(write(to_child, "d", 1), 1);
        const bool told = WaitReadable(from_child, kChildTimeout / 2) && read(from_child, &refused, 1) == 1;
        src_.FillPattern(14);
        ibv_sge sge = src_.Sge(0, kLength);
        ibv_wc wc = {};
        const int posted = PostOne(a_.get(), SendWr(1, &sge, 1));
        const bool completed = posted == 0 && PollOneCompletion(a_.send_cq.get(), &wc, kChildTimeout / 2);
        EXPECT_EQ(prctl(PR_SET_DUMPABLE, 1), 0) << std::strerror(errno);
        ASSERT_TRUE(told) << "the child did not say whether it may read the parent";
        ASSERT_EQ(posted, 0);
        ASSERT_TRUE(completed) << "the SEND did not complete";
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
      },
      setup);
  if (!HasFailure() && refused != 'y') GTEST_SKIP() << "skipped: the child could read the parent's memory here";
}

// Rule: as QpErrorTest.RecvFails_BufferTooSmall and SendFails_RemoteRecvTooSmall, across processes:
//   a SEND longer than the receive WQE's buffers completes that receive with IBV_WC_LOC_LEN_ERR,
//   and the requester's SEND with IBV_WC_REM_INV_REQ_ERR (NAK Invalid Request).
// Checks: the parent sends 128 bytes into the child's 64-byte receive, then (another child) 64 KiB
//   (on the simulator, a SEND its responder reads from the requester's buffer): both completions
//   as above, each time.
TEST_F(CrossProcessWriteTest, SendLongerThanTheReceiveFailsOnBothSides) {
  for (const uint32_t length : {uint32_t{128}, static_cast<uint32_t>(kLength)}) {
    SCOPED_TRACE("a SEND of " + std::to_string(length) + " bytes");
    RunWithChild(
        kFullMrAccess, kRcRemoteAccess,
        [](const Child& c) {
          ibv_wc wc = {};
          ASSERT_TRUE(PollOneCompletion(c.recv_cq, &wc, kChildTimeout / 2));
          EXPECT_EQ(wc.wr_id, 7u);
          EXPECT_EQ(wc.status, IBV_WC_LOC_LEN_ERR) << DescribeWc(wc);
          // Stay until the parent has its completion.
          EXPECT_TRUE(WaitReadable(c.from_parent, kChildTimeout / 2));
        },
        [&](const Target&, int to_child, int) {
          ibv_sge sge = src_.Sge(0, length);
          ibv_wc wc = {};
          ASSERT_EQ(PostOne(a_.get(), SendWr(1, &sge, 1)), 0);
          EXPECT_TRUE(PollOneCompletion(a_.send_cq.get(), &wc, kChildTimeout / 2));
          EXPECT_EQ(wc.status, IBV_WC_REM_INV_REQ_ERR) << DescribeWc(wc);
          EXPECT_EQ(write(to_child, "x", 1), 1);
        });
    a_.reset();  // the next child connects to a new QP
    if (HasFailure()) return;
  }
}

// Rule: as QpCommEstTest.RaisedByFirstPacketInRtr, with the requester in another process:
//   IBTA 11.6.3: the first packet that reaches an RC QP in RTR raises IBV_EVENT_COMM_EST.
// Checks: the child's QP, left in RTR with a receive posted, receives the parent's SEND (success on
//   both sides) and the child gets IBV_EVENT_COMM_EST for it.
TEST_F(CrossProcessWriteTest, FirstSendToAQpInRtrRaisesCommEst) {
  SKIP_IF(!Backend().Answer("CommEstOnFirstPacketInRtr", true)) << "(the backend raises no COMM_EST)";
  ChildSetup setup;
  setup.stay_in_rtr = true;
  RunWithChild(
      kFullMrAccess, kRcRemoteAccess,
      [](const Child& c) {
        ASSERT_NO_FATAL_FAILURE(ReceiveFirst(c));
        EventAcks acks;  // (acknowledged before the QP is destroyed)
        EXPECT_TRUE(WaitForAsyncEvent(c.qp->context, IBV_EVENT_COMM_EST, c.qp, &acks));
      },
      [&](const Target&, int, int) {
        const ibv_wc wc = Send(1);
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
      },
      setup);
}

// Rule: IBTA 9.7.5.1 (RC is reliable): a request whose ACK was lost is sent again after the
//   requester's transport timeout; the responder acknowledges the duplicate again and does not
//   deliver it again (rxe_resp.c check_psn: a PSN behind the expected one is a duplicate request).
// Checks: (simulator only) the parent posts a SEND while the child is stopped, then makes its own
//   next delivery of a packet run out of memory (fault point "deliver_packet"): that is the SEND's
//   ACK, which is lost, so the SEND goes again. It completes with success, once; the child, with a
//   second receive posted, gets one receive completion and no other within kBlockWindow after the
//   parent's SEND completed.
TEST_F(CrossProcessWriteTest, SendRepeatedAfterItsAckWasLostIsReceivedOnce) {
  SKIP_IF(!Sim()) << "(the fault point is the simulator's)";
  RunWithChild(
      kFullMrAccess, kRcRemoteAccess,
      [](const Child& c) {
        ibv_sge second = {reinterpret_cast<uintptr_t>(c.buf) + 64, 64, c.mr->lkey};
        ASSERT_EQ(PostRecv(c.qp, 8, &second, 1), 0);
        ASSERT_EQ(write(c.to_parent, "r", 1), 1);
        ASSERT_NO_FATAL_FAILURE(ReceiveFirst(c));
        // The parent's SEND has completed: the copy sent again has been answered.
        ASSERT_TRUE(WaitReadable(c.from_parent, kChildTimeout / 2));
        EXPECT_TRUE(NoCompletionWithin(c.recv_cq, kBlockWindow)) << "the SEND sent again was received again";
      },
      [&](const Target& target, int to_child, int from_child) {
        ASSERT_NO_FATAL_FAILURE(WaitForChild(from_child));
        ASSERT_EQ(kill(target.pid, SIGSTOP), 0) << std::strerror(errno);
        const bool stopped = StoppedWithin(target.pid, kReturnWindow);
        ibv_sge sge = src_.Sge(0, 64);
        const int posted = PostOne(a_.get(), SendWr(1, &sge, 1));
        const int armed = sim().FailAfter("deliver_packet", 0, ENOMEM);
        EXPECT_EQ(kill(target.pid, SIGCONT), 0);
        ASSERT_TRUE(stopped) << "the child did not stop";
        ASSERT_EQ(posted, 0);
        ASSERT_EQ(armed, 0);
        ibv_wc wc = {};
        EXPECT_TRUE(PollOneCompletion(a_.send_cq.get(), &wc, kChildTimeout / 2));
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
        EXPECT_TRUE(NoCompletionWithin(a_.send_cq.get(), kBlockWindow)) << "the SEND completed twice";
        EXPECT_EQ(write(to_child, "x", 1), 1);
      });
}

// Rule: ibv_post_send(3): every WR of a list is posted, and executed in order; a SEND's message is
//   its gather list, end to end; an RDMA WRITE puts its bytes at remote_addr and takes no receive
//   WQE; SEND with immediate carries imm_data. A QP that has sent to its peer before (later
//   one-packet SENDs are sent another way by the simulator) keeps all of this, and a SEND longer
//   than the path MTU (1024 here) arrives whole.
// Checks: after a first SEND, the parent posts a list of two SENDs, a SEND of two SGEs, a WRITE,
//   a SEND with immediate and a SEND of 5000 bytes, one call each but the list: all seven
//   complete with success, in order; the child's six receives complete in order with the lengths,
//   bytes and immediate data of their SENDs, and the WRITE's bytes are in the child's buffer.
TEST_F(CrossProcessWriteTest, WorkRequestsAfterAFirstSendKeepTheirMeaning) {
  constexpr uint32_t kImm = 0x0badcafe;
  constexpr size_t kWriteAt = 1024;
  constexpr size_t kLongAt = 8192;
  constexpr uint32_t kLongLength = 5000;
  RunWithChild(
      kFullMrAccess, kRcRemoteAccess,
      [&](const Child& c) {
        ASSERT_NO_FATAL_FAILURE(PostMoreReceives(c, 4));
        ibv_sge long_rsge = {reinterpret_cast<uintptr_t>(c.buf) + kLongAt, 8192, c.mr->lkey};
        ASSERT_EQ(PostRecv(c.qp, 12, &long_rsge, 1), 0);
        ASSERT_EQ(write(c.to_parent, "r", 1), 1);
        std::vector<ibv_wc> wcs;
        ASSERT_TRUE(PollCompletions(c.recv_cq, 6, &wcs, kChildTimeout / 2)) << "the child did not receive all six";
        const std::vector<uint8_t> pattern = Pattern(11, 8192);
        const auto bytes = [&](size_t from, size_t length) {
          return std::vector<uint8_t>(pattern.begin() + static_cast<long>(from),
                                      pattern.begin() + static_cast<long>(from + length));
        };
        const uint32_t lengths[6] = {16, 24, 24, 32, 8, kLongLength};
        for (size_t k = 0; k < 6; ++k) {
          EXPECT_EQ(wcs[k].wr_id, 7 + k);
          EXPECT_EQ(wcs[k].status, IBV_WC_SUCCESS) << DescribeWc(wcs[k]);
          EXPECT_EQ(wcs[k].byte_len, lengths[k]) << "receive " << 7 + k;
        }
        EXPECT_EQ(Read(c.buf, 16), bytes(0, 16));
        EXPECT_EQ(Read(c.buf + 64, 24), bytes(64, 24));
        EXPECT_EQ(Read(c.buf + 128, 24), bytes(128, 24));
        std::vector<uint8_t> gathered = bytes(192, 20);
        const std::vector<uint8_t> tail = bytes(256, 12);
        gathered.insert(gathered.end(), tail.begin(), tail.end());
        EXPECT_EQ(Read(c.buf + 192, 32), gathered) << "the SEND of two SGEs";
        EXPECT_TRUE(wcs[4].wc_flags & IBV_WC_WITH_IMM) << DescribeWc(wcs[4]);
        EXPECT_EQ(wcs[4].imm_data, htonl(kImm));
        EXPECT_EQ(Read(c.buf + 256, 8), bytes(384, 8));
        EXPECT_EQ(Read(c.buf + kWriteAt, 32), bytes(320, 32)) << "the WRITE";
        EXPECT_EQ(Read(c.buf + kLongAt, kLongLength), bytes(1024, kLongLength)) << "the SEND longer than the MTU";
      },
      [&](const Target& target, int, int from_child) {
        ASSERT_NO_FATAL_FAILURE(WaitForChild(from_child));
        src_.FillPattern(11);
        ibv_sge first = src_.Sge(0, 16);
        ASSERT_EQ(PostOne(a_.get(), SendWr(1, &first, 1)), 0);
        ibv_sge listed[2] = {src_.Sge(64, 24), src_.Sge(128, 24)};
        std::vector<ibv_send_wr> list = {SendWr(2, &listed[0], 1), SendWr(3, &listed[1], 1)};
        ASSERT_EQ(PostList(a_.get(), &list), 0);
        ibv_sge two[2] = {src_.Sge(192, 20), src_.Sge(256, 12)};
        ASSERT_EQ(PostOne(a_.get(), SendWr(4, two, 2)), 0);
        ibv_sge written = src_.Sge(320, 32);
        ASSERT_EQ(PostOne(a_.get(), RdmaWr(5, IBV_WR_RDMA_WRITE, &written, 1, target.addr + kWriteAt, target.rkey)), 0);
        ibv_sge last = src_.Sge(384, 8);
        ibv_send_wr with_imm = SendWr(6, &last, 1, IBV_SEND_SIGNALED, IBV_WR_SEND_WITH_IMM);
        with_imm.imm_data = htonl(kImm);
        ASSERT_EQ(PostOne(a_.get(), with_imm), 0);
        ibv_sge long_sge = src_.Sge(1024, kLongLength);
        ASSERT_EQ(PostOne(a_.get(), SendWr(7, &long_sge, 1)), 0);
        std::vector<ibv_wc> wcs;
        EXPECT_TRUE(PollCompletions(a_.send_cq.get(), 7, &wcs, kChildTimeout / 2)) << "not all seven completed";
        for (size_t k = 0; k < wcs.size(); ++k) {
          EXPECT_EQ(wcs[k].wr_id, 1 + k);
          EXPECT_EQ(wcs[k].status, IBV_WC_SUCCESS) << DescribeWc(wcs[k]);
        }
      },
      ChildSetup{.max_send_sge = 2});
}

// Rule: ibv_post_send(3): ENOMEM, "Send Queue is full": a WR posted while max_send_wr WRs are
//   outstanding is refused, and *bad_wr names it; the WRs before it go on.
// Checks: (simulator only: with the child stopped nothing is acknowledged, which a kernel
//   responder would not wait for) the parent's QP, max_send_wr 15, takes 15 SENDs of 8 bytes
//   posted one at a time; the 16th fails with ENOMEM and bad_wr pointing at it. Once the child
//   resumes, the 15 complete with success and the child receives all 15.
TEST_F(CrossProcessWriteTest, SendToAFullSendQueueFailsWithEnomem) {
  SKIP_IF(!Sim()) << "(a stopped responder that acknowledges nothing)";
  // The QPs' max_send_wr: 2^4 - 1 is what a queue rounded to a power of two less one (rxe) holds too.
  constexpr int kSends = 15;
  RunWithChild(
      kFullMrAccess, kRcRemoteAccess,
      [&](const Child& c) {
        ASSERT_NO_FATAL_FAILURE(PostMoreReceives(c, kSends - 1));
        ASSERT_EQ(write(c.to_parent, "r", 1), 1);
        std::vector<ibv_wc> wcs;
        EXPECT_TRUE(PollCompletions(c.recv_cq, kSends, &wcs, kChildTimeout / 2)) << "not all SENDs arrived";
        for (size_t k = 0; k < wcs.size(); ++k) {
          EXPECT_EQ(wcs[k].status, IBV_WC_SUCCESS) << DescribeWc(wcs[k]);
          EXPECT_EQ(wcs[k].byte_len, 8u);
        }
      },
      [&](const Target& target, int, int from_child) {
        ASSERT_NO_FATAL_FAILURE(WaitForChild(from_child));
        ASSERT_EQ(kill(target.pid, SIGSTOP), 0) << std::strerror(errno);
        const bool stopped = StoppedWithin(target.pid, kReturnWindow);
        int posted = 0;
        for (int k = 0; k < kSends && stopped; ++k) {
          ibv_sge sge = src_.Sge(8 * static_cast<size_t>(k), 8);
          if (PostOne(a_.get(), SendWr(1 + static_cast<uint64_t>(k), &sge, 1)) == 0) ++posted;
        }
        ibv_sge extra_sge = src_.Sge(512, 8);
        ibv_send_wr extra = SendWr(99, &extra_sge, 1);
        ibv_send_wr* bad = nullptr;
        const int refused = stopped ? ibv_post_send(a_.get(), &extra, &bad) : -1;
        EXPECT_EQ(kill(target.pid, SIGCONT), 0);
        ASSERT_TRUE(stopped) << "the child did not stop";
        EXPECT_EQ(posted, kSends);
        EXPECT_EQ(refused, ENOMEM);
        EXPECT_EQ(bad, &extra);
        std::vector<ibv_wc> wcs;
        EXPECT_TRUE(PollCompletions(a_.send_cq.get(), kSends, &wcs, kChildTimeout / 2)) << "not all SENDs completed";
        for (size_t k = 0; k < wcs.size(); ++k) {
          EXPECT_EQ(wcs[k].wr_id, 1 + k);
          EXPECT_EQ(wcs[k].status, IBV_WC_SUCCESS) << DescribeWc(wcs[k]);
        }
      },
      ChildSetup{.max_send_wr = kSends});
}

// Rule: ibv_post_send(3) and IBTA 10.8.3.1: a QP the transport has taken to the Error state sends
//   nothing more; a WR posted to it completes with IBV_WC_WR_FLUSH_ERR.
// Checks: the parent's first SEND, longer than the child's receive, completes with an error (the
//   status is the backend's: SendLongerThanTheReceiveFailsOnBothSides), which takes the parent's QP
//   to ERR; a second SEND of 16 bytes posted then is accepted and completes with
//   IBV_WC_WR_FLUSH_ERR.
TEST_F(CrossProcessWriteTest, SendPostedAfterTheQpFailedIsFlushed) {
  RunWithChild(
      kFullMrAccess, kRcRemoteAccess,
      [](const Child& c) {
        ibv_wc wc = {};
        ASSERT_TRUE(PollOneCompletion(c.recv_cq, &wc, kChildTimeout / 2));
        EXPECT_NE(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
        // Stay until the parent has its completions.
        EXPECT_TRUE(WaitReadable(c.from_parent, kChildTimeout / 2));
      },
      [&](const Target&, int to_child, int) {
        ibv_sge overlong = src_.Sge(0, 128);
        ibv_wc wc = {};
        ASSERT_EQ(PostOne(a_.get(), SendWr(1, &overlong, 1)), 0);
        EXPECT_TRUE(PollOneCompletion(a_.send_cq.get(), &wc, kChildTimeout / 2));
        EXPECT_NE(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
        ibv_sge sge = src_.Sge(0, 16);
        EXPECT_EQ(PostOne(a_.get(), SendWr(2, &sge, 1)), 0);
        wc = {};
        EXPECT_TRUE(PollOneCompletion(a_.send_cq.get(), &wc, kChildTimeout / 2)) << "the SEND posted in ERR never completed";
        EXPECT_EQ(wc.wr_id, 2u);
        EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR) << DescribeWc(wc);
        EXPECT_EQ(write(to_child, "x", 1), 1);
      });
}

// Rule: IBA 10.7.3.1 (via ibv_poll_cq(3)): a WR that fails locally completes in error once the WRs
//   before it have completed, the RC QP then enters ERR, and the WRs posted after it are not sent:
//   they complete with IBV_WC_WR_FLUSH_ERR.
// Checks: (simulator only: with the child stopped nothing is acknowledged, so the first of them
//   is still unanswered when the others are posted) after a first SEND, the parent posts three
//   SENDs one at a time: the first fine, the second with an lkey that names no MR, the third
//   fine. They complete as SUCCESS, LOC_PROT_ERR, WR_FLUSH_ERR, and the child receives the first
//   two SENDs only.
TEST_F(CrossProcessWriteTest, SendBehindALocalErrorIsFlushed) {
  SKIP_IF(!Sim()) << "(a stopped responder that acknowledges nothing)";
  RunWithChild(
      kFullMrAccess, kRcRemoteAccess,
      [](const Child& c) {
        ASSERT_NO_FATAL_FAILURE(PostMoreReceives(c, 2));
        ASSERT_EQ(write(c.to_parent, "r", 1), 1);
        std::vector<ibv_wc> wcs;
        ASSERT_TRUE(PollCompletions(c.recv_cq, 2, &wcs, kChildTimeout / 2)) << "the child did not receive two";
        EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS) << DescribeWc(wcs[0]);
        EXPECT_EQ(wcs[1].status, IBV_WC_SUCCESS) << DescribeWc(wcs[1]);
        // The parent has its completions: the flushed SEND was never sent.
        ASSERT_TRUE(WaitReadable(c.from_parent, kChildTimeout / 2));
        ibv_wc wc = {};
        if (PollOneCompletion(c.recv_cq, &wc, kBlockWindow)) {
          EXPECT_NE(wc.status, IBV_WC_SUCCESS) << "the SEND behind the failed one was received";
        }
      },
      [&](const Target& target, int to_child, int from_child) {
        ASSERT_NO_FATAL_FAILURE(WaitForChild(from_child));
        const ibv_wc first = Send(1);
        ASSERT_FALSE(HasFailure()) << "the first SEND was not posted or did not complete";
        ASSERT_EQ(first.status, IBV_WC_SUCCESS) << DescribeWc(first);
        ASSERT_EQ(kill(target.pid, SIGSTOP), 0) << std::strerror(errno);
        const bool stopped = StoppedWithin(target.pid, kReturnWindow);
        ibv_sge good = src_.Sge(64, 16);
        ibv_sge bad = src_.Sge(128, 16);
        bad.lkey ^= 0x5a5a00;  // names no MR
        ibv_sge after = src_.Sge(192, 16);
        const int posted[3] = {stopped ? PostOne(a_.get(), SendWr(2, &good, 1)) : -1,
                               stopped ? PostOne(a_.get(), SendWr(3, &bad, 1)) : -1,
                               stopped ? PostOne(a_.get(), SendWr(4, &after, 1)) : -1};
        EXPECT_EQ(kill(target.pid, SIGCONT), 0);
        ASSERT_TRUE(stopped) << "the child did not stop";
        for (int p : posted) EXPECT_EQ(p, 0);
        std::vector<ibv_wc> wcs;
        EXPECT_TRUE(PollCompletions(a_.send_cq.get(), 3, &wcs, kChildTimeout / 2)) << "not all three completed";
        const ibv_wc_status expected[3] = {IBV_WC_SUCCESS, IBV_WC_LOC_PROT_ERR, IBV_WC_WR_FLUSH_ERR};
        for (size_t k = 0; k < wcs.size(); ++k) {
          EXPECT_EQ(wcs[k].wr_id, 2 + k);
          EXPECT_EQ(wcs[k].status, expected[k]) << DescribeWc(wcs[k]);
        }
        EXPECT_EQ(write(to_child, "x", 1), 1);
      });
}

// Rule: simverbs.h, simverbs_fail_send_wr: the nth send WR posted after the call completes with the
//   given status instead of being executed, whichever way the QP sends it.
// Checks: (simulator only) after a first SEND has completed, the next SEND is set to fail with
//   IBV_WC_REM_OP_ERR: it completes with that status, and the child, with a second receive
//   posted, receives nothing within kBlockWindow.
TEST_F(CrossProcessWriteTest, InjectedFailureOfASendHoldsAfterAFirstSend) {
  SKIP_IF(!Sim()) << "(the control API is the simulator's)";
  RunWithChild(
      kFullMrAccess, kRcRemoteAccess,
      [](const Child& c) {
        ibv_sge rsge = {reinterpret_cast<uintptr_t>(c.buf) + 64, 64, c.mr->lkey};
        ASSERT_EQ(PostRecv(c.qp, 8, &rsge, 1), 0);
        ASSERT_EQ(write(c.to_parent, "r", 1), 1);
        ASSERT_NO_FATAL_FAILURE(ReceiveFirst(c));
        ASSERT_TRUE(WaitReadable(c.from_parent, kChildTimeout / 2));
        EXPECT_TRUE(NoCompletionWithin(c.recv_cq, kBlockWindow)) << "the SEND set to fail was received";
      },
      [&](const Target&, int to_child, int from_child) {
        ASSERT_NO_FATAL_FAILURE(WaitForChild(from_child));
        const ibv_wc first = Send(1);
        ASSERT_FALSE(HasFailure()) << "the first SEND was not posted or did not complete";
        ASSERT_EQ(first.status, IBV_WC_SUCCESS) << DescribeWc(first);
        ASSERT_EQ(sim().FailSendWr(a_.get(), 1, IBV_WC_REM_OP_ERR), 0);
        ibv_sge sge = src_.Sge(0, 16);
        ASSERT_EQ(PostOne(a_.get(), SendWr(2, &sge, 1)), 0);
        ibv_wc wc = {};
        EXPECT_TRUE(PollOneCompletion(a_.send_cq.get(), &wc, kChildTimeout / 2));
        EXPECT_EQ(wc.wr_id, 2u);
        EXPECT_EQ(wc.status, IBV_WC_REM_OP_ERR) << DescribeWc(wc);
        EXPECT_EQ(write(to_child, "x", 1), 1);
      });
}

// Rule: IBTA Vol 1 ch. 9 (Unreliable Connection): a UC SEND completes at the requester once it is
//   sent (there is no acknowledgement), and the responder takes the messages in order.
// Checks: three UC SENDs of 16 bytes, posted one at a time, complete with success, and the child
//   receives them in order with their bytes.
TEST_F(CrossProcessWriteTest, UcSendsPostedOneByOneCompleteAndArrive) {
  RunWithChild(
      kFullMrAccess, kRcRemoteAccess,
      [&](const Child& c) {
        ASSERT_NO_FATAL_FAILURE(PostMoreReceives(c, 2));
        ASSERT_EQ(write(c.to_parent, "r", 1), 1);
        std::vector<ibv_wc> wcs;
        ASSERT_TRUE(PollCompletions(c.recv_cq, 3, &wcs, kChildTimeout / 2)) << "the child did not receive all three";
        ExpectSendsReceived(c, wcs, Pattern(12, 64), 16);
      },
      [&](const Target&, int, int from_child) {
        ASSERT_NO_FATAL_FAILURE(WaitForChild(from_child));
        src_.FillPattern(12);
        for (uint64_t k = 0; k < 3; ++k) {
          ibv_sge sge = src_.Sge(16 * k, 16);
          ASSERT_EQ(PostOne(a_.get(), SendWr(1 + k, &sge, 1)), 0);
        }
        std::vector<ibv_wc> wcs;
        EXPECT_TRUE(PollCompletions(a_.send_cq.get(), 3, &wcs, kChildTimeout / 2)) << "not all three completed";
        for (size_t k = 0; k < wcs.size(); ++k) {
          EXPECT_EQ(wcs[k].wr_id, 1 + k);
          EXPECT_EQ(wcs[k].status, IBV_WC_SUCCESS) << DescribeWc(wcs[k]);
        }
      },
      ChildSetup{.type = IBV_QPT_UC});
}

// Rule: ibv_post_send(3): IBV_SEND_INLINE "Send data in given gather list as inline data ... The
//   L_Key will not be checked", and "the buffer can be reused immediately after the call returns";
//   an inline WR longer than the QP's max_inline_data is refused with EINVAL through bad_wr (as
//   QpPostTest.PostSendFails_InlineAboveMax). A QP that has sent to its peer before (later
//   one-packet SENDs are sent another way by the simulator) keeps all of this.
// Checks: after a first SEND, the parent posts, one call each, an inline SEND of 48 bytes and an
//   inline SEND with immediate of 32 bytes, each from an unregistered buffer with lkey 0 that it
//   overwrites as soon as ibv_post_send returns; then an inline SEND of max_inline_data + 1
//   bytes, which returns EINVAL with bad_wr naming it. The first three complete with success, in
//   order, and no fourth; the child's three receives get the original bytes, lengths and
//   immediate data.
TEST_F(CrossProcessWriteTest, InlineSendsAfterAFirstSendCarryTheirBytes) {
  constexpr uint32_t kImm = 0x1badf00d;
  RunWithChild(
      kFullMrAccess, kRcRemoteAccess,
      [&](const Child& c) {
        ASSERT_NO_FATAL_FAILURE(PostMoreReceives(c, 3));
        ASSERT_EQ(write(c.to_parent, "r", 1), 1);
        std::vector<ibv_wc> wcs;
        ASSERT_TRUE(PollCompletions(c.recv_cq, 3, &wcs, kChildTimeout / 2)) << "the child did not receive all three";
        const uint32_t lengths[3] = {16, 48, 32};
        for (size_t k = 0; k < 3; ++k) {
          EXPECT_EQ(wcs[k].wr_id, 7 + k);
          EXPECT_EQ(wcs[k].status, IBV_WC_SUCCESS) << DescribeWc(wcs[k]);
          EXPECT_EQ(wcs[k].byte_len, lengths[k]) << "receive " << 7 + k;
        }
        EXPECT_EQ(Read(c.buf + 64, 48), Pattern(21, 48)) << "the inline SEND";
        EXPECT_EQ(Read(c.buf + 128, 32), Pattern(22, 32)) << "the inline SEND with immediate";
        EXPECT_TRUE(wcs[2].wc_flags & IBV_WC_WITH_IMM) << DescribeWc(wcs[2]);
        EXPECT_EQ(wcs[2].imm_data, htonl(kImm));
        EXPECT_TRUE(NoCompletionWithin(c.recv_cq, kBlockWindow)) << "the refused SEND arrived";
      },
      [&](const Target&, int, int from_child) {
        ASSERT_NO_FATAL_FAILURE(WaitForChild(from_child));
        ibv_qp_attr attr = {};
        ibv_qp_init_attr init = {};
        ASSERT_EQ(ibv_query_qp(a_.get(), &attr, IBV_QP_CAP, &init), 0);
        const uint32_t max_inline = attr.cap.max_inline_data;
        ASSERT_GE(max_inline, 48u);
        ASSERT_LT(max_inline, 512u);
        src_.FillPattern(20);
        ibv_sge first = src_.Sge(0, 16);
        ASSERT_EQ(PostOne(a_.get(), SendWr(1, &first, 1)), 0);
        uint8_t message[512];
        const std::vector<uint8_t> inline_bytes = Pattern(21, 48);
        std::memcpy(message, inline_bytes.data(), inline_bytes.size());
        ibv_sge inline_sge = {reinterpret_cast<uintptr_t>(message), 48, 0};
        ASSERT_EQ(PostOne(a_.get(), SendWr(2, &inline_sge, 1, IBV_SEND_SIGNALED | IBV_SEND_INLINE)), 0);
        std::memset(message, 0xee, sizeof message);
        const std::vector<uint8_t> imm_bytes = Pattern(22, 32);
        std::memcpy(message, imm_bytes.data(), imm_bytes.size());
        ibv_sge imm_sge = {reinterpret_cast<uintptr_t>(message), 32, 0};
        ibv_send_wr with_imm = SendWr(3, &imm_sge, 1, IBV_SEND_SIGNALED | IBV_SEND_INLINE, IBV_WR_SEND_WITH_IMM);
        with_imm.imm_data = htonl(kImm);
        ASSERT_EQ(PostOne(a_.get(), with_imm), 0);
        std::memset(message, 0xee, sizeof message);
        ibv_sge overlong = {reinterpret_cast<uintptr_t>(message), max_inline + 1, 0};
        ibv_send_wr refused = SendWr(4, &overlong, 1, IBV_SEND_SIGNALED | IBV_SEND_INLINE);
        ibv_send_wr* bad = nullptr;
        EXPECT_EQ(ibv_post_send(a_.get(), &refused, &bad), EINVAL);
        EXPECT_EQ(bad, &refused);
        std::vector<ibv_wc> wcs;
        EXPECT_TRUE(PollCompletions(a_.send_cq.get(), 3, &wcs, kChildTimeout / 2)) << "not all three completed";
        for (size_t k = 0; k < wcs.size(); ++k) {
          EXPECT_EQ(wcs[k].wr_id, 1 + k);
          EXPECT_EQ(wcs[k].status, IBV_WC_SUCCESS) << DescribeWc(wcs[k]);
        }
        EXPECT_TRUE(NoCompletionWithin(a_.send_cq.get(), kBlockWindow)) << "the refused SEND completed";
      },
      ChildSetup{.max_inline_data = 64});
}

// Rule: IBTA 9.7.5.1 (RC is reliable, via ibv_post_send(3)): a packet the responder's side loses
//   is sent again after the requester's transport timeout, and the message completes once.
// Checks: (simulator only) the child makes its next delivery of a packet run out of memory (fault
//   point "deliver_packet"); the parent's two SENDs, one after the other, both complete with
//   success and the child receives both, whole and in order (the lost packet left nothing behind
//   that holds later packets back in the receiving process).
TEST_F(CrossProcessWriteTest, PacketLostForMemoryIsSentAgain) {
  SKIP_IF(!Sim()) << "(the fault point is the simulator's)";
  RunWithChild(
      kFullMrAccess, kRcRemoteAccess,
      [&](const Child& c) {
        ibv_sge second = {reinterpret_cast<uintptr_t>(c.buf) + 64, 64, c.mr->lkey};
        ASSERT_EQ(PostRecv(c.qp, 8, &second, 1), 0);
        ASSERT_EQ(sim().FailAfter("deliver_packet", 0, ENOMEM), 0);
        ASSERT_EQ(write(c.to_parent, "a", 1), 1);
        std::vector<ibv_wc> wcs;
        ASSERT_TRUE(PollCompletions(c.recv_cq, 2, &wcs, kChildTimeout / 2)) << "the child did not receive both";
        for (size_t k = 0; k < wcs.size(); ++k) {
          EXPECT_EQ(wcs[k].wr_id, 7 + k);
          EXPECT_EQ(wcs[k].status, IBV_WC_SUCCESS) << DescribeWc(wcs[k]);
        }
        EXPECT_EQ(Read(c.buf, 128), Pattern(5, 128)) << "the received bytes";
      },
      [&](const Target&, int, int from_child) {
        ASSERT_NO_FATAL_FAILURE(WaitForChild(from_child));
        src_.FillPattern(5);
        for (uint64_t id = 1; id <= 2; ++id) {
          ibv_sge sge = src_.Sge(64 * (id - 1), 64);
          ASSERT_EQ(PostOne(a_.get(), SendWr(id, &sge, 1)), 0);
          ibv_wc wc = {};
          ASSERT_TRUE(PollOneCompletion(a_.send_cq.get(), &wc, kChildTimeout / 2)) << "send " << id;
          EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
        }
      });
}

// Rule: IBTA 9.7.5.1: a WR of an RC QP completes once its responder has taken its PSNs, so they
//   cannot be lost after that; a packet lost later is sent again from its own PSN, and the
//   requester's buffers of a completed WR are not read again (ibv_post_send(3): they are the
//   program's once the WR has completed).
// Checks: with fault point "deliver_packet" armed in the child (it loses the next packet it takes;
//   the parent places the WRITE's bytes itself and completes it at once, so the packet that gives
//   the child's QP the WRITE's PSNs comes after that completion), a WRITE of 32 KiB completes with
//   success; the parent then fills its buffer with another pattern and posts a SEND, which
//   completes with success and reaches the child; the child's buffer holds what the WRITE wrote.
TEST_F(CrossProcessWriteTest, PacketLostAfterACompletedWriteIsSentAgain) {
  SKIP_IF(!Sim()) << "(the fault point is the simulator's)";
  constexpr size_t kWriteOffset = 4096;
  constexpr uint32_t kWriteBytes = 32768;
  RunWithChild(
      kFullMrAccess, kRcRemoteAccess,
      [&](const Child& c) {
        ASSERT_EQ(sim().FailAfter("deliver_packet", 0, ENOMEM), 0);
        ASSERT_EQ(write(c.to_parent, "a", 1), 1);
        ASSERT_NO_FATAL_FAILURE(ReceiveFirst(c));
        const std::vector<uint8_t> written = Pattern(5, kWriteBytes);
        EXPECT_TRUE(Read(c.buf + kWriteOffset, kWriteBytes) == written)
            << "the child's buffer does not hold what the WRITE wrote";
        EXPECT_EQ(Read(c.buf, 16), Pattern(6, 16)) << "the SEND's bytes";
      },
      [&](const Target& target, int, int from_child) {
        ASSERT_NO_FATAL_FAILURE(WaitForChild(from_child));
        src_.FillPattern(5);
        ibv_sge sge = src_.Sge(0, kWriteBytes);
        ibv_wc wc = {};
        ASSERT_EQ(PostOne(a_.get(), RdmaWr(1, IBV_WR_RDMA_WRITE, &sge, 1, target.addr + kWriteOffset, target.rkey)),
                  0);
        ASSERT_TRUE(PollOneCompletion(a_.send_cq.get(), &wc, kChildTimeout / 2)) << "the WRITE did not complete";
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
        src_.FillPattern(6);
        wc = Send(2);
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
      });
}

// Rule: ibv_dereg_mr(3): the MR's memory is the program's again; simverbs' one-copy WRITE maps the
//   file of an MR whose pages the program mapped shared (sim/src/fabric/file_window.h), and must
//   not keep that file's pages alive once the key is withdrawn.
// Checks: the child registers 64 KiB of a memfd of its own; the parent's WRITE into it lands (and
//   the parent maps the memfd); the child deregisters it, unmaps and closes the memfd; after the
//   parent's next WRITE into the child, the parent no longer maps it.
TEST_F(CrossProcessWriteTest, WriterUnmapsTheFileOfAWithdrawnKey) {
  SKIP_IF(!Sim()) << "(the writer's mapping of the MR's file is the simulator's)";
  ExpectWriterUnmapsAWithdrawnFile(true);
}

// Rule: as above.
// Checks: as above, but the parent writes no more: it no longer maps the memfd within
//   kChildTimeout / 2 all the same.
TEST_F(CrossProcessWriteTest, WriterUnmapsTheFileOfAWithdrawnKeyWithoutWritingAgain) {
  SKIP_IF(!Sim()) << "(the writer's mapping of the MR's file is the simulator's)";
  ExpectWriterUnmapsAWithdrawnFile(false);
}

// `write_again`: the parent writes into the child once more after the deregistration, and expects
// the mapping gone at once; otherwise it writes no more and expects it gone within kChildTimeout / 2
// (the progress thread looks every 100 ms).
void CrossProcessWriteTest::ExpectWriterUnmapsAWithdrawnFile(bool write_again) {
  struct Memfd {
    uint32_t rkey;
    uint64_t addr;
  };
  RunWithChild(
      kFullMrAccess, kRcRemoteAccess,
      [&](const Child& c) {
        const std::string name = "withdrawn-key-" + std::to_string(getpid());
        const int fd = memfd_create(name.c_str(), MFD_CLOEXEC);
        ASSERT_GE(fd, 0);
        ASSERT_EQ(ftruncate(fd, kLength), 0);
        void* mem = mmap(nullptr, kLength, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        ASSERT_NE(mem, MAP_FAILED);
        ibv_mr* mr = ibv_reg_mr(c.mr->pd, mem, kLength, static_cast<int>(kFullMrAccess));
        ASSERT_NE(mr, nullptr);
        const Memfd target{mr->rkey, reinterpret_cast<uintptr_t>(mem)};
        ASSERT_EQ(write(c.to_parent, &target, sizeof target), static_cast<ssize_t>(sizeof target));
        char step = 0;
        ASSERT_TRUE(WaitReadable(c.from_parent, kChildTimeout / 2));
        ASSERT_EQ(read(c.from_parent, &step, 1), 1);
        EXPECT_EQ(Read(static_cast<uint8_t*>(mem), kLength), Pattern(8, kLength));
        EXPECT_EQ(ibv_dereg_mr(mr), 0);
        munmap(mem, kLength);
        close(fd);
        ASSERT_EQ(write(c.to_parent, "d", 1), 1);
        EXPECT_TRUE(WaitReadable(c.from_parent, kChildTimeout / 2));
      },
      [&](const Target& target, int to_child, int from_child) {
        const std::string memfd_name = "withdrawn-key-" + std::to_string(target.pid);
        Memfd memfd{};
        ASSERT_TRUE(WaitReadable(from_child, kChildTimeout / 2));
        ASSERT_EQ(read(from_child, &memfd, sizeof memfd), static_cast<ssize_t>(sizeof memfd));
        src_.FillPattern(8);
        const ibv_wc first = Write(Target{target.qpn, memfd.rkey, memfd.addr, target.pid});
        EXPECT_EQ(first.status, IBV_WC_SUCCESS) << DescribeWc(first);
        // (Without it the WRITE takes process_vm_writev: there is no file mapping to see.)
        const bool refused = ReadOf(target.pid, memfd.addr, 1).empty() || !KernelPopulatesWrite();
        const bool mapped = MapsFileNamed(memfd_name);
        EXPECT_TRUE(mapped || refused) << "the WRITE did not go through the writer's mapping of the child's memfd";
        EXPECT_EQ(write(to_child, "w", 1), 1);
        ASSERT_NO_FATAL_FAILURE(WaitForChild(from_child));
        if (mapped && write_again) {
          const ibv_wc second = Write(target);
          EXPECT_EQ(second.status, IBV_WC_SUCCESS) << DescribeWc(second);
          EXPECT_FALSE(MapsFileNamed(memfd_name)) << "the writer still maps the file of a withdrawn key";
        } else if (mapped) {
          const auto deadline = std::chrono::steady_clock::now() + kChildTimeout / 2;
          bool still = true;
          while ((still = MapsFileNamed(memfd_name)) && std::chrono::steady_clock::now() < deadline) {
            std::this_thread::sleep_for(std::chrono::milliseconds(10));  // polled, bounded
          }
          EXPECT_FALSE(still) << "the writer still maps the file of a withdrawn key after "
                              << std::chrono::duration_cast<std::chrono::milliseconds>(kChildTimeout / 2).count()
                              << " ms";
        }
        EXPECT_EQ(write(to_child, "e", 1), 1);
        if (refused) {
          GTEST_SKIP() << "skipped: process_vm_readv of the child is refused here, or the kernel has no "
                          "MADV_POPULATE_WRITE (no one-copy WRITE through a file)";
        }
      });
}

// Rule: ibv_is_fork_initialized(3): IBV_FORK_UNNEEDED means the kernel copies registered pages for
//   a child of fork() (copy-on-fork of pinned pages), so fork needs no ibv_fork_init: the child works
//   on its own copy and the parent's registered memory is not affected by it.
// Checks: with IBV_FORK_UNNEEDED, a child of fork() writes over a registered, page-aligned buffer
//   and reads its own bytes back; the parent still reads its bytes afterwards.
TEST_F(CrossProcessWriteTest, ChildOfForkWritesItsOwnCopy) {
  if (ibv_is_fork_initialized() != IBV_FORK_UNNEEDED) GTEST_SKIP() << "fork needs ibv_fork_init here";
  void* mem = mmap(nullptr, kLength, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  auto* buf = static_cast<uint8_t*>(mem);
  std::memset(buf, 1, kLength);
  MrPtr mr(ibv_reg_mr(pd(), buf, kLength, static_cast<int>(kFullMrAccess)));
  EXPECT_NE(mr, nullptr);
  const ChildResult result = RunChecksInChild(
      [&] {
        std::memset(buf, 2, kLength);
        EXPECT_EQ(std::vector<uint8_t>(buf, buf + kLength), std::vector<uint8_t>(kLength, 2));
      },
      kChildTimeout, "a child of fork writing registered memory");
  EXPECT_TRUE(Passed(result));
  EXPECT_EQ(std::vector<uint8_t>(buf, buf + kLength), std::vector<uint8_t>(kLength, 1));
  mr.reset();
  munmap(mem, kLength);
}

// Rule: ibv_is_fork_initialized(3): with IBV_FORK_UNNEEDED a child of fork() is a process of its own;
//   a QP it makes on a context of its own reaches the parent's QPs as any other process's QP would (the
//   HCA addresses a QP by its number), and an RDMA WRITE through the parent's rkey lands in the parent's
//   registered pages, not in the child's copy of them.
// Checks: the parent registers a zeroed buffer and makes an RC QP, then forks; the child opens its own
//   context and connects an RC QP to the parent's (which connects back), WRITEs a pattern through the
//   parent's rkey: it completes with success, the parent's buffer holds the pattern, and the child's copy
//   of that buffer is still zero.
TEST_F(CrossProcessWriteTest, ChildOfForkWritesIntoTheParentsMemory) {
  if (ibv_is_fork_initialized() != IBV_FORK_UNNEEDED) GTEST_SKIP() << "fork needs ibv_fork_init here";
  constexpr uint32_t kBytes = 4096;
  Buffer sink;
  ASSERT_TRUE(sink.Register(pd(), kBytes));
  ChildSetup setup;
  setup.parent_qp_before_fork = true;
  RunWithChild(
      kFullMrAccess, kRcRemoteAccess,
      [&](const Child& c) {
        const std::vector<uint8_t> pattern = Pattern(21, kBytes);
        std::memcpy(c.buf, pattern.data(), kBytes);
        ibv_sge sge = {reinterpret_cast<uintptr_t>(c.buf), kBytes, c.mr->lkey};
        ASSERT_EQ(PostOne(c.qp, RdmaWr(1, IBV_WR_RDMA_WRITE, &sge, 1, sink.addr(), sink.rkey())), 0);
        ibv_wc wc = {};
        ASSERT_TRUE(PollOneCompletion(c.qp->send_cq, &wc, kChildTimeout / 2));
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
        EXPECT_EQ(Read(sink.data(), kBytes), std::vector<uint8_t>(kBytes, 0))
            << "the WRITE landed in the child's copy of the parent's buffer";
        ASSERT_EQ(write(c.to_parent, "d", 1), 1);
      },
      [&](const Target&, int, int from_child) {
        ASSERT_NO_FATAL_FAILURE(WaitForChild(from_child));
        EXPECT_TRUE(HoldsWithin(sink.data(), Pattern(21, kBytes), kReturnWindow))
            << "the child's WRITE is not in the parent's buffer";
      },
      setup);
}

// Rule: a child of fork() that closes the context it inherited (ibv_close_device) drops only its own
//   reference to the device file: the kernel destroys the context's objects with the last reference, so
//   the parent's QPs go on working.
// Checks: a_ connected to a QP in another process; a child of fork() of the test closes the fixture's
//   context (which holds a_) and exits; the other process's WRITE into the test's memory through a_
//   then completes with success and lands.
TEST_F(CrossProcessWriteTest, ChildClosingTheInheritedContextLeavesTheParentsQps) {
  constexpr uint32_t kBytes = 64;
  std::memset(src_.data(), 0, kBytes);
  RunWithChild(
      kFullMrAccess, kRcRemoteAccess,
      [&](const Child& c) {
        const std::vector<uint8_t> pattern = Pattern(5, kBytes);
        std::memcpy(c.buf, pattern.data(), kBytes);
        char go = 0;
        ASSERT_TRUE(WaitReadable(c.from_parent, kChildTimeout / 2));
        ASSERT_EQ(read(c.from_parent, &go, 1), 1);
        ibv_sge sge = {reinterpret_cast<uintptr_t>(c.buf), kBytes, c.mr->lkey};
        ASSERT_EQ(PostOne(c.qp, RdmaWr(1, IBV_WR_RDMA_WRITE, &sge, 1, src_.addr(), src_.rkey())), 0);
        ibv_wc wc = {};
        ASSERT_TRUE(PollOneCompletion(c.qp->send_cq, &wc, kChildTimeout / 2));
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
        ASSERT_EQ(write(c.to_parent, "d", 1), 1);
      },
      [&](const Target&, int to_child, int from_child) {
        const ChildResult closer =
            RunChecksInChild([&] { EXPECT_EQ(ibv_close_device(context()), 0); }, kChildTimeout,
                             "a child of fork() closing the context it inherited");
        EXPECT_TRUE(Passed(closer));
        EXPECT_EQ(write(to_child, "g", 1), 1);
        ASSERT_NO_FATAL_FAILURE(WaitForChild(from_child));
        EXPECT_TRUE(HoldsWithin(src_.data(), Pattern(5, kBytes), kReturnWindow))
            << "the other process's WRITE did not land in the test's memory";
      });
}

// Rule: the simulator's: a process that dies ends its QPs, and an RC requester whose responder is gone
//   gets IBV_WC_RETRY_EXC_ERR once its retries run out (ibv_modify_qp(3) retry_cnt), even while a child
//   of fork() of the dead process lives on: the child holds nothing of its parent's. (Measured on rxe
//   6.1: there the dead process's QP goes on answering while such a child lives, even one that closed
//   every inherited descriptor: the child's inherited mappings of the uverbs file keep the context.
//   The simulator does not keep a dead process's QPs, whose responder ran in that process.)
// Checks: a peer process connects an RC QP to a_ (a first WRITE succeeds), forks a child that closes
//   every inherited descriptor and lives on, and is killed; a_'s next WRITE completes with
//   IBV_WC_RETRY_EXC_ERR while that child still lives.
TEST_F(CrossProcessWriteTest, KilledPeerIsGoneWhileItsChildLivesOn) {
  SKIP_IF(!Sim()) << "(a rule of the simulator's: on rxe the dead process's QP answers while its child lives)";
  Pipe to_parent;
  Pipe to_peer;
  Pipe keep_child;  // the child of the peer lives until its read end sees EOF
  ASSERT_GE(to_parent.fds[0], 0);
  ASSERT_GE(to_peer.fds[0], 0);
  ASSERT_GE(keep_child.fds[0], 0);
  ASSERT_TRUE(CreateEnd(&a_));
  const ibv_ah_attr address = LocalAddress();
  const pid_t peer = fork();
  ASSERT_GE(peer, 0) << std::strerror(errno);
  if (peer == 0) {
    // The peer: its own context, a QP and an MR, then a child that keeps nothing of them.
    alarm(static_cast<unsigned>(std::chrono::duration_cast<std::chrono::seconds>(kChildTimeout).count()));
    ibv_context* context = OpenAnotherContext().release();
    ibv_pd* own_pd = context ? ibv_alloc_pd(context) : nullptr;
    QpEnd end;
    void* mem = mmap(nullptr, kLength, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ibv_mr* mr = own_pd && mem != MAP_FAILED ? ibv_reg_mr(own_pd, mem, kLength, static_cast<int>(kFullMrAccess))
                                             : nullptr;
    if (!mr || !CreateEndOn(context, own_pd, &end, EndConfig{})) _exit(1);
    const Target target{end.qp_num(), mr->rkey, reinterpret_cast<uintptr_t>(mem), getpid()};
    uint32_t parent_qpn = 0;
    if (write(to_parent.fds[1], &target, sizeof target) != static_cast<ssize_t>(sizeof target) ||
        read(to_peer.fds[0], &parent_qpn, sizeof parent_qpn) != static_cast<ssize_t>(sizeof parent_qpn) ||
        !BringUp(end.get(), port(), parent_qpn, address, ConnectParams{})) {
      _exit(1);
    }
    const pid_t child = fork();
    if (child == 0) {
      alarm(static_cast<unsigned>(std::chrono::duration_cast<std::chrono::seconds>(kChildTimeout).count()));
      const int keep = keep_child.fds[0];
      close_range(3, static_cast<unsigned>(keep) - 1, 0);
      close_range(static_cast<unsigned>(keep) + 1, ~0U, 0);
      char byte = 0;
      while (read(keep, &byte, 1) > 0) {
      }
      _exit(0);
    }
    char wait = 0;
    if (child < 0 || write(to_parent.fds[1], "r", 1) != 1) _exit(1);
    while (read(to_peer.fds[0], &wait, 1) > 0) {  // until killed
    }
    _exit(0);
  }
  Target target;
  ConnectParams params;
  params.timeout = 10;  // 4 ms
  params.retry_cnt = 1;
  char ready = 0;
  const bool connected = WaitReadable(to_parent.fds[0], kChildTimeout) &&
                         read(to_parent.fds[0], &target, sizeof target) == static_cast<ssize_t>(sizeof target) &&
                         BringUp(a_.get(), port(), target.qpn, address, params) &&
                         write(to_peer.fds[1], &a_.get()->qp_num, sizeof(uint32_t)) == sizeof(uint32_t) &&
                         WaitReadable(to_parent.fds[0], kChildTimeout) && read(to_parent.fds[0], &ready, 1) == 1;
  if (connected) {
    const ibv_wc first = Write(target);
    EXPECT_EQ(first.status, IBV_WC_SUCCESS) << DescribeWc(first);
  }
  kill(peer, SIGKILL);
  int status = 0;
  EXPECT_EQ(waitpid(peer, &status, 0), peer);
  ASSERT_TRUE(connected) << "the peer never connected its QP";
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "the peer ended before it was killed";
  const ibv_wc after = Write(target);
  EXPECT_EQ(after.status, IBV_WC_RETRY_EXC_ERR) << DescribeWc(after);
}  // (keep_child closes: the peer's child ends)

}  // namespace
}  // namespace conformance
