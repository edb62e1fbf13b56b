#include "fault/device_fatal.h"

#include <cerrno>
#include <mutex>
#include <vector>

#include "context.h"
#include "device.h"
#include "event_queue.h"
#include "qp.h"
#include "transport/engine.h"

namespace simverbs {
namespace {

// The doorbell goes nowhere: the dead HCA never reads the queue.
int DeadPostSend(ibv_qp*, ibv_send_wr*, ibv_send_wr**) { return 0; }
int DeadPostRecv(ibv_qp*, ibv_recv_wr*, ibv_recv_wr**) { return 0; }
int DeadPostSrqRecv(ibv_srq*, ibv_recv_wr*, ibv_recv_wr**) { return 0; }
int DeadWrComplete(ibv_qp_ex* qp) {
  qp->wr_abort(qp);  // forget the WRs built since wr_start
  return 0;
}

// Commands: the firmware no longer answers.
ibv_qp* DeadCreateQpEx(ibv_context*, ibv_qp_init_attr_ex*) {
  errno = EIO;
  return nullptr;
}
ibv_cq_ex* DeadCreateCqEx(ibv_context*, ibv_cq_init_attr_ex*) {
  errno = EIO;
  return nullptr;
}
ibv_mw* DeadAllocMw(ibv_pd*, ibv_mw_type) {
  errno = EIO;
  return nullptr;
}
ibv_xrcd* DeadOpenXrcd(ibv_context*, ibv_xrcd_init_attr*) {
  errno = EIO;
  return nullptr;
}
ibv_srq* DeadCreateSrqEx(ibv_context*, ibv_srq_init_attr_ex*) {
  errno = EIO;
  return nullptr;
}
// A type 1 bind is a post: accepted, never executed.
int DeadBindMw(ibv_qp*, ibv_mw*, ibv_mw_bind*) { return 0; }

}  // namespace

bool EnterDeviceFatal(Context* ctx) {
  if (!ctx->MarkFatal()) return false;
  verbs_context* v = ctx->vctx();
  v->context.ops.post_send = DeadPostSend;
  v->context.ops.post_recv = DeadPostRecv;
  v->context.ops.post_srq_recv = DeadPostSrqRecv;
  v->context.ops.alloc_mw = DeadAllocMw;
  v->context.ops.bind_mw = DeadBindMw;
  v->open_xrcd = DeadOpenXrcd;
  v->create_srq_ex = DeadCreateSrqEx;
  v->create_qp_ex = DeadCreateQpEx;
  v->create_cq_ex = DeadCreateCqEx;
  {
    // Take the context's QPs off the wire: what arrives for them is lost, and
    // their retransmit timers stop.
    std::lock_guard<DataPathMutex> lock(Engine::Get().mu());
    Device* device = ctx->device();
    std::vector<Qp*> qps;
    device->ForEachQp([&](Qp* qp) {
      if (qp->context() == ctx) qps.push_back(qp);
    });
    for (Qp* qp : qps) {
      qp->LeaveWireLocked();
      if (qp->has_qp_ex()) qp->ibv_ex()->wr_complete = DeadWrComplete;
    }
  }
  QueuedEvent ev;
  ev.type = IBV_EVENT_DEVICE_FATAL;
  ctx->RaiseAsync(ev);
  return true;
}

bool DeviceFatal(const ibv_context* ctx) {
  const Context* c = Context::From(ctx);
  return c && c->fatal();
}

}  // namespace simverbs
