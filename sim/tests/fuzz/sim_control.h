#pragma once

// The simulator's control API, when the libibverbs the loader picked is the
// simulator (resolved with dlsym, so the walk also runs on real devices).

#include <infiniband/verbs.h>

#include "simverbs/simverbs.h"

namespace verbs_fuzz {

class SimControl {
 public:
  SimControl();
  bool available() const { return version_ != nullptr; }

  // Restarts the simulator's scheduler (every choice among legal behaviours).
  void Reseed(unsigned long long seed) const;
  // Each returns 0 or an errno value.
  int RaiseQpEvent(ibv_qp* qp, ibv_event_type type) const;
  int RaiseSrqEvent(ibv_srq* srq, ibv_event_type type) const;
  int RaiseCqEvent(ibv_cq* cq, ibv_event_type type) const;
  int SetQpState(ibv_qp* qp, ibv_qp_state state) const;

 private:
  decltype(&simverbs_version) version_ = nullptr;
  decltype(&simverbs_reseed) reseed_ = nullptr;
  decltype(&simverbs_raise_qp_event) raise_qp_event_ = nullptr;
  decltype(&simverbs_raise_srq_event) raise_srq_event_ = nullptr;
  decltype(&simverbs_raise_cq_event) raise_cq_event_ = nullptr;
  decltype(&simverbs_set_qp_state) set_qp_state_ = nullptr;
};

}  // namespace verbs_fuzz
