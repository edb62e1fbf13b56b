// exec-liveness: a WRITE to a process that has exec'd another program does
// not land in that program. The simulator copies a WRITE into a peer's
// private memory with process_vm_writev, which names the peer by its pid;
// after exec() the pid is the same but the memory is the new program's (on a
// device, the exec closes the old program's verbs context and its QPs go).
// The check: a child registers a static buffer, connects a QP to ours and
// execs this program again (built without PIE, so the buffer is at the same
// address in the new image); our 16 KiB WRITE to the old MR must then not
// complete with success, and the new image must find its buffer untouched.
//
// usage: exec-liveness (with LD_LIBRARY_PATH at the simulator's libibverbs.so.1)

#include <infiniband/verbs.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "rc_connect.h"

namespace {

using simverbs::ConnectRc;

constexpr size_t kBytes = 16384;  // several packets at the path MTU of 1024: never through the ring whole
alignas(4096) uint8_t g_target[kBytes];

// What the child tells the parent: its QP, port and buffer.
struct Info {
  uint32_t qpn;
  uint16_t lid;
  uint64_t addr;
  uint32_t rkey;
};

int Fail(const char* what) {
  std::fprintf(stderr, "exec-liveness: %s\n", what);
  return 2;
}

// Reads exactly `n` bytes from `fd` within `seconds`; false on timeout, end or error.
bool ReadWithin(int fd, void* out, size_t n, int seconds) {
  auto* p = static_cast<uint8_t*>(out);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (n > 0) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd pfd = {fd, POLLIN, 0};
    if (left.count() <= 0 || poll(&pfd, 1, static_cast<int>(left.count())) <= 0) return false;
    const ssize_t got = read(fd, p, n);
    if (got <= 0) return false;
    p += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

struct Verbs {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  uint16_t lid = 0;
};

bool Open(Verbs* v) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  v->ctx = list && n > 0 ? ibv_open_device(list[0]) : nullptr;
  if (list) ibv_free_device_list(list);
  v->pd = v->ctx ? ibv_alloc_pd(v->ctx) : nullptr;
  v->cq = v->pd ? ibv_create_cq(v->ctx, 16, nullptr, nullptr, 0) : nullptr;
  if (!v->cq) return false;
  ibv_qp_init_attr init = {};
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_wr = 4;
  init.cap.max_recv_wr = 4;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  init.send_cq = init.recv_cq = v->cq;
  v->qp = ibv_create_qp(v->pd, &init);
  ibv_port_attr port = {};
  if (!v->qp || ibv_query_port(v->ctx, 1, &port)) return false;
  v->lid = port.lid;
  return true;
}

// One retry after 16.8 ms, and none after an RNR NAK: a WRITE nobody answers fails soon.
constexpr simverbs::RcConnect kFailSoon = {
    .access = IBV_ACCESS_REMOTE_WRITE, .timeout = 12, .retry_cnt = 1, .rnr_retry = 0};

// The child after exec: says it runs, waits for the parent's word, then says
// whether its buffer is still all zero ('z') or was written ('w').
int AfterExec(int from_parent, int to_parent) {
  if (write(to_parent, "e", 1) != 1) return 2;
  char done = 0;
  if (!ReadWithin(from_parent, &done, 1, 30)) return 2;
  bool zero = true;
  for (uint8_t b : g_target) zero &= b == 0;
  return write(to_parent, zero ? "z" : "w", 1) == 1 ? 0 : 2;
}

// The child before exec: an MR over g_target and a QP connected to the parent's, then exec.
int BeforeExec(const char* self, int from_parent, int to_parent) {
  Verbs v;
  if (!Open(&v)) return Fail("the child's set-up failed");
  ibv_mr* mr = ibv_reg_mr(v.pd, g_target, kBytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (!mr) return Fail("the child's ibv_reg_mr failed");
  const Info mine = {v.qp->qp_num, v.lid, reinterpret_cast<uintptr_t>(g_target), mr->rkey};
  Info theirs = {};
  if (write(to_parent, &mine, sizeof mine) != sizeof mine || !ReadWithin(from_parent, &theirs, sizeof theirs, 30) ||
      !ConnectRc(v.qp, theirs.qpn, theirs.lid, kFailSoon)) {
    return Fail("the child could not connect");
  }
  // No teardown: the new program knows nothing of the old one's verbs.
  const std::string in = std::to_string(from_parent);
  const std::string out = std::to_string(to_parent);
  execl(self, self, "--after-exec", in.c_str(), out.c_str(), static_cast<char*>(nullptr));
  return Fail("exec failed");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::strcmp(argv[1], "--after-exec") == 0) return AfterExec(std::atoi(argv[2]), std::atoi(argv[3]));
  alarm(60);  // a watchdog: no step below may hang the check
  int to_parent[2];
  int to_child[2];
  if (pipe(to_parent) || pipe(to_child)) return Fail("pipe failed");
  const pid_t child = fork();
  if (child < 0) return Fail("fork failed");
  if (child == 0) {
    close(to_parent[0]);
    close(to_child[1]);
    _exit(BeforeExec("/proc/self/exe", to_child[0], to_parent[1]));
  }
  close(to_parent[1]);
  close(to_child[0]);
  struct Reap {
    pid_t pid;
    int fd;
    ~Reap() {
      close(fd);
      int status = 0;
      waitpid(pid, &status, 0);
    }
  } reap{child, to_child[1]};

  Verbs v;
  if (!Open(&v)) return Fail("ibv_open_device and the rest failed (is LD_LIBRARY_PATH the simulator's?)");
  std::vector<uint8_t> source(kBytes, 0x41);
  ibv_mr* mr = ibv_reg_mr(v.pd, source.data(), kBytes, IBV_ACCESS_LOCAL_WRITE);
  Info theirs = {};
  if (!mr || !ReadWithin(to_parent[0], &theirs, sizeof theirs, 30)) return Fail("the child did not send its QP");
  const Info mine = {v.qp->qp_num, v.lid, 0, 0};
  if (write(to_child[1], &mine, sizeof mine) != sizeof mine ||
      !ConnectRc(v.qp, theirs.qpn, theirs.lid, kFailSoon)) {
    return Fail("could not connect to the child");
  }
  // The new program runs: the exec is over, and the old one's verbs with it.
  char ran = 0;
  if (!ReadWithin(to_parent[0], &ran, 1, 30) || ran != 'e') return Fail("the child did not exec");

  ibv_sge sge = {reinterpret_cast<uintptr_t>(source.data()), static_cast<uint32_t>(kBytes), mr->lkey};
  ibv_send_wr wr = {};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = theirs.addr;
  wr.wr.rdma.rkey = theirs.rkey;
  ibv_send_wr* bad = nullptr;
  if (ibv_post_send(v.qp, &wr, &bad)) return Fail("ibv_post_send failed");
  ibv_wc wc = {};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  int polled = 0;
  while ((polled = ibv_poll_cq(v.cq, 1, &wc)) == 0 && std::chrono::steady_clock::now() < deadline) {
  }
  if (polled != 1) return Fail("the WRITE did not complete within 30 s");
  char verdict = 0;
  if (write(to_child[1], "d", 1) != 1 || !ReadWithin(to_parent[0], &verdict, 1, 30)) {
    return Fail("the new program did not say what its buffer holds");
  }
  std::printf("WRITE to the exec'd peer: %s; its new program's buffer %s\n", ibv_wc_status_str(wc.status),
              verdict == 'z' ? "untouched" : "written");
  int failures = 0;
  if (wc.status == IBV_WC_SUCCESS) {
    std::fprintf(stderr, "exec-liveness: a WRITE to a peer that exec'd completed with success\n");
    ++failures;
  }
  if (verdict != 'z') {
    std::fprintf(stderr, "exec-liveness: the WRITE landed in the program the peer exec'd\n");
    ++failures;
  }
  ibv_dereg_mr(mr);
  return failures ? 1 : 0;
}
