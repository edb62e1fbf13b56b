#include "ops_table.h"

#include <cerrno>
#include <type_traits>

#include "abi/c_api.h"
#include "cq.h"
#include "mw.h"
#include "qp.h"
#include "query.h"
#include "srq.h"
#include "xrcd.h"

namespace simverbs {
namespace {

// Unsupported<decltype(slot)>::Call has the slot's exact signature and fails
// the way rdma-core's dummy ops do: EOPNOTSUPP returned, or NULL with errno.
template <typename Fn>
struct Unsupported;

template <typename R, typename... Args>
struct Unsupported<R (*)(Args...)> {
  static R Call(Args...) {
    if constexpr (std::is_void_v<R>) {
      return;
    } else if constexpr (std::is_pointer_v<R>) {
      errno = EOPNOTSUPP;
      return nullptr;
    } else {
      return static_cast<R>(EOPNOTSUPP);
    }
  }
};

#define SIMVERBS_STUB(slot) (slot) = Unsupported<decltype(slot)>::Call

}  // namespace

void InstallOps(verbs_context* v) {
  ibv_context_ops& o = v->context.ops;
  SIMVERBS_STUB(o._compat_query_device);
  SIMVERBS_STUB(o._compat_query_port);
  SIMVERBS_STUB(o._compat_alloc_pd);
  SIMVERBS_STUB(o._compat_dealloc_pd);
  SIMVERBS_STUB(o._compat_reg_mr);
  SIMVERBS_STUB(o._compat_rereg_mr);
  SIMVERBS_STUB(o._compat_dereg_mr);
  SIMVERBS_STUB(o.alloc_mw);
  SIMVERBS_STUB(o.bind_mw);
  SIMVERBS_STUB(o.dealloc_mw);
  SIMVERBS_STUB(o._compat_create_cq);
  SIMVERBS_STUB(o.poll_cq);
  SIMVERBS_STUB(o.req_notify_cq);
  SIMVERBS_STUB(o._compat_cq_event);
  SIMVERBS_STUB(o._compat_resize_cq);
  SIMVERBS_STUB(o._compat_destroy_cq);
  SIMVERBS_STUB(o._compat_create_srq);
  SIMVERBS_STUB(o._compat_modify_srq);
  SIMVERBS_STUB(o._compat_query_srq);
  SIMVERBS_STUB(o._compat_destroy_srq);
  SIMVERBS_STUB(o.post_srq_recv);
  SIMVERBS_STUB(o._compat_create_qp);
  SIMVERBS_STUB(o._compat_query_qp);
  SIMVERBS_STUB(o._compat_modify_qp);
  SIMVERBS_STUB(o._compat_destroy_qp);
  SIMVERBS_STUB(o.post_send);
  SIMVERBS_STUB(o.post_recv);
  SIMVERBS_STUB(o._compat_create_ah);
  SIMVERBS_STUB(o._compat_destroy_ah);
  SIMVERBS_STUB(o._compat_attach_mcast);
  SIMVERBS_STUB(o._compat_detach_mcast);
  SIMVERBS_STUB(o._compat_async_event);

  SIMVERBS_STUB(v->query_port);
  SIMVERBS_STUB(v->advise_mr);
  SIMVERBS_STUB(v->alloc_null_mr);
  SIMVERBS_STUB(v->read_counters);
  SIMVERBS_STUB(v->attach_counters_point_flow);
  SIMVERBS_STUB(v->create_counters);
  SIMVERBS_STUB(v->destroy_counters);
  SIMVERBS_STUB(v->reg_dm_mr);
  SIMVERBS_STUB(v->alloc_dm);
  SIMVERBS_STUB(v->free_dm);
  SIMVERBS_STUB(v->modify_flow_action_esp);
  SIMVERBS_STUB(v->destroy_flow_action);
  SIMVERBS_STUB(v->create_flow_action_esp);
  SIMVERBS_STUB(v->modify_qp_rate_limit);
  SIMVERBS_STUB(v->alloc_parent_domain);
  SIMVERBS_STUB(v->dealloc_td);
  SIMVERBS_STUB(v->alloc_td);
  SIMVERBS_STUB(v->modify_cq);
  SIMVERBS_STUB(v->post_srq_ops);
  SIMVERBS_STUB(v->destroy_rwq_ind_table);
  SIMVERBS_STUB(v->create_rwq_ind_table);
  SIMVERBS_STUB(v->destroy_wq);
  SIMVERBS_STUB(v->modify_wq);
  SIMVERBS_STUB(v->create_wq);
  SIMVERBS_STUB(v->query_rt_values);
  SIMVERBS_STUB(v->create_cq_ex);
  SIMVERBS_STUB(v->query_device_ex);
  SIMVERBS_STUB(v->ibv_destroy_flow);
  SIMVERBS_STUB(v->ABI_placeholder2);
  SIMVERBS_STUB(v->ibv_create_flow);
  SIMVERBS_STUB(v->ABI_placeholder1);
  SIMVERBS_STUB(v->open_qp);
  SIMVERBS_STUB(v->create_qp_ex);
  SIMVERBS_STUB(v->get_srq_num);
  SIMVERBS_STUB(v->create_srq_ex);
  SIMVERBS_STUB(v->open_xrcd);
  SIMVERBS_STUB(v->close_xrcd);

  // What the simulator implements, each behind a guard: programs call these
  // through verbs.h's inline functions, so they are C entry points too
  // (abi/c_api.h).
  o._compat_query_device = Guard<QueryDeviceOp, OnThrow::kErrnoSet>::Call;
  o._compat_query_port =
      reinterpret_cast<decltype(o._compat_query_port)>(Guard<QueryPortCompatOp, OnThrow::kErrnoSet>::Call);
  v->query_port = Guard<QueryPortOp, OnThrow::kErrnoSet>::Call;
  v->query_device_ex = Guard<QueryDeviceExOp, OnThrow::kErrnoSet>::Call;
  v->query_rt_values = Guard<QueryRtValuesOp, OnThrow::kErrno>::Call;
  o.poll_cq = Guard<Cq::PollOp, OnThrow::kNegativeErrno>::Call;
  o.req_notify_cq = Guard<Cq::ReqNotifyOp, OnThrow::kErrno>::Call;
  v->create_cq_ex = Guard<Cq::CreateExOp, OnThrow::kNullErrno>::Call;
  v->create_qp_ex = Guard<Qp::CreateExOp, OnThrow::kNullErrno>::Call;
  o.post_srq_recv = GuardPost<Srq::PostRecvOp>::Call;
  o.post_send = GuardPost<Qp::PostSendOp>::Call;
  o.alloc_mw = Guard<Mw::AllocOp, OnThrow::kNullErrno>::Call;
  o.dealloc_mw = Guard<Mw::DeallocOp, OnThrow::kErrnoSet>::Call;
  o.bind_mw = Guard<Mw::BindOp, OnThrow::kErrno>::Call;
  o.post_recv = GuardPost<Qp::PostRecvOp>::Call;
  v->open_xrcd = Guard<Xrcd::OpenOp, OnThrow::kNullErrno>::Call;
  v->close_xrcd = Guard<Xrcd::CloseOp, OnThrow::kErrnoSet>::Call;
  v->create_srq_ex = Guard<Srq::CreateExOp, OnThrow::kNullErrno>::Call;
  v->get_srq_num = Guard<Srq::GetSrqNumOp, OnThrow::kErrno>::Call;
}

}  // namespace simverbs
