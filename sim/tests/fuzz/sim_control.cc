#include "sim_control.h"

#include <dlfcn.h>

#include <cerrno>

namespace verbs_fuzz {
namespace {

template <typename Fn>
void Resolve(Fn* fn, const char* name) {
  *fn = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, name));
}

}  // namespace

SimControl::SimControl() {
  Resolve(&version_, "simverbs_version");
  if (!version_) return;
  Resolve(&reseed_, "simverbs_reseed");
  Resolve(&raise_qp_event_, "simverbs_raise_qp_event");
  Resolve(&raise_srq_event_, "simverbs_raise_srq_event");
  Resolve(&raise_cq_event_, "simverbs_raise_cq_event");
  Resolve(&set_qp_state_, "simverbs_set_qp_state");
}

void SimControl::Reseed(unsigned long long seed) const {
  if (reseed_) reseed_(seed);
}

int SimControl::RaiseQpEvent(ibv_qp* qp, ibv_event_type type) const {
  return raise_qp_event_ ? raise_qp_event_(qp, type) : EOPNOTSUPP;
}

int SimControl::RaiseSrqEvent(ibv_srq* srq, ibv_event_type type) const {
  return raise_srq_event_ ? raise_srq_event_(srq, type) : EOPNOTSUPP;
}

int SimControl::RaiseCqEvent(ibv_cq* cq, ibv_event_type type) const {
  return raise_cq_event_ ? raise_cq_event_(cq, type) : EOPNOTSUPP;
}

int SimControl::SetQpState(ibv_qp* qp, ibv_qp_state state) const {
  return set_qp_state_ ? set_qp_state_(qp, state) : EOPNOTSUPP;
}

}  // namespace verbs_fuzz
