#pragma once

#include <chrono>

namespace conformance {

using std::chrono_literals::operator""ms;
using std::chrono_literals::operator""s;

// How long a call must stay blocked to count as "waits" (a bounded wait for a
// negative: it cannot prove "forever", only "not within this window").
inline constexpr std::chrono::milliseconds kBlockWindow = 200ms;
// How long an unblocked call, or an event that should be there, may take.
inline constexpr std::chrono::milliseconds kReturnWindow = 2000ms;
// How long to watch for an event that must not come.
inline constexpr std::chrono::milliseconds kQuietWindow = 50ms;
// The limit for a whole watchdog child.
inline constexpr std::chrono::milliseconds kChildTimeout = 10000ms;
// The safety net for a whole test in the main process.
inline constexpr std::chrono::milliseconds kTestDeadline = 60000ms;

}  // namespace conformance
