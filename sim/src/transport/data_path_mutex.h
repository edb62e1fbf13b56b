#pragma once

// The data path's locks (Engine::mu, and each CQ's): a futex mutex whose
// uncontended lock and unlock are one atomic instruction each, inlined into
// the verb that takes it. A ping-pong message takes these locks several times
// on each side, and pthread_mutex_lock and unlock are calls that check the
// mutex type and count users as well (about 3% of ib_send_lat's one-way
// time). A waiter spins briefly before it sleeps (the lock is held for the
// microseconds of a verb); unlock wakes one sleeper only when one may be
// asleep. Process-private (the fabric's shared memory has locks of its own),
// and never throws.

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

#include "transport/lock_spinning.h"

namespace simverbs {

class DataPathMutex {
 public:
  void lock() {
    uint32_t expected = kFree;
    if (__builtin_expect(state_.compare_exchange_strong(expected, kLocked, std::memory_order_acquire), 1)) return;
    LockContended();
  }
  bool try_lock() {
    uint32_t expected = kFree;
    return state_.compare_exchange_strong(expected, kLocked, std::memory_order_acquire);
  }
  void unlock() {
    if (__builtin_expect(state_.exchange(kFree, std::memory_order_release) == kSleepers, 0)) WakeOne();
  }

 private:
  // kSleepers: held, and a waiter may be asleep on the futex.
  static constexpr uint32_t kFree = 0, kLocked = 1, kSleepers = 2;
  static constexpr int kSpins = 100;

  void LockContended() {
    for (int i = 0; i < kSpins; ++i) {
      CpuRelax();
      uint32_t expected = kFree;
      if (state_.load(std::memory_order_relaxed) == kFree &&
          state_.compare_exchange_weak(expected, kLocked, std::memory_order_acquire)) {
        return;
      }
    }
    // Taken as kSleepers from here on: our unlock wakes whoever else sleeps.
    while (state_.exchange(kSleepers, std::memory_order_acquire) != kFree) {
      syscall(SYS_futex, reinterpret_cast<uint32_t*>(&state_), FUTEX_WAIT_PRIVATE, kSleepers, nullptr, nullptr,
              0);
    }
  }
  void WakeOne() {
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&state_), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
  }

  std::atomic<uint32_t> state_{kFree};
};

}  // namespace simverbs
