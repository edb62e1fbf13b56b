#include "conformance/lib/qp_pair.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>
#include <thread>

#include "conformance/lib/backend_profile.h"
#include "conformance/lib/errno_capture.h"
#include "conformance/lib/event_wait.h"
#include "conformance/lib/fd_poll.h"

namespace conformance {
namespace {

using Clock = std::chrono::steady_clock;

// Between two empty polls: let the provider's threads (rxe, the simulator's
// timer) run. A poll interval inside a deadline loop, not a synchronisation.
void Pause() { std::this_thread::yield(); }

std::chrono::milliseconds Remaining(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() > 0 ? left : std::chrono::milliseconds(0);
}

testing::AssertionResult Modify(ibv_qp* qp, ibv_qp_attr& attr, int mask, const char* what) {
  const int rc = ibv_modify_qp(qp, &attr, mask);
  if (rc != 0) {
    return testing::AssertionFailure() << "ibv_modify_qp to " << what << " (QP " << qp->qp_num << ") returned "
                                       << ErrnoName(rc);
  }
  return testing::AssertionSuccess();
}

bool IsQpEvent(ibv_event_type type) {
  switch (type) {
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_QP_LAST_WQE_REACHED:
      return true;
    default:
      return false;
  }
}

}  // namespace

const char* QpStateName(ibv_qp_state state) {
  switch (state) {
    case IBV_QPS_RESET: return "RESET";
    case IBV_QPS_INIT: return "INIT";
    case IBV_QPS_RTR: return "RTR";
    case IBV_QPS_RTS: return "RTS";
    case IBV_QPS_SQD: return "SQD";
    case IBV_QPS_SQE: return "SQE";
    case IBV_QPS_ERR: return "ERR";
    default: return "UNKNOWN";
  }
}

std::string DescribeWc(const ibv_wc& wc) {
  std::ostringstream out;
  out << "{wr_id=" << wc.wr_id << " status=" << ibv_wc_status_str(wc.status) << " (" << wc.status
      << ") opcode=" << wc.opcode << " byte_len=" << wc.byte_len << " qp_num=" << wc.qp_num
      << " wc_flags=0x" << std::hex << wc.wc_flags << std::dec << "}";
  return out.str();
}

std::string DescribeWcs(const std::vector<ibv_wc>& wcs) {
  std::string text;
  for (const ibv_wc& wc : wcs) text += "\n  " + DescribeWc(wc);
  return text.empty() ? " (none)" : text;
}

testing::AssertionResult PollCompletions(ibv_cq* cq, int count, std::vector<ibv_wc>* out,
                                         std::chrono::milliseconds timeout) {
  out->clear();
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    ibv_wc wc[16];
    const int want = std::min<int>(16, count - static_cast<int>(out->size()));
    const int n = want > 0 ? ibv_poll_cq(cq, want, wc) : 0;
    if (n < 0) {
      return testing::AssertionFailure() << "ibv_poll_cq returned " << n << " after " << out->size() << " of "
                                         << count << " completions:" << DescribeWcs(*out);
    }
    out->insert(out->end(), wc, wc + n);
    if (static_cast<int>(out->size()) >= count) return testing::AssertionSuccess();
    if (Clock::now() >= deadline) {
      return testing::AssertionFailure() << "only " << out->size() << " of " << count << " completions within "
                                         << timeout.count() << " ms:" << DescribeWcs(*out);
    }
    if (n == 0) Pause();
  }
}

testing::AssertionResult PollOneCompletion(ibv_cq* cq, ibv_wc* wc, std::chrono::milliseconds timeout) {
  std::vector<ibv_wc> wcs;
  testing::AssertionResult ok = PollCompletions(cq, 1, &wcs, timeout);
  if (ok) *wc = wcs[0];
  return ok;
}

int PostWhileFull(const std::function<int()>& post, std::chrono::milliseconds window) {
  const auto deadline = std::chrono::steady_clock::now() + window;
  int rc = ENOMEM;
  while ((rc = post()) == ENOMEM && std::chrono::steady_clock::now() < deadline) {
  }
  return rc;
}

testing::AssertionResult NoCompletionWithin(ibv_cq* cq, std::chrono::milliseconds window) {
  const auto deadline = Clock::now() + window;
  do {
    ibv_wc wc;
    const int n = ibv_poll_cq(cq, 1, &wc);
    if (n < 0) return testing::AssertionFailure() << "ibv_poll_cq returned " << n;
    if (n > 0) return testing::AssertionFailure() << "got an unexpected completion " << DescribeWc(wc);
    Pause();
  } while (Clock::now() < deadline);
  return testing::AssertionSuccess();
}

void DrainCq(ibv_cq* cq, std::vector<ibv_wc>* taken, int* last_rc) {
  for (;;) {
    ibv_wc wc[16];
    const int n = ibv_poll_cq(cq, 16, wc);
    *last_rc = n;
    if (n <= 0) return;
    taken->insert(taken->end(), wc, wc + n);
  }
}

testing::AssertionResult QueryQpState(ibv_qp* qp, ibv_qp_state* state) {
  ibv_qp_attr attr = {};
  ibv_qp_init_attr init = {};
  const int rc = ibv_query_qp(qp, &attr, IBV_QP_STATE, &init);
  if (rc != 0) return testing::AssertionFailure() << "ibv_query_qp returned " << ErrnoName(rc);
  *state = attr.qp_state;
  return testing::AssertionSuccess();
}

testing::AssertionResult QpStateBecomes(ibv_qp* qp, ibv_qp_state state, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  ibv_qp_state now = IBV_QPS_UNKNOWN;
  for (;;) {
    if (auto ok = QueryQpState(qp, &now); !ok) return ok;
    if (now == state) return testing::AssertionSuccess();
    if (Clock::now() >= deadline) break;
    Pause();
  }
  return testing::AssertionFailure() << "QP " << qp->qp_num << " is in " << QpStateName(now) << ", not "
                                     << QpStateName(state) << ", after " << timeout.count() << " ms";
}

ibv_qp_state UnreliableSendErrorState() {
  return Backend().Answer("UnreliableSendErrorState", "SQE") == "ERR" ? IBV_QPS_ERR : IBV_QPS_SQE;
}

testing::AssertionResult SqDrainEnds(ibv_qp* qp, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  ibv_qp_attr attr = {};
  for (;;) {
    ibv_qp_init_attr init = {};
    const int rc = ibv_query_qp(qp, &attr, IBV_QP_STATE, &init);
    if (rc != 0) return testing::AssertionFailure() << "ibv_query_qp returned " << ErrnoName(rc);
    if (attr.qp_state == IBV_QPS_SQD && attr.sq_draining == 0) return testing::AssertionSuccess();
    if (Clock::now() >= deadline) break;
    Pause();
  }
  return testing::AssertionFailure() << "QP " << qp->qp_num << " is in " << QpStateName(attr.qp_state)
                                     << " with sq_draining " << int{attr.sq_draining} << ", not drained SQD, after "
                                     << timeout.count() << " ms";
}

const void* EventElement(const ibv_async_event& event) {
  if (IsQpEvent(event.event_type)) return event.element.qp;
  switch (event.event_type) {
    case IBV_EVENT_CQ_ERR: return event.element.cq;
    case IBV_EVENT_SRQ_ERR:
    case IBV_EVENT_SRQ_LIMIT_REACHED: return event.element.srq;
    case IBV_EVENT_WQ_FATAL: return event.element.wq;
    default: return nullptr;
  }
}

std::string DescribeEvent(const ibv_async_event& event) {
  std::ostringstream out;
  out << ibv_event_type_str(event.event_type) << " (" << event.event_type << ")";
  if (const void* element = EventElement(event)) out << " on " << element;
  return out.str();
}

testing::AssertionResult WaitForAsyncEvent(ibv_context* context, ibv_event_type type, const void* element,
                                           EventAcks* acks, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  std::string others;
  for (;;) {
    ibv_async_event event = {};
    testing::AssertionResult got = GetAsyncEventWithin(context, &event, Remaining(deadline));
    if (!got) {
      return testing::AssertionFailure() << "no " << ibv_event_type_str(type) << " for " << element << " within "
                                         << timeout.count() << " ms (" << got.message() << ")"
                                         << (others.empty() ? "" : "; other events:" + others);
    }
    if (event.event_type == type && EventElement(event) == element) {
      acks->AddAsyncEvent(event);
      return testing::AssertionSuccess();
    }
    others += " " + DescribeEvent(event) + ";";
    ibv_ack_async_event(&event);
  }
}

testing::AssertionResult NoAsyncEventFor(ibv_context* context, ibv_event_type type, const void* element,
                                         std::chrono::milliseconds window) {
  if (SetNonBlocking(context->async_fd) != 0) {
    return testing::AssertionFailure() << "cannot set O_NONBLOCK on the async fd: " << ErrnoName(errno);
  }
  const auto deadline = Clock::now() + window;
  for (;;) {
    // Returns at once when an event is queued; at the deadline the wait is 0 ms.
    if (!WaitReadable(context->async_fd, Remaining(deadline))) break;
    ibv_async_event event = {};
    if (ibv_get_async_event(context, &event) != 0) {
      if (Clock::now() >= deadline) break;
      continue;
    }
    const bool match = event.event_type == type && EventElement(event) == element;
    const std::string what = DescribeEvent(event);
    ibv_ack_async_event(&event);
    if (match) return testing::AssertionFailure() << "got " << what;
  }
  return testing::AssertionSuccess();
}

// ---- Buffer

testing::AssertionResult Buffer::Register(ibv_pd* pd, size_t size, unsigned access, uint8_t fill) {
  mr_.reset();
  size_ = size;
  storage_.reset(new uint64_t[(size + 7) / 8 + 1]);
  std::memset(storage_.get(), fill, size);
  errno = 0;
  mr_.reset(ibv_reg_mr(pd, storage_.get(), size, static_cast<int>(access)));
  if (!mr_) {
    return testing::AssertionFailure() << "ibv_reg_mr(" << size << " bytes, access 0x" << std::hex << access
                                       << std::dec << ") failed: " << ErrnoName(errno);
  }
  return testing::AssertionSuccess();
}

ibv_sge Buffer::Sge(size_t offset, uint32_t length) const {
  ibv_sge sge = {};
  sge.addr = addr(offset);
  sge.length = length;
  sge.lkey = lkey();
  return sge;
}

std::vector<uint8_t> Pattern(uint8_t seed, size_t length) {
  std::vector<uint8_t> bytes(length);
  for (size_t i = 0; i < length; ++i) bytes[i] = static_cast<uint8_t>(seed * 31 + i * 7 + (i >> 8));
  return bytes;
}

void Buffer::FillPattern(uint8_t seed) {
  const std::vector<uint8_t> bytes = Pattern(seed, size_);
  std::memcpy(data(), bytes.data(), size_);
}

std::vector<uint8_t> Buffer::Bytes(size_t offset, size_t length) const {
  return std::vector<uint8_t>(data() + offset, data() + offset + length);
}

// ---- work requests

ibv_send_wr SendWr(uint64_t wr_id, ibv_sge* sges, int num_sge, unsigned flags, ibv_wr_opcode opcode) {
  ibv_send_wr wr = {};
  wr.wr_id = wr_id;
  wr.sg_list = sges;
  wr.num_sge = num_sge;
  wr.opcode = opcode;
  wr.send_flags = flags;
  return wr;
}

ibv_send_wr RdmaWr(uint64_t wr_id, ibv_wr_opcode opcode, ibv_sge* sges, int num_sge, uint64_t remote_addr,
                   uint32_t rkey, unsigned flags) {
  ibv_send_wr wr = SendWr(wr_id, sges, num_sge, flags, opcode);
  wr.wr.rdma.remote_addr = remote_addr;
  wr.wr.rdma.rkey = rkey;
  return wr;
}

ibv_send_wr AtomicWr(uint64_t wr_id, ibv_wr_opcode opcode, ibv_sge* sge, uint64_t remote_addr, uint32_t rkey,
                     uint64_t compare_add, uint64_t swap) {
  ibv_send_wr wr = SendWr(wr_id, sge, 1, IBV_SEND_SIGNALED, opcode);
  wr.wr.atomic.remote_addr = remote_addr;
  wr.wr.atomic.rkey = rkey;
  wr.wr.atomic.compare_add = compare_add;
  wr.wr.atomic.swap = swap;
  return wr;
}

ibv_send_wr UdSendWr(uint64_t wr_id, ibv_sge* sges, int num_sge, ibv_ah* ah, uint32_t remote_qpn,
                     uint32_t remote_qkey, unsigned flags) {
  ibv_send_wr wr = SendWr(wr_id, sges, num_sge, flags, IBV_WR_SEND);
  wr.wr.ud.ah = ah;
  wr.wr.ud.remote_qpn = remote_qpn;
  wr.wr.ud.remote_qkey = remote_qkey;
  return wr;
}

int PostOne(ibv_qp* qp, ibv_send_wr wr) {
  wr.next = nullptr;
  ibv_send_wr* bad = nullptr;
  return ibv_post_send(qp, &wr, &bad);
}

int PostRecv(ibv_qp* qp, uint64_t wr_id, ibv_sge* sges, int num_sge) {
  ibv_recv_wr wr = {};
  wr.wr_id = wr_id;
  wr.sg_list = sges;
  wr.num_sge = num_sge;
  ibv_recv_wr* bad = nullptr;
  return ibv_post_recv(qp, &wr, &bad);
}

int PostSrqRecv(ibv_srq* srq, uint64_t wr_id, ibv_sge* sges, int num_sge) {
  ibv_recv_wr wr = {};
  wr.wr_id = wr_id;
  wr.sg_list = sges;
  wr.num_sge = num_sge;
  ibv_recv_wr* bad = nullptr;
  return ibv_post_srq_recv(srq, &wr, &bad);
}

// ---- QP set-up

ibv_qp_init_attr MakeInitAttr(ibv_qp_type type, ibv_cq* send_cq, ibv_cq* recv_cq, const QpCaps& caps,
                              int sq_sig_all, ibv_srq* srq) {
  ibv_qp_init_attr init = {};
  init.send_cq = send_cq;
  init.recv_cq = recv_cq;
  init.srq = srq;
  init.qp_type = type;
  init.sq_sig_all = sq_sig_all;
  init.cap.max_send_wr = caps.max_send_wr;
  init.cap.max_recv_wr = srq ? 0 : caps.max_recv_wr;
  init.cap.max_send_sge = caps.max_send_sge;
  init.cap.max_recv_sge = srq ? 0 : caps.max_recv_sge;
  init.cap.max_inline_data = caps.max_inline_data;
  return init;
}

testing::AssertionResult PortAddress(ibv_context* context, uint8_t port, int gid_index, bool grh,
                                     ibv_ah_attr* out) {
  ibv_port_attr port_attr = {};
  if (const int rc = ibv_query_port(context, port, &port_attr); rc != 0) {
    return testing::AssertionFailure() << "ibv_query_port(" << int{port} << ") returned " << ErrnoName(rc);
  }
  *out = {};
  out->port_num = port;
  out->dlid = port_attr.lid;
  if (grh || port_attr.link_layer == IBV_LINK_LAYER_ETHERNET) {
    out->is_global = 1;
    out->grh.sgid_index = static_cast<uint8_t>(gid_index);
    out->grh.hop_limit = 64;
    if (const int rc = ibv_query_gid(context, port, gid_index, &out->grh.dgid); rc != 0) {
      return testing::AssertionFailure() << "ibv_query_gid(port " << int{port} << ", index " << gid_index
                                         << ") returned " << rc << " (--gid-index)";
    }
  }
  return testing::AssertionSuccess();
}

testing::AssertionResult ModifyToInit(ibv_qp* qp, uint8_t port, const ConnectParams& params) {
  ibv_qp_attr attr = {};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = 0;
  attr.port_num = port;
  int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
  if (qp->qp_type == IBV_QPT_UD) {
    attr.qkey = params.qkey;
    mask |= IBV_QP_QKEY;
  } else {
    attr.qp_access_flags = qp->qp_type == IBV_QPT_UC ? (params.access & IBV_ACCESS_REMOTE_WRITE) : params.access;
    mask |= IBV_QP_ACCESS_FLAGS;
  }
  return Modify(qp, attr, mask, "INIT");
}

testing::AssertionResult ModifyToRtr(ibv_qp* qp, uint32_t dest_qpn, const ibv_ah_attr& remote,
                                     const ConnectParams& params) {
  ibv_qp_attr attr = {};
  attr.qp_state = IBV_QPS_RTR;
  int mask = IBV_QP_STATE;
  if (qp->qp_type != IBV_QPT_UD) {
    attr.path_mtu = params.path_mtu;
    attr.dest_qp_num = dest_qpn;
    attr.rq_psn = params.rq_psn;
    attr.ah_attr = remote;
    mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
  }
  if (qp->qp_type == IBV_QPT_RC) {
    attr.max_dest_rd_atomic = params.max_dest_rd_atomic;
    attr.min_rnr_timer = params.min_rnr_timer;
    mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  }
  return Modify(qp, attr, mask, "RTR");
}

testing::AssertionResult ModifyToRts(ibv_qp* qp, const ConnectParams& params) {
  ibv_qp_attr attr = {};
  attr.qp_state = IBV_QPS_RTS;
  attr.sq_psn = params.sq_psn;
  int mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
  if (qp->qp_type == IBV_QPT_RC) {
    attr.timeout = params.timeout;
    attr.retry_cnt = params.retry_cnt;
    attr.rnr_retry = params.rnr_retry;
    attr.max_rd_atomic = params.max_rd_atomic;
    mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
  }
  return Modify(qp, attr, mask, "RTS");
}

testing::AssertionResult BringUp(ibv_qp* qp, uint8_t port, uint32_t dest_qpn, const ibv_ah_attr& remote,
                                 const ConnectParams& params) {
  if (auto ok = ModifyToInit(qp, port, params); !ok) return ok;
  if (auto ok = ModifyToRtr(qp, dest_qpn, remote, params); !ok) return ok;
  return ModifyToRts(qp, params);
}

testing::AssertionResult ModifyToState(ibv_qp* qp, ibv_qp_state state) {
  ibv_qp_attr attr = {};
  attr.qp_state = state;
  return Modify(qp, attr, IBV_QP_STATE, QpStateName(state));
}

// ---- QpTest

void QpTest::SetUp() {
  VerbsTest::SetUp();
  if (HasFatalFailure() || IsSkipped()) return;
  errno = 0;
  pd_.reset(ibv_alloc_pd(context()));
  ASSERT_NE(pd_, nullptr) << "ibv_alloc_pd: " << ErrnoName(errno);
}

void QpTest::TearDown() {
  // Acks first: destroying a QP, CQ or SRQ waits for the events read for it.
  acks_.AckAll();
  a_.reset();
  b_.reset();
  srq_.reset();
  channel_.reset();
}

ibv_ah_attr QpTest::LocalAddress(bool grh) const {
  ibv_ah_attr ah = {};
  EXPECT_TRUE(PortAddress(context(), port(), gid_index(), grh, &ah));
  return ah;
}

ibv_mtu QpTest::DefaultMtu() const { return std::min(IBV_MTU_1024, port_attr().active_mtu); }

testing::AssertionResult CreateEndOn(ibv_context* context, ibv_pd* pd, QpEnd* end, const EndConfig& config) {
  errno = 0;
  if (config.send_cq_ex || config.send_cq_flags != 0 || config.send_cq_wc_flags != 0) {
    ibv_cq_init_attr_ex attr = {};
    attr.cqe = static_cast<uint32_t>(config.send_cqe);
    attr.wc_flags = IBV_WC_STANDARD_FLAGS | config.send_cq_wc_flags;
    attr.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
    attr.flags = config.send_cq_flags;
    ibv_cq_ex* cq = ibv_create_cq_ex(context, &attr);
    end->send_cq.reset(cq ? ibv_cq_ex_to_cq(cq) : nullptr);
  } else {
    end->send_cq.reset(ibv_create_cq(context, config.send_cqe, nullptr, config.send_channel, 0));
  }
  if (!end->send_cq) return testing::AssertionFailure() << "creating the send CQ: " << ErrnoName(errno);
  end->recv_cq.reset(ibv_create_cq(context, config.recv_cqe, nullptr, config.recv_channel, 0));
  if (!end->recv_cq) return testing::AssertionFailure() << "ibv_create_cq (recv): " << ErrnoName(errno);
  ibv_qp_init_attr init = MakeInitAttr(config.type, end->send_cq.get(), end->recv_cq.get(), config.caps,
                                       config.sq_sig_all, config.srq);
  errno = 0;
  end->qp.reset(ibv_create_qp(pd, &init));
  if (!end->qp) return testing::AssertionFailure() << "ibv_create_qp: " << ErrnoName(errno);
  return testing::AssertionSuccess();
}

testing::AssertionResult QpTest::CreateEnd(QpEnd* end, const EndConfig& config) {
  return CreateEndOn(context(), config.pd ? config.pd : pd(), end, config);
}

testing::AssertionResult ConnectOn(ibv_context* context, uint8_t port, int gid_index, ibv_mtu active_mtu, QpEnd& a,
                                   QpEnd& b, const ConnectParams& a_params, const ConnectParams& b_params) {
  ConnectParams ap = a_params;
  ConnectParams bp = b_params;
  ap.path_mtu = std::min(ap.path_mtu, active_mtu);
  bp.path_mtu = std::min(bp.path_mtu, active_mtu);
  ap.rq_psn = bp.sq_psn;
  bp.rq_psn = ap.sq_psn;
  ibv_ah_attr a_route = {};
  ibv_ah_attr b_route = {};
  if (auto ok = PortAddress(context, port, gid_index, ap.grh, &a_route); !ok) return ok;
  if (auto ok = PortAddress(context, port, gid_index, bp.grh, &b_route); !ok) return ok;
  if (auto ok = BringUp(a.get(), port, b.qp_num(), a_route, ap); !ok) return ok;
  return BringUp(b.get(), port, a.qp_num(), b_route, bp);
}

testing::AssertionResult QpTest::Connect(QpEnd& a, QpEnd& b, const ConnectParams& a_params,
                                         const ConnectParams& b_params) {
  return ConnectOn(context(), port(), gid_index(), port_attr().active_mtu, a, b, a_params, b_params);
}

testing::AssertionResult QpTest::MakePair(const EndConfig& config, const ConnectParams& params) {
  return MakePair(config, config, params, params);
}

testing::AssertionResult QpTest::MakePair(const EndConfig& a_config, const EndConfig& b_config,
                                          const ConnectParams& a_params, const ConnectParams& b_params) {
  if (auto ok = CreateEnd(&a_, a_config); !ok) return ok;
  if (auto ok = CreateEnd(&b_, b_config); !ok) return ok;
  return Connect(a_, b_, a_params, b_params);
}

}  // namespace conformance
