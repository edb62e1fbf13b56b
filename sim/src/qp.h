#pragma once

// A queue pair. This file owns every QP state transition; the transition
// table is in qp_state_table.cc. Lock order: Qp::mu_ before Cq::mu_ before
// EventQueue::mu_.
//
// Destroy follows libibverbs: it returns when every async event that was
// read for this QP has been acked (public mutex/cond/events_completed).

#include <infiniband/verbs.h>

#include <atomic>
#include <mutex>

#include "handle.h"
#include "result.h"

namespace simverbs {

class Context;
class Cq;
class Pd;
class Srq;

class Qp {
 public:
  static constexpr uint64_t kMagic = 0x53494d5150000001;  // "SIMQP"

  static Result<Qp*> Create(Pd* pd, const ibv_qp_init_attr_ex& attr);
  int Destroy();
  int Modify(const ibv_qp_attr& attr, int mask);
  int Query(ibv_qp_attr* attr, int mask, ibv_qp_init_attr* init) const;

  static Qp* From(const ibv_qp* qp) { return Handle<ibv_qp_ex, Qp>::From(qp); }
  ibv_qp* ibv() { return &handle_.pub.qp_base; }
  ibv_qp_ex* ibv_ex() { return &handle_.pub; }
  bool has_qp_ex() const { return has_qp_ex_; }
  Context* context() const { return ctx_; }

  // Raises an async event affiliated with this QP (counted for destroy).
  void RaiseAsync(ibv_event_type type);

  static ibv_qp* CreateExOp(ibv_context* ctx, ibv_qp_init_attr_ex* attr);

 private:
  Qp(Pd* pd, Cq* send_cq, Cq* recv_cq, Srq* srq, const ibv_qp_init_attr_ex& attr, uint32_t qp_num);
  ~Qp();
  // Checks attribute values against the device (ports, P_Key and GID tables, limits).
  int CheckValues(const ibv_qp_attr& attr, int mask) const;
  // Requires: mu_ held.
  void RaiseAsyncLocked(ibv_event_type type);

  Handle<ibv_qp_ex, Qp> handle_;
  Context* ctx_;
  Pd* pd_;
  Cq* send_cq_;
  Cq* recv_cq_;
  Srq* srq_;
  const bool has_qp_ex_;
  std::atomic<uint32_t> events_reported_{0};

  mutable std::mutex mu_;
  ibv_qp_attr attr_{};  // the attributes as ibv_query_qp reports them
  ibv_qp_init_attr init_{};
  bool destroying_ = false;
};

}  // namespace simverbs
