#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

// Declarations only: the functions are resolved at run time with dlsym, so the
// suite never links against the simulator.
#include "sim/include/simverbs/simverbs.h"

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

 private:
  SimControl();

  decltype(&simverbs_version) version_ = nullptr;
  decltype(&simverbs_raise_cq_event) raise_cq_event_ = nullptr;
  decltype(&simverbs_raise_qp_event) raise_qp_event_ = nullptr;
  decltype(&simverbs_raise_srq_event) raise_srq_event_ = nullptr;
  decltype(&simverbs_raise_port_event) raise_port_event_ = nullptr;
  decltype(&simverbs_raise_device_fatal) raise_device_fatal_ = nullptr;
  decltype(&simverbs_push_completion) push_completion_ = nullptr;
};

}  // namespace conformance
