// extern "C" control API (sim/include/simverbs/simverbs.h).

#include "simverbs/simverbs.h"

#include "abi/c_api.h"
#include "context.h"
#include "cq.h"
#include "device.h"
#include "qp.h"
#include "srq.h"
#include "transport/engine.h"

using namespace simverbs;

SIMVERBS_EXPORT int simverbs_version(void) { return SIMVERBS_API_VERSION; }

SIMVERBS_EXPORT int simverbs_raise_cq_event(ibv_cq* cq, ibv_event_type type) {
  Cq* c = Cq::From(cq);
  if (!c || type != IBV_EVENT_CQ_ERR) return EINVAL;
  c->SetError();
  return 0;
}

SIMVERBS_EXPORT int simverbs_raise_qp_event(ibv_qp* qp, ibv_event_type type) {
  Qp* q = Qp::From(qp);
  if (!q) return EINVAL;
  switch (type) {
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_QP_LAST_WQE_REACHED:
      q->RaiseAsync(type);
      return 0;
    default:
      return EINVAL;
  }
}

SIMVERBS_EXPORT int simverbs_raise_srq_event(ibv_srq* srq, ibv_event_type type) {
  Srq* s = Srq::From(srq);
  if (!s || (type != IBV_EVENT_SRQ_ERR && type != IBV_EVENT_SRQ_LIMIT_REACHED)) return EINVAL;
  s->RaiseAsync(type);
  return 0;
}

SIMVERBS_EXPORT int simverbs_raise_port_event(ibv_context* context, uint8_t port_num, ibv_event_type type) {
  Context* c = Context::From(context);
  if (!c || !c->device()->ValidPort(port_num)) return EINVAL;
  switch (type) {
    case IBV_EVENT_PORT_ACTIVE:
    case IBV_EVENT_PORT_ERR:
    case IBV_EVENT_LID_CHANGE:
    case IBV_EVENT_PKEY_CHANGE:
    case IBV_EVENT_SM_CHANGE:
    case IBV_EVENT_CLIENT_REREGISTER:
    case IBV_EVENT_GID_CHANGE:
      break;
    default:
      return EINVAL;
  }
  c->device()->RaisePortEvent(port_num, type);
  return 0;
}

SIMVERBS_EXPORT int simverbs_raise_device_fatal(ibv_context* context) {
  Context* c = Context::From(context);
  if (!c) return EINVAL;
  c->device()->RaiseDeviceEvent(IBV_EVENT_DEVICE_FATAL);
  return 0;
}

SIMVERBS_EXPORT int simverbs_push_completion(ibv_cq* cq, const ibv_wc* wc, int solicited) {
  Cq* c = Cq::From(cq);
  if (!c || !wc) return EINVAL;
  std::lock_guard<std::mutex> lock(Engine::Get().mu());
  switch (c->Push(*wc, solicited != 0)) {
    case Cq::PushResult::kOk:
      return 0;
    case Cq::PushResult::kOverrun:
      // As if the HCA overran it: the default profile takes the QPs on it down too.
      if (c->context()->device()->behaviour().cq_overrun == Behaviour::CqOverrun::kCascade) {
        c->CascadeOverrunLocked();
      }
      return ENOSPC;
    case Cq::PushResult::kErrored:
      return ENOSPC;
  }
  return ENOSPC;
}
