#include "event_channel.h"

#include <fcntl.h>
#include <sys/socket.h>
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
  // A stream socket pair rather than a pipe: recv(MSG_DONTWAIT) takes a
  // withdrawn event's byte without blocking whatever the program set on fd.
  int fds[2] = {-1, -1};
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    const int err = errno;
    delete channel;
    errno = err;
    return nullptr;
  }
  channel->pub_.fd = fds[0];
  channel->write_fd_ = fds[1];
  // The CM thread writes with the lock held: it must never block.
  fcntl(fds[1], F_SETFL, O_NONBLOCK);
  return channel;
}

EventChannel::~EventChannel() {
  for (CmEvent* e : queue_) delete e;
  if (write_fd_ >= 0) close(write_fd_);
  if (pub_.fd >= 0) close(pub_.fd);
}

void EventChannel::Push(CmEvent* event) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(event);
  }
  const char one = 1;
  // Fails only with a full socket buffer (a hundred thousand unread events): the fd is readable then anyway.
  [[maybe_unused]] ssize_t n = write(write_fd_, &one, 1);
}

CmEvent* EventChannel::Pop() {
  for (;;) {
    char token = 0;
    // A signal whose handler has no SA_RESTART ends the wait with EINTR, as
    // it ends the kernel's (ucma_get_event's wait_event_interruptible).
    const ssize_t n = read(pub_.fd, &token, 1);
    if (n == 0) {
      // The channel was destroyed under this reader (its write end closed).
      // The kernel's rdma_cm file keeps a reader blocked then, until the
      // thread is cancelled or the process ends: so does this one, touching
      // nothing of the channel (pause(2) is a cancellation point).
      for (;;) pause();
    }
    if (n != 1) return nullptr;  // errno: EAGAIN with O_NONBLOCK, EINTR
    std::lock_guard<std::mutex> lock(mu_);
    // Another reader, or a withdrawal, took the event this byte stood for.
    if (queue_.empty()) continue;
    CmEvent* e = queue_.front();
    queue_.pop_front();
    if (e->pub.event == RDMA_CM_EVENT_CONNECT_REQUEST && e->id) --e->id->unread_requests;
    return e;
  }
}

bool EventChannel::Empty() {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.empty();
}

std::vector<CmEvent*> EventChannel::Withdraw(CmId* id) {
  std::vector<CmEvent*> taken;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = queue_.begin(); it != queue_.end();) {
    if ((*it)->id != id) {
      ++it;
      continue;
    }
    taken.push_back(*it);
    it = queue_.erase(it);
    // Its byte goes too, so the fd is readable only while an event waits.
    // None left: a reader has it and finds one event fewer (Pop loops).
    char token = 0;
    if (recv(pub_.fd, &token, 1, MSG_DONTWAIT) < 0) continue;
  }
  return taken;
}

}  // namespace simverbs::rdmacm
