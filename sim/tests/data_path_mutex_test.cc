// The engine lock: mutual exclusion under contention, and a waiter that went
// to sleep on the futex is woken by the unlock.

#include "transport/data_path_mutex.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <fstream>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace simverbs {
namespace {

using std::chrono::seconds;

// More threads than this machine's CPUs: waiters spin, then sleep, then are woken.
TEST(DataPathMutexTest, ExcludesUnderContention) {
  DataPathMutex mu;
  constexpr int kThreads = 4, kRounds = 100000;
  long counter = 0;  // plain: only the lock orders the increments
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kRounds; ++i) {
        std::lock_guard<DataPathMutex> lock(mu);
        ++counter;
      }
    });
  }
  // A lost wake-up leaves a thread asleep for good: a watchdog, not a hang.
  std::promise<void> joined;
  std::thread joiner([&] {
    for (std::thread& t : threads) t.join();
    joined.set_value();
  });
  if (joined.get_future().wait_for(seconds(60)) != std::future_status::ready) {
    std::fprintf(stderr, "DataPathMutexTest: %d threads contending did not finish in 60 s\n", kThreads);
    std::_Exit(1);
  }
  joiner.join();
  EXPECT_EQ(counter, long{kThreads} * kRounds);
}

TEST(DataPathMutexTest, TryLockFailsWhileHeld) {
  DataPathMutex mu;
  mu.lock();
  bool taken = true;
  std::thread([&] { taken = mu.try_lock(); }).join();
  EXPECT_FALSE(taken);
  mu.unlock();
  ASSERT_TRUE(mu.try_lock());
  mu.unlock();
}

// The state letter of a thread of this process ('S': asleep).
char ThreadState(pid_t tid) {
  std::ifstream stat("/proc/self/task/" + std::to_string(tid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const size_t close = line.rfind(')');
  return close == std::string::npos || close + 2 >= line.size() ? '?' : line[close + 2];
}

TEST(DataPathMutexTest, UnlockWakesASleepingWaiter) {
  DataPathMutex mu;
  mu.lock();
  std::atomic<pid_t> waiter_tid{0};
  std::promise<void> got_it;
  std::thread waiter([&] {
    waiter_tid = static_cast<pid_t>(syscall(SYS_gettid));
    mu.lock();
    got_it.set_value();
    mu.unlock();
  });
  // Its spinning is bounded: it goes to sleep on the futex.
  const auto deadline = std::chrono::steady_clock::now() + seconds(10);
  bool asleep = false;
  while (!asleep && std::chrono::steady_clock::now() < deadline) {
    const pid_t tid = waiter_tid.load();
    asleep = tid != 0 && ThreadState(tid) == 'S';
    if (!asleep) std::this_thread::yield();
  }
  EXPECT_TRUE(asleep) << "the waiter never went to sleep in 10 s";
  mu.unlock();
  const bool woken = got_it.get_future().wait_for(seconds(10)) == std::future_status::ready;
  if (!woken) {
    // The waiter would block the join for good: end the run with the reason.
    std::fprintf(stderr, "DataPathMutexTest: the unlock did not wake the sleeping waiter within 10 s\n");
    std::_Exit(1);
  }
  waiter.join();
}

}  // namespace
}  // namespace simverbs
