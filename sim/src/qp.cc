#include "qp.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "context.h"
#include "cq.h"
#include "device.h"
#include "fabric/fabric.h"
#include "gid.h"
#include "pd.h"
#include "qp_state_table.h"
#include "queue_size.h"
#include "srq.h"
#include "trace/trace.h"
#include "transport/engine.h"
#include "fault/fault_points.h"
#include "xrcd.h"

namespace simverbs {
namespace {

std::atomic<uint32_t> next_qp_handle{1};

// (CREATE_FLAGS with no flag set: AsksForCreateFlags.)
constexpr uint32_t kSupportedCreateMask =
    IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS | IBV_QP_INIT_ATTR_CREATE_FLAGS;

// The ibv_qp_ex operations each transport can build (ibv_wr_post(3)).
uint64_t SupportedSendOps(ibv_qp_type type) {
  const uint64_t send = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;
  const uint64_t write = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM;
  const uint64_t windows = IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV;
  const uint64_t rc_only = IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
                           IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_SEND_WITH_INV;
  switch (type) {
    case IBV_QPT_RC:
    case IBV_QPT_XRC_SEND: return send | write | windows | rc_only;
    case IBV_QPT_UC: return send | write | windows;
    default: return send;
  }
}

}  // namespace

Qp::Qp(Context* ctx, Pd* pd, Cq* send_cq, Cq* recv_cq, Srq* srq, const ibv_qp_init_attr_ex& a, uint32_t qp_num)
    : ctx_(ctx),
      pd_(pd),
      send_cq_(send_cq),
      recv_cq_(recv_cq),
      srq_(srq),
      has_qp_ex_(a.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS),
      events_(ctx_, "QP", ibv(), &handle_.pub.qp_base.mutex, &handle_.pub.qp_base.cond,
              &handle_.pub.qp_base.events_completed) {
  handle_.Bind(this);
  ibv_qp& q = handle_.pub.qp_base;
  q.context = ctx_->ibv();
  q.qp_context = a.qp_context;
  // XRC QPs lack some of these (ibv_create_qp_ex(3)): they stay NULL.
  q.pd = pd ? pd->ibv() : nullptr;
  q.send_cq = send_cq ? send_cq->ibv() : nullptr;
  q.recv_cq = recv_cq ? recv_cq->ibv() : nullptr;
  q.srq = srq ? srq->ibv() : nullptr;
  q.handle = next_qp_handle.fetch_add(1);
  q.qp_num = qp_num;
  q.state = IBV_QPS_RESET;
  q.qp_type = a.qp_type;
  if (has_qp_ex_) {
    handle_.pub.comp_mask = 0;
    QpWrBuilder::Install(&handle_.pub);
  }

  init_.qp_context = a.qp_context;
  init_.send_cq = q.send_cq;
  init_.recv_cq = q.recv_cq;
  init_.srq = q.srq;
  init_.cap = a.cap;
  if (srq || !recv_cq) init_.cap.max_recv_wr = init_.cap.max_recv_sge = 0;
  if (!send_cq) init_.cap.max_send_wr = init_.cap.max_send_sge = init_.cap.max_inline_data = 0;
  // A send WQE has room for its SGEs or its inline data, whichever is larger, so
  // inline data may use the SGEs' room too (rxe_qp_init_req: max_inline = max(sge
  // * 16, inline); mlx5 likewise rounds up). ibv_create_qp(3) allows actual
  // capabilities above the requested ones.
  const Behaviour& behaviour = ctx->device()->behaviour();
  init_.cap.max_inline_data = std::max<uint32_t>(
      init_.cap.max_inline_data,
      std::min<uint32_t>(init_.cap.max_send_sge * static_cast<uint32_t>(sizeof(ibv_sge)), behaviour.max_inline_data));
  if (behaviour.send_sge_fills_inline_room) {
    const uint32_t room = init_.cap.max_inline_data / static_cast<uint32_t>(sizeof(ibv_sge));
    const auto max_sge = static_cast<uint32_t>(ctx->device()->profile().attr_ex.orig_attr.max_sge);
    init_.cap.max_send_sge = std::max(init_.cap.max_send_sge, std::min(room, max_sge));
  }
  if (behaviour.qp_size_pow2_minus_one) {
    init_.cap.max_send_wr = Pow2Minus1AtLeast(init_.cap.max_send_wr);
    init_.cap.max_recv_wr = Pow2Minus1AtLeast(init_.cap.max_recv_wr);
  }
  init_.qp_type = a.qp_type;
  // The kernel keeps a signal type, and reads it back as 1 or 0 (uverbs
  // create_qp: IB_SIGNAL_ALL_WR for any non-zero value; query_qp).
  init_.sq_sig_all = a.sq_sig_all != 0;
  attr_.qp_state = attr_.cur_qp_state = IBV_QPS_RESET;
  attr_.cap = init_.cap;
  attr_.path_mtu = IBV_MTU_1024;
  attr_.port_num = 1;

  if (pd) pd->AddUser();
  if (send_cq) send_cq->AddQp(this);
  if (recv_cq) recv_cq->AddQp(this);
  if (srq) srq->AddUser();
  device()->AddQp(this);
}

Device* Qp::device() const { return ctx_->device(); }

Qp::~Qp() { handle_.Unbind(); }

Result<Qp*> Qp::Create(Pd* pd, const ibv_qp_init_attr_ex& a) {
  if (int err = FaultPoints::Get().Hit(FaultPoint::kCreateQp)) return Result<Qp*>::Error(err);
  using R = Result<Qp*>;
  Context* ctx = pd->context();
  const ibv_device_attr& dev = ctx->device()->profile().attr_ex.orig_attr;
  if (a.comp_mask & ~kSupportedCreateMask) return R::Error(EOPNOTSUPP);
  if (AsksForCreateFlags(a)) return R::Error(EOPNOTSUPP);
  switch (a.qp_type) {
    case IBV_QPT_RC:
    case IBV_QPT_UC:
    case IBV_QPT_UD:
      break;
    case IBV_QPT_XRC_SEND:
      if (!(dev.device_cap_flags & IBV_DEVICE_XRC)) return R::Error(EOPNOTSUPP);
      break;
    case IBV_QPT_XRC_RECV:
      return R::Error(EINVAL);  // it has no PD but an XRC domain (IBV_QP_INIT_ATTR_XRCD)
    case IBV_QPT_RAW_PACKET:
    case IBV_QPT_DRIVER:
      return R::Error(EOPNOTSUPP);
    default:
      return R::Error(EINVAL);
  }
  if ((a.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) && (a.send_ops_flags & ~SupportedSendOps(a.qp_type))) {
    return R::Error(EOPNOTSUPP);
  }
  // An XRC_SEND QP has a send queue only: its recv_cq and srq are ignored, as the kernel does.
  const bool send_only = a.qp_type == IBV_QPT_XRC_SEND;
  Cq* send_cq = Cq::From(a.send_cq);
  Cq* recv_cq = send_only ? nullptr : Cq::From(a.recv_cq);
  Srq* srq = a.srq && !send_only ? Srq::From(a.srq) : nullptr;
  if (!send_cq || (!recv_cq && !send_only) || (a.srq && !send_only && !srq)) return R::Error(EINVAL);
  // An XRC SRQ takes messages for XRC target QPs only (the kernel's
  // create_qp refuses it for any other QP).
  if (srq && srq->is_xrc()) return R::Error(EINVAL);
  if (send_cq->context() != ctx || (recv_cq && recv_cq->context() != ctx) || (srq && srq->context() != ctx)) {
    return R::Error(EINVAL);
  }
  const ibv_qp_cap& cap = a.cap;
  if (cap.max_send_wr > static_cast<uint32_t>(dev.max_qp_wr) || cap.max_send_sge > static_cast<uint32_t>(dev.max_sge) ||
      cap.max_inline_data > ctx->device()->behaviour().max_inline_data) {
    return R::Error(EINVAL);
  }
  if (!srq && !send_only && (cap.max_recv_wr > static_cast<uint32_t>(dev.max_qp_wr) ||
               cap.max_recv_sge > static_cast<uint32_t>(dev.max_sge))) {
    return R::Error(EINVAL);
  }
  if (!ctx->ReserveObject(Device::Kind::kQp)) return R::Error(ENOMEM);
  const uint32_t qpn = ctx->device()->AllocQpn();
  if (qpn == 0) {
    ctx->ReleaseObject(Device::Kind::kQp);
    return R::Error(ENOMEM);
  }
  std::lock_guard<DataPathMutex> lock(Engine::Get().mu());
  return new Qp(ctx, pd, send_cq, recv_cq, srq, a, qpn);
}

ibv_qp_cap Qp::CreatedCaps(const ibv_qp_cap& asked) const {
  ibv_qp_cap cap = init_.cap;
  if (device()->behaviour().qp_size_pow2_minus_one) {
    if (cap.max_send_wr != 0) cap.max_send_wr = asked.max_send_wr;
    if (cap.max_recv_wr != 0) cap.max_recv_wr = asked.max_recv_wr;
  }
  return cap;
}

ibv_qp* Qp::CreateExOp(ibv_context* ibctx, ibv_qp_init_attr_ex* attr) {
  Context* ctx = Context::From(ibctx);
  const bool target = attr && attr->qp_type == IBV_QPT_XRC_RECV;
  if (!ctx || !attr || (!target && !(attr->comp_mask & IBV_QP_INIT_ATTR_PD))) {
    errno = EINVAL;
    return nullptr;
  }
  Pd* pd = target ? nullptr : Pd::From(attr->pd);
  if (!target && (!pd || pd->context() != ctx)) {
    errno = EINVAL;
    return nullptr;
  }
  Result<Qp*> r = target ? CreateXrcTarget(ctx, *attr) : Create(pd, *attr);
  if (!r.ok()) {
    errno = r.err();
    return nullptr;
  }
  // ibv_create_qp_ex(3): cap is updated "with the actual QP values".
  if (!target) attr->cap = r.value()->CreatedCaps(attr->cap);
  return r.value()->ibv();
}

int Qp::CheckValues(const ibv_qp_attr& a, int mask) const {
  Device* dev = ctx_->device();
  const ibv_device_attr& d = dev->profile().attr_ex.orig_attr;
  const int port = (mask & IBV_QP_PORT) ? a.port_num : attr_.port_num;
  if (!dev->ValidPort(port)) return EINVAL;
  const ibv_port_attr& p = dev->profile().ports[port - 1].attr;
  if ((mask & IBV_QP_PKEY_INDEX) && a.pkey_index >= p.pkey_tbl_len) return EINVAL;
  if ((mask & IBV_QP_PATH_MTU) && (a.path_mtu < IBV_MTU_256 || a.path_mtu > p.max_mtu)) return EINVAL;
  if ((mask & IBV_QP_TIMEOUT) && a.timeout > 31) return EINVAL;
  if ((mask & IBV_QP_RETRY_CNT) && a.retry_cnt > 7) return EINVAL;
  if ((mask & IBV_QP_RNR_RETRY) && a.rnr_retry > 7) return EINVAL;
  if ((mask & IBV_QP_MIN_RNR_TIMER) && a.min_rnr_timer > 31) return EINVAL;
  if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) && a.max_rd_atomic > d.max_qp_init_rd_atom) return EINVAL;
  if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && a.max_dest_rd_atomic > d.max_qp_rd_atom) return EINVAL;
  if ((mask & IBV_QP_PATH_MIG_STATE) && a.path_mig_state > IBV_MIG_ARMED) return EINVAL;
  if (mask & IBV_QP_AV) {
    if (int err = AddressError(a.ah_attr, port, p)) return err;
  }
  if (mask & IBV_QP_ALT_PATH) {
    // Alternate paths are InfiniBand's alone (the kernel's _ib_modify_qp:
    // "Ban them in roce mode").
    if (p.link_layer == IBV_LINK_LAYER_ETHERNET) return EINVAL;
    // The alternate path is checked as the primary one is
    // (drivers/infiniband/core/uverbs_cmd.c: modify_qp wants a valid
    // alt_port_num equal to the address's port; rxe_qp_chk_attr checks
    // alt_timeout and the address; the P_Key index is looked up).
    if (!dev->ValidPort(a.alt_port_num) || a.alt_ah_attr.port_num != a.alt_port_num) return EINVAL;
    const ibv_port_attr& alt = dev->profile().ports[a.alt_port_num - 1].attr;
    if (alt.link_layer == IBV_LINK_LAYER_ETHERNET) return EINVAL;  // both ports InfiniBand
    if (a.alt_timeout > 31 || a.alt_pkey_index >= alt.pkey_tbl_len) return EINVAL;
    if (int err = AddressError(a.alt_ah_attr, a.alt_port_num, alt)) return err;
  }
  return 0;
}

int Qp::AddressError(const ibv_ah_attr& ah, int port_num, const ibv_port_attr& port) const {
  const Device* dev = ctx_->device();
  if (ah.port_num != 0 && !dev->ValidPort(ah.port_num)) return EINVAL;
  // RoCE carries every packet in a GRH: an address without one is invalid there.
  if (port.link_layer == IBV_LINK_LAYER_ETHERNET && !ah.is_global) return EINVAL;
  if (!ah.is_global) return 0;
  if (ah.grh.sgid_index >= port.gid_tbl_len) return EINVAL;
  // An empty entry has no source address (the kernel's rdma_fill_sgid_attr: ENODATA).
  const GidProfile* sgid = dev->Gid(ah.port_num != 0 ? ah.port_num : port_num, ah.grh.sgid_index);
  if (!sgid) return ENODATA;
  if (port.link_layer != IBV_LINK_LAYER_ETHERNET) return 0;
  return RoceDestinationError(sgid->gid, sgid->kind == GidKind::kIbRoceV1, ah.grh.dgid);
}

void Qp::DiscardCompletionsLocked() {
  if (!context()->device()->behaviour().reset_discards_completions) return;
  if (send_cq_) send_cq_->DiscardQpCompletions(qp_num());
  // An XRC target's completions are its SRQ's CQ's (recv_cq_ names it): mlx5
  // cleans no CQ for one (its ibqp->recv_cq is NULL).
  if (recv_cq_ && recv_cq_ != send_cq_ && !xrcd_) recv_cq_->DiscardQpCompletions(qp_num());
}

bool Qp::PortUpLocked() const { return ctx_->device()->PassesTraffic(attr_.port_num); }

bool Qp::OnInfinibandLocked() const {
  const Device* dev = ctx_->device();
  if (attr_.qp_state != IBV_QPS_RESET && dev->ValidPort(attr_.port_num)) {
    return dev->StaticPortAttr(attr_.port_num).link_layer != IBV_LINK_LAYER_ETHERNET;
  }
  for (int port = 1; port <= dev->port_count(); ++port) {
    if (dev->StaticPortAttr(port).link_layer == IBV_LINK_LAYER_ETHERNET) return false;
  }
  return true;
}

void Qp::TransmitToPeerLocked(Packet&& p) {
  // A datagram's address is its WR's: nothing to keep.
  if (type() != IBV_QPT_UD && peer_route_.Send(p)) return;
  Engine::Get().Transmit(std::move(p));
}

int Qp::Modify(const ibv_qp_attr& requested, int requested_mask) {
  // The kernel refuses mask bits it does not know before anything else
  // (ib_uverbs_modify_qp: EOPNOTSUPP); a rate limit it knows, but not for these QPs.
  if (requested_mask & ~(((IBV_QP_DEST_QPN << 1) - 1) | IBV_QP_RATE_LIMIT)) return EOPNOTSUPP;
  if ((requested_mask & IBV_QP_RATE_LIMIT) && device()->behaviour().rate_limit_unsupported) return EOPNOTSUPP;
  ibv_qp_attr a = requested;
  // The kernel drops what an XRC QP has no use for before anything looks at
  // the mask (drivers/infiniband/core/uverbs_cmd.c: modify_qp_mask), so
  // programs that set the RC attributes on both ends (perftest -c XRC) work.
  int mask = requested_mask;
  if (type() == IBV_QPT_XRC_SEND) mask &= ~(IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  if (type() == IBV_QPT_XRC_RECV) mask &= ~(IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY);
  std::lock_guard<DataPathMutex> lock(Engine::Get().mu());
  if (destroying_) return EINVAL;
  // The kernel's uverbs modify_qp: an address names a valid port; at
  // INIT->RTR it is the QP's own port; in SQD->SQD an address without
  // IBV_QP_PORT moves the QP to its port, and one with it must agree.
  if (mask & IBV_QP_AV) {
    if (!device()->ValidPort(a.ah_attr.port_num)) return EINVAL;
    if ((mask & IBV_QP_STATE) && a.qp_state == IBV_QPS_RTR) {
      if (a.ah_attr.port_num != attr_.port_num) return EINVAL;
    } else if (mask & IBV_QP_PORT) {
      if (a.port_num != a.ah_attr.port_num) return EINVAL;
    } else {
      mask |= IBV_QP_PORT;
      a.port_num = a.ah_attr.port_num;
    }
  }
  const ibv_qp_state cur = attr_.qp_state;
  if ((mask & IBV_QP_CUR_STATE) && a.cur_qp_state != cur) return EINVAL;
  const ibv_qp_state next = (mask & IBV_QP_STATE) ? a.qp_state : cur;
  // A draining SQD QP may only go to ERR or RESET (rxe_qp_chk_attr, IBTA 10.3.1).
  if (cur == IBV_QPS_SQD && attr_.sq_draining && next != IBV_QPS_ERR && next != IBV_QPS_RESET) return EINVAL;
  if (!QpTransitionIsValid(cur, next, handle_.pub.qp_base.qp_type, mask)) return EINVAL;
  if (int err = CheckValues(a, mask)) return err;

  // Every check passed; apply the attributes together.
  peer_route_.Forget();
  wire_answer_.Forget();
  wire_send_.Forget();
  if (mask & IBV_QP_PKEY_INDEX) attr_.pkey_index = a.pkey_index;
  if (mask & IBV_QP_PORT) attr_.port_num = a.port_num;
  if (mask & IBV_QP_QKEY) attr_.qkey = a.qkey;
  if (mask & IBV_QP_ACCESS_FLAGS) attr_.qp_access_flags = a.qp_access_flags;
  if (mask & IBV_QP_AV) attr_.ah_attr = a.ah_attr;
  if (mask & IBV_QP_ALT_PATH) {
    attr_.alt_ah_attr = a.alt_ah_attr;
    attr_.alt_pkey_index = a.alt_pkey_index;
    attr_.alt_port_num = a.alt_port_num;
    attr_.alt_timeout = a.alt_timeout;
  }
  if (mask & IBV_QP_PATH_MTU) attr_.path_mtu = a.path_mtu;
  if (mask & IBV_QP_TIMEOUT) attr_.timeout = a.timeout;
  if (mask & IBV_QP_RETRY_CNT) attr_.retry_cnt = a.retry_cnt;
  if (mask & IBV_QP_RNR_RETRY) attr_.rnr_retry = a.rnr_retry;
  if (mask & IBV_QP_RQ_PSN) attr_.rq_psn = a.rq_psn & 0xffffff;
  if (mask & IBV_QP_SQ_PSN) attr_.sq_psn = a.sq_psn & 0xffffff;
  if (mask & IBV_QP_MAX_QP_RD_ATOMIC) attr_.max_rd_atomic = a.max_rd_atomic;
  if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) attr_.max_dest_rd_atomic = a.max_dest_rd_atomic;
  if (mask & IBV_QP_MIN_RNR_TIMER) attr_.min_rnr_timer = a.min_rnr_timer;
  if (mask & IBV_QP_DEST_QPN) attr_.dest_qp_num = a.dest_qp_num & 0xffffff;
  if (mask & IBV_QP_PATH_MIG_STATE) attr_.path_mig_state = a.path_mig_state;
  if (mask & IBV_QP_EN_SQD_ASYNC_NOTIFY) attr_.en_sqd_async_notify = a.en_sqd_async_notify;

  if (next == IBV_QPS_RESET) {
    // RESET forgets everything but the capabilities (as after create).
    const ibv_qp_cap cap = attr_.cap;
    attr_ = {};
    attr_.cap = cap;
    attr_.path_mtu = IBV_MTU_1024;
    attr_.port_num = 1;
  }
  if (next == IBV_QPS_ERR) {
    if (cur != IBV_QPS_ERR) EnterErrorLocked(-1);
    return 0;
  }
  if (next == IBV_QPS_RESET) {
    // RESET drops every queued WR without completions (rxe_qp_reset).
    Engine::Get().CancelTimer(this);
    sq_.clear();
    rq_.clear();
    next_to_send_ = 0;
    recv_in_progress_ = false;
    uc_message_ = false;
    rnr_wait_ = false;
    comm_established_ = false;
    sent_sequence_nak_ = false;
    atomic_results_ = {};
    pulls_refused_ = false;  // it may be connected to another requester next
    xrc_awaiting_ = xrc_forwarding_ = false;  // a late result from an SRQ's owner is ignored
    ForgetQueueSlotsLocked();  // (the completions a CQ keeps free nothing of the new queues)
    DiscardCompletionsLocked();
  }
  SetStateLocked(next);
  if (mask & IBV_QP_SQ_PSN) next_psn_ = attr_.sq_psn;
  if (mask & IBV_QP_RQ_PSN) {
    epsn_ = attr_.rq_psn;
    sent_sequence_nak_ = false;
  }
  if (mask & IBV_QP_RETRY_CNT) retries_left_ = attr_.retry_cnt;
  if (mask & IBV_QP_RNR_RETRY) rnr_retries_left_ = attr_.rnr_retry;

  // RTS→SQD: new WRs wait; the queue has drained once every message already
  // sent is answered (at once if none is outstanding). One that waits to be
  // sent again (after an RNR NAK) was sent: it is resent while draining.
  if (next == IBV_QPS_SQD && cur != IBV_QPS_SQD) {
    for (size_t i = 0; i < sq_.size() && sq_[i].started; ++i) sq_[i].before_sqd = true;
    attr_.sq_draining = 1;
    CheckDrainedLocked();
  }
  // WRs posted in INIT/RTR (profiles that queue them) or held in SQD run now.
  if (next == IBV_QPS_RTS) ProgressLocked();
  return 0;
}

void Qp::EnterErrorLocked(int event) {
  if (attr_.qp_state == IBV_QPS_ERR) return;
  attr_.sq_draining = 0;
  const bool was_reset = attr_.qp_state == IBV_QPS_RESET;
  SetStateLocked(IBV_QPS_ERR);
  Engine::Get().CancelTimer(this);
  if (event >= 0) RaiseAsyncLocked(static_cast<ibv_event_type>(event));
  if (was_reset) return;
  // Flush the send queue: every WR not completed yet, in posting order.
  for (SendWqe& wqe : sq_) {
    if (wqe.completed) continue;
    wqe.acked = wqe.completed = true;
    ibv_wc wc{};
    wc.wr_id = wqe.wr_id;
    wc.status = IBV_WC_WR_FLUSH_ERR;
    wc.qp_num = qp_num();
    PushSendCompletion(wqe, wc);  // into an errored CQ it is lost
  }
  if (!executing_) RetireLocked();
  // Then the receive queue (an SRQ is never flushed: the QP stops taking from it).
  if (recv_in_progress_) {
    recv_in_progress_ = false;
    CompleteRecvLocked(recv_wqe_, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV);
  }
  while (!rq_.empty()) {
    RecvWqe wqe = std::move(rq_.front());
    rq_.pop_front();
    CompleteRecvLocked(wqe, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV);
  }
  // IBTA o11-5.2.5: an SRQ QP in ERR with no WQE left raises Last WQE Reached.
  // (An XRC_RECV QP's srq_ is only the SRQ of its last message: not attached.)
  if (srq_ && !xrcd_ && device()->behaviour().last_wqe_reached_event) RaiseAsyncLocked(IBV_EVENT_QP_LAST_WQE_REACHED);
}

int Qp::FailNthSend(uint32_t nth, ibv_wc_status status) {
  std::lock_guard<DataPathMutex> lock(Engine::Get().mu());
  return FailNthSendLocked(nth, status);
}

int Qp::FailNthSendLocked(uint32_t nth, ibv_wc_status status) {
  // An error status of enum ibv_wc_status (as the plan's names): no HCA completes with another.
  if (nth == 0 || status <= IBV_WC_SUCCESS || status > IBV_WC_TM_RNDV_INCOMPLETE || destroying_) return EINVAL;
  fail_countdown_ = nth;
  fail_status_ = status;
  return 0;
}

int Qp::InjectState(ibv_qp_state next) {
  std::lock_guard<DataPathMutex> lock(Engine::Get().mu());
  return InjectStateLocked(next);
}

int Qp::InjectStateLocked(ibv_qp_state next) {
  if (destroying_) return EINVAL;
  const ibv_qp_state cur = state();
  if (next == IBV_QPS_ERR) {
    // A QP in RESET has no context on the HCA to fail (and RESET->ERR is not a transition).
    if (cur == IBV_QPS_RESET || cur == IBV_QPS_ERR) return EINVAL;
    EnterErrorLocked(IBV_EVENT_QP_FATAL);
    return 0;
  }
  // IBTA 10.3.1: only UC and UD send queues enter SQE (RC errors go to ERR).
  if (next == IBV_QPS_SQE && (type() == IBV_QPT_UC || type() == IBV_QPT_UD) && cur == IBV_QPS_RTS) {
    Engine::Get().CancelTimer(this);
    EnterSqeLocked();
    if (!executing_) RetireLocked();
    return 0;
  }
  return EINVAL;
}

namespace {

// A pull epoch no QP of this process had before (0 is none). It starts
// where the clock says: a QP number that another process takes over must not
// find its old owner's epoch again.
uint32_t NextPullEpoch() {
  static std::atomic<uint32_t> next{static_cast<uint32_t>(MonotonicNs() ^ (MonotonicNs() >> 32))};
  uint32_t epoch = next.fetch_add(1, std::memory_order_relaxed);
  while (epoch == 0) epoch = next.fetch_add(1, std::memory_order_relaxed);
  return epoch;
}

}  // namespace

void Qp::SetStateLocked(ibv_qp_state next) {
  Trace::Get().QpState(qp_num(), attr_.qp_state, next);
  attr_.qp_state = attr_.cur_qp_state = next;
  PublishAcceptsLocked();
  // Our responder may pull our SENDs' bytes while we send. Withdrawn when we
  // stop, before a flush reports them (EnterErrorLocked) and the program may
  // free their buffers: RevokePullsLocked waits for a pull under way.
  const bool sends = type() == IBV_QPT_RC && (next == IBV_QPS_RTS || next == IBV_QPS_SQD);
  if (sends && pull_epoch_ == 0) {
    pull_epoch_ = NextPullEpoch();
    Fabric::Get().GrantPullsLocked(device()->index(), qp_num(), pull_epoch_);
  } else if (!sends) {
    WithdrawPullsLocked();
  }
}

void Qp::WithdrawPullsLocked() {
  if (pull_epoch_ == 0) return;
  pull_epoch_ = 0;
  Fabric::Get().RevokePullsLocked(device()->index(), qp_num());
}

void Qp::PublishAcceptsLocked() {
  // What a peer's one-copy WRITE, READ or SEND checks of this QP (fabric/fabric.h).
  const ibv_qp_state next = state();
  const bool responds = (type() == IBV_QPT_RC || type() == IBV_QPT_UC) &&
                        (next == IBV_QPS_RTR || next == IBV_QPS_RTS || next == IBV_QPS_SQD || next == IBV_QPS_SQE);
  const bool takes_writes = responds && (attr_.qp_access_flags & IBV_ACCESS_REMOTE_WRITE);
  // (a READ needs a responder resource: none with max_dest_rd_atomic 0)
  const bool takes_reads = responds && type() == IBV_QPT_RC && (attr_.qp_access_flags & IBV_ACCESS_REMOTE_READ) &&
                           attr_.max_dest_rd_atomic > 0;
  const bool pulls = responds && type() == IBV_QPT_RC && !pulls_refused_;
  uint32_t accepts = 0;
  if (takes_writes || takes_reads || pulls) {
    accepts = (static_cast<uint32_t>(type()) + 1) | (takes_writes ? Fabric::kAcceptsWrites : 0) |
              (takes_reads ? Fabric::kAcceptsReads : 0) | (pulls ? Fabric::kAcceptsPulls : 0);
  }
  const int peer_device = responds ? RemoteDeviceIndex() : -1;
  const uint32_t peer = peer_device >= 0 ? Fabric::ConnectionTag(peer_device, attr_.dest_qp_num) : 0;
  Fabric::Get().PublishQpLocked(device()->index(), qp_num(), reinterpret_cast<uintptr_t>(pd_), accepts, peer,
                                attr_.rq_psn);
}

int Qp::Query(ibv_qp_attr* attr, int /*mask*/, ibv_qp_init_attr* init) const {
  if (!attr || !init) return EINVAL;
  std::lock_guard<DataPathMutex> lock(Engine::Get().mu());
  // Providers fill every attribute whatever the mask asks; so does the simulator.
  *attr = attr_;
  // The PSNs are the current ones, not those last set (rxe_qp_to_attr: the
  // requester's and responder's next PSN; mlx5: next_send_psn, next_rcv_psn).
  attr->sq_psn = next_psn_;
  attr->rq_psn = epsn_;
  *init = init_;
  return 0;
}

void Qp::RaiseAsync(ibv_event_type type) {
  std::lock_guard<DataPathMutex> lock(Engine::Get().mu());
  if (destroying_) return;
  RaiseAsyncLocked(type);
}

void Qp::RaiseAsyncLocked(ibv_event_type type) { events_.RaiseAsync(type); }

int Qp::AttachMulticast(const ibv_gid& gid, uint16_t lid) {
  std::lock_guard<DataPathMutex> lock(Engine::Get().mu());
  // ibv_attach_mcast(3): only UD QPs may be attached to multicast groups.
  if (type() != IBV_QPT_UD || destroying_) return EINVAL;
  return Engine::Get().AttachMulticast(this, gid, lid);
}

int Qp::DetachMulticast(const ibv_gid& gid, uint16_t lid) {
  std::lock_guard<DataPathMutex> lock(Engine::Get().mu());
  if (type() != IBV_QPT_UD) return EINVAL;
  return Engine::Get().DetachMulticast(this, gid, lid);
}

void Qp::LeaveWireLocked() {
  device()->RemoveQp(this);
  Engine::Get().CancelTimer(this);
  Engine::Get().ForgetDeferredAck(this);
  Engine::Get().DetachAllLocked(this);
}

void Qp::OrphanLocked() {
  if (destroying_) return;
  destroying_ = true;
  LeaveWireLocked();
  ReleaseQpNumberLocked();
  // An XRC domain outlives its handles in other contexts: it must not list a
  // QP of a closed one (an SRQ being destroyed walks the list).
  if (xrcd_) xrcd_->domain()->targets.erase(this);
}

void Qp::ReleaseQpNumberLocked() {
  // The windows it bound serve no QP that takes the number next.
  device()->ForgetWindowsOfQp(qp_num());
  device()->ReleaseQpn(qp_num());
}

int Qp::Destroy() {
  {
    // Outstanding WRs are discarded without completions; the QP number stops
    // answering, so peers see their packets lost.
    std::lock_guard<DataPathMutex> lock(Engine::Get().mu());
    // The kernel counts attachments in the QP's usecnt: destroy fails while attached.
    if (Engine::Get().IsAttached(this)) return EBUSY;
    destroying_ = true;
    Engine::Get().CancelTimer(this);
    Engine::Get().ForgetDeferredAck(this);
    device()->RemoveQp(this);
    ReleaseQpNumberLocked();
    ForgetQueueSlotsLocked();    // (what a CQ keeps must not reach the QP once it is gone)
    DiscardCompletionsLocked();  // as at RESET: mlx5_destroy_qp cleans its CQs
    if (send_cq_) send_cq_->RemoveQp(this);
    if (xrcd_) {
      xrcd_->domain()->targets.erase(this);
    } else if (recv_cq_) {
      recv_cq_->RemoveQp(this);
    }
  }
  // What the QP holds is free before the wait for acks, as libibverbs waits
  // after the kernel has destroyed the QP (ibv_cmd_destroy_qp): a PD or SRQ
  // may go meanwhile.
  if (xrcd_) {
    xrcd_->RemoveUser();  // an XRC_RECV QP holds no PD or SRQ of its own
  } else {
    pd_->RemoveUser();
    if (srq_) srq_->RemoveUser();
  }
  ctx_->ReleaseObject(Device::Kind::kQp);
  events_.Purge(ctx_->async_events());
  events_.WaitForAcks(qp_num());
  delete this;
  return 0;
}

}  // namespace simverbs
