#pragma once

// A QP's transport (or RNR) timer, kept in the QP itself: the engine keeps a
// list of the QPs whose timer is armed, and arming, re-arming and cancelling
// allocate nothing (a ping-pong arms and cancels once per message).

#include <chrono>
#include <cstddef>
#include <limits>

namespace simverbs {

struct TimerEntry {
  static constexpr size_t kNotArmed = std::numeric_limits<size_t>::max();
  // Until `stamped`, the deadline is `duration` from the timer thread's next
  // look (Engine::ArmTimer: posting reads no clock).
  std::chrono::steady_clock::time_point deadline{};
  std::chrono::nanoseconds duration{};
  bool stamped = true;
  size_t index = kNotArmed;  // in Engine::armed_; engine lock
};

}  // namespace simverbs
