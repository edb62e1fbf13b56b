#include "event_channel.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <new>

#include "cm_id.h"

namespace simverbs::rdmacm {

EventChannel* EventChannel::Create() {
  auto* channel = new (std::nothrow) EventChannel();
  if (!channel) {
    errno = ENOMEM;
    return nullptr;
  }
  channel->pub_.fd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
  if (channel->pub_.fd < 0) {
    const int err = errno;
    delete channel;
    errno = err;
    return nullptr;
  }
  return channel;
}

EventChannel::~EventChannel() {
  for (CmEvent* e : queue_) delete e;
  if (pub_.fd >= 0) close(pub_.fd);
}

void EventChannel::Push(CmEvent* event) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(event);
  }
  const uint64_t one = 1;
  // Cannot fail short of 2^64 - 1 queued events.
  [[maybe_unused]] ssize_t n = write(pub_.fd, &one, sizeof one);
}

CmEvent* EventChannel::Pop() {
  for (;;) {
    uint64_t count = 0;
    const ssize_t n = read(pub_.fd, &count, sizeof count);
    if (n < 0 && errno == EINTR) continue;
    if (n != sizeof count) return nullptr;  // errno: EAGAIN with O_NONBLOCK
    std::lock_guard<std::mutex> lock(mu_);
    // The count and the queue move together; a dropped event is skipped.
    if (queue_.empty()) continue;
    CmEvent* e = queue_.front();
    queue_.pop_front();
    if (!e->placeholder) return e;
    delete e;
  }
}

bool EventChannel::Empty() {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.empty();
}

std::vector<CmEvent*> EventChannel::Withdraw(CmId* id) {
  std::vector<CmEvent*> taken;
  std::lock_guard<std::mutex> lock(mu_);
  for (CmEvent*& e : queue_) {
    if (e->placeholder || e->id != id) continue;
    taken.push_back(e);
    e = new CmEvent();
    e->placeholder = true;
  }
  return taken;
}

}  // namespace simverbs::rdmacm
