#include "event_queue.h"

#include "fabric/fabric.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

namespace simverbs {

EventQueue::EventQueue() : fd_(eventfd(0, EFD_CLOEXEC)) {
  if (fd_ < 0) std::abort();  // no fd means no device: nothing sensible to continue with
}

EventQueue::~EventQueue() = default;  // the fd is closed by its owner (channel or context)

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

void EventQueue::Push(const QueuedEvent& ev) {
  std::lock_guard<std::mutex> lock(mu_);
  events_.push_back(ev);
  SetReadableLocked(true);
}

int EventQueue::Pop(QueuedEvent* out) {
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!events_.empty()) {
        *out = events_.front();
        events_.pop_front();
        if (out->reported) out->reported->fetch_add(1, std::memory_order_acq_rel);
        SetReadableLocked(!events_.empty() || closed_);
        return 0;
      }
      if (closed_) return EIO;
    }
    const int flags = fcntl(fd_, F_GETFL);
    if (flags >= 0 && (flags & O_NONBLOCK)) return EAGAIN;
    Fabric::Get().BeforeBlocking();  // peers' packets must not wait for our next poll
    pollfd pfd{fd_, POLLIN, 0};
    if (poll(&pfd, 1, -1) < 0 && errno == EINTR) return EINTR;
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
}

}  // namespace simverbs
