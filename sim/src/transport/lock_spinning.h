#pragma once

// Taking the engine lock from a helper thread (progress, timers) without
// going to sleep on it while the application holds it for the microseconds
// of a verb: a sleeping waiter costs the application a wake-up system call
// when it unlocks, and one that keeps failing to take the lock after each
// wake-up (the application takes it back first) costs one per verb.

#include <mutex>

namespace simverbs {

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Takes `mu` if it is free, or becomes free within `spins` pauses; the
// returned lock does not own it otherwise.
template <typename Mutex>
inline std::unique_lock<Mutex> TryLockSpinning(Mutex& mu, int spins = 4096) {
  std::unique_lock<Mutex> lock(mu, std::try_to_lock);
  for (int i = 0; i < spins && !lock.owns_lock(); ++i) {
    CpuRelax();
    if (i % 16 == 15) (void)lock.try_lock();
  }
  return lock;
}

// The same, then waits asleep: for a holder that keeps the lock longer.
template <typename Mutex>
inline std::unique_lock<Mutex> LockSpinningFirst(Mutex& mu) {
  std::unique_lock<Mutex> lock = TryLockSpinning(mu);
  if (!lock.owns_lock()) lock.lock();
  return lock;
}

}  // namespace simverbs
