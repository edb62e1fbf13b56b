#pragma once

// An event queue behind a real file descriptor: the completion channel fd and
// the context's async_fd. Applications poll/epoll the fd and set O_NONBLOCK on
// it with fcntl, so readiness and blocking must follow the fd, as with the
// kernel's uverbs event files.
//
// The queue itself is in memory; an eventfd is readable exactly while the
// queue is non-empty (or closed). The library writes and reads it through a
// descriptor of its own: a program that closes its fd, and opens a file that
// takes the number, never gets our bytes in that file (libibverbs only reads
// the kernel's event file), and its ibv_get_*_event fails with EBADF.
//
// The count of events "reported" for an object grows when an event is handed
// out, not when it is queued (as the kernel's ib_uverbs_event_read does):
// destroy waits only for events that were read.
//
// Several threads may block in Pop. Which of them receives an event is a
// choice among legal behaviours, so it comes from the seeded scheduler (or
// from the control API, DeliverNextTo): Push reserves the event for one
// waiter, and the others keep waiting. A blocked reader waits in read(2) on
// an eventfd of its own, written by every Push and Close, not on the queue's
// fd, so a reserved event does not wake the others into a busy loop. As in
// libibverbs, whose readers block in read(2) on the kernel's event file, a
// signal interrupts the wait (EINTR, or a restart under SA_RESTART) and
// pthread_cancel ends it (the reader leaves the queue as it unwinds).
//
// Each waiter records its process: after fork(), the parent's blocked
// readers are not in the child, so the child neither waits for them nor
// reserves events for them.

#include <infiniband/verbs.h>
#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

namespace simverbs {

struct QueuedEvent {
  ibv_event_type type = IBV_EVENT_CQ_ERR;
  bool is_completion = false;   // a completion event (comp channel) rather than an async event
  void* element = nullptr;      // ibv_cq* / ibv_qp* / ibv_srq* / ibv_wq*, or nullptr for port events
  int port_num = 0;
  std::atomic<uint32_t>* reported = nullptr;  // bumped when handed out; nullptr for port/device events
  uint64_t waiter = 0;  // the blocked reader it is reserved for; 0 = whoever reads it first
};

class EventQueue {
 public:
  EventQueue();
  // Readers still blocked in Pop (ibv_get_async_event while the context is
  // closed) get EIO, as from the kernel's freed event file
  // (ib_uverbs_free_event_queue); the queue goes once they have left.
  ~EventQueue();
  EventQueue(const EventQueue&) = delete;
  EventQueue& operator=(const EventQueue&) = delete;

  // The fd; ownership passes to the caller with ReleaseFd (the app closes a
  // channel fd through ibv_destroy_comp_channel, the context closes async_fd).
  int fd() const { return fd_; }
  // Why there is no fd (-1): the errno of eventfd(2), EMFILE when the process
  // has none left; the owner fails with it, as ibv_open_device and
  // ibv_create_comp_channel do when the kernel has no fd to give. 0: an fd.
  int fd_error() const { return fd_error_; }

  void Push(const QueuedEvent& ev);

  // Blocks until an event is available, unless the fd is O_NONBLOCK (EAGAIN).
  // Returns 0 or an errno: EAGAIN, EINTR, EIO (queue closed, nothing left for this reader).
  int Pop(QueuedEvent* out);

  // Drops every queued event for `element` (the object is being destroyed).
  void Purge(const void* element);

  // Marks the queue closed: nothing more is queued, what is queued can still
  // be read, then readers get EIO, blocking or not (rxe 6.1 hands out a
  // completion event queued before ibv_close_device, then EIO, measured).
  void Close();

  // Threads blocked in Pop now.
  size_t waiters() const;
  // The next event pushed goes to the blocked reader at `index` (0 = the one
  // waiting longest). EINVAL if fewer readers are blocked.
  int DeliverNextTo(size_t index);

 private:
  // A reader blocked in Pop.
  struct Waiter {
    uint64_t id = 0;
    int wake_fd = -1;  // its eventfd; -1: none could be made, it waits on wake_seq_
    pid_t pid = 0;     // the process it is in
  };
  class Reader;

  // Makes the queue's fd readable, with a new wake-up for edge-triggered
  // epoll each time (the kernel wakes the file's readers for every event).
  void NotifyReadableLocked();
  void SetReadableLocked(bool readable);
  bool ProgramFdIsOursLocked() const;
  void WakeAllLocked();
  void RemoveWaiterLocked(uint64_t id);
  // The blocked readers that are in this process.
  std::vector<const Waiter*> OurWaitersLocked() const;
  // Whether the reader `me` may take e: not reserved, reserved for it, or
  // reserved for a reader that is not in this process (the parent's, after fork).
  bool ClaimableLocked(const QueuedEvent& e, uint64_t me) const;

  int fd_;            // the program's (channel->fd, async_fd)
  int own_fd_ = -1;   // ours, on the same eventfd: what we write and read
  int fd_error_ = 0;
  mutable std::mutex mu_;
  std::deque<QueuedEvent> events_;
  bool readable_ = false;
  bool closed_ = false;
  std::vector<Waiter> waiters_;  // blocked readers, longest waiting first
  std::condition_variable readers_left_;  // no reader of this process is blocked any more
  uint64_t next_waiter_id_ = 1;
  int deliver_next_to_ = -1;       // index in OurWaitersLocked(), from DeliverNextTo
  std::atomic<uint32_t> wake_seq_{0};  // futex word of readers without a wake_fd
};

}  // namespace simverbs
