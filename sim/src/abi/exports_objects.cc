// extern "C" verbs of PDs, MRs, completion channels and CQs, plus the object
// verbs the simulator does not implement yet (they fail with EOPNOTSUPP).

#include <infiniband/verbs.h>

#include "abi/c_api.h"
#include "ah.h"
#include "comp_channel.h"
#include "context.h"
#include "device.h"
#include "cq.h"
#include "fault/device_fatal.h"
#include "mr.h"
#include "pd.h"
#include "qp.h"
#include "srq.h"

#include <cstring>

#undef ibv_reg_mr
#undef ibv_reg_mr_iova

using namespace simverbs;

namespace {

template <typename T>
T* Unsupported() {
  errno = EOPNOTSUPP;
  return nullptr;
}

}  // namespace

// ---- PD

SIMVERBS_EXPORT_1_1(ibv_alloc_pd) ibv_pd* sv_ibv_alloc_pd(ibv_context* context) {
  return Guarded<OnThrow::kNullErrno>([&]() -> ibv_pd* {
    Context* c = Context::From(context);
    if (!c) return NullWithErrno(EINVAL);
    if (DeviceFatal(context)) return NullWithErrno(EIO);
    Pd* pd = PointerOrErrno(Pd::Alloc(c));
    return pd ? pd->ibv() : nullptr;
  });
}

SIMVERBS_EXPORT_1_1(ibv_dealloc_pd) int sv_ibv_dealloc_pd(ibv_pd* pd) {
  return Guarded<OnThrow::kErrnoSet>([&]() -> int {
    Pd* p = Pd::From(pd);
    return p ? p->Dealloc() : EINVAL;
  });
}

SIMVERBS_EXPORT ibv_pd* ibv_import_pd(ibv_context*, uint32_t) { return Unsupported<ibv_pd>(); }
SIMVERBS_EXPORT void ibv_unimport_pd(ibv_pd*) {}

// ---- MR

namespace {
ibv_mr* RegisterMr(ibv_pd* pd, void* addr, size_t length, uint64_t iova, unsigned access) {
  return Guarded<OnThrow::kNullErrno>([&]() -> ibv_mr* {
    Pd* p = Pd::From(pd);
    if (!p) return NullWithErrno(EINVAL);
    if (DeviceFatal(pd->context)) return NullWithErrno(EIO);
    Mr* mr = PointerOrErrno(Mr::Register(p, addr, length, iova, access));
    return mr ? mr->ibv() : nullptr;
  });
}
}  // namespace

SIMVERBS_EXPORT_1_1(ibv_reg_mr) ibv_mr* sv_ibv_reg_mr(ibv_pd* pd, void* addr, size_t length, int access) {
  return RegisterMr(pd, addr, length, reinterpret_cast<uintptr_t>(addr), static_cast<unsigned>(access));
}

SIMVERBS_EXPORT ibv_mr* ibv_reg_mr_iova(ibv_pd* pd, void* addr, size_t length, uint64_t iova, int access) {
  return RegisterMr(pd, addr, length, iova, static_cast<unsigned>(access));
}

SIMVERBS_EXPORT ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t length, uint64_t iova, unsigned int access) {
  return RegisterMr(pd, addr, length, iova, access);
}

SIMVERBS_EXPORT ibv_mr* ibv_reg_dmabuf_mr(ibv_pd*, uint64_t, size_t, uint64_t, int, int) {
  return Unsupported<ibv_mr>();
}

SIMVERBS_EXPORT int ibv_rereg_mr(ibv_mr* mr, int flags, ibv_pd* pd, void* addr, size_t length, int access) {
  return Guarded<OnThrow::kReregCmd>([&]() -> int {
    Mr* m = Mr::From(mr);
    // (A missing PD with CHANGE_PD is Reregister's to refuse, after what a
    // provider without rereg_mr answers first.)
    Pd* p = (flags & IBV_REREG_MR_CHANGE_PD) ? Pd::From(pd) : nullptr;
    const int result = !m ? IBV_REREG_MR_ERR_INPUT : m->Reregister(flags, p, addr, length, static_cast<unsigned>(access));
    // As libibverbs' own input checks: errno EINVAL with IBV_REREG_MR_ERR_INPUT.
    if (result == IBV_REREG_MR_ERR_INPUT) errno = EINVAL;
    return result;
  });
}

SIMVERBS_EXPORT_1_1(ibv_dereg_mr) int sv_ibv_dereg_mr(ibv_mr* mr) {
  return Guarded<OnThrow::kErrnoSet>([&]() -> int {
    Mr* m = Mr::From(mr);
    return m ? m->Deregister() : EINVAL;
  });
}

SIMVERBS_EXPORT ibv_mr* ibv_import_mr(ibv_pd*, uint32_t) { return Unsupported<ibv_mr>(); }
SIMVERBS_EXPORT void ibv_unimport_mr(ibv_mr*) {}
SIMVERBS_EXPORT ibv_dm* ibv_import_dm(ibv_context*, uint32_t) { return Unsupported<ibv_dm>(); }
SIMVERBS_EXPORT void ibv_unimport_dm(ibv_dm*) {}

// ---- completion channel

SIMVERBS_EXPORT ibv_comp_channel* ibv_create_comp_channel(ibv_context* context) {
  return Guarded<OnThrow::kNullErrno>([&]() -> ibv_comp_channel* {
    Context* c = Context::From(context);
    if (!c) return NullWithErrno(EINVAL);
    CompChannel* ch = PointerOrErrno(CompChannel::Create(c));
    return ch ? ch->ibv() : nullptr;
  });
}

SIMVERBS_EXPORT int ibv_destroy_comp_channel(ibv_comp_channel* channel) {
  return Guarded<OnThrow::kErrno>([&]() -> int {
    CompChannel* ch = CompChannel::From(channel);
    return ch ? ch->Destroy() : EINVAL;
  });
}

SIMVERBS_EXPORT_1_1(ibv_get_cq_event) int sv_ibv_get_cq_event(ibv_comp_channel* channel, ibv_cq** cq, void** cq_context) {
  return GuardedCancellable<OnThrow::kMinusOneErrno>([&]() -> int {
    CompChannel* ch = CompChannel::From(channel);
    if (!ch || !cq || !cq_context) return MinusOneOrZero(EINVAL);
    QueuedEvent ev;
    if (int err = ch->events().Pop(&ev)) return MinusOneOrZero(err);
    *cq = static_cast<ibv_cq*>(ev.element);
    *cq_context = (*cq)->cq_context;
    return 0;
  });
}

SIMVERBS_EXPORT_1_1(ibv_ack_cq_events) void sv_ibv_ack_cq_events(ibv_cq* cq, unsigned int nevents) {
  // As libibverbs: no check against what was received (over-acking is the
  // caller's bug and makes destroy wait forever).
  pthread_mutex_lock(&cq->mutex);
  cq->comp_events_completed += nevents;
  pthread_cond_signal(&cq->cond);
  pthread_mutex_unlock(&cq->mutex);
}

// ---- CQ

SIMVERBS_EXPORT_1_1(ibv_create_cq) ibv_cq* sv_ibv_create_cq(ibv_context* context, int cqe, void* cq_context, ibv_comp_channel* channel,
                                      int comp_vector) {
  return Guarded<OnThrow::kNullErrno>([&]() -> ibv_cq* {
    Context* c = Context::From(context);
    CompChannel* ch = channel ? CompChannel::From(channel) : nullptr;
    if (!c || (channel && !ch) || comp_vector < 0) return NullWithErrno(EINVAL);
    if (DeviceFatal(context)) return NullWithErrno(EIO);
    Cq::Params p;
    p.cqe = cqe;
    p.cq_context = cq_context;
    p.channel = ch;
    p.comp_vector = static_cast<uint32_t>(comp_vector);
    Cq* cq = PointerOrErrno(Cq::Create(c, p));
    return cq ? cq->ibv() : nullptr;
  });
}

SIMVERBS_EXPORT_1_1(ibv_resize_cq) int sv_ibv_resize_cq(ibv_cq* cq, int cqe) {
  return Guarded<OnThrow::kErrnoSet>([&]() -> int {
    Cq* c = Cq::From(cq);
    if (c && DeviceFatal(cq->context)) return EIO;
    return c ? c->Resize(cqe) : EINVAL;
  });
}

SIMVERBS_EXPORT_1_1(ibv_destroy_cq) int sv_ibv_destroy_cq(ibv_cq* cq) {
  return Guarded<OnThrow::kErrnoSet>([&]() -> int {
    Cq* c = Cq::From(cq);
    return c ? c->Destroy() : EINVAL;
  });
}

// ---- QP

SIMVERBS_EXPORT_1_1(ibv_create_qp) ibv_qp* sv_ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* qp_init_attr) {
  return Guarded<OnThrow::kNullErrno>([&]() -> ibv_qp* {
    Pd* p = Pd::From(pd);
    if (!p || !qp_init_attr) return NullWithErrno(EINVAL);
    if (DeviceFatal(pd->context)) return NullWithErrno(EIO);
    ibv_qp_init_attr_ex ex{};
    std::memcpy(&ex, qp_init_attr, sizeof *qp_init_attr);
    ex.comp_mask = IBV_QP_INIT_ATTR_PD;
    ex.pd = pd;
    Qp* qp = PointerOrErrno(Qp::Create(p, ex));
    if (!qp) return nullptr;
    // ibv_create_qp(3): the actual capabilities are returned in qp_init_attr->cap.
    qp_init_attr->cap = qp->CreatedCaps(qp_init_attr->cap);
    return qp->ibv();
  });
}

SIMVERBS_EXPORT_1_1(ibv_query_qp) int sv_ibv_query_qp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask,
                                                     ibv_qp_init_attr* init_attr) {
  return Guarded<OnThrow::kErrnoSet>([&]() -> int {
    Qp* q = Qp::From(qp);
    if (q && DeviceFatal(qp->context)) return EIO;
    const int rc = q ? q->Query(attr, attr_mask, init_attr) : EINVAL;
    // As libibverbs: qp->state is what the program last set or queried.
    if (rc == 0 && (attr_mask & IBV_QP_STATE)) qp->state = attr->qp_state;
    return rc;
  });
}

SIMVERBS_EXPORT_1_1(ibv_modify_qp) int sv_ibv_modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask) {
  return Guarded<OnThrow::kErrnoSet>([&]() -> int {
    Qp* q = Qp::From(qp);
    if (q && DeviceFatal(qp->context)) return EIO;
    const int rc = q && attr ? q->Modify(*attr, attr_mask) : EINVAL;
    if (rc == 0 && (attr_mask & IBV_QP_STATE)) qp->state = attr->qp_state;
    return rc;
  });
}

SIMVERBS_EXPORT_1_1(ibv_destroy_qp) int sv_ibv_destroy_qp(ibv_qp* qp) {
  return Guarded<OnThrow::kErrnoSet>([&]() -> int {
    Qp* q = Qp::From(qp);
    return q ? q->Destroy() : EINVAL;
  });
}

SIMVERBS_EXPORT ibv_qp_ex* ibv_qp_to_qp_ex(ibv_qp* qp) {
  Qp* q = Qp::From(qp);
  return q && q->has_qp_ex() ? q->ibv_ex() : nullptr;
}

SIMVERBS_EXPORT int ibv_query_qp_data_in_order(ibv_qp*, ibv_wr_opcode, uint32_t) { return 0; }
SIMVERBS_EXPORT int ibv_query_ece(ibv_qp*, ibv_ece*) { return EOPNOTSUPP; }
SIMVERBS_EXPORT int ibv_set_ece(ibv_qp*, ibv_ece*) { return EOPNOTSUPP; }

// ---- SRQ

SIMVERBS_EXPORT_1_1(ibv_create_srq) ibv_srq* sv_ibv_create_srq(ibv_pd* pd, ibv_srq_init_attr* srq_init_attr) {
  return Guarded<OnThrow::kNullErrno>([&]() -> ibv_srq* {
    Pd* p = Pd::From(pd);
    if (!p || !srq_init_attr) return NullWithErrno(EINVAL);
    if (DeviceFatal(pd->context)) return NullWithErrno(EIO);
    Srq* srq = PointerOrErrno(Srq::Create(p, *srq_init_attr));
    if (!srq) return nullptr;
    // ibv_create_srq(3): the actual sizes are returned in srq_init_attr->attr
    // (rxe 6.1 leaves max_wr as asked although its queue is larger).
    ibv_srq_attr actual;
    srq->Query(&actual);
    if (!p->context()->device()->behaviour().srq_size_pow2_minus_one) srq_init_attr->attr.max_wr = actual.max_wr;
    srq_init_attr->attr.max_sge = actual.max_sge;
    return srq->ibv();
  });
}

SIMVERBS_EXPORT_1_1(ibv_modify_srq) int sv_ibv_modify_srq(ibv_srq* srq, ibv_srq_attr* srq_attr, int srq_attr_mask) {
  return Guarded<OnThrow::kErrnoSet>([&]() -> int {
    Srq* s = Srq::From(srq);
    if (s && DeviceFatal(srq->context)) return EIO;
    return s && srq_attr ? s->Modify(*srq_attr, srq_attr_mask) : EINVAL;
  });
}

SIMVERBS_EXPORT_1_1(ibv_query_srq) int sv_ibv_query_srq(ibv_srq* srq, ibv_srq_attr* srq_attr) {
  return Guarded<OnThrow::kErrnoSet>([&]() -> int {
    Srq* s = Srq::From(srq);
    if (s && DeviceFatal(srq->context)) return EIO;
    return s ? s->Query(srq_attr) : EINVAL;
  });
}

SIMVERBS_EXPORT_1_1(ibv_destroy_srq) int sv_ibv_destroy_srq(ibv_srq* srq) {
  return Guarded<OnThrow::kErrnoSet>([&]() -> int {
    Srq* s = Srq::From(srq);
    return s ? s->Destroy() : EINVAL;
  });
}

// ---- AH

SIMVERBS_EXPORT_1_1(ibv_create_ah) ibv_ah* sv_ibv_create_ah(ibv_pd* pd, ibv_ah_attr* attr) {
  return Guarded<OnThrow::kNullErrno>([&]() -> ibv_ah* {
    Pd* p = Pd::From(pd);
    if (!p || !attr) return NullWithErrno(EINVAL);
    if (DeviceFatal(pd->context)) return NullWithErrno(EIO);
    Ah* ah = PointerOrErrno(Ah::Create(p, *attr));
    return ah ? ah->ibv() : nullptr;
  });
}

SIMVERBS_EXPORT int ibv_init_ah_from_wc(ibv_context* context, uint8_t port_num, ibv_wc* wc, ibv_grh* grh,
                                        ibv_ah_attr* ah_attr) {
  // ibv_init_ah_from_wc(3): "0 on success, and -1 on error" (errno set).
  return Guarded<OnThrow::kMinusOneErrno>([&]() -> int {
    Context* c = Context::From(context);
    if (!c || !wc) return MinusOneOrZero(EINVAL);
    return MinusOneOrZero(Ah::InitFromWc(c, port_num, *wc, grh, ah_attr));
  });
}

SIMVERBS_EXPORT ibv_ah* ibv_create_ah_from_wc(ibv_pd* pd, ibv_wc* wc, ibv_grh* grh, uint8_t port_num) {
  return Guarded<OnThrow::kNullErrno>([&]() -> ibv_ah* {
    Pd* p = Pd::From(pd);
    if (!p || !wc) return NullWithErrno(EINVAL);
    if (DeviceFatal(pd->context)) return NullWithErrno(EIO);
    ibv_ah_attr attr;
    if (int err = Ah::InitFromWc(p->context(), port_num, *wc, grh, &attr)) return NullWithErrno(err);
    Ah* ah = PointerOrErrno(Ah::Create(p, attr));
    return ah ? ah->ibv() : nullptr;
  });
}

SIMVERBS_EXPORT_1_1(ibv_destroy_ah) int sv_ibv_destroy_ah(ibv_ah* ah) {
  return Guarded<OnThrow::kErrnoSet>([&]() -> int {
    Ah* a = Ah::From(ah);
    return a ? a->Destroy() : EINVAL;
  });
}

// ---- multicast

SIMVERBS_EXPORT_1_1(ibv_attach_mcast) int sv_ibv_attach_mcast(ibv_qp* qp, const ibv_gid* gid, uint16_t lid) {
  return Guarded<OnThrow::kErrnoSet>([&]() -> int {
    Qp* q = Qp::From(qp);
    if (q && DeviceFatal(qp->context)) return EIO;
    return q && gid ? q->AttachMulticast(*gid, lid) : EINVAL;
  });
}

SIMVERBS_EXPORT_1_1(ibv_detach_mcast) int sv_ibv_detach_mcast(ibv_qp* qp, const ibv_gid* gid, uint16_t lid) {
  return Guarded<OnThrow::kErrnoSet>([&]() -> int {
    Qp* q = Qp::From(qp);
    if (q && DeviceFatal(qp->context)) return EIO;
    return q && gid ? q->DetachMulticast(*gid, lid) : EINVAL;
  });
}
// rdma-core's returns 0 or a negative errno: no simulated port has a neighbour table to resolve from.
SIMVERBS_EXPORT int ibv_resolve_eth_l2_from_gid(ibv_context*, ibv_ah_attr*, uint8_t*, uint16_t*) { return -EOPNOTSUPP; }
