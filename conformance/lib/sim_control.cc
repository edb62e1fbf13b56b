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
  Resolve("simverbs_fail_send_wr", &fail_send_wr_);
  Resolve("simverbs_set_qp_state", &set_qp_state_);
  Resolve("simverbs_fault_point_count", &fault_point_count_);
  Resolve("simverbs_fault_point_name", &fault_point_name_);
  Resolve("simverbs_fail_after", &fail_after_);
  Resolve("simverbs_clear_faults", &clear_faults_);
  Resolve("simverbs_hold_completions", &hold_completions_);
  Resolve("simverbs_release_completions", &release_completions_);
  Resolve("simverbs_async_waiters", &async_waiters_);
  Resolve("simverbs_deliver_async_to", &deliver_async_to_);
  Resolve("simverbs_seed", &seed_);
  Resolve("simverbs_reseed", &reseed_);
  Resolve("simverbs_cm_reject_requests", &cm_reject_requests_);
  Resolve("simverbs_cm_drop_messages", &cm_drop_messages_);
  Resolve("simverbs_cm_raise_event", &cm_raise_event_);
}

int SimControl::CmRejectRequests(unsigned count, int reason) const {
  return cm_reject_requests_ ? cm_reject_requests_(count, reason) : EOPNOTSUPP;
}

int SimControl::CmDropMessages(simverbs_cm_message message, unsigned count) const {
  return cm_drop_messages_ ? cm_drop_messages_(message, count) : EOPNOTSUPP;
}

int SimControl::CmRaiseEvent(ibv_context* context, uint8_t port_num, rdma_cm_event_type type) const {
  return cm_raise_event_ ? cm_raise_event_(context, port_num, type) : -EOPNOTSUPP;
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

int SimControl::FailSendWr(ibv_qp* qp, unsigned nth, ibv_wc_status status) const {
  return fail_send_wr_ ? fail_send_wr_(qp, nth, status) : EOPNOTSUPP;
}

int SimControl::SetQpState(ibv_qp* qp, ibv_qp_state state) const {
  return set_qp_state_ ? set_qp_state_(qp, state) : EOPNOTSUPP;
}

int SimControl::FaultPointCount() const { return fault_point_count_ ? fault_point_count_() : 0; }

const char* SimControl::FaultPointName(int index) const {
  return fault_point_name_ ? fault_point_name_(index) : nullptr;
}

int SimControl::FailAfter(const char* point, unsigned calls, int err) const {
  return fail_after_ ? fail_after_(point, calls, err) : EOPNOTSUPP;
}

void SimControl::ClearFaults() const {
  if (clear_faults_) clear_faults_();
}

int SimControl::HoldCompletions(ibv_cq* cq) const { return hold_completions_ ? hold_completions_(cq) : EOPNOTSUPP; }

int SimControl::ReleaseCompletions(ibv_cq* cq) const {
  return release_completions_ ? release_completions_(cq) : EOPNOTSUPP;
}

int SimControl::AsyncWaiters(ibv_context* context) const { return async_waiters_ ? async_waiters_(context) : -1; }

int SimControl::DeliverAsyncTo(ibv_context* context, unsigned index) const {
  return deliver_async_to_ ? deliver_async_to_(context, index) : EOPNOTSUPP;
}

unsigned long long SimControl::Seed() const { return seed_ ? seed_() : 0; }

void SimControl::Reseed(unsigned long long seed) const {
  if (reseed_) reseed_(seed);
}

}  // namespace conformance
