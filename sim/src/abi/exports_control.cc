// extern "C" control API (sim/include/simverbs/simverbs.h).

#include "simverbs/simverbs.h"

#include "abi/c_api.h"
#include "context.h"
#include "cq.h"
#include "device.h"
#include "event_element.h"
#include "fault/inject.h"
#include "qp.h"
#include "srq.h"
#include "transport/engine.h"

using namespace simverbs;

SIMVERBS_EXPORT int simverbs_version(void) { return SIMVERBS_API_VERSION; }

SIMVERBS_EXPORT int simverbs_raise_cq_event(ibv_cq* cq, ibv_event_type type) {
  Cq* c = Cq::From(cq);
  if (!c || ElementOf(type) != EventElement::kCq) return EINVAL;
  c->SetError();
  return 0;
}

SIMVERBS_EXPORT int simverbs_raise_qp_event(ibv_qp* qp, ibv_event_type type) {
  Qp* q = Qp::From(qp);
  if (!q || ElementOf(type) != EventElement::kQp) return EINVAL;
  q->RaiseAsync(type);
  return 0;
}

SIMVERBS_EXPORT int simverbs_raise_srq_event(ibv_srq* srq, ibv_event_type type) {
  Srq* s = Srq::From(srq);
  if (!s || ElementOf(type) != EventElement::kSrq) return EINVAL;
  s->RaiseAsync(type);
  return 0;
}

SIMVERBS_EXPORT int simverbs_raise_port_event(ibv_context* context, uint8_t port_num, ibv_event_type type) {
  Context* c = Context::From(context);
  if (!c || !c->device()->ValidPort(port_num) || ElementOf(type) != EventElement::kPort) return EINVAL;
  c->device()->RaisePortEvent(port_num, type);
  return 0;
}

SIMVERBS_EXPORT int simverbs_raise_device_fatal(ibv_context* context) {
  Context* c = Context::From(context);
  if (!c) return EINVAL;
  FaultSite site;
  site.device = c->device();
  RaiseFault(IBV_EVENT_DEVICE_FATAL, site);  // every context of the device becomes fatal
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
