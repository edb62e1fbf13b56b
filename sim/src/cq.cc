#include "cq.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <new>

#include "abi/c_api.h"
#include "comp_channel.h"
#include "context.h"
#include "device.h"
#include "fabric/fabric.h"
#include "fault/fault_plan.h"
#include "qp.h"
#include "queue_size.h"
#include "sched/scheduler.h"
#include "trace/trace.h"
#include "transport/engine.h"
#include "fault/fault_points.h"

namespace simverbs {
namespace {
std::atomic<uint32_t> next_cq_handle{1};

constexpr uint64_t kSupportedCqFlags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED | IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;
// The completion fields every provider can fill (rxe's RXE_SUP_WC_EX_FLAGS).
constexpr uint64_t kIbWcFlags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM |
                                IBV_WC_EX_WITH_SRC_QP | IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL |
                                IBV_WC_EX_WITH_DLID_PATH_BITS;
// What a kernel that takes no CQ flags answers IGNORE_OVERRUN with (rxe 6.1, measured).
constexpr int kIgnoreOverrunRefusal = EOPNOTSUPP;
}  // namespace

int Cq::ActualSize(const Device* device, int cqe) {
  if (!device->behaviour().cq_size_pow2_minus_one || cqe < 0) return cqe;
  return static_cast<int>(std::min<uint32_t>(Pow2Minus1AtLeast(static_cast<uint32_t>(cqe)), INT32_MAX));
}

Cq::Cq(Context* ctx, const Params& p)
    : ctx_(ctx),
      channel_(p.channel),
      ignore_overrun_(p.ignore_overrun),
      events_(ctx, "CQ", ibv(), &handle_.pub.mutex, &handle_.pub.cond, &handle_.pub.async_events_completed,
              &handle_.pub.comp_events_completed),
      ring_(static_cast<size_t>(p.cqe)),
      releases_(static_cast<size_t>(p.cqe)) {
  handle_.Bind(this);
  if (p.wc_flags & (IBV_WC_EX_WITH_COMPLETION_TIMESTAMP | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK)) {
    stamps_.resize(ring_.size());
    timespec real = {};
    clock_gettime(CLOCK_REALTIME, &real);
    wallclock_offset_ns_ = static_cast<int64_t>(real.tv_sec * 1000000000ll + real.tv_nsec) -
                           static_cast<int64_t>(MonotonicNs());
  }
  ibv_cq_ex& c = handle_.pub;
  c.context = ctx->ibv();
  c.channel = p.channel ? p.channel->ibv() : nullptr;
  c.cq_context = p.cq_context;
  c.handle = next_cq_handle.fetch_add(1);
  c.cqe = p.cqe;
  InstallExOps();
  if (p.channel) {
    // As verbs_init_cq: the channel's refcnt counts the CQs that use it.
    pthread_mutex_lock(&ctx->ibv()->mutex);
    ++p.channel->ibv()->refcnt;
    pthread_mutex_unlock(&ctx->ibv()->mutex);
  }
}

Cq::~Cq() { handle_.Unbind(); }

Result<Cq*> Cq::Create(Context* ctx, const Params& p) {
  if (int err = FaultPoints::Get().Hit(FaultPoint::kCreateCq)) return Result<Cq*>::Error(err);
  const DeviceProfile& prof = ctx->device()->profile();
  if (p.cqe < 1 || p.cqe > prof.attr_ex.orig_attr.max_cqe) return Result<Cq*>::Error(EINVAL);
  if (p.comp_vector >= static_cast<uint32_t>(ctx->ibv()->num_comp_vectors)) return Result<Cq*>::Error(EINVAL);
  if (p.channel && p.channel->context() != ctx) return Result<Cq*>::Error(EINVAL);
  if (!ctx->ReserveObject(Device::Kind::kCq)) return Result<Cq*>::Error(ENOMEM);
  Params sized = p;
  sized.cqe = ActualSize(ctx->device(), p.cqe);
  try {
    return new Cq(ctx, sized);
  } catch (const std::bad_alloc&) {
    // No memory for the ring (a large cqe, a limited address space): the
    // verb fails with ENOMEM and the CQ is not counted.
    ctx->ReleaseObject(Device::Kind::kCq);
    return Result<Cq*>::Error(ENOMEM);
  }
}

int Cq::Destroy() {
  {
    std::lock_guard<DataPathMutex> engine_lock(Engine::Get().mu());
    if (!qps_.empty() || srqs_.load() != 0) return EBUSY;
    std::lock_guard<DataPathMutex> lock(mu_);
    destroying_ = true;
  }
  // Events never read are dropped; they do not hold up the destroy.
  if (channel_) events_.Purge(channel_->events());
  events_.Purge(ctx_->async_events());
  // libibverbs' ibv_cmd_destroy_cq: wait until every event handed out has been acked.
  events_.WaitForAcks(handle_.pub.handle);

  if (channel_) {
    pthread_mutex_lock(&ctx_->ibv()->mutex);
    --channel_->ibv()->refcnt;
    pthread_mutex_unlock(&ctx_->ibv()->mutex);
  }
  ctx_->ReleaseObject(Device::Kind::kCq);
  delete this;
  return 0;
}

int Cq::Resize(int cqe) {
  std::lock_guard<std::mutex> poll_lock(poll_mu_);
  std::lock_guard<DataPathMutex> lock(mu_);
  if (error_) return EINVAL;
  const int max_cqe = ctx_->device()->profile().attr_ex.orig_attr.max_cqe;
  if (cqe < 1 || cqe > max_cqe || static_cast<size_t>(cqe) < count_) return EINVAL;
  cqe = ActualSize(ctx_->device(), cqe);
  std::vector<ibv_wc> ring(static_cast<size_t>(cqe));
  std::vector<uint64_t> stamps(stamps_.empty() ? 0 : static_cast<size_t>(cqe));
  std::vector<SlotRelease> releases(static_cast<size_t>(cqe));
  for (size_t i = 0; i < count_; ++i) {
    ring[i] = ring_[RingIndex(head_, i)];
    if (!stamps.empty()) stamps[i] = stamps_[RingIndex(head_, i)];
    releases[i] = releases_[RingIndex(head_, i)];
  }
  ring_ = std::move(ring);
  stamps_ = std::move(stamps);
  releases_ = std::move(releases);
  head_ = 0;
  handle_.pub.cqe = cqe;
  return 0;
}

Cq::PushResult Cq::Push(const ibv_wc& wc, bool solicited, SlotRelease release) {
  std::lock_guard<DataPathMutex> lock(mu_);
  if (destroying_ || error_) {
    Free(release);  // (lost: nobody can poll it)
    return PushResult::kErrored;
  }
  if (held_) {
    held_wcs_.push_back(Held{wc, solicited, release});
    return PushResult::kOk;
  }
  if (wc.status != IBV_WC_SUCCESS && ctx_->device()->behaviour().error_wc_garbage) {
    ibv_wc scrambled = wc;
    ScrambleInvalidFields(&scrambled);
    return PushLocked(scrambled, solicited, release);
  }
  return PushLocked(wc, solicited, release);
}

void Cq::Free(const SlotRelease& release) {
  if (release.qp) release.qp->FreeSlots(release);
}

void Cq::ReleaseSlotsOf(size_t i) {
  const SlotRelease r = releases_[i];
  releases_[i] = {};
  Free(r);
}

uint32_t Cq::ForgetSlotReleases(const Qp* qp) {
  std::lock_guard<DataPathMutex> lock(mu_);
  uint32_t receives = 0;
  for (SlotRelease& r : releases_) {
    if (r.qp != qp) continue;
    receives += r.recv ? 1 : 0;
    r = {};
  }
  for (Held& held : held_wcs_) {
    if (held.release.qp != qp) continue;
    receives += held.release.recv ? 1 : 0;
    held.release = {};
  }
  return receives;
}

void Cq::DiscardQpCompletions(uint32_t qp_num) {
  std::lock_guard<DataPathMutex> lock(mu_);
  size_t kept = 0;
  for (size_t i = 0; i < count_; ++i) {
    const ibv_wc& wc = ring_[RingIndex(head_, i)];
    // has_current_ changes only under mu_: the entry being read is ring_[head_].
    if (wc.qp_num == qp_num && !(i == 0 && has_current_)) continue;
    if (!stamps_.empty()) stamps_[RingIndex(head_, kept)] = stamps_[RingIndex(head_, i)];
    releases_[RingIndex(head_, kept)] = releases_[RingIndex(head_, i)];
    ring_[RingIndex(head_, kept++)] = wc;
  }
  for (size_t i = kept; i < count_; ++i) releases_[RingIndex(head_, i)] = {};  // (its QP starts over)
  count_ = kept;
  std::erase_if(held_wcs_, [qp_num](const Held& held) { return held.wc.qp_num == qp_num; });
}

// ibv_poll_cq(3): "If the completion status is other than IBV_WC_SUCCESS, only
// the following attributes are valid: wr_id, status, qp_num, and vendor_err."
void Cq::ScrambleInvalidFields(ibv_wc* wc) {
  Scheduler& s = Scheduler::Get();
  wc->opcode = static_cast<ibv_wc_opcode>(s.Next() & 0xff);
  wc->byte_len = static_cast<uint32_t>(s.Next());
  wc->imm_data = static_cast<uint32_t>(s.Next());
  wc->src_qp = static_cast<uint32_t>(s.Next()) & 0xffffff;
  wc->wc_flags = static_cast<unsigned>(s.Next()) & 0x7f;
  wc->pkey_index = static_cast<uint16_t>(s.Next());
  wc->slid = static_cast<uint16_t>(s.Next());
  wc->sl = static_cast<uint8_t>(s.Next() & 0xf);
  wc->dlid_path_bits = static_cast<uint8_t>(s.Next() & 0x7f);
}

// Requires: mu_ held.
Cq::PushResult Cq::PushLocked(const ibv_wc& wc, bool solicited, SlotRelease release) {
  if (count_ == ring_.size()) {
    if (ignore_overrun_) {
      // IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN: the new CQE overwrites the oldest.
      // If a polling section is reading that one (ibv_start_poll), the
      // overwrite consumes it: the section goes on from the next oldest.
      Trace::Get().Cqe(handle_.pub.handle, wc);
      ReleaseSlotsOf(head_);  // (as if polled: nobody can poll it now)
      ring_[head_] = wc;
      releases_[head_] = release;
      if (!stamps_.empty()) stamps_[head_] = MonotonicNs();
      head_ = RingIndex(head_, 1);
      has_current_ = false;
      NotifyLocked(wc, solicited);
      return PushResult::kOk;
    }
    // (rxe 6.1 drops the CQE and raises CQ_ERR for each one it drops.)
    ErrLocked();
    Free(release);  // (lost: nobody can poll it)
    return PushResult::kOverrun;
  }
  Trace::Get().Cqe(handle_.pub.handle, wc);
  const size_t count = count_.load(std::memory_order_relaxed);
  ring_[RingIndex(head_, count)] = wc;
  releases_[RingIndex(head_, count)] = release;
  if (!stamps_.empty()) stamps_[RingIndex(head_, count)] = MonotonicNs();
  count_.store(count + 1, std::memory_order_release);
  if (arm_ != Arm::kNone) NotifyLocked(wc, solicited);  // (a polled CQ is not armed: no call)
  return PushResult::kOk;
}

void Cq::Hold() {
  std::lock_guard<DataPathMutex> lock(mu_);
  held_ = true;
}

int Cq::ReleaseLocked() {
  std::vector<Held> released;
  {
    std::lock_guard<DataPathMutex> lock(mu_);
    if (!held_) return EINVAL;
    held_ = false;
    released.swap(held_wcs_);
  }
  int result = 0;
  for (const Held& held : released) {
    if (Push(held.wc, held.solicited, held.release) != PushResult::kOverrun) continue;
    result = ENOSPC;
    // The QP that completed is not known any more; the default mode's cascade
    // covers every QP on the CQ anyway.
    if (ctx_->device()->behaviour().cq_overrun == Behaviour::CqOverrun::kCascade) CascadeOverrunLocked();
  }
  return result;
}

void Cq::CascadeOverrunLocked() {
  // Copy: entering ERR flushes into CQs, which must not change the set under us.
  // In QP number order, not by address: a seeded run must trace the same
  // cascade every time, and where malloc puts a QP is not seeded.
  std::vector<Qp*> qps(qps_.begin(), qps_.end());
  qps.erase(std::unique(qps.begin(), qps.end()), qps.end());
  std::sort(qps.begin(), qps.end(), [](const Qp* a, const Qp* b) { return a->qp_num() < b->qp_num(); });
  for (Qp* qp : qps) {
    // A QP in RESET has nothing on the HCA to fail (and RESET -> ERR is not a transition).
    if (qp->state() != IBV_QPS_RESET) qp->EnterErrorLocked(IBV_EVENT_QP_FATAL);
  }
}

// ibv_req_notify_cq(3): "A CQE is solicited if it is a receive completion for
// a message with the Solicited Event header bit set, or if the status is not
// successful. All other successful receive completions, or any successful
// send completion is unsolicited." (Or the profile's rxe rule: Behaviour.)
void Cq::NotifyLocked(const ibv_wc& wc, bool solicited_bit) {
  const bool receive = wc.opcode & IBV_WC_RECV;
  const bool solicited = ctx_->device()->behaviour().solicited_receives_only
                             ? receive && (solicited_bit || wc.status == IBV_WC_WR_FLUSH_ERR)
                             : wc.status != IBV_WC_SUCCESS || (receive && solicited_bit);
  if (arm_ == Arm::kNone || (arm_ == Arm::kSolicited && !solicited)) return;
  arm_ = Arm::kNone;
  if (!channel_) return;
  channel_->events().Push(events_.CompletionEvent());
}

void Cq::SetErrorLocked() {
  const Behaviour::CqOverrun mode = ctx_->device()->behaviour().cq_overrun;
  {
    std::lock_guard<DataPathMutex> lock(mu_);
    if (destroying_ || error_) return;
    ErrLocked();
  }
  // (lazy: each QP fails as it next completes into the CQ, Qp::CompletionLostLocked.)
  if (mode == Behaviour::CqOverrun::kCascade) CascadeOverrunLocked();
}

void Cq::ErrLocked() {
  // rxe 6.1's CQs have no error state: it raises CQ_ERR, and the CQ goes on.
  // Everyone else's CQ enters it once.
  if (ctx_->device()->behaviour().cq_overrun != Behaviour::CqOverrun::kRxe61) error_ = true;
  RaiseAsyncLocked(IBV_EVENT_CQ_ERR);
}

void Cq::RaiseAsync(ibv_event_type type) {
  std::lock_guard<DataPathMutex> lock(mu_);
  if (destroying_) return;
  RaiseAsyncLocked(type);
}

void Cq::RaiseAsyncLocked(ibv_event_type type) { events_.RaiseAsync(type); }

int Cq::PollOp(ibv_cq* ibcq, int num_entries, ibv_wc* wc) {
  Cq* cq = From(ibcq);
  if (!cq || (num_entries > 0 && !wc)) return -1;
  // A count of 0 or less finds nothing (the providers' poll loops never run), not an error.
  num_entries = std::max(num_entries, 0);
  // Packets from other processes are handled by whoever polls (no system call).
  Fabric::Get().PollInbound();
  if (cq->EmptyAndSound()) {
    Fabric::Get().PollFoundNothing();
    return 0;
  }
  // poll_mu_ only while another thread is inside a polling section (which
  // holds it between calls): one lock per poll otherwise, as a provider's.
  std::unique_lock<DataPathMutex> lock(cq->mu_);
  std::unique_lock<std::mutex> poll_lock;
  if (cq->in_section_) {
    lock.unlock();
    poll_lock = std::unique_lock<std::mutex>(cq->poll_mu_);
    lock.lock();
  }
  if (cq->error_) return -1;
  int n = 0;
  size_t count = cq->count_.load(std::memory_order_relaxed);
  while (n < num_entries && count > 0) {
    wc[n++] = cq->ring_[cq->head_];
    cq->ReleaseSlotsOf(cq->head_);
    cq->head_ = cq->RingIndex(cq->head_, 1);
    --count;
  }
  cq->count_.store(count, std::memory_order_release);
  if (n > 0) Fabric::Get().PollFoundWork();
  return n;
}

int Cq::ReqNotifyOp(ibv_cq* ibcq, int solicited_only) {
  Cq* cq = From(ibcq);
  if (!cq) return EINVAL;
  std::lock_guard<DataPathMutex> lock(cq->mu_);
  if (cq->error_) return EINVAL;
  // Arming for solicited while armed for any completion keeps the wider arm.
  if (!solicited_only) {
    cq->arm_ = Arm::kNext;
  } else if (cq->arm_ != Arm::kNext) {
    cq->arm_ = Arm::kSolicited;
  }
  // Hardware that compares the arm with its producer index fires at once when
  // completions are already waiting; the profile may ask for that, by seed.
  if (cq->count_ > 0 && cq->channel_ && cq->ctx_->device()->behaviour().spurious_comp_events &&
      Scheduler::Get().OneIn(2)) {
    cq->arm_ = Arm::kNone;
    cq->channel_->events().Push(cq->events_.CompletionEvent());
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
  const Behaviour& behaviour = ctx->device()->behaviour();
  if (!behaviour.cq_ex_all_wc_flags && (attr->wc_flags & ~kIbWcFlags)) {
    errno = EOPNOTSUPP;  // the provider's own check (rxe: RXE_SUP_WC_EX_FLAGS)
    return nullptr;
  }
  Params p;
  if (attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) {
    if (attr->flags & ~kSupportedCqFlags) {
      errno = EOPNOTSUPP;
      return nullptr;
    }
    if ((attr->flags & IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN) && !behaviour.cq_ignore_overrun) {
      errno = kIgnoreOverrunRefusal;
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
// ibv_start_poll takes the CQ's poller lock and keeps it until ibv_end_poll,
// as providers do; on ENOENT from start_poll the lock is released at once
// (the caller must not call end_poll then). The ring itself is locked only
// while it changes: completions may arrive during the section.

// Requires: mu_ held, count_ > 0. Hands the oldest completion to the program.
void Cq::LoadCurrentLocked() {
  // Polled now: its queue slots are free before ibv_end_poll, as mlx5 frees
  // them when it parses the entry (ibv_rc_pingpong -t reposts meanwhile).
  ReleaseSlotsOf(head_);
  current_ = ring_[head_];
  current_stamp_ = stamps_.empty() ? 0 : stamps_[head_];
  has_current_ = true;
  handle_.pub.wr_id = current_.wr_id;
  handle_.pub.status = current_.status;
  fault_plan::OnPolledEx(this, current_.qp_num);
}

// Requires: mu_ held. The entry the section read is consumed (at most once;
// its slots were freed when it was loaded).
void Cq::ConsumeCurrentLocked() {
  if (!has_current_ || count_ == 0) return;
  has_current_ = false;
  head_ = RingIndex(head_, 1);
  count_.store(count_.load(std::memory_order_relaxed) - 1, std::memory_order_release);
}

int Cq::StartPoll(ibv_cq_ex* ibcq, ibv_poll_cq_attr* attr) {
  Cq* cq = From(ibcq);
  if (!cq || (attr && attr->comp_mask)) return EINVAL;
  // As ibv_poll_cq: packets from other processes are handled by whoever polls.
  Fabric::Get().PollInbound();
  if (cq->EmptyAndSound()) {
    Fabric::Get().PollFoundNothing();
    return ENOENT;
  }
  std::unique_lock<std::mutex> poll_lock(cq->poll_mu_);  // kept on success, until end_poll
  std::lock_guard<DataPathMutex> lock(cq->mu_);
  if (cq->error_ || cq->count_ == 0) return cq->error_ ? EINVAL : ENOENT;
  cq->LoadCurrentLocked();
  cq->in_section_ = true;
  Fabric::Get().PollFoundWork();
  poll_lock.release();
  return 0;
}

int Cq::NextPoll(ibv_cq_ex* ibcq) {
  Cq* cq = From(ibcq);
  std::lock_guard<DataPathMutex> lock(cq->mu_);
  cq->ConsumeCurrentLocked();
  if (cq->count_ == 0) return ENOENT;
  cq->LoadCurrentLocked();
  return 0;
}

void Cq::EndPoll(ibv_cq_ex* ibcq) {
  Cq* cq = From(ibcq);
  {
    std::lock_guard<DataPathMutex> lock(cq->mu_);
    cq->ConsumeCurrentLocked();
    cq->in_section_ = false;
  }
  cq->poll_mu_.unlock();
  fault_plan::OnEndPoll();
}

const ibv_wc& Cq::Current(ibv_cq_ex* ibcq) { return From(ibcq)->current_; }

uint64_t Cq::HcaTicks(const Device* device, uint64_t monotonic_ns) {
  const uint64_t khz = device->profile().attr_ex.hca_core_clock;
  const auto ticks = static_cast<unsigned __int128>(monotonic_ns) * khz / 1000000u;
  return static_cast<uint64_t>(ticks) & device->profile().attr_ex.completion_timestamp_mask;
}

void Cq::InstallExOps() {
  ibv_cq_ex& c = handle_.pub;
  // Called by programs (ibv_start_poll ...): guarded as C entry points
  // (abi/c_api.h). The read_* functions only copy a field.
  c.start_poll = Guard<StartPoll, OnThrow::kErrno>::Call;
  c.next_poll = Guard<NextPoll, OnThrow::kErrno>::Call;
  c.end_poll = Guard<EndPoll, OnThrow::kNothing>::Call;
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
  // Stamped when the completion was written (stamps_), in HCA clock ticks.
  c.read_completion_ts = [](ibv_cq_ex* cq) {
    Cq* c = From(cq);
    return HcaTicks(c->ctx_->device(), c->current_stamp_);
  };
  c.read_cvlan = [](ibv_cq_ex*) { return uint16_t{0}; };
  c.read_flow_tag = [](ibv_cq_ex*) { return uint32_t{0}; };
  c.read_tm_info = [](ibv_cq_ex*, ibv_wc_tm_info* info) { std::memset(info, 0, sizeof *info); };
  c.read_completion_wallclock_ns = [](ibv_cq_ex* cq) {
    Cq* c = From(cq);
    return static_cast<uint64_t>(static_cast<int64_t>(c->current_stamp_) + c->wallclock_offset_ns_);
  };
}

}  // namespace simverbs
