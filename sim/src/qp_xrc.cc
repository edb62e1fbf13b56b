// The XRC side of a QP: creating an XRC_RECV (target) QP, and binding each
// request it receives to the XRC SRQ named in the packet (the XRCETH).

#include "context.h"
#include "device.h"
#include "fabric/fabric.h"
#include "qp.h"
#include "srq.h"
#include "transport/engine.h"
#include "xrcd.h"
#include "fault/fault_points.h"

namespace simverbs {

Result<Qp*> Qp::CreateXrcTarget(Context* ctx, const ibv_qp_init_attr_ex& a) {
  using R = Result<Qp*>;
  if (int err = FaultPoints::Get().Hit(FaultPoint::kCreateQp)) return R::Error(err);
  Device* device = ctx->device();
  if (!(device->profile().attr_ex.orig_attr.device_cap_flags & IBV_DEVICE_XRC)) return R::Error(EOPNOTSUPP);
  if (a.comp_mask & ~(IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_XRCD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS |
                      IBV_QP_INIT_ATTR_CREATE_FLAGS)) {
    return R::Error(EOPNOTSUPP);
  }
  if (AsksForCreateFlags(a)) return R::Error(EOPNOTSUPP);
  // ibv_create_qp_ex(3): an XRC_RECV QP takes its XRC domain (and no PD, CQs or queues).
  Xrcd* xrcd = (a.comp_mask & IBV_QP_INIT_ATTR_XRCD) ? Xrcd::From(a.xrcd) : nullptr;
  if (!xrcd || xrcd->context() != ctx) return R::Error(EINVAL);
  // It has no send queue, so there is nothing for the ibv_wr_* API to build.
  if ((a.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) && a.send_ops_flags) return R::Error(EINVAL);
  if (!ctx->ReserveObject(Device::Kind::kQp)) return R::Error(ENOMEM);
  const uint32_t qpn = device->AllocQpn();
  if (qpn == 0) {
    ctx->ReleaseObject(Device::Kind::kQp);
    return R::Error(ENOMEM);
  }
  ibv_qp_init_attr_ex init = a;
  init.comp_mask &= ~IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  init.cap = {};
  std::lock_guard<DataPathMutex> lock(Engine::Get().mu());
  Qp* qp = new Qp(ctx, nullptr, nullptr, nullptr, nullptr, init, qpn);
  qp->xrcd_ = xrcd;
  xrcd->AddUser();
  xrcd->domain()->targets.insert(qp);
  return qp;
}

bool Qp::BindXrcSrqLocked(const Packet& pkt) {
  if (xrc_awaiting_) {
    HoldWhileForwardedLocked(pkt);
    return false;
  }
  Srq* srq = Srq::FindXrcLocked(device(), pkt.xrc_srqn);
  if (!srq) {
    // Perhaps an SRQ of another process in the same domain.
    ForwardXrcLocked(pkt);
    return false;
  }
  // The SRQ must be in the target QP's XRC domain, and a message keeps its
  // SRQ from its first packet to its last. Anything else is answered as an
  // invalid request (the requester completes with IBV_WC_REM_INV_REQ_ERR),
  // like the responder's other invalid requests.
  if (srq->xrcd()->domain() != xrcd_->domain() || (recv_in_progress_ && !pkt.first && srq != srq_)) {
    ResponderFatal(pkt, IBV_WC_SUCCESS, Packet::Nak::kInvalidRequest, IBV_EVENT_QP_REQ_ERR);
    return false;
  }
  // Receive buffers and remote keys are checked against the SRQ's PD.
  srq_ = srq;
  pd_ = srq->pd();
  recv_cq_ = srq->cq();
  return true;
}

// The SRQ is not in this process: this QP keeps the transport (PSNs, ACKs,
// NAKs) and the SRQ's owner delivers the data (xrc_remote.h). Only sends
// cross processes this way; until the owner answers, later messages get an
// RNR NAK.
void Qp::ForwardXrcLocked(const Packet& pkt) {
  const uint32_t diff = (pkt.psn - epsn_) & 0xffffff;
  if (diff != 0) {
    if (diff > 0x800000) {
      Respond(pkt, Packet::Kind::kAck);  // a resend of a delivered message
    } else {
      Respond(pkt, Packet::Kind::kNak, Packet::Nak::kSequence);
    }
    return;
  }
  if (!pkt.first) return;  // the rest of a message that was not forwarded
  const XrcDomain* domain = xrcd_->domain();
  const bool is_send = pkt.op == IBV_WR_SEND || pkt.op == IBV_WR_SEND_WITH_IMM;
  Packet fwd = pkt;
  fwd.kind = Packet::Kind::kXrcForward;
  fwd.dst_qpn = pkt.xrc_srqn;
  fwd.src_qpn = qp_num();
  fwd.src_device = device();
  fwd.xrc_domain_dev = domain->st_dev;
  fwd.xrc_domain_ino = domain->st_ino;
  // A private domain has no SRQ in another process.
  if (!is_send || !domain->has_inode || !Fabric::Get().SendRemote(device()->index(), fwd)) {
    ResponderFatal(pkt, IBV_WC_SUCCESS, Packet::Nak::kInvalidRequest, IBV_EVENT_QP_REQ_ERR);
    return;
  }
  xrc_awaiting_ = true;
  xrc_forwarding_ = !pkt.last;
  xrc_first_psn_ = pkt.psn;
  xrc_awaiting_srqn_ = pkt.xrc_srqn;
  epsn_ = (pkt.psn + 1) & 0xffffff;
}

void Qp::HoldWhileForwardedLocked(const Packet& pkt) {
  const uint32_t diff = (pkt.psn - epsn_) & 0xffffff;
  if (diff == 0 && xrc_forwarding_ && !pkt.first) {
    Packet fwd = pkt;
    fwd.kind = Packet::Kind::kXrcForward;
    fwd.dst_qpn = pkt.xrc_srqn;
    fwd.src_qpn = qp_num();
    fwd.src_device = device();
    fwd.xrc_domain_dev = xrcd_->domain()->st_dev;
    fwd.xrc_domain_ino = xrcd_->domain()->st_ino;
    Fabric::Get().SendRemote(device()->index(), fwd);
    xrc_forwarding_ = !pkt.last;
    epsn_ = (pkt.psn + 1) & 0xffffff;
    return;
  }
  // The SRQ's owner exited or was killed before it answered: its SRQ is gone,
  // as it would be on an HCA, so the message named an SRQ that does not exist.
  if (!Fabric::Get().OwnerAlive(device()->index(), xrc_awaiting_srqn_)) {
    Packet gone;
    gone.op = pkt.op;
    gone.psn = (epsn_ - 1) & 0xffffff;
    gone.nak = Packet::Nak::kInvalidRequest;
    XrcResultLocked(gone);
    return;
  }
  // A later message, or a resend of the one being delivered (the requester's
  // transport timer cannot see the SRQ owner's ring), waits: RNR NAK. The
  // owner's answer then completes the forwarded message.
  Respond(pkt, Packet::Kind::kNak, Packet::Nak::kRnr);
}

void Qp::XrcResultLocked(const Packet& result) {
  if (!xrc_awaiting_) return;
  xrc_awaiting_ = xrc_forwarding_ = false;
  const ibv_qp_state s = state();
  if (s != IBV_QPS_RTR && s != IBV_QPS_RTS && s != IBV_QPS_SQD) return;
  Packet req;
  req.op = result.op;
  req.psn = result.psn;
  switch (result.nak) {
    case Packet::Nak::kNone:
      Respond(req, Packet::Kind::kAck);
      return;
    case Packet::Nak::kRnr:
      // No receive was posted: the requester sends the message again.
      epsn_ = xrc_first_psn_;
      req.psn = xrc_first_psn_;
      Respond(req, Packet::Kind::kNak, Packet::Nak::kRnr);
      return;
    case Packet::Nak::kCqOverrun:
    case Packet::Nak::kCqErrored:
      // Delivered, but its completion was lost in the SRQ owner's CQ: as a
      // completion of ours lost in our own CQ, and acknowledged only if the
      // QP is not in ERR after that (a QP in ERR acknowledges nothing).
      CompletionLostLocked(nullptr, result.nak == Packet::Nak::kCqOverrun, true);
      if (state() != IBV_QPS_ERR) Respond(req, Packet::Kind::kAck);
      return;
    default:
      Respond(req, Packet::Kind::kNak, result.nak);
      EnterErrorLocked(result.nak == Packet::Nak::kInvalidRequest ? IBV_EVENT_QP_REQ_ERR : -1);
      return;
  }
}

void Qp::ForgetXrcSrqLocked(Srq* srq) {
  if (srq_ != srq) return;
  srq_ = nullptr;
  pd_ = nullptr;
  recv_cq_ = nullptr;
  recv_in_progress_ = false;  // the rest of a message into it is dropped
}

}  // namespace simverbs
