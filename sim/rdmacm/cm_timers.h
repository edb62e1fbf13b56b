#pragma once

// The connection manager's timers: the end of a connection's timewait
// (TIMEWAIT_EXIT), the resending of a message that got no answer, and the
// next look at a request held back by a full listen backlog. One
// timerfd, armed for the earliest deadline, wakes the CM thread's epoll, so a
// timer added from any thread is seen at once. Guarded by CmService::mu().

#include <chrono>
#include <map>
#include <vector>

#include "cm_message.h"

namespace simverbs::rdmacm {

class CmId;

struct CmTimer {
  enum class Kind { kTimewait, kResend, kHeldRequest };
  Kind kind = Kind::kTimewait;
  CmId* id = nullptr;  // (kHeldRequest: none yet)
  CmMessage message;  // kResend: what to send again
  int lost = 0;       // kResend: how many times it has been lost so far; kHeldRequest: looks so far
  uint64_t token = 0;  // kHeldRequest: the connection the request came on
};

class CmTimers {
 public:
  // The timerfd (made on first use); -1 when it cannot be made.
  int fd();
  void Add(std::chrono::milliseconds after, const CmTimer& timer);
  // Forgets the timers of an id that is going away.
  void Cancel(const CmId* id);
  // The timers that are due, removed; reads the timerfd and arms it for the next.
  std::vector<CmTimer> TakeDue();
  // In a forked child: the parent's timers are not ours; closes the child's copy of the fd.
  void Forget();

 private:
  using Clock = std::chrono::steady_clock;
  void Arm();
  int fd_ = -1;
  std::multimap<Clock::time_point, CmTimer> timers_;
};

}  // namespace simverbs::rdmacm
