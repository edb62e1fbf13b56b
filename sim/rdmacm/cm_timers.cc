#include "cm_timers.h"

#include <sys/timerfd.h>
#include <unistd.h>

#include <cstdint>

namespace simverbs::rdmacm {

int CmTimers::fd() {
  if (fd_ < 0) fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
  return fd_;
}

void CmTimers::Add(std::chrono::milliseconds after, const CmTimer& timer) {
  timers_.emplace(Clock::now() + after, timer);
  Arm();
}

void CmTimers::Cancel(const CmId* id) {
  for (auto it = timers_.begin(); it != timers_.end();) {
    it = it->second.id == id ? timers_.erase(it) : std::next(it);
  }
  Arm();
}

std::vector<CmTimer> CmTimers::TakeDue() {
  if (fd_ >= 0) {
    uint64_t expirations = 0;
    if (read(fd_, &expirations, sizeof expirations) < 0) {
      // EAGAIN: not expired (the epoll wake-up came before a re-arm); nothing to do.
    }
  }
  std::vector<CmTimer> due;
  const Clock::time_point now = Clock::now();
  while (!timers_.empty() && timers_.begin()->first <= now) {
    due.push_back(timers_.begin()->second);
    timers_.erase(timers_.begin());
  }
  Arm();
  return due;
}

void CmTimers::Forget() {
  timers_.clear();
  if (fd_ >= 0) close(fd_);  // the child's copy; the parent's stays armed
  fd_ = -1;
}

void CmTimers::Arm() {
  if (fd() < 0) return;
  itimerspec spec = {};
  if (!timers_.empty()) {
    const auto wait = std::chrono::duration_cast<std::chrono::nanoseconds>(timers_.begin()->first - Clock::now());
    const int64_t ns = wait.count() > 0 ? wait.count() : 1;  // 0 would disarm: 1 ns fires at once
    spec.it_value.tv_sec = ns / 1'000'000'000;
    spec.it_value.tv_nsec = ns % 1'000'000'000;
  }
  timerfd_settime(fd_, 0, &spec, nullptr);
}

}  // namespace simverbs::rdmacm
