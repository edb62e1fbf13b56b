#pragma once

// A completion queue. Lock order: Cq::poll_mu_ before Engine::mu_ before
// Cq::mu_ before EventQueue::mu_.
//
// States: usable → errored (overrun in the profile's error modes: poll
// returns -1, notify and resize fail; only destroy works) → destroyed.
// Arming is one-shot: a completion that matches the arm fires one event on
// the channel and disarms. Destroy waits, like libibverbs, until every event
// that was *read* for this CQ has been acked (affiliated_events.h).

#include <infiniband/verbs.h>

#include <atomic>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "affiliated_events.h"
#include "cq_slot_release.h"
#include "handle.h"
#include "result.h"
#include "transport/data_path_mutex.h"

namespace simverbs {

class Context;
class CompChannel;
class Device;
class Qp;

class Cq {
 public:
  static constexpr uint64_t kMagic = 0x53494d4351000001;  // "SIMCQ"

  struct Params {
    int cqe = 0;
    void* cq_context = nullptr;
    CompChannel* channel = nullptr;
    uint32_t comp_vector = 0;
    uint64_t wc_flags = 0;
    bool ignore_overrun = false;
    bool extended = false;  // created with ibv_create_cq_ex
  };
  static Result<Cq*> Create(Context* ctx, const Params& params);
  int Destroy();  // EBUSY while QPs/SRQs use it; otherwise waits for acks
  int Resize(int cqe);
  // The size a CQ asked to hold `cqe` entries gets on `device` (its profile's cq_size).
  static int ActualSize(const Device* device, int cqe);

  // The HCA clock (hca_core_clock kHz) at a time of CLOCK_MONOTONIC
  // (MonotonicNs): what completion timestamps and ibv_query_rt_values_ex read.
  static uint64_t HcaTicks(const Device* device, uint64_t monotonic_ns);

  static Cq* From(const ibv_cq* cq) { return Handle<ibv_cq_ex, Cq>::From(cq); }
  static Cq* From(const ibv_cq_ex* cq) { return Handle<ibv_cq_ex, Cq>::From(cq); }
  ibv_cq* ibv() { return reinterpret_cast<ibv_cq*>(&handle_.pub); }
  ibv_cq_ex* ibv_ex() { return &handle_.pub; }
  Context* context() const { return ctx_; }

  // Producer side (the transport and the control API). Requires: engine lock.
  enum class PushResult {
    kOk,
    kOverrun,  // this completion did not fit: CQ_ERR raised; the CQ is in error unless the profile is rxe-6.1
    kErrored,  // the CQ was already in error (or being destroyed): the completion is lost
  };
  using SlotRelease = CqSlotRelease;
  // `release` happens when the completion is polled, or at once when it is
  // lost (kOverrun, kErrored): nobody can poll it then.
  PushResult Push(const ibv_wc& wc, bool solicited, SlotRelease release = {});
  // Control API: while held, completions wait outside the CQ (not polled, no
  // events); Release pushes them in order, as if they completed now.
  // Requires: engine lock (Release).
  void Hold();
  int ReleaseLocked();  // EINVAL if not held; ENOSPC if a released completion overran the CQ

  // The cascade of the default overrun mode: every QP on this CQ goes to ERR
  // with IBV_EVENT_QP_FATAL. Requires: engine lock.
  void CascadeOverrunLocked();
  // The CQ enters the error state and raises IBV_EVENT_CQ_ERR (simverbs_raise_cq_event, an injected
  // fault), with what an overrun brings the QPs on it under the profile (cq_overrun). Requires: engine lock.
  void SetErrorLocked();
  // Raises an async event affiliated with this CQ (counted for destroy).
  void RaiseAsync(ibv_event_type type);

  // Removes the completions of QP `qp_num` that have not been polled (held
  // ones too), keeping the order of the rest; the entry an extended poll is
  // reading stays. For a QP moved to RESET (Behaviour::reset_discards_completions).
  void DiscardQpCompletions(uint32_t qp_num);
  // The completions of `qp` still here free nothing of its queues any more
  // (the QP is reset or destroyed). Returns how many were receive completions.
  uint32_t ForgetSlotReleases(const Qp* qp);

  // QPs that complete into this CQ (send or receive side). Requires: engine lock.
  void AddQp(Qp* qp) { qps_.insert(qp); }
  void RemoveQp(Qp* qp) { qps_.erase(qp); }
  // XRC SRQs that complete into this CQ (they keep it from being destroyed).
  void AddSrq() { srqs_.fetch_add(1); }
  void RemoveSrq() { srqs_.fetch_sub(1); }

  // ops installed in every context
  static int PollOp(ibv_cq* cq, int num_entries, ibv_wc* wc);
  static int ReqNotifyOp(ibv_cq* cq, int solicited_only);
  static ibv_cq_ex* CreateExOp(ibv_context* ctx, ibv_cq_init_attr_ex* attr);

 private:
  Cq(Context* ctx, const Params& params);
  ~Cq();
  void InstallExOps();
  // Requires: mu_ held.
  PushResult PushLocked(const ibv_wc& wc, bool solicited, SlotRelease release);
  // The entry at ring index `i` is taken out (polled, or overwritten): its
  // release happens. Requires: mu_ held.
  void ReleaseSlotsOf(size_t i);
  static void Free(const SlotRelease& release);
  // The CQ errs as the profile's CQs do (an overrun, a raised CQ error): its
  // error state, where it has one, and IBV_EVENT_CQ_ERR. Requires: mu_ held.
  void ErrLocked();
  static void ScrambleInvalidFields(ibv_wc* wc);
  // Requires: mu_ held.
  void NotifyLocked(const ibv_wc& wc, bool solicited_bit);
  void RaiseAsyncLocked(ibv_event_type type);

  // cq_ex polling (ibv_start_poll / ibv_next_poll / ibv_end_poll and readers)
  static int StartPoll(ibv_cq_ex* cq, ibv_poll_cq_attr* attr);
  static int NextPoll(ibv_cq_ex* cq);
  static void EndPoll(ibv_cq_ex* cq);
  static const ibv_wc& Current(ibv_cq_ex* cq);
  void LoadCurrentLocked();
  void ConsumeCurrentLocked();

  enum class Arm { kNone, kSolicited, kNext };

  // No completion and no error right now: what a busy poll loop mostly finds,
  // answered with two loads and no lock.
  bool EmptyAndSound() const {
    return count_.load(std::memory_order_acquire) == 0 && !error_.load(std::memory_order_acquire);
  }

  Handle<ibv_cq_ex, Cq> handle_;
  Context* ctx_;
  CompChannel* channel_;
  const bool ignore_overrun_;
  std::multiset<Qp*> qps_;  // engine lock; a QP with one CQ for both queues is in it twice
  AffiliatedEvents events_;
  std::atomic<int> srqs_{0};

  // Held from ibv_start_poll to ibv_end_poll (in_section_ says so, under
  // mu_), by a resize, and by ibv_poll_cq only while a section is open.
  // Producers do not take it, so a program may post (and so complete, in
  // this process) from inside a polling section.
  std::mutex poll_mu_;
  bool in_section_ = false;  // mu_
  DataPathMutex mu_;  // taken by every poll that finds a completion, and every completion
  std::vector<ibv_wc> ring_;  // capacity = cqe
  // When each entry of ring_ was written (CLOCK_MONOTONIC ns), for a CQ made
  // with a completion timestamp in its wc_flags; empty otherwise.
  std::vector<uint64_t> stamps_;
  std::vector<SlotRelease> releases_;  // beside ring_
  int64_t wallclock_offset_ns_ = 0;  // CLOCK_REALTIME - CLOCK_MONOTONIC when it was made
  size_t head_ = 0;
  // Written under mu_ (a load and a store: no locked instruction, as only
  // the holder writes it); read without it by a poller to answer an empty CQ
  // without taking a lock (EmptyAndSound).
  std::atomic<size_t> count_{0};
  // The ring index `n` (at most the ring's size) entries after `i`: no
  // division on the data path.
  size_t RingIndex(size_t i, size_t n) const {
    i += n;
    return i >= ring_.size() ? i - ring_.size() : i;
  }
  Arm arm_ = Arm::kNone;
  std::atomic<bool> error_{false};
  bool destroying_ = false;
  bool held_ = false;
  struct Held {
    ibv_wc wc;
    bool solicited;
    SlotRelease release;
  };
  std::vector<Held> held_wcs_;
  // The entry the ibv_wc_read_* calls read (a copy: producers may write the
  // ring meanwhile); has_current_ while it is not consumed. poll_mu_.
  ibv_wc current_{};
  uint64_t current_stamp_ = 0;
  bool has_current_ = false;
};

}  // namespace simverbs
