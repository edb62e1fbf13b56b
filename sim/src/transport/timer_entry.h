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
  std::chrono::steady_clock::time_point deadline{};
  size_t index = kNotArmed;  // in Engine::armed_; engine lock
};

}  // namespace simverbs
