#pragma once

// The events affiliated with one CQ, QP or SRQ, and the destroy rule of
// libibverbs that goes with them: ibv_destroy_cq/qp/srq return only when
// every event that was *read* for the object has been acknowledged.
//
// The application acks through the public struct (ibv_ack_async_event and
// ibv_ack_cq_events bump its *_completed counters under its mutex and signal
// its cond); the events handed out are counted here, when the event queue
// hands them out. The public mutex and cond are initialised and destroyed
// here too.
//
// A destroy that waits longer than SIMVERBS_DESTROY_WARN_MS (default 3000;
// 0 turns it off) prints once to stderr which object it is and how many
// events were read but not acked - the classic hang of a program that forgot
// an ack. The wait itself is unchanged: it still lasts until the acks come.

#include <infiniband/verbs.h>
#include <pthread.h>

#include <atomic>
#include <cstdint>

#include "event_queue.h"

namespace simverbs {

class Context;

class AffiliatedEvents {
 public:
  // `kind` names the object in the diagnostic ("CQ", "QP", "SRQ"); `element`
  // is its public struct, as event.element carries it. `async_acked` (and,
  // for a CQ, `comp_acked`) are the public counters the ack functions bump.
  AffiliatedEvents(Context* ctx, const char* kind, void* element, pthread_mutex_t* mutex, pthread_cond_t* cond,
                   uint32_t* async_acked, uint32_t* comp_acked = nullptr);
  ~AffiliatedEvents();
  AffiliatedEvents(const AffiliatedEvents&) = delete;
  AffiliatedEvents& operator=(const AffiliatedEvents&) = delete;

  // Queues an async event for the object on its context's async queue.
  void RaiseAsync(ibv_event_type type);
  // A completion event for the object's channel (CQs only).
  QueuedEvent CompletionEvent();

  // Drops the object's events that were never read from `queue`: they need
  // no ack and must not be read after the object is gone.
  void Purge(EventQueue& queue) { queue.Purge(element_); }

  // Returns once every event read for the object has been acked (compared
  // with != as libibverbs does, so acking too many also waits). `id` names
  // the object in the diagnostic (CQ/SRQ handle, QP number).
  void WaitForAcks(uint32_t id);

 private:
  // Requires: *mutex_ held.
  bool AllAckedLocked() const;
  void WarnLocked(uint32_t id, long waited_ms) const;

  Context* const ctx_;
  const char* const kind_;
  void* const element_;
  pthread_mutex_t* const mutex_;
  pthread_cond_t* const cond_;
  uint32_t* const async_acked_;
  uint32_t* const comp_acked_;
  std::atomic<uint32_t> async_reported_{0};
  std::atomic<uint32_t> comp_reported_{0};
};

}  // namespace simverbs
