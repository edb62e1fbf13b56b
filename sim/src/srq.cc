#include "srq.h"

#include <algorithm>
#include <atomic>
#include <new>
#include <unordered_map>

#include "context.h"
#include "cq.h"
#include "device.h"
#include "fabric/fabric.h"
#include "pd.h"
#include "fault/fault_points.h"
#include "sched/scheduler.h"
#include "qp.h"
#include "queue_size.h"
#include "transport/engine.h"
#include "xrc_remote.h"
#include "xrcd.h"

namespace simverbs {
namespace {
std::atomic<uint32_t> next_srq_handle{1};

// XRC SRQs by (device, number), for the target QPs. Engine lock.
std::unordered_map<uint64_t, Srq*>& XrcDirectory() {
  static auto* dir = new std::unordered_map<uint64_t, Srq*>();
  return *dir;
}
uint64_t XrcKey(const Device* device, uint32_t srq_num) {
  return (static_cast<uint64_t>(device->index()) << 32) | srq_num;
}
}  // namespace

uint32_t Srq::ActualSize(const Device* device, uint32_t entries) {
  return device->behaviour().srq_size_pow2_minus_one ? Pow2Minus1AtLeast(entries) : entries;
}

Srq::Srq(Pd* pd, const ibv_srq_init_attr& a)
    : ctx_(pd->context()),
      pd_(pd),
      events_(ctx_, "SRQ", ibv(), &handle_.pub.mutex, &handle_.pub.cond, &handle_.pub.events_completed),
      max_wr_(ActualSize(pd->context()->device(), a.attr.max_wr ? a.attr.max_wr : 1)),
      max_sge_(a.attr.max_sge ? a.attr.max_sge : 1) {
  handle_.Bind(this);
  ibv_srq& s = handle_.pub;
  s.context = ctx_->ibv();
  s.srq_context = a.srq_context;
  s.pd = pd->ibv();
  s.handle = next_srq_handle.fetch_add(1);
  pd->AddUser();
}

Srq::~Srq() { handle_.Unbind(); }

Result<Srq*> Srq::Create(Pd* pd, const ibv_srq_init_attr& a) {
  if (int err = FaultPoints::Get().Hit(FaultPoint::kCreateSrq)) return Result<Srq*>::Error(err);
  return CreateChecked(pd, a);
}

Result<Srq*> Srq::CreateChecked(Pd* pd, const ibv_srq_init_attr& a) {
  const ibv_device_attr& d = pd->context()->device()->profile().attr_ex.orig_attr;
  // srq_limit is ignored at creation (ibv_create_srq(3)).
  if (a.attr.max_wr > static_cast<uint32_t>(d.max_srq_wr) || a.attr.max_sge > static_cast<uint32_t>(d.max_srq_sge)) {
    return Result<Srq*>::Error(EINVAL);
  }
  if (a.attr.max_wr == 0 && pd->context()->device()->behaviour().srq_zero_wr_einval) return Result<Srq*>::Error(EINVAL);
  if (!pd->context()->ReserveObject(Device::Kind::kSrq)) return Result<Srq*>::Error(ENOMEM);
  return new Srq(pd, a);
}

Result<Srq*> Srq::CreateEx(Context* ctx, const ibv_srq_init_attr_ex& a) {
  using R = Result<Srq*>;
  constexpr uint32_t kKnown = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD |
                              IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_TM;
  if (a.comp_mask & ~kKnown) return R::Error(EOPNOTSUPP);  // as ibv_cmd_create_srq_ex
  const ibv_srq_type type = (a.comp_mask & IBV_SRQ_INIT_ATTR_TYPE) ? a.srq_type : IBV_SRQT_BASIC;
  if (type == IBV_SRQT_TM) return R::Error(EOPNOTSUPP);  // tag matching is not simulated
  if (type != IBV_SRQT_BASIC && type != IBV_SRQT_XRC) return R::Error(EINVAL);
  Pd* pd = (a.comp_mask & IBV_SRQ_INIT_ATTR_PD) ? Pd::From(a.pd) : nullptr;
  if (!pd || pd->context() != ctx) return R::Error(EINVAL);
  ibv_srq_init_attr base{};
  base.srq_context = a.srq_context;
  base.attr = a.attr;
  if (type == IBV_SRQT_BASIC) return Create(pd, base);
  if (int err = FaultPoints::Get().Hit(FaultPoint::kCreateSrq)) return R::Error(err);

  // ibv_create_srq_ex(3): an XRC SRQ needs its XRC domain and its CQ.
  Xrcd* xrcd = (a.comp_mask & IBV_SRQ_INIT_ATTR_XRCD) ? Xrcd::From(a.xrcd) : nullptr;
  Cq* cq = (a.comp_mask & IBV_SRQ_INIT_ATTR_CQ) ? Cq::From(a.cq) : nullptr;
  if (!xrcd || xrcd->context() != ctx || !cq || cq->context() != ctx) return R::Error(EINVAL);
  R r = CreateChecked(pd, base);
  if (!r.ok()) return r;
  Srq* srq = r.value();
  const uint32_t srq_num = ctx->device()->AllocQpn();
  if (srq_num == 0) {
    srq->Destroy();
    return R::Error(ENOMEM);
  }
  xrcd->AddUser();
  cq->AddSrq();
  std::lock_guard<DataPathMutex> lock(Engine::Get().mu());
  srq->xrcd_ = xrcd;
  srq->cq_ = cq;
  srq->srq_num_ = srq_num;
  XrcDirectory()[XrcKey(ctx->device(), srq_num)] = srq;
  return srq;
}

void Srq::LeaveXrcDirectoryLocked() {
  // No target QP delivers into it from now on; its number is free again.
  XrcDirectory().erase(XrcKey(ctx_->device(), srq_num_));
  for (Qp* qp : xrcd_->domain()->targets) qp->ForgetXrcSrqLocked(this);
  XrcForgetSrqLocked(this);
  ctx_->device()->ReleaseQpn(srq_num_);
}

void Srq::OrphanXrcLocked(const Context* ctx) {
  std::vector<Srq*> orphans;
  for (const auto& [key, srq] : XrcDirectory()) {
    if (srq->ctx_ == ctx) orphans.push_back(srq);
  }
  for (Srq* srq : orphans) {
    {
      std::lock_guard<std::mutex> lock(srq->mu_);
      srq->destroying_ = true;  // no more events: the context is gone
    }
    srq->LeaveXrcDirectoryLocked();
  }
}

Srq* Srq::FindXrcLocked(const Device* device, uint32_t srq_num) {
  auto it = XrcDirectory().find(XrcKey(device, srq_num));
  return it == XrcDirectory().end() ? nullptr : it->second;
}

ibv_srq* Srq::CreateExOp(ibv_context* ibctx, ibv_srq_init_attr_ex* attr) {
  Context* ctx = Context::From(ibctx);
  if (!ctx || !attr) {
    errno = EINVAL;
    return nullptr;
  }
  Result<Srq*> r = CreateEx(ctx, *attr);
  if (!r.ok()) {
    errno = r.err();
    return nullptr;
  }
  // As ibv_create_srq: the actual sizes are returned in attr->attr.
  r.value()->Query(&attr->attr);
  return r.value()->ibv();
}

// ibv_get_srq_num(3) defines the number of XRC SRQs; a basic SRQ has none here.
int Srq::GetSrqNumOp(ibv_srq* srq, uint32_t* srq_num) {
  Srq* s = From(srq);
  if (!s || !srq_num || !s->is_xrc()) return EINVAL;
  *srq_num = s->srq_num_;
  return 0;
}

int Srq::Modify(const ibv_srq_attr& a, int mask) {
  const ibv_device_attr& d = ctx_->device()->profile().attr_ex.orig_attr;
  std::lock_guard<std::mutex> lock(mu_);
  // Other bits of the mask are ignored, as the kernel and its drivers ignore
  // them (ib_uverbs_modify_srq, rxe_srq_chk_attr, mlx5_ib_modify_srq).
  uint32_t max_wr = max_wr_;
  if (mask & IBV_SRQ_MAX_WR) {
    if (!(d.device_cap_flags & IBV_DEVICE_SRQ_RESIZE)) return EINVAL;
    if (a.max_wr == 0 || a.max_wr > static_cast<uint32_t>(d.max_srq_wr) || a.max_wr < wqes_.size()) return EINVAL;
    max_wr = ActualSize(ctx_->device(), a.max_wr);
  }
  // An armed limit must stay within the queue, whichever of the two changes
  // (rxe: rxe_srq_chk_attr refuses a max_wr below the armed limit).
  const uint32_t limit = (mask & IBV_SRQ_LIMIT) ? a.srq_limit : limit_;
  if (limit > max_wr) return EINVAL;
  max_wr_ = max_wr;
  // ibv_modify_srq(3): setting srq_limit arms the low-watermark event.
  if (mask & IBV_SRQ_LIMIT) limit_ = a.srq_limit;
  return 0;
}

int Srq::Query(ibv_srq_attr* attr) const {
  if (!attr) return EINVAL;
  std::lock_guard<std::mutex> lock(mu_);
  attr->max_wr = max_wr_;
  attr->max_sge = max_sge_;
  attr->srq_limit = limit_;
  return 0;
}

int Srq::PostRecv(ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  std::lock_guard<std::mutex> lock(mu_);
  for (; wr; wr = wr->next) {
    int err = 0;
    if (wr->num_sge < 0 || static_cast<uint32_t>(wr->num_sge) > max_sge_) {
      err = EINVAL;
    } else if (wqes_.size() + held_.load(std::memory_order_acquire) >= max_wr_) {
      err = ENOMEM;
    }
    if (err) {
      if (bad_wr) *bad_wr = wr;
      return err;
    }
    try {
      // Room for every receive the QPs hold (at most one each) to come back
      // (PutBackLocked) without memory.
      wqes_.reserve(wqes_.size() + 1 + static_cast<size_t>(std::max(users_.load(), 0)));
      wqes_.push_back_filled([&](Wqe& slot) {
        slot.wr_id = wr->wr_id;
        slot.sges.assign(wr->sg_list, wr->sg_list + wr->num_sge);
      });
    } catch (const std::bad_alloc&) {
      // No memory to hold the WR: refused as by a full queue.
      if (bad_wr) *bad_wr = wr;
      return ENOMEM;
    }
  }
  return 0;
}

int Srq::PostRecvOp(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  Srq* s = From(srq);
  if (!s) {
    if (bad_wr) *bad_wr = wr;
    return EINVAL;
  }
  Fabric::Get().PostedWork();
  return s->PostRecv(wr, bad_wr);
}

bool Srq::TakeLocked(Wqe* out) {
  std::lock_guard<std::mutex> lock(mu_);
  if (wqes_.empty()) return false;
  // IBTA leaves the order in which an SRQ's receives are used open; a profile
  // may ask for any order, chosen by the seeded scheduler.
  size_t index = 0;
  if (ctx_->device()->behaviour().srq_any_order) index = Scheduler::Get().Choose(wqes_.size());
  *out = std::move(wqes_[index]);
  // Those in front of it move up one, in order (moves: no memory).
  for (size_t i = index; i > 0; --i) wqes_[i] = std::move(wqes_[i - 1]);
  wqes_.pop_front();
  // ibv_modify_srq(3): the event fires once the number of WQEs drops below
  // srq_limit; the SRQ is then disarmed (query reports 0).
  if (limit_ != 0 && wqes_.size() < limit_) {
    limit_ = 0;
    RaiseAsyncLocked(IBV_EVENT_SRQ_LIMIT_REACHED);
  }
  return true;
}

void Srq::PutBackLocked(Wqe wqe) {
  std::lock_guard<std::mutex> lock(mu_);
  wqes_.push_front_slot() = std::move(wqe);  // (room kept by PostRecv: no memory)
}

void Srq::RaiseAsync(ibv_event_type type) {
  std::lock_guard<std::mutex> lock(mu_);
  RaiseAsyncLocked(type);
}

void Srq::RaiseAsyncLocked(ibv_event_type type) {
  if (destroying_) return;
  events_.RaiseAsync(type);
}

int Srq::Destroy() {
  if (users_.load() != 0) return EBUSY;
  {
    std::lock_guard<std::mutex> lock(mu_);
    destroying_ = true;
  }
  if (xrcd_) {
    std::lock_guard<DataPathMutex> lock(Engine::Get().mu());
    LeaveXrcDirectoryLocked();
  }
  // Free before the wait for acks, as the kernel destroys the SRQ before
  // libibverbs waits (ibv_cmd_destroy_srq): its PD, XRC domain and CQ may go meanwhile.
  pd_->RemoveUser();
  if (xrcd_) {
    xrcd_->RemoveUser();
    cq_->RemoveSrq();
  }
  ctx_->ReleaseObject(Device::Kind::kSrq);
  const uint32_t handle = handle_.pub.handle;
  events_.Purge(ctx_->async_events());
  events_.WaitForAcks(handle);
  delete this;
  return 0;
}

}  // namespace simverbs
