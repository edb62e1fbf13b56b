#include "event_queue.h"

#include <fcntl.h>
#include <linux/kcmp.h>
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
  if (fd_ < 0) {
    fd_error_ = errno;
    return;
  }
  // With no descriptor left for our own, the program's serves (the kernel's
  // channel needs one descriptor: so does ours).
  own_fd_ = fcntl(fd_, F_DUPFD_CLOEXEC, 0);
  if (own_fd_ < 0) own_fd_ = fd_;
}

EventQueue::~EventQueue() {
  // The program's fd is closed by its owner (channel or context), maybe already: not touched here.
  std::unique_lock<std::mutex> lock(mu_);
  closed_ = true;
  WakeAllLocked();
  readers_left_.wait(lock, [this] { return OurWaitersLocked().empty(); });
  if (own_fd_ >= 0 && own_fd_ != fd_) close(own_fd_);
}

// Requires: mu_ held. Whether the program's fd number still names our eventfd:
// a program may close it (or dup2 another file over it) behind our back.
bool EventQueue::ProgramFdIsOursLocked() const {
  if (own_fd_ != fd_) {
    const pid_t self = getpid();
    const long same = syscall(SYS_kcmp, self, self, KCMP_FILE, fd_, own_fd_);
    if (same >= 0) return same == 0;
  }
  return fcntl(fd_, F_GETFD) >= 0;  // (one descriptor, or no kcmp here: closed is all we can tell)
}

// A call of Pop: once it has to block it is a waiter, with an eventfd to be
// woken through, and it stops being one however Pop ends (an event, EINTR,
// EIO, or the unwinding of pthread_cancel out of read(2)).
class EventQueue::Reader {
 public:
  explicit Reader(EventQueue* queue) : queue_(queue) {}
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;
  ~Reader() {
    if (id_ != 0) {
      std::lock_guard<std::mutex> lock(queue_->mu_);
      queue_->RemoveWaiterLocked(id_);
    }
    if (wake_fd_ >= 0) close(wake_fd_);
  }

  uint64_t id() const { return id_; }

  // Requires: the queue's mu_ held.
  void BlockLocked() {
    if (id_ != 0) return;
    if (wake_fd_ < 0) wake_fd_ = eventfd(0, EFD_CLOEXEC);  // -1 (no fd to be had): the futex
    id_ = queue_->next_waiter_id_++;
    queue_->waiters_.push_back(Waiter{id_, wake_fd_, getpid()});
  }
  void LeaveLocked() {
    if (id_ != 0) queue_->RemoveWaiterLocked(id_);
    id_ = 0;
  }

  // Waits for the next wake-up after `seen`: 0, or EINTR for a signal.
  int Wait(uint32_t seen) {
    if (wake_fd_ >= 0) {
      uint64_t value = 0;
      // A cancellation point: pthread_cancel unwinds from here.
      return read(wake_fd_, &value, sizeof value) < 0 && errno == EINTR ? EINTR : 0;
    }
    if (syscall(SYS_futex, &queue_->wake_seq_, FUTEX_WAIT_PRIVATE, seen, nullptr, nullptr, 0) != 0 &&
        errno == EINTR) {
      return EINTR;
    }
    return 0;
  }

 private:
  EventQueue* queue_;
  uint64_t id_ = 0;
  int wake_fd_ = -1;
};

// Requires: mu_ held.
void EventQueue::NotifyReadableLocked() {
  uint64_t value = 1;
  (void)!write(own_fd_, &value, sizeof value);
  readable_ = true;
}

// Requires: mu_ held. Keeps the eventfd counter non-zero exactly while readable_.
void EventQueue::SetReadableLocked(bool readable) {
  if (readable == readable_) return;
  if (readable) {
    NotifyReadableLocked();
    return;
  }
  // The counter is non-zero here, so this read cannot block.
  uint64_t value = 0;
  (void)!read(own_fd_, &value, sizeof value);
  readable_ = false;
}

// Requires: mu_ held. No system call unless a reader is blocked.
void EventQueue::WakeAllLocked() {
  wake_seq_.fetch_add(1, std::memory_order_release);
  if (waiters_.empty()) return;
  bool futex_waiters = false;
  for (const Waiter* w : OurWaitersLocked()) {
    if (w->wake_fd < 0) {
      futex_waiters = true;
      continue;
    }
    uint64_t value = 1;
    (void)!write(w->wake_fd, &value, sizeof value);
  }
  if (futex_waiters) syscall(SYS_futex, &wake_seq_, FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

std::vector<const EventQueue::Waiter*> EventQueue::OurWaitersLocked() const {
  std::vector<const Waiter*> ours;
  if (waiters_.empty()) return ours;
  const pid_t self = getpid();
  for (const Waiter& w : waiters_) {
    if (w.pid == self) ours.push_back(&w);
  }
  return ours;
}

bool EventQueue::ClaimableLocked(const QueuedEvent& e, uint64_t me) const {
  if (e.waiter == 0 || e.waiter == me) return true;
  const auto w = std::find_if(waiters_.begin(), waiters_.end(), [&e](const Waiter& x) { return x.id == e.waiter; });
  return w == waiters_.end() || w->pid != getpid();
}

void EventQueue::Push(const QueuedEvent& ev) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return;  // the channel's context is gone
  QueuedEvent e = ev;
  // Only readers with no event reserved yet are candidates, so every reserved
  // event has a reader of its own.
  const std::vector<const Waiter*> ours = OurWaitersLocked();
  std::vector<uint64_t> free_waiters;
  for (const Waiter* w : ours) {
    const uint64_t id = w->id;
    if (std::none_of(events_.begin(), events_.end(), [id](const QueuedEvent& q) { return q.waiter == id; })) {
      free_waiters.push_back(id);
    }
  }
  if (deliver_next_to_ >= 0 && static_cast<size_t>(deliver_next_to_) < ours.size()) {
    e.waiter = ours[static_cast<size_t>(deliver_next_to_)]->id;
  } else if (free_waiters.size() > 1) {
    e.waiter = free_waiters[Scheduler::Get().Choose(free_waiters.size())];
  }
  deliver_next_to_ = -1;
  events_.push_back(e);
  NotifyReadableLocked();
  WakeAllLocked();
}

// Requires: mu_ held. Events reserved for a reader that left go to anyone.
void EventQueue::RemoveWaiterLocked(uint64_t id) {
  waiters_.erase(std::remove_if(waiters_.begin(), waiters_.end(), [id](const Waiter& w) { return w.id == id; }),
                 waiters_.end());
  if (OurWaitersLocked().empty()) readers_left_.notify_all();
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
  Reader me(this);
  for (;;) {
    uint32_t seen;
    {
      std::lock_guard<std::mutex> lock(mu_);
      // libibverbs reads the program's fd: closed by the program (or another file now), that read
      // fails. (Closed by the library with its context or channel: what Close says.)
      if (!closed_ && !ProgramFdIsOursLocked()) {
        me.LeaveLocked();
        return EBADF;
      }
      auto it = std::find_if(events_.begin(), events_.end(),
                             [&](const QueuedEvent& e) { return ClaimableLocked(e, me.id()); });
      if (it != events_.end()) {
        *out = *it;
        out->waiter = 0;
        events_.erase(it);
        me.LeaveLocked();
        if (out->reported) out->reported->fetch_add(1, std::memory_order_acq_rel);
        SetReadableLocked(!events_.empty() || closed_);
        return 0;
      }
      // Closed: nothing more comes, and what is left is reserved for other
      // readers (a reader that blocked here could wait forever). EIO even
      // for an O_NONBLOCK fd, as rxe 6.1 answers (measured).
      if (closed_) {
        me.LeaveLocked();
        return EIO;
      }
      const int flags = fcntl(own_fd_, F_GETFL);  // (one description: the program's O_NONBLOCK)
      if (flags >= 0 && (flags & O_NONBLOCK)) {
        me.LeaveLocked();
        return EAGAIN;
      }
      me.BlockLocked();
      seen = wake_seq_.load(std::memory_order_acquire);
    }
    Fabric::Get().BeforeBlocking();  // peers' packets must not wait for our next poll
    if (me.Wait(seen) == EINTR) return EINTR;  // (the Reader leaves the queue)
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
  return OurWaitersLocked().size();
}

int EventQueue::DeliverNextTo(size_t index) {
  std::lock_guard<std::mutex> lock(mu_);
  if (index >= OurWaitersLocked().size()) return EINVAL;
  deliver_next_to_ = static_cast<int>(index);
  return 0;
}

}  // namespace simverbs
