// extern "C" control API (sim/include/simverbs/simverbs.h).

#include "simverbs/simverbs.h"

#include "abi/c_api.h"
#include "context.h"
#include "cq.h"
#include "device.h"
#include "comp_channel.h"
#include "event_element.h"
#include "fault/fault_points.h"
#include "sched/scheduler.h"
#include "fault/inject.h"
#include "qp.h"
#include "srq.h"
#include "transport/engine.h"

using namespace simverbs;

SIMVERBS_EXPORT int simverbs_version(void) { return SIMVERBS_API_VERSION; }

SIMVERBS_EXPORT int simverbs_raise_cq_event(ibv_cq* cq, ibv_event_type type) {
  return Guarded<OnThrow::kErrno>([&]() -> int {
    Cq* c = Cq::From(cq);
    if (!c || ElementOf(type) != EventElement::kCq) return EINVAL;
    if (c->context()->fatal()) return EIO;  // nothing comes after DEVICE_FATAL
    std::lock_guard<DataPathMutex> lock(Engine::Get().mu());
    c->SetErrorLocked();
    return 0;
  });
}

SIMVERBS_EXPORT int simverbs_raise_qp_event(ibv_qp* qp, ibv_event_type type) {
  return Guarded<OnThrow::kErrno>([&]() -> int {
    Qp* q = Qp::From(qp);
    if (!q || ElementOf(type) != EventElement::kQp) return EINVAL;
    if (q->context()->fatal()) return EIO;
    q->RaiseAsync(type);
    return 0;
  });
}

SIMVERBS_EXPORT int simverbs_raise_srq_event(ibv_srq* srq, ibv_event_type type) {
  return Guarded<OnThrow::kErrno>([&]() -> int {
    Srq* s = Srq::From(srq);
    if (!s || ElementOf(type) != EventElement::kSrq) return EINVAL;
    if (s->context()->fatal()) return EIO;
    s->RaiseAsync(type);
    return 0;
  });
}

SIMVERBS_EXPORT int simverbs_raise_port_event(ibv_context* context, uint8_t port_num, ibv_event_type type) {
  return Guarded<OnThrow::kErrno>([&]() -> int {
    Context* c = Context::From(context);
    if (!c || !c->device()->ValidPort(port_num) || ElementOf(type) != EventElement::kPort) return EINVAL;
    if (c->fatal()) return EIO;
    c->device()->RaisePortEvent(port_num, type);
    return 0;
  });
}

SIMVERBS_EXPORT int simverbs_raise_device_fatal(ibv_context* context) {
  return Guarded<OnThrow::kErrno>([&]() -> int {
    Context* c = Context::From(context);
    if (!c) return EINVAL;
    FaultSite site;
    site.device = c->device();
    RaiseFault(IBV_EVENT_DEVICE_FATAL, site);  // every context of the device becomes fatal
    return 0;
  });
}

SIMVERBS_EXPORT int simverbs_push_completion(ibv_cq* cq, const ibv_wc* wc, int solicited) {
  return Guarded<OnThrow::kErrno>([&]() -> int {
    Cq* c = Cq::From(cq);
    if (!c || !wc) return EINVAL;
    if (c->context()->fatal()) return EIO;  // the dead HCA writes no new CQE
    std::lock_guard<DataPathMutex> lock(Engine::Get().mu());
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
  });
}

SIMVERBS_EXPORT int simverbs_fail_send_wr(ibv_qp* qp, unsigned int nth, ibv_wc_status status) {
  return Guarded<OnThrow::kErrno>([&]() -> int {
    Qp* q = Qp::From(qp);
    if (!q) return EINVAL;
    return q->FailNthSend(nth, status);
  });
}

SIMVERBS_EXPORT int simverbs_set_qp_state(ibv_qp* qp, ibv_qp_state state) {
  return Guarded<OnThrow::kErrno>([&]() -> int {
    Qp* q = Qp::From(qp);
    if (!q) return EINVAL;
    if (q->context()->fatal()) return EIO;
    return q->InjectState(state);
  });
}

SIMVERBS_EXPORT int simverbs_fault_point_count(void) { return static_cast<int>(FaultPoints::kCount); }

SIMVERBS_EXPORT const char* simverbs_fault_point_name(int index) {
  return Guarded<OnThrow::kNullErrno>([&]() -> const char* {
    return index < 0 ? nullptr : FaultPoints::Name(static_cast<size_t>(index));
  });
}

SIMVERBS_EXPORT int simverbs_fail_after(const char* point, unsigned int calls, int err) {
  return Guarded<OnThrow::kErrno>([&]() -> int {
    return FaultPoints::Get().Arm(point, calls, err);
  });
}

SIMVERBS_EXPORT void simverbs_clear_faults(void) {
  Guarded<OnThrow::kNothing>([&]() -> void {
    FaultPoints::Get().DisarmAll();
  });
}

SIMVERBS_EXPORT int simverbs_hold_completions(ibv_cq* cq) {
  return Guarded<OnThrow::kErrno>([&]() -> int {
    Cq* c = Cq::From(cq);
    if (!c) return EINVAL;
    c->Hold();
    return 0;
  });
}

SIMVERBS_EXPORT int simverbs_release_completions(ibv_cq* cq) {
  return Guarded<OnThrow::kErrno>([&]() -> int {
    Cq* c = Cq::From(cq);
    if (!c) return EINVAL;
    std::lock_guard<DataPathMutex> lock(Engine::Get().mu());
    return c->ReleaseLocked();
  });
}

SIMVERBS_EXPORT int simverbs_async_waiters(ibv_context* context) {
  return Guarded<OnThrow::kMinusOneErrno>([&]() -> int {
    Context* c = Context::From(context);
    return c ? static_cast<int>(c->async_events().waiters()) : -1;
  });
}

SIMVERBS_EXPORT int simverbs_comp_waiters(ibv_comp_channel* channel) {
  return Guarded<OnThrow::kMinusOneErrno>([&]() -> int {
    CompChannel* ch = CompChannel::From(channel);
    return ch ? static_cast<int>(ch->events().waiters()) : -1;
  });
}

SIMVERBS_EXPORT int simverbs_deliver_async_to(ibv_context* context, unsigned int index) {
  return Guarded<OnThrow::kErrno>([&]() -> int {
    Context* c = Context::From(context);
    if (!c) return EINVAL;
    return c->async_events().DeliverNextTo(index);
  });
}

SIMVERBS_EXPORT int simverbs_deliver_comp_to(ibv_comp_channel* channel, unsigned int index) {
  return Guarded<OnThrow::kErrno>([&]() -> int {
    CompChannel* ch = CompChannel::From(channel);
    if (!ch) return EINVAL;
    return ch->events().DeliverNextTo(index);
  });
}

SIMVERBS_EXPORT unsigned long long simverbs_seed(void) { return Scheduler::Get().seed(); }

SIMVERBS_EXPORT void simverbs_reseed(unsigned long long seed) {
  Guarded<OnThrow::kNothing>([&]() -> void {
    Scheduler::Get().Reseed(seed);
  });
}
