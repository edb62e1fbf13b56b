#include "conformance/lib/sim_control.h"

#include <dlfcn.h>

#include <cerrno>

namespace conformance {
namespace {

template <typename Fn>
void Resolve(const char* symbol, Fn* fn) {
  *fn = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, symbol));
}

}  // namespace

const SimControl& SimControl::Get() {
  static const SimControl control;
  return control;
}

SimControl::SimControl() {
  Resolve("simverbs_version", &version_);
  Resolve("simverbs_raise_cq_event", &raise_cq_event_);
  Resolve("simverbs_raise_qp_event", &raise_qp_event_);
  Resolve("simverbs_raise_srq_event", &raise_srq_event_);
  Resolve("simverbs_raise_port_event", &raise_port_event_);
  Resolve("simverbs_raise_device_fatal", &raise_device_fatal_);
  Resolve("simverbs_push_completion", &push_completion_);
}

int SimControl::version() const { return version_ ? version_() : 0; }

int SimControl::RaiseCqEvent(ibv_cq* cq, ibv_event_type type) const {
  return raise_cq_event_ ? raise_cq_event_(cq, type) : EOPNOTSUPP;
}

int SimControl::RaiseQpEvent(ibv_qp* qp, ibv_event_type type) const {
  return raise_qp_event_ ? raise_qp_event_(qp, type) : EOPNOTSUPP;
}

int SimControl::RaiseSrqEvent(ibv_srq* srq, ibv_event_type type) const {
  return raise_srq_event_ ? raise_srq_event_(srq, type) : EOPNOTSUPP;
}

int SimControl::RaisePortEvent(ibv_context* context, uint8_t port_num, ibv_event_type type) const {
  return raise_port_event_ ? raise_port_event_(context, port_num, type) : EOPNOTSUPP;
}

int SimControl::RaiseDeviceFatal(ibv_context* context) const {
  return raise_device_fatal_ ? raise_device_fatal_(context) : EOPNOTSUPP;
}

int SimControl::PushCompletion(ibv_cq* cq, const ibv_wc& wc, bool solicited) const {
  return push_completion_ ? push_completion_(cq, &wc, solicited ? 1 : 0) : EOPNOTSUPP;
}

}  // namespace conformance
