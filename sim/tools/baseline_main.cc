// simverbs-baseline: the machine's own limits, measured in the same run as a
// benchmark so its figures can be given as ratios (scripts/bench):
//   memcpy <bytes>   single-thread memcpy bandwidth in MB/s (hot buffers)
//   handoff          one-way latency of a cache-line hand-off between two
//                    processes busy-polling shared memory, in ns
//   message-handoff  one-way latency of a 64-byte message between two
//                    processes busy-polling shared memory, in ns: the sender
//                    copies the bytes into one line of the next slot of a
//                    ring and then publishes them in another, the receiver
//                    copies them out; the least a 64-byte SEND between two
//                    processes moves (its payload and the line that says it
//                    is there)
//   cross-process-copy <bytes>
//                    bandwidth in MB/s of messages of <bytes> handed from one
//                    process to another through a ring in shared memory, a
//                    memcpy in on one side and a memcpy out on the other:
//                    what a SEND under 16 KiB or a READ's answer under 256
//                    KiB between two processes does at least (each byte
//                    copied twice, and its cache
//                    lines moved once between the two CPUs), copied as the
//                    simulator copies packets (transport/copy_bytes.h)
//   process-vm-writev <bytes>
//                    bandwidth of process_vm_writev(2) into another
//                    process's private memory in MB/s: what a WRITE into
//                    memory not mapped from a file costs at least
//   process-vm-readv <bytes>
//                    bandwidth of process_vm_readv(2) from another process's
//                    private memory in MB/s: what a READ the requester reads
//                    itself (256 KiB or more) costs at least
//   process-vm-writev-pair <bytes>
//                    bandwidth in MB/s of two threads at once, each writing
//                    the same <bytes> of another process's private memory
//                    with process_vm_writev(2) (as two writers of
//                    ib_write_bw's messages would: perftest writes every
//                    message of 64 KiB to the same place): what a second
//                    copying thread would add to a WRITE stream

#include <sched.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <system_error>
#include <thread>

#include "transport/copy_bytes.h"

namespace {

using Clock = std::chrono::steady_clock;

// A buffer that starts a page, filled with `fill`, as perftest's are. Two heap
// blocks of one size can sit a few bytes apart modulo 4 KiB, and then memcpy's
// `rep movsb` (which glibc uses for copies of a few KiB up to about the L2
// size) runs up to 20x slower on some CPUs (AMD Zen 3 seen: 1.8 against 38
// GB/s for 64 KiB); a baseline must not measure that by chance. data() is
// null when there was no memory.
class PageBuffer {
 public:
  PageBuffer(size_t bytes, char fill) : bytes_(bytes) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return;
    data_ = static_cast<char*>(p);
    std::memset(data_, fill, bytes);
  }
  ~PageBuffer() {
    if (data_) munmap(data_, bytes_);
  }
  PageBuffer(const PageBuffer&) = delete;
  PageBuffer& operator=(const PageBuffer&) = delete;
  char* data() const { return data_; }

 private:
  size_t bytes_;
  char* data_ = nullptr;
};

double MemcpyMBps(size_t bytes) {
  const PageBuffer src(bytes, 1), dst(bytes, 0);
  if (!src.data() || !dst.data()) return 0;
  // Enough repetitions for ~0.2 s; best of 5 runs (the machine is noisy).
  const size_t reps = std::max<size_t>(1, (size_t{2} << 30) / bytes / 10);
  double best = 0;
  for (int run = 0; run < 5; ++run) {
    const auto t0 = Clock::now();
    for (size_t i = 0; i < reps; ++i) {
      std::memcpy(dst.data(), src.data(), bytes);
      asm volatile("" : : "r"(dst.data()) : "memory");
    }
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, bytes * reps / s / 1e6);
  }
  return best;
}

// Spins until the counter *line (which only grows) reaches `value`; false
// once `deadline` has passed (the other side died or never started). The
// clock is read every 2^16 spins only. A wait that lasts 1024 spins (the other
// side answers within a few hundred nanoseconds when it has a CPU) gives the
// CPU away: with more spinners than CPUs, the other side may be waiting for
// this one, and each hand-off would otherwise wait out a scheduler time slice.
bool SpinUntil(const std::atomic<uint64_t>* line, uint64_t value, Clock::time_point deadline) {
  for (uint32_t spins = 1;; ++spins) {
    if (line->load(std::memory_order_acquire) >= value) return true;
    if (spins % 1024 == 0) sched_yield();
    if (spins % 65536 == 0 && Clock::now() > deadline) return false;
  }
}

// The mean one-way time, in ns, of `rounds` round trips between this process
// and a child of it: round i (from 1) is parent_round(i, deadline), which
// sends and waits for the answer, against child_round(i, deadline), which
// waits and answers; each is false once the deadline has passed. 0 when it
// could not be measured (no fork, or the child did not answer within 30 s).
template <typename ParentRound, typename ChildRound>
double OneWayNs(int rounds, ParentRound parent_round, ChildRound child_round) {
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  const pid_t child = fork();
  if (child == 0) {
    for (int i = 1; i <= rounds; ++i) {
      if (!child_round(i, deadline)) _exit(1);
    }
    _exit(0);
  }
  if (child < 0) return 0;
  bool answered = true;
  const auto t0 = Clock::now();
  for (int i = 1; i <= rounds && answered; ++i) answered = parent_round(i, deadline);
  const double ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
  if (!answered) kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  return answered ? ns / rounds / 2 : 0;  // a round trip is two hand-offs
}

// 0 when it could not be measured (no memory, or as OneWayNs).
double HandoffNs() {
  void* shared = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) return 0;
  auto* line = static_cast<std::atomic<uint64_t>*>(shared);
  line->store(0);
  const double ns = OneWayNs(
      200000,
      [&](uint64_t i, Clock::time_point deadline) {
        line->store(2 * i - 1, std::memory_order_release);
        return SpinUntil(line, 2 * i, deadline);
      },
      [&](uint64_t i, Clock::time_point deadline) {
        if (!SpinUntil(line, 2 * i - 1, deadline)) return false;
        line->store(2 * i, std::memory_order_release);
        return true;
      });
  munmap(shared, 4096);
  return ns;
}

// A ring slot for one message: the payload on a line of its own, then the
// line that publishes it (the number of the message).
struct alignas(64) Mailbox {
  char payload[64];
  alignas(64) std::atomic<uint64_t> sent;
};

// Messages go round a ring of this many slots each way, as packets do.
constexpr uint64_t kMailboxes = 32;

// Sends message `number` (from 1): its bytes, then its number.
void SendMessage(Mailbox* box, const char* bytes, uint64_t number) {
  std::memcpy(box->payload, bytes, sizeof box->payload);
  box->sent.store(number, std::memory_order_release);
}

// Waits for message `number` and copies its bytes out; false at the deadline.
bool ReceiveMessage(const Mailbox* box, char* bytes, uint64_t number, Clock::time_point deadline) {
  if (!SpinUntil(&box->sent, number, deadline)) return false;
  std::memcpy(bytes, box->payload, sizeof box->payload);
  asm volatile("" : : "r"(bytes) : "memory");
  return true;
}

// 0 when it could not be measured (no memory, or as OneWayNs).
double MessageHandoffNs() {
  constexpr size_t kBytes = 2 * kMailboxes * sizeof(Mailbox);
  void* shared = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) return 0;
  auto* to_child = new (shared) Mailbox[kMailboxes]{};
  auto* to_parent = new (static_cast<char*>(shared) + kMailboxes * sizeof(Mailbox)) Mailbox[kMailboxes]{};
  char bytes[64];
  std::memset(bytes, 5, sizeof bytes);
  const double ns = OneWayNs(
      200000,
      [&](uint64_t i, Clock::time_point deadline) {
        SendMessage(&to_child[i % kMailboxes], bytes, i);
        return ReceiveMessage(&to_parent[i % kMailboxes], bytes, i, deadline);
      },
      [&](uint64_t i, Clock::time_point deadline) {
        if (!ReceiveMessage(&to_child[i % kMailboxes], bytes, i, deadline)) return false;
        SendMessage(&to_parent[i % kMailboxes], bytes, i);
        return true;
      });
  munmap(shared, kBytes);
  return ns;
}

// 0 when it could not be measured (no memory, no fork, or the other side
// stopped for 30 s).
double CrossProcessCopyMBps(size_t bytes) {
  // A ring of about 1 MiB (at least 2 messages), as a packet ring holds.
  const size_t stride = (bytes + 63) / 64 * 64;
  const size_t slots = std::max<size_t>(2, (size_t{1} << 20) / stride);
  // Two counters on lines of their own, then the ring.
  const size_t size = 128 + slots * stride;
  void* shared = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) return 0;
  auto* published = static_cast<std::atomic<uint64_t>*>(shared);
  auto* consumed = reinterpret_cast<std::atomic<uint64_t>*>(static_cast<char*>(shared) + 64);
  char* ring = static_cast<char*>(shared) + 128;
  published->store(0);
  consumed->store(0);
  // Enough messages for ~0.2 s at 10 GB/s, after as many to warm up.
  const uint64_t messages = std::max<uint64_t>(64, (uint64_t{2} << 30) / bytes);
  const uint64_t total = 2 * messages;
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  const pid_t child = fork();
  if (child == 0) {
    const PageBuffer src(bytes, 3);
    if (!src.data()) _exit(1);
    for (uint64_t i = 0; i < total; ++i) {
      if (i >= slots && !SpinUntil(consumed, i - slots + 1, deadline)) _exit(1);
      simverbs::CopyBytes(ring + (i % slots) * stride, src.data(), bytes);
      published->store(i + 1, std::memory_order_release);
    }
    _exit(0);
  }
  double mbps = 0;
  if (child > 0) {
    const PageBuffer dst(bytes, 0);
    bool answered = dst.data() != nullptr;
    Clock::time_point t0;
    for (uint64_t i = 0; i < total && answered; ++i) {
      if (i == messages) t0 = Clock::now();
      answered = SpinUntil(published, i + 1, deadline);
      if (!answered) break;
      simverbs::CopyBytes(dst.data(), ring + (i % slots) * stride, bytes);
      asm volatile("" : : "r"(dst.data()) : "memory");
      consumed->store(i + 1, std::memory_order_release);
    }
    if (answered) {
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      mbps = static_cast<double>(bytes) * messages / s / 1e6;
    } else {
      kill(child, SIGKILL);
    }
    waitpid(child, nullptr, 0);
  }
  munmap(shared, size);
  return mbps;
}

// process_vm_writev into a child's private memory, or (`from_child`) process_vm_readv from it. With
// `pair`, two threads write at once, both into the target's first `bytes`. 0 when a copy failed (no
// figure; *refused when the kernel's ptrace rules refused it).
double ProcessVmMBps(size_t bytes, bool from_child, bool pair, bool* refused) {
  // One thread writes (or reads) pieces that cycle through 8 MiB of the
  // target (or one message); a pair writes its first `bytes` only.
  const size_t span = std::max<size_t>(bytes, size_t{8} << 20);
  auto* target = static_cast<char*>(mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (target == MAP_FAILED) return 0;
  int ready[2] = {-1, -1}, done[2] = {-1, -1};
  pid_t child = -1;
  if (pipe(ready) == 0 && pipe(done) == 0) child = fork();
  // Each side closes the pipe ends the other one uses, so that either one's
  // read ends (end of file) when the other exits or dies.
  if (child == 0) {
    close(ready[0]);
    close(done[1]);
    std::memset(target, 1, span);  // its own pages, not its parent's copy-on-write ones
    char c = 0;
    // Then waits until the parent closes its end.
    if (write(ready[1], &c, 1) != 1 || read(done[0], &c, 1) < 0) _exit(1);
    _exit(0);
  }
  double best = 0;
  if (child > 0) {
    close(ready[1]);
    close(done[0]);
    ready[1] = done[0] = -1;
    char c;
    const PageBuffer src(bytes, 2);
    const PageBuffer second_src(pair ? bytes : 1, 3);
    if (src.data() && second_src.data() && read(ready[0], &c, 1) == 1) {
      const size_t slots = pair ? 1 : span / bytes;
      const size_t reps = std::max<size_t>(1, (size_t{1} << 30) / bytes / 10);
      std::atomic<int> failure{0};  // the errno of the first copy that failed
      // `reps` copies by one thread; false at the first that fails.
      const auto copies = [&](char* from) {
        for (size_t i = 0; i < reps; ++i) {
          iovec local{from, bytes};
          iovec remote{target + (i % slots) * bytes, bytes};
          const ssize_t n = from_child ? process_vm_readv(child, &local, 1, &remote, 1, 0)
                                       : process_vm_writev(child, &local, 1, &remote, 1, 0);
          if (n != static_cast<ssize_t>(bytes)) {
            int expected = 0;
            failure.compare_exchange_strong(expected, n < 0 ? errno : EIO);
            return false;
          }
        }
        return true;
      };
      for (int run = 0; run < 5 && failure.load() == 0; ++run) {
        const auto t0 = Clock::now();
        std::thread second;
        if (pair) {
          try {
            second = std::thread([&] { copies(second_src.data()); });
          } catch (const std::system_error&) {
            failure.store(EAGAIN);  // no second thread: no figure
            break;
          }
        }
        copies(src.data());
        if (pair) second.join();
        const double s = std::chrono::duration<double>(Clock::now() - t0).count();
        const size_t moved = reps * bytes * (pair ? 2 : 1);
        if (failure.load() == 0) best = std::max(best, moved / s / 1e6);
      }
      // A copy that failed leaves no figure.
      if (const int err = failure.load(); err != 0) {
        best = 0;
        *refused = err == EPERM || err == ENOSYS;
      }
    }
    close(done[1]);  // the child's read ends: it exits
    done[1] = -1;
    waitpid(child, nullptr, 0);
  }
  for (int fd : {ready[0], ready[1], done[0], done[1]}) {
    if (fd >= 0) close(fd);
  }
  munmap(target, span);
  return best;
}

// A BYTES argument: a positive number (decimal or 0x), or false.
bool ParseBytes(const char* text, size_t* bytes) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long value = std::strtoull(text, &end, 0);
  if (errno != 0 || end == text || *end != '\0' || value == 0 || text[0] == '-') return false;
  *bytes = static_cast<size_t>(value);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "";
  size_t bytes = 0;
  const bool sized = what == "memcpy" || what == "process-vm-writev" || what == "process-vm-readv" ||
                     what == "process-vm-writev-pair" || what == "cross-process-copy";
  if (sized && argc == 3 && !ParseBytes(argv[2], &bytes)) {
    std::fprintf(stderr, "%s %s: BYTES must be a positive number of bytes (e.g. 65536), not \"%s\"\n", argv[0],
                 what.c_str(), argv[2]);
    return 2;
  }
  const auto usage = [&] {
    std::fprintf(stderr,
                 "usage: %s memcpy BYTES | handoff | message-handoff | cross-process-copy BYTES |"
                 " process-vm-writev BYTES |"
                 " process-vm-readv BYTES | process-vm-writev-pair BYTES\n",
                 argv[0]);
    return 2;
  };
  // Prints a figure, or says why there is none (exit status 1).
  const auto report = [&](double figure, const char* failure) {
    if (figure <= 0) {
      std::fprintf(stderr, "%s: %s\n", argv[0], failure);
      return 1;
    }
    std::printf("%.1f\n", figure);
    return 0;
  };
  if (what == "memcpy" && argc == 3) return report(MemcpyMBps(bytes), "memcpy could not be timed");
  if (what == "process-vm-writev" || what == "process-vm-readv" || what == "process-vm-writev-pair") {
    if (argc != 3) return usage();
    const bool from_child = what == "process-vm-readv";
    bool refused = false;
    const double mbps = ProcessVmMBps(bytes, from_child, what == "process-vm-writev-pair", &refused);
    if (refused) {
      // Not this machine's limit but its policy (Yama, a seccomp filter): nothing to measure (77: a
      // skipped test for meson).
      std::fprintf(stderr, "%s: the kernel refused %s with a child (its ptrace rules)\n", argv[0],
                   from_child ? "process_vm_readv" : "process_vm_writev");
      return 77;
    }
    return report(mbps, from_child ? "process_vm_readv from a child failed" : "process_vm_writev into a child failed");
  }
  if (what == "cross-process-copy" && argc == 3) {
    return report(CrossProcessCopyMBps(bytes),
                  "the copying child did not answer within 30 s (or could not be started)");
  }
  if (what == "handoff" && argc == 2) {
    return report(HandoffNs(), "the hand-off child did not answer within 30 s (or could not be started)");
  }
  if (what == "message-handoff" && argc == 2) {
    return report(MessageHandoffNs(), "the message child did not answer within 30 s (or could not be started)");
  }
  return usage();
}
