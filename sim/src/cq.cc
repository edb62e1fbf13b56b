#include "cq.h"

#include <atomic>
#include <cstring>

#include "comp_channel.h"
#include "context.h"
#include "device.h"
#include "fabric/fabric.h"
#include "qp.h"
#include "transport/engine.h"

namespace simverbs {
namespace {
std::atomic<uint32_t> next_cq_handle{1};

constexpr uint64_t kSupportedCqFlags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED | IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;
}  // namespace

Cq::Cq(Context* ctx, const Params& p)
    : ctx_(ctx), channel_(p.channel), ignore_overrun_(p.ignore_overrun), ring_(static_cast<size_t>(p.cqe)) {
  handle_.Bind(this);
  ibv_cq_ex& c = handle_.pub;
  c.context = ctx->ibv();
  c.channel = p.channel ? p.channel->ibv() : nullptr;
  c.cq_context = p.cq_context;
  c.handle = next_cq_handle.fetch_add(1);
  c.cqe = p.cqe;
  c.comp_events_completed = 0;
  c.async_events_completed = 0;
  pthread_mutex_init(&c.mutex, nullptr);
  pthread_cond_init(&c.cond, nullptr);
  InstallExOps();
  if (p.channel) {
    // As verbs_init_cq: the channel's refcnt counts the CQs that use it.
    pthread_mutex_lock(&ctx->ibv()->mutex);
    ++p.channel->ibv()->refcnt;
    pthread_mutex_unlock(&ctx->ibv()->mutex);
  }
}

Cq::~Cq() {
  pthread_mutex_destroy(&handle_.pub.mutex);
  pthread_cond_destroy(&handle_.pub.cond);
  handle_.Unbind();
}

Result<Cq*> Cq::Create(Context* ctx, const Params& p) {
  const DeviceProfile& prof = ctx->device()->profile();
  if (p.cqe < 1 || p.cqe > prof.attr_ex.orig_attr.max_cqe) return Result<Cq*>::Error(EINVAL);
  if (p.comp_vector >= static_cast<uint32_t>(ctx->ibv()->num_comp_vectors)) return Result<Cq*>::Error(EINVAL);
  if (p.channel && p.channel->context() != ctx) return Result<Cq*>::Error(EINVAL);
  if (!ctx->device()->Reserve(Device::Kind::kCq)) return Result<Cq*>::Error(ENOMEM);
  return new Cq(ctx, p);
}

int Cq::Destroy() {
  {
    std::lock_guard<std::mutex> engine_lock(Engine::Get().mu());
    if (!qps_.empty() || srqs_.load() != 0) return EBUSY;
    std::lock_guard<std::mutex> lock(mu_);
    destroying_ = true;
  }
  // Events never read are dropped; they do not hold up the destroy.
  if (channel_) channel_->events().Purge(ibv());
  ctx_->async_events().Purge(ibv());

  // libibverbs' ibv_cmd_destroy_cq: wait until every event handed out has
  // been acked. Compared with != as there, so over-acking also blocks.
  ibv_cq_ex& c = handle_.pub;
  pthread_mutex_lock(&c.mutex);
  while (c.comp_events_completed != comp_reported_.load() || c.async_events_completed != async_reported_.load()) {
    pthread_cond_wait(&c.cond, &c.mutex);
  }
  pthread_mutex_unlock(&c.mutex);

  if (channel_) {
    pthread_mutex_lock(&ctx_->ibv()->mutex);
    --channel_->ibv()->refcnt;
    pthread_mutex_unlock(&ctx_->ibv()->mutex);
  }
  ctx_->device()->Release(Device::Kind::kCq);
  delete this;
  return 0;
}

int Cq::Resize(int cqe) {
  std::lock_guard<std::mutex> lock(mu_);
  if (error_) return EINVAL;
  const int max_cqe = ctx_->device()->profile().attr_ex.orig_attr.max_cqe;
  if (cqe < 1 || cqe > max_cqe || static_cast<size_t>(cqe) < count_) return EINVAL;
  std::vector<ibv_wc> ring(static_cast<size_t>(cqe));
  for (size_t i = 0; i < count_; ++i) ring[i] = ring_[(head_ + i) % ring_.size()];
  ring_ = std::move(ring);
  head_ = 0;
  handle_.pub.cqe = cqe;
  return 0;
}

Cq::PushResult Cq::Push(const ibv_wc& wc, bool solicited) {
  std::lock_guard<std::mutex> lock(mu_);
  if (destroying_ || error_) return PushResult::kErrored;
  if (count_ == ring_.size()) {
    if (ignore_overrun_) {
      // IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN: the new CQE overwrites the oldest.
      ring_[head_] = wc;
      head_ = (head_ + 1) % ring_.size();
      NotifyLocked(wc, solicited);
      return PushResult::kOk;
    }
    // rxe 6.1 drops the CQE and raises CQ_ERR for each one it drops; the CQ
    // itself keeps working. Everyone else puts the CQ in error once.
    if (ctx_->device()->behaviour().cq_overrun != Behaviour::CqOverrun::kRxe61) error_ = true;
    RaiseAsyncLocked(IBV_EVENT_CQ_ERR);
    return PushResult::kOverrun;
  }
  ring_[(head_ + count_) % ring_.size()] = wc;
  ++count_;
  NotifyLocked(wc, solicited);
  return PushResult::kOk;
}

void Cq::CascadeOverrunLocked() {
  // Copy: entering ERR flushes into CQs, which must not change the set under us.
  const std::set<Qp*> qps(qps_.begin(), qps_.end());
  for (Qp* qp : qps) qp->EnterErrorLocked(IBV_EVENT_QP_FATAL);
}

// ibv_req_notify_cq(3): "A CQE is solicited if it is a receive completion for
// a message with the Solicited Event header bit set, or if the status is not
// successful. All other successful receive completions, or any successful
// send completion is unsolicited."
void Cq::NotifyLocked(const ibv_wc& wc, bool solicited_bit) {
  const bool solicited = wc.status != IBV_WC_SUCCESS || ((wc.opcode & IBV_WC_RECV) && solicited_bit);
  if (arm_ == Arm::kNone || (arm_ == Arm::kSolicited && !solicited)) return;
  arm_ = Arm::kNone;
  if (!channel_) return;
  QueuedEvent ev;
  ev.is_completion = true;
  ev.element = ibv();
  ev.reported = &comp_reported_;
  channel_->events().Push(ev);
}

void Cq::SetError() {
  std::lock_guard<std::mutex> lock(mu_);
  if (destroying_ || error_) return;
  error_ = true;
  RaiseAsyncLocked(IBV_EVENT_CQ_ERR);
}

void Cq::RaiseAsync(ibv_event_type type) {
  std::lock_guard<std::mutex> lock(mu_);
  if (destroying_) return;
  RaiseAsyncLocked(type);
}

void Cq::RaiseAsyncLocked(ibv_event_type type) {
  QueuedEvent ev;
  ev.type = type;
  ev.element = ibv();
  ev.reported = &async_reported_;
  ctx_->RaiseAsync(ev);
}

int Cq::PollOp(ibv_cq* ibcq, int num_entries, ibv_wc* wc) {
  Cq* cq = From(ibcq);
  if (!cq || num_entries < 0 || (num_entries > 0 && !wc)) return -1;
  // Packets from other processes are handled by whoever polls (no system call).
  Fabric::Get().PollInbound();
  std::lock_guard<std::mutex> lock(cq->mu_);
  if (cq->error_) return -1;
  int n = 0;
  while (n < num_entries && cq->count_ > 0) {
    wc[n++] = cq->ring_[cq->head_];
    cq->head_ = (cq->head_ + 1) % cq->ring_.size();
    --cq->count_;
  }
  if (n > 0) Fabric::Get().PollFoundWork();
  return n;
}

int Cq::ReqNotifyOp(ibv_cq* ibcq, int solicited_only) {
  Cq* cq = From(ibcq);
  if (!cq) return EINVAL;
  std::lock_guard<std::mutex> lock(cq->mu_);
  if (cq->error_) return EINVAL;
  // Arming for solicited while armed for any completion keeps the wider arm.
  if (!solicited_only) {
    cq->arm_ = Arm::kNext;
  } else if (cq->arm_ != Arm::kNext) {
    cq->arm_ = Arm::kSolicited;
  }
  return 0;
}

ibv_cq_ex* Cq::CreateExOp(ibv_context* ibctx, ibv_cq_init_attr_ex* attr) {
  Context* ctx = Context::From(ibctx);
  if (!ctx || !attr) {
    errno = EINVAL;
    return nullptr;
  }
  // As libibverbs' __lib_ibv_create_cq_ex: unknown wc_flags are EOPNOTSUPP.
  if (attr->wc_flags & ~static_cast<uint64_t>(IBV_CREATE_CQ_SUP_WC_FLAGS)) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  if (attr->comp_mask & ~static_cast<uint32_t>(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD)) {
    errno = EINVAL;
    return nullptr;
  }
  Params p;
  if (attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) {
    if (attr->flags & ~kSupportedCqFlags) {
      errno = EOPNOTSUPP;
      return nullptr;
    }
    p.ignore_overrun = attr->flags & IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;
  }
  // Completion timestamps need a clock the profile declares.
  const uint64_t ts_flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;
  if ((attr->wc_flags & ts_flags) && ctx->device()->profile().attr_ex.completion_timestamp_mask == 0) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  if (attr->cqe > static_cast<uint32_t>(INT32_MAX)) {
    errno = EINVAL;
    return nullptr;
  }
  p.cqe = static_cast<int>(attr->cqe);
  p.cq_context = attr->cq_context;
  p.channel = attr->channel ? CompChannel::From(attr->channel) : nullptr;
  if (attr->channel && !p.channel) {
    errno = EINVAL;
    return nullptr;
  }
  p.comp_vector = attr->comp_vector;
  p.wc_flags = attr->wc_flags;
  p.extended = true;
  Result<Cq*> r = Create(ctx, p);
  if (!r.ok()) {
    errno = r.err();
    return nullptr;
  }
  return r.value()->ibv_ex();
}

// ---- extended polling ------------------------------------------------------
// ibv_start_poll takes the CQ lock and keeps it until ibv_end_poll, as
// providers do; on ENOENT from start_poll the lock is released at once (the
// caller must not call end_poll then).

void Cq::LoadCurrentLocked() {
  const ibv_wc& wc = ring_[head_];
  handle_.pub.wr_id = wc.wr_id;
  handle_.pub.status = wc.status;
}

int Cq::StartPoll(ibv_cq_ex* ibcq, ibv_poll_cq_attr* attr) {
  Cq* cq = From(ibcq);
  if (!cq || (attr && attr->comp_mask)) return EINVAL;
  cq->mu_.lock();
  if (cq->error_) {
    cq->mu_.unlock();
    return EINVAL;
  }
  if (cq->count_ == 0) {
    cq->mu_.unlock();
    return ENOENT;
  }
  cq->LoadCurrentLocked();
  return 0;
}

int Cq::NextPoll(ibv_cq_ex* ibcq) {
  Cq* cq = From(ibcq);
  if (cq->count_ > 0) {
    cq->head_ = (cq->head_ + 1) % cq->ring_.size();
    --cq->count_;
  }
  if (cq->count_ == 0) return ENOENT;
  cq->LoadCurrentLocked();
  return 0;
}

void Cq::EndPoll(ibv_cq_ex* ibcq) {
  Cq* cq = From(ibcq);
  // The entry read last is consumed here unless next_poll already found the queue empty.
  if (cq->count_ > 0) {
    cq->head_ = (cq->head_ + 1) % cq->ring_.size();
    --cq->count_;
  }
  cq->mu_.unlock();
}

const ibv_wc& Cq::Current(ibv_cq_ex* ibcq) {
  Cq* cq = From(ibcq);
  return cq->ring_[cq->head_];
}

void Cq::InstallExOps() {
  ibv_cq_ex& c = handle_.pub;
  c.start_poll = StartPoll;
  c.next_poll = NextPoll;
  c.end_poll = EndPoll;
  c.read_opcode = [](ibv_cq_ex* cq) { return Current(cq).opcode; };
  c.read_vendor_err = [](ibv_cq_ex* cq) { return Current(cq).vendor_err; };
  c.read_byte_len = [](ibv_cq_ex* cq) { return Current(cq).byte_len; };
  c.read_imm_data = [](ibv_cq_ex* cq) { return Current(cq).imm_data; };
  c.read_qp_num = [](ibv_cq_ex* cq) { return Current(cq).qp_num; };
  c.read_src_qp = [](ibv_cq_ex* cq) { return Current(cq).src_qp; };
  c.read_wc_flags = [](ibv_cq_ex* cq) { return Current(cq).wc_flags; };
  c.read_slid = [](ibv_cq_ex* cq) { return static_cast<uint32_t>(Current(cq).slid); };
  c.read_sl = [](ibv_cq_ex* cq) { return Current(cq).sl; };
  c.read_dlid_path_bits = [](ibv_cq_ex* cq) { return Current(cq).dlid_path_bits; };
  c.read_completion_ts = [](ibv_cq_ex*) { return uint64_t{0}; };
  c.read_cvlan = [](ibv_cq_ex*) { return uint16_t{0}; };
  c.read_flow_tag = [](ibv_cq_ex*) { return uint32_t{0}; };
  c.read_tm_info = [](ibv_cq_ex*, ibv_wc_tm_info* info) { std::memset(info, 0, sizeof *info); };
  c.read_completion_wallclock_ns = [](ibv_cq_ex*) { return uint64_t{0}; };
}

}  // namespace simverbs
