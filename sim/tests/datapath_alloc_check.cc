// datapath-alloc: the steady-state data path allocates nothing. A malloc per
// message costs a lock-free fast path at best and a brk or mmap system call at
// worst (the READ path once grew a buffer per message), and a timer kept in a
// map allocated a node on every post and freed it on every ACK.
//
// This program defines malloc, calloc, realloc and aligned_alloc itself
// (exported: the simulator's calls, operator new's included, resolve to them
// first) and counts the calls made on its own thread while it runs SENDs,
// RDMA WRITEs and RDMA READs between two RC QPs of one process on the
// simulator, after a warm-up. Any call fails the check.
//
// usage: datapath-alloc (with LD_LIBRARY_PATH at the simulator's libibverbs.so.1)

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

extern "C" void* __libc_malloc(size_t);
extern "C" void* __libc_calloc(size_t, size_t);
extern "C" void* __libc_realloc(void*, size_t);
extern "C" void* __libc_memalign(size_t, size_t);

namespace {

thread_local bool counting = false;
std::atomic<long> calls{0};

void Count() {
  if (counting) calls.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

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
  std::fprintf(stderr, "datapath-alloc: %s failed: %s\n", what, std::strerror(errno));
  return 2;
}

bool Connect(ibv_qp* qp, uint32_t remote_qpn, uint16_t lid) {
  ibv_qp_attr a = {};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) return false;
  a = {};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = remote_qpn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 1;
  a.ah_attr.dlid = lid;
  a.ah_attr.port_num = 1;
  if (ibv_modify_qp(qp, &a,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) {
    return false;
  }
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 1;
  return ibv_modify_qp(qp, &a,
                       IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                           IBV_QP_MAX_QP_RD_ATOMIC) == 0;
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

}  // namespace

int main() {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (!list || n == 0) {
    std::fprintf(stderr, "datapath-alloc: no device (is LD_LIBRARY_PATH the simulator's?)\n");
    return 2;
  }
  ibv_context* ctx = ibv_open_device(list[0]);
  if (!ctx) return Fail("ibv_open_device");
  ibv_port_attr port = {};
  if (ibv_query_port(ctx, 1, &port)) return Fail("ibv_query_port");
  if (port.link_layer != IBV_LINK_LAYER_INFINIBAND) {
    std::fprintf(stderr, "datapath-alloc: port 1 is not InfiniBand (run it on an IB profile)\n");
    return 2;
  }
  ibv_pd* pd = ibv_alloc_pd(ctx);
  ibv_cq* cq_a = ibv_create_cq(ctx, 64, nullptr, nullptr, 0);
  ibv_cq* cq_b = ibv_create_cq(ctx, 64, nullptr, nullptr, 0);
  if (!pd || !cq_a || !cq_b) return Fail("ibv_alloc_pd or ibv_create_cq");
  ibv_qp_init_attr init = {};
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_wr = 16;
  init.cap.max_recv_wr = 16;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  init.send_cq = init.recv_cq = cq_a;
  ibv_qp* a = ibv_create_qp(pd, &init);
  init.send_cq = init.recv_cq = cq_b;
  ibv_qp* b = ibv_create_qp(pd, &init);
  if (!a || !b) return Fail("ibv_create_qp");
  if (!Connect(a, b->qp_num, port.lid) || !Connect(b, a->qp_num, port.lid)) return Fail("ibv_modify_qp");
  constexpr size_t kBytes = 4096;  // several packets at the path MTU of 1024
  std::vector<uint8_t> src(kBytes, 7), dst(kBytes, 0);
  const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  ibv_mr* src_mr = ibv_reg_mr(pd, src.data(), kBytes, access);
  ibv_mr* dst_mr = ibv_reg_mr(pd, dst.data(), kBytes, access);
  if (!src_mr || !dst_mr) return Fail("ibv_reg_mr");

  // One round: a SEND a -> b, an RDMA WRITE a -> b and an RDMA READ of b by a, each signaled and
  // polled to completion.
  const auto round = [&]() -> bool {
    ibv_sge rsge = {reinterpret_cast<uintptr_t>(dst.data()), kBytes, dst_mr->lkey};
    ibv_recv_wr rwr = {};
    rwr.sg_list = &rsge;
    rwr.num_sge = 1;
    ibv_recv_wr* bad_recv = nullptr;
    if (ibv_post_recv(b, &rwr, &bad_recv)) return false;
    const ibv_wr_opcode ops[] = {IBV_WR_SEND, IBV_WR_RDMA_WRITE, IBV_WR_RDMA_READ};
    for (ibv_wr_opcode op : ops) {
      ibv_sge sge = {reinterpret_cast<uintptr_t>(src.data()), kBytes, src_mr->lkey};
      ibv_send_wr wr = {};
      wr.opcode = op;
      wr.send_flags = IBV_SEND_SIGNALED;
      wr.sg_list = &sge;
      wr.num_sge = 1;
      wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(dst.data());
      wr.wr.rdma.rkey = dst_mr->rkey;
      ibv_send_wr* bad = nullptr;
      if (ibv_post_send(a, &wr, &bad) || !PollOne(cq_a)) return false;
      if (op == IBV_WR_SEND && !PollOne(cq_b)) return false;
    }
    return true;
  };
  constexpr int kWarmUp = 1000;
  constexpr int kRounds = 20000;
  for (int i = 0; i < kWarmUp; ++i) {
    if (!round()) return Fail("a warm-up round");
  }
  // The check can fail: the counter sees a call made on this thread.
  counting = true;
  void* probe = std::malloc(16);
  const long probed = calls.exchange(0);
  std::free(probe);
  for (int i = 0; i < kRounds; ++i) {
    if (!round()) {
      counting = false;
      return Fail("a round");
    }
  }
  counting = false;
  const long during = calls.load();
  if (probed != 1) {
    std::fprintf(stderr, "datapath-alloc: the counter did not see a call of our own (%ld): this proves nothing\n",
                 probed);
    return 2;
  }
  std::printf("datapath-alloc: %d rounds of SEND, WRITE and READ (%zu bytes), %ld allocations\n", kRounds, kBytes,
              during);
  ibv_destroy_qp(a);
  ibv_destroy_qp(b);
  ibv_dereg_mr(src_mr);
  ibv_dereg_mr(dst_mr);
  ibv_destroy_cq(cq_a);
  ibv_destroy_cq(cq_b);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  ibv_free_device_list(list);
  if (during > 0) {
    std::fprintf(stderr, "datapath-alloc: %ld allocations in %d rounds (%.2f per round)\n", during, kRounds,
                 static_cast<double>(during) / kRounds);
    return 1;
  }
  return 0;
}
