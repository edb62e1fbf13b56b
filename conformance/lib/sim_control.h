#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

// Declarations only: the functions are resolved at run time with dlsym, so the
// suite never links against the simulator.
#include "sim/include/simverbs/simverbs.h"
#include "sim/include/simverbs/simverbs_rdmacm.h"

namespace conformance {

// The simulator's control API, resolved with dlsym(RTLD_DEFAULT, ...). When
// simverbs_version does not resolve, the libibverbs the loader picked is not
// the simulator and available() is false.
class SimControl {
 public:
  // Resolves once per process.
  static const SimControl& Get();

  bool available() const { return version_ != nullptr; }
  int version() const;

  // Each returns 0 or an errno value, like the C API; EOPNOTSUPP when the
  // function is missing.
  int RaiseCqEvent(ibv_cq* cq, ibv_event_type type) const;
  int RaiseQpEvent(ibv_qp* qp, ibv_event_type type) const;
  int RaiseSrqEvent(ibv_srq* srq, ibv_event_type type) const;
  int RaisePortEvent(ibv_context* context, uint8_t port_num, ibv_event_type type) const;
  int RaiseDeviceFatal(ibv_context* context) const;
  int PushCompletion(ibv_cq* cq, const ibv_wc& wc, bool solicited) const;
  int FailSendWr(ibv_qp* qp, unsigned nth, ibv_wc_status status) const;
  int SetQpState(ibv_qp* qp, ibv_qp_state state) const;
  int FaultPointCount() const;                  // 0 when missing
  const char* FaultPointName(int index) const;  // nullptr when missing
  int FailAfter(const char* point, unsigned calls, int err) const;
  void ClearFaults() const;
  int HoldCompletions(ibv_cq* cq) const;
  int ReleaseCompletions(ibv_cq* cq) const;
  int AsyncWaiters(ibv_context* context) const;  // -1 when missing
  int DeliverAsyncTo(ibv_context* context, unsigned index) const;
  // The scheduler's seed; 0 when missing (check available()).
  unsigned long long Seed() const;
  void Reseed(unsigned long long seed) const;
  // rdma_cm faults (the simulator's librdmacm; simverbs_rdmacm.h). EOPNOTSUPP
  // (-EOPNOTSUPP for CmRaiseEvent) when missing.
  int CmRejectRequests(unsigned count, int reason) const;
  int CmDropMessages(simverbs_cm_message message, unsigned count) const;
  int CmRaiseEvent(ibv_context* context, uint8_t port_num, rdma_cm_event_type type) const;

 private:
  SimControl();

  decltype(&simverbs_version) version_ = nullptr;
  decltype(&simverbs_raise_cq_event) raise_cq_event_ = nullptr;
  decltype(&simverbs_raise_qp_event) raise_qp_event_ = nullptr;
  decltype(&simverbs_raise_srq_event) raise_srq_event_ = nullptr;
  decltype(&simverbs_raise_port_event) raise_port_event_ = nullptr;
  decltype(&simverbs_raise_device_fatal) raise_device_fatal_ = nullptr;
  decltype(&simverbs_push_completion) push_completion_ = nullptr;
  decltype(&simverbs_fail_send_wr) fail_send_wr_ = nullptr;
  decltype(&simverbs_set_qp_state) set_qp_state_ = nullptr;
  decltype(&simverbs_fault_point_count) fault_point_count_ = nullptr;
  decltype(&simverbs_fault_point_name) fault_point_name_ = nullptr;
  decltype(&simverbs_fail_after) fail_after_ = nullptr;
  decltype(&simverbs_clear_faults) clear_faults_ = nullptr;
  decltype(&simverbs_hold_completions) hold_completions_ = nullptr;
  decltype(&simverbs_release_completions) release_completions_ = nullptr;
  decltype(&simverbs_async_waiters) async_waiters_ = nullptr;
  decltype(&simverbs_deliver_async_to) deliver_async_to_ = nullptr;
  decltype(&simverbs_seed) seed_ = nullptr;
  decltype(&simverbs_reseed) reseed_ = nullptr;
  decltype(&simverbs_cm_reject_requests) cm_reject_requests_ = nullptr;
  decltype(&simverbs_cm_drop_messages) cm_drop_messages_ = nullptr;
  decltype(&simverbs_cm_raise_event) cm_raise_event_ = nullptr;
};

}  // namespace conformance
