// The XRC side of a QP: creating an XRC_RECV (target) QP, and binding each
// request it receives to the XRC SRQ named in the packet (the XRCETH).

#include "context.h"
#include "device.h"
#include "qp.h"
#include "srq.h"
#include "transport/engine.h"
#include "xrcd.h"

namespace simverbs {

Result<Qp*> Qp::CreateXrcTarget(Context* ctx, const ibv_qp_init_attr_ex& a) {
  using R = Result<Qp*>;
  Device* device = ctx->device();
  if (!(device->profile().attr_ex.orig_attr.device_cap_flags & IBV_DEVICE_XRC)) return R::Error(EOPNOTSUPP);
  if (a.comp_mask & ~(IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_XRCD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS)) {
    return R::Error(EOPNOTSUPP);
  }
  // ibv_create_qp_ex(3): an XRC_RECV QP takes its XRC domain (and no PD, CQs or queues).
  Xrcd* xrcd = (a.comp_mask & IBV_QP_INIT_ATTR_XRCD) ? Xrcd::From(a.xrcd) : nullptr;
  if (!xrcd || xrcd->context() != ctx) return R::Error(EINVAL);
  // It has no send queue, so there is nothing for the ibv_wr_* API to build.
  if ((a.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) && a.send_ops_flags) return R::Error(EINVAL);
  if (!device->Reserve(Device::Kind::kQp)) return R::Error(ENOMEM);
  const uint32_t qpn = device->AllocQpn();
  if (qpn == 0) {
    device->Release(Device::Kind::kQp);
    return R::Error(ENOMEM);
  }
  ibv_qp_init_attr_ex init = a;
  init.comp_mask &= ~IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  init.cap = {};
  std::lock_guard<std::mutex> lock(Engine::Get().mu());
  Qp* qp = new Qp(ctx, nullptr, nullptr, nullptr, nullptr, init, qpn);
  qp->xrcd_ = xrcd;
  xrcd->AddUser();
  xrcd->domain()->targets.insert(qp);
  return qp;
}

bool Qp::BindXrcSrqLocked(const Packet& pkt) {
  Srq* srq = Srq::FindXrcLocked(device(), pkt.xrc_srqn);
  // The SRQ must be in the target QP's XRC domain, and a message keeps its
  // SRQ from its first packet to its last. Anything else is answered as an
  // invalid request (the requester completes with IBV_WC_REM_INV_REQ_ERR),
  // like the responder's other invalid requests.
  if (!srq || srq->xrcd()->domain() != xrcd_->domain() || (recv_in_progress_ && !pkt.first && srq != srq_)) {
    ResponderFatal(pkt, IBV_WC_SUCCESS, Packet::Nak::kInvalidRequest, IBV_EVENT_QP_REQ_ERR);
    return false;
  }
  // Receive buffers and remote keys are checked against the SRQ's PD.
  srq_ = srq;
  pd_ = srq->pd();
  recv_cq_ = srq->cq();
  return true;
}

void Qp::ForgetXrcSrqLocked(Srq* srq) {
  if (srq_ != srq) return;
  srq_ = nullptr;
  pd_ = nullptr;
  recv_cq_ = nullptr;
  recv_in_progress_ = false;  // the rest of a message into it is dropped
}

}  // namespace simverbs
