#include "event_queue.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>

#include "fabric/fabric.h"
#include "sched/scheduler.h"

namespace simverbs {

EventQueue::EventQueue() : fd_(eventfd(0, EFD_CLOEXEC)) {
  if (fd_ < 0) std::abort();  // no fd means no device: nothing sensible to continue with
}

EventQueue::~EventQueue() {
  // The fd is closed by its owner (channel or context), maybe already: not touched here.
  std::unique_lock<std::mutex> lock(mu_);
  closed_ = true;
  WakeAllLocked();
  readers_left_.wait(lock, [this] { return waiters_.empty(); });
}

// Requires: mu_ held. Keeps the eventfd counter non-zero exactly while readable_.
void EventQueue::SetReadableLocked(bool readable) {
  if (readable == readable_) return;
  uint64_t value = 1;
  if (readable) {
    (void)!write(fd_, &value, sizeof value);
  } else {
    // The counter is non-zero here, so this read cannot block.
    (void)!read(fd_, &value, sizeof value);
  }
  readable_ = readable;
}

// Requires: mu_ held. No system call unless a reader is blocked.
void EventQueue::WakeAllLocked() {
  wake_seq_.fetch_add(1, std::memory_order_release);
  if (!waiters_.empty()) syscall(SYS_futex, &wake_seq_, FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

void EventQueue::Push(const QueuedEvent& ev) {
  std::lock_guard<std::mutex> lock(mu_);
  QueuedEvent e = ev;
  // Only readers with no event reserved yet are candidates, so every reserved
  // event has a reader of its own.
  std::vector<uint64_t> free_waiters;
  for (uint64_t id : waiters_) {
    if (std::none_of(events_.begin(), events_.end(), [id](const QueuedEvent& q) { return q.waiter == id; })) {
      free_waiters.push_back(id);
    }
  }
  if (deliver_next_to_ >= 0 && static_cast<size_t>(deliver_next_to_) < waiters_.size()) {
    e.waiter = waiters_[static_cast<size_t>(deliver_next_to_)];
  } else if (free_waiters.size() > 1) {
    e.waiter = free_waiters[Scheduler::Get().Choose(free_waiters.size())];
  }
  deliver_next_to_ = -1;
  events_.push_back(e);
  SetReadableLocked(true);
  WakeAllLocked();
}

// Requires: mu_ held. Events reserved for a reader that left go to anyone.
void EventQueue::RemoveWaiterLocked(uint64_t id) {
  waiters_.erase(std::remove(waiters_.begin(), waiters_.end(), id), waiters_.end());
  if (waiters_.empty()) readers_left_.notify_all();
  bool released = false;
  for (QueuedEvent& e : events_) {
    if (e.waiter == id) {
      e.waiter = 0;
      released = true;
    }
  }
  if (released) WakeAllLocked();
}

int EventQueue::Pop(QueuedEvent* out) {
  uint64_t me = 0;  // our waiter id once we block
  for (;;) {
    uint32_t seen;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = std::find_if(events_.begin(), events_.end(),
                             [me](const QueuedEvent& e) { return e.waiter == 0 || e.waiter == me; });
      if (it != events_.end()) {
        *out = *it;
        out->waiter = 0;
        events_.erase(it);
        if (me != 0) RemoveWaiterLocked(me);
        if (out->reported) out->reported->fetch_add(1, std::memory_order_acq_rel);
        SetReadableLocked(!events_.empty() || closed_);
        return 0;
      }
      // Closed: nothing more comes, and what is left is reserved for other
      // readers (a reader that blocked here could wait forever).
      if (closed_) {
        if (me != 0) RemoveWaiterLocked(me);
        return EIO;
      }
      const int flags = fcntl(fd_, F_GETFL);
      if (flags >= 0 && (flags & O_NONBLOCK)) {
        if (me != 0) RemoveWaiterLocked(me);
        return EAGAIN;
      }
      if (me == 0) {
        me = next_waiter_id_++;
        waiters_.push_back(me);
      }
      seen = wake_seq_.load(std::memory_order_acquire);
    }
    Fabric::Get().BeforeBlocking();  // peers' packets must not wait for our next poll
    if (syscall(SYS_futex, &wake_seq_, FUTEX_WAIT_PRIVATE, seen, nullptr, nullptr, 0) != 0 && errno == EINTR) {
      std::lock_guard<std::mutex> lock(mu_);
      RemoveWaiterLocked(me);
      return EINTR;
    }
  }
}

void EventQueue::Purge(const void* element) {
  std::lock_guard<std::mutex> lock(mu_);
  events_.erase(std::remove_if(events_.begin(), events_.end(),
                               [element](const QueuedEvent& e) { return e.element == element; }),
                events_.end());
  SetReadableLocked(!events_.empty() || closed_);
}

void EventQueue::Close() {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
  SetReadableLocked(true);
  WakeAllLocked();
}

size_t EventQueue::waiters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return waiters_.size();
}

int EventQueue::DeliverNextTo(size_t index) {
  std::lock_guard<std::mutex> lock(mu_);
  if (index >= waiters_.size()) return EINVAL;
  deliver_next_to_ = static_cast<int>(index);
  return 0;
}

}  // namespace simverbs
