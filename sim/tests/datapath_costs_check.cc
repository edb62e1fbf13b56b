// datapath-costs: the steady-state data path allocates nothing and reads no
// precise clock. A malloc per message costs a lock-free fast path at best and
// a brk or mmap system call at worst (the READ path once grew a buffer per
// message), and a timer kept in a map allocated a node on every post and freed
// it on every ACK. A read of the precise clock is a system call in a VM whose
// clock source has no vDSO (HPET), and posting arms the transport timer: the
// timer thread takes the deadline from its own clock read when it looks within
// a floor anyway.
//
// This program defines malloc, calloc, realloc, aligned_alloc and
// clock_gettime itself (exported: the simulator's calls, operator new's
// included, resolve to them first) and counts the calls made on its own thread
// while it runs SENDs, RDMA WRITEs and RDMA READs from an RC QP to a peer QP,
// after a warm-up: first a peer of its own process, then one of a child
// process (whose answers cross the fabric's rings and come later, so that
// posts arm the transport timer, and into whose memory a WRITE is placed).
// Any allocation fails the check, and so do clock reads (but CLOCK_*_COARSE)
// in more than one round in 100: a post reads the clock only when the timer
// thread sleeps until a deadline more than a floor away, to tell whether its
// own is earlier. (One that finds the timer thread asleep for good, after a
// stall of a few milliseconds, wakes it and leaves the deadline to its clock:
// under load a check that allowed the clock read there failed with 448.)
//
// usage: datapath-costs (with LD_LIBRARY_PATH at the simulator's libibverbs.so.1)

#include <dlfcn.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

extern "C" void* __libc_malloc(size_t);
extern "C" void* __libc_calloc(size_t, size_t);
extern "C" void* __libc_realloc(void*, size_t);
extern "C" void* __libc_memalign(size_t, size_t);

#include "rc_connect.h"

namespace {

using simverbs::ConnectRc;

thread_local bool counting = false;
std::atomic<long> calls{0};

std::atomic<long> clock_reads{0};

void Count() {
  if (counting) calls.fetch_add(1, std::memory_order_relaxed);
}

using ClockGettime = int (*)(clockid_t, timespec*);

}  // namespace

extern "C" __attribute__((visibility("default"))) int clock_gettime(clockid_t clock, timespec* ts) {
  static const auto real = reinterpret_cast<ClockGettime>(dlsym(RTLD_NEXT, "clock_gettime"));
  if (counting && clock != CLOCK_MONOTONIC_COARSE && clock != CLOCK_REALTIME_COARSE) {
    clock_reads.fetch_add(1, std::memory_order_relaxed);
  }
  return real(clock, ts);
}

extern "C" __attribute__((visibility("default"))) void* malloc(size_t n) {
  Count();
  return __libc_malloc(n);
}
extern "C" __attribute__((visibility("default"))) void* calloc(size_t n, size_t size) {
  Count();
  return __libc_calloc(n, size);
}
extern "C" __attribute__((visibility("default"))) void* realloc(void* p, size_t n) {
  Count();
  return __libc_realloc(p, n);
}
extern "C" __attribute__((visibility("default"))) void* aligned_alloc(size_t alignment, size_t n) {
  Count();
  return __libc_memalign(alignment, n);
}

namespace {

int Fail(const char* what) {
  std::fprintf(stderr, "datapath-costs: %s failed: %s\n", what, std::strerror(errno));
  return 2;
}

// One completion from `cq`, polled a bounded number of times; false if none came or it failed.
bool PollOne(ibv_cq* cq) {
  ibv_wc wc;
  for (long tries = 0; tries < 100000000; ++tries) {
    const int n = ibv_poll_cq(cq, 1, &wc);
    if (n < 0) return false;
    if (n == 1) return wc.status == IBV_WC_SUCCESS;
  }
  return false;
}


// What a peer tells the other side: its QP and where its buffer is.
struct PeerInfo {
  uint32_t qpn;
  uint64_t addr;
  uint32_t rkey;
};

constexpr size_t kBytes = 4096;  // several packets at the path MTU of 1024
constexpr int kWarmUp = 1000;
constexpr int kRounds = 20000;
constexpr int kAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

// The peer QP and its buffer, in this process or a child.
struct Peer {
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  ibv_mr* mr = nullptr;
  std::vector<uint8_t> buffer = std::vector<uint8_t>(kBytes, 0);
};

bool MakePeer(ibv_pd* pd, Peer* peer) {
  peer->cq = ibv_create_cq(pd->context, 64, nullptr, nullptr, 0);
  if (!peer->cq) return false;
  ibv_qp_init_attr init = {};
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_wr = 16;
  init.cap.max_recv_wr = 16;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  init.send_cq = init.recv_cq = peer->cq;
  peer->qp = ibv_create_qp(pd, &init);
  peer->mr = ibv_reg_mr(pd, peer->buffer.data(), kBytes, kAccess);
  return peer->qp && peer->mr;
}

bool PostRecv(const Peer& peer) {
  ibv_sge sge = {reinterpret_cast<uintptr_t>(peer.buffer.data()), kBytes, peer.mr->lkey};
  ibv_recv_wr wr = {};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  return ibv_post_recv(peer.qp, &wr, &bad) == 0;
}

void DestroyPeer(Peer* peer) {
  if (peer->qp) ibv_destroy_qp(peer->qp);
  if (peer->mr) ibv_dereg_mr(peer->mr);
  if (peer->cq) ibv_destroy_cq(peer->cq);
}

// The child: a peer QP that keeps a receive posted for every SEND, until the
// parent closes its end of `from_parent` (or a minute passes).
int RunChildPeer(int to_parent, int from_parent) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  ibv_context* ctx = list && n > 0 ? ibv_open_device(list[0]) : nullptr;
  ibv_pd* pd = ctx ? ibv_alloc_pd(ctx) : nullptr;
  ibv_port_attr port = {};
  Peer peer;
  if (!pd || ibv_query_port(ctx, 1, &port) || !MakePeer(pd, &peer)) return Fail("the child's set-up");
  const PeerInfo mine = {peer.qp->qp_num, reinterpret_cast<uintptr_t>(peer.buffer.data()), peer.mr->rkey};
  PeerInfo theirs = {};
  if (write(to_parent, &mine, sizeof mine) != sizeof mine || read(from_parent, &theirs, sizeof theirs) != sizeof theirs ||
      !ConnectRc(peer.qp, theirs.qpn, port.lid)) {
    return Fail("the child's exchange with its parent, or its ibv_modify_qp");
  }
  for (int i = 0; i < 16; ++i) {
    if (!PostRecv(peer)) return Fail("the child's ibv_post_recv");
  }
  const char ready = 1;
  if (write(to_parent, &ready, 1) != 1) return Fail("the child's write to its parent");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  for (uint64_t polls = 0;; ++polls) {
    ibv_wc wc;
    if (ibv_poll_cq(peer.cq, 1, &wc) == 1) {
      if (wc.status != IBV_WC_SUCCESS) {
        std::fprintf(stderr, "datapath-costs: the child's receive failed (%s)\n", ibv_wc_status_str(wc.status));
        return 1;
      }
      if (!PostRecv(peer)) return Fail("the child's ibv_post_recv");
    }
    // Now and then: has the parent finished (closed its end)?
    if (polls % 4096 == 0) {
      pollfd pfd = {from_parent, POLLIN, 0};
      if (poll(&pfd, 1, 0) > 0) break;
      if (std::chrono::steady_clock::now() > deadline) {
        std::fprintf(stderr, "datapath-costs: the child peer gives up after a minute\n");
        return 1;
      }
    }
  }
  DestroyPeer(&peer);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  ibv_free_device_list(list);
  return 0;
}

// What the counted rounds of one Run cost on this thread.
struct Costs {
  long allocations = 0;
  long clock_reads = 0;
};

// SENDs, WRITEs and READs from `from`'s QP (its buffer the source) to the
// peer `dst`: warm-up rounds, then counted ones; false if any failed. `local`:
// the peer in this process (nullptr: another process, which keeps its
// receives posted itself).
bool Run(const char* which, const Peer& from, const PeerInfo& dst, const Peer* local, Costs* costs) {
  // One round: a SEND, an RDMA WRITE and an RDMA READ, each signaled and polled to completion.
  const auto round = [&]() -> bool {
    if (local && !PostRecv(*local)) return false;
    const ibv_wr_opcode ops[] = {IBV_WR_SEND, IBV_WR_RDMA_WRITE, IBV_WR_RDMA_READ};
    for (ibv_wr_opcode op : ops) {
      ibv_sge sge = {reinterpret_cast<uintptr_t>(from.buffer.data()), kBytes, from.mr->lkey};
      ibv_send_wr wr = {};
      wr.opcode = op;
      wr.send_flags = IBV_SEND_SIGNALED;
      wr.sg_list = &sge;
      wr.num_sge = 1;
      wr.wr.rdma.remote_addr = dst.addr;
      wr.wr.rdma.rkey = dst.rkey;
      ibv_send_wr* bad = nullptr;
      if (ibv_post_send(from.qp, &wr, &bad) || !PollOne(from.cq)) return false;
      if (local && op == IBV_WR_SEND && !PollOne(local->cq)) return false;
    }
    return true;
  };
  for (int i = 0; i < kWarmUp; ++i) {
    if (!round()) {
      std::fprintf(stderr, "datapath-costs: a warm-up round with %s failed\n", which);
      return false;
    }
  }
  // The check can fail: the counters see calls made on this thread (the
  // clock read as the library reads it).
  counting = true;
  void* probe = std::malloc(16);
  const long probed = calls.exchange(0);
  std::free(probe);
  (void)std::chrono::steady_clock::now();
  const long clock_probed = clock_reads.exchange(0);
  bool ok = true;
  for (int i = 0; i < kRounds && ok; ++i) ok = round();
  counting = false;
  costs->allocations = calls.exchange(0);
  costs->clock_reads = clock_reads.exchange(0);
  if (!ok) {
    std::fprintf(stderr, "datapath-costs: a round with %s failed\n", which);
    return false;
  }
  if (probed != 1 || clock_probed != 1) {
    std::fprintf(stderr,
                 "datapath-costs: the counters did not see calls of our own (%ld allocations, %ld clock reads): this "
                 "proves nothing\n",
                 probed, clock_probed);
    return false;
  }
  std::printf("datapath-costs: %d rounds of SEND, WRITE and READ (%zu bytes) with %s: %ld allocations, %ld precise "
              "clock reads\n",
              kRounds, kBytes, which, costs->allocations, costs->clock_reads);
  return true;
}

bool WithinBounds(const char* which, const Costs& costs) {
  constexpr long kRoundsPerClockRead = 100;
  if (costs.allocations > 0) {
    std::fprintf(stderr, "datapath-costs: %ld allocations with %s\n", costs.allocations, which);
  }
  if (costs.clock_reads * kRoundsPerClockRead > kRounds) {
    std::fprintf(stderr,
                 "datapath-costs: %ld reads of a precise clock with %s (at most one per %ld rounds): a system call "
                 "each where the clock source has no vDSO\n",
                 costs.clock_reads, which, kRoundsPerClockRead);
  }
  return costs.allocations == 0 && costs.clock_reads * kRoundsPerClockRead <= kRounds;
}

}  // namespace

int main() {
  // The child peer is forked first, before this process opens anything.
  int to_parent[2];
  int from_parent[2];
  if (pipe(to_parent) || pipe(from_parent)) return Fail("pipe");
  const pid_t child = fork();
  if (child < 0) return Fail("fork");
  if (child == 0) {
    close(to_parent[0]);
    close(from_parent[1]);
    _exit(RunChildPeer(to_parent[1], from_parent[0]));
  }
  close(to_parent[1]);
  close(from_parent[0]);
  // However main returns, the child is told (its end closes) and reaped.
  struct ChildGuard {
    pid_t pid;
    int fd;
    ~ChildGuard() {
      close(fd);
      int status = 0;
      waitpid(pid, &status, 0);
    }
  } guard{child, from_parent[1]};

  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (!list || n == 0) {
    std::fprintf(stderr, "datapath-costs: no device (is LD_LIBRARY_PATH the simulator's?)\n");
    return 2;
  }
  ibv_context* ctx = ibv_open_device(list[0]);
  if (!ctx) return Fail("ibv_open_device");
  ibv_port_attr port = {};
  if (ibv_query_port(ctx, 1, &port)) return Fail("ibv_query_port");
  if (port.link_layer != IBV_LINK_LAYER_INFINIBAND) {
    std::fprintf(stderr, "datapath-costs: port 1 is not InfiniBand (run it on an IB profile)\n");
    return 2;
  }
  ibv_pd* pd = ibv_alloc_pd(ctx);
  if (!pd) return Fail("ibv_alloc_pd");
  Peer own;    // the QP that posts
  Peer local;  // the peer in this process
  Peer remote_side;  // the QP that posts to the child's peer
  if (!MakePeer(pd, &own) || !MakePeer(pd, &local) || !MakePeer(pd, &remote_side)) {
    return Fail("ibv_create_cq, ibv_create_qp or ibv_reg_mr");
  }
  PeerInfo child_peer = {};
  const PeerInfo mine = {remote_side.qp->qp_num, 0, 0};
  char ready = 0;
  if (read(to_parent[0], &child_peer, sizeof child_peer) != sizeof child_peer ||
      write(from_parent[1], &mine, sizeof mine) != sizeof mine ||
      !ConnectRc(remote_side.qp, child_peer.qpn, port.lid) ||
      read(to_parent[0], &ready, 1) != 1) {
    std::fprintf(stderr, "datapath-costs: the child peer did not come up\n");
    return 2;
  }

  if (!ConnectRc(own.qp, local.qp->qp_num, port.lid) || !ConnectRc(local.qp, own.qp->qp_num, port.lid)) {
    return Fail("ibv_modify_qp");
  }
  const PeerInfo local_peer = {local.qp->qp_num, reinterpret_cast<uintptr_t>(local.buffer.data()), local.mr->rkey};
  Costs in_process;
  Costs across;
  if (!Run("a peer in this process", own, local_peer, &local, &in_process) ||
      !Run("a peer in another process", remote_side, child_peer, nullptr, &across)) {
    return 2;
  }
  const bool within = WithinBounds("a peer in this process", in_process) & WithinBounds("a peer in another process", across);
  DestroyPeer(&own);
  DestroyPeer(&local);
  DestroyPeer(&remote_side);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  ibv_free_device_list(list);
  return within ? 0 : 1;
}
