// fork() and the library's process-wide locks (fork_locks.h): a fork() made
// while another thread holds one waits until it is let go, so the child finds
// it free and what it guards whole; and a thread that nests them in the
// library's order while another forks does not wait for ever.
//
// Each case runs in a process of its own that SIGALRM ends after 10 s: a
// fork() that waits for ever shows as that signal, not as a hung test.

#include "fork_locks.h"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <mutex>
#include <string>
#include <thread>

#include "device_list.h"
#include "fabric/fabric.h"
#include "sched/scheduler.h"
#include "transport/engine.h"

#include "gtest/gtest.h"

namespace simverbs {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

// A process-wide lock of the library, as a case takes it.
struct LibraryLock {
  const char* name;
  void (*lock)();
  void (*unlock)();
  bool (*try_lock)();
};

Device& FirstDevice() { return *DeviceList::Get().devices().front(); }

// A leaf lock of the test's own, handed in with HoldAcrossFork in the case's process.
std::mutex test_leaf;

const LibraryLock kAttach{"the fabric's attach lock", [] { Fabric::Get().attach_mutex().lock(); },
                          [] { Fabric::Get().attach_mutex().unlock(); },
                          [] { return Fabric::Get().attach_mutex().try_lock(); }};
const LibraryLock kContexts{"the device's contexts lock", [] { FirstDevice().contexts_mutex().lock(); },
                            [] { FirstDevice().contexts_mutex().unlock(); },
                            [] { return FirstDevice().contexts_mutex().try_lock(); }};
const LibraryLock kEngine{"the engine lock", [] { Engine::Get().mu().lock(); }, [] { Engine::Get().mu().unlock(); },
                          [] { return Engine::Get().mu().try_lock(); }};
const LibraryLock kDevice{"the device's lock", [] { FirstDevice().mutex().lock(); },
                          [] { FirstDevice().mutex().unlock(); }, [] { return FirstDevice().mutex().try_lock(); }};
const LibraryLock kLeaf{"a leaf lock handed in", [] { test_leaf.lock(); }, [] { test_leaf.unlock(); },
                        [] { return test_leaf.try_lock(); }};
// The scheduler's lock, as the library takes it (under the device's lock, for a reused QP number).
const LibraryLock kScheduler{"the scheduler's lock", [] { (void)Scheduler::Get().Choose(2); }, [] {},
                             [] { return true; }};

// What a case's process ends with.
constexpr int kEnded = 0, kForkDidNotWait = 10, kLockedInChild = 11, kNoDevice = 12, kChildFailed = 13;

// Makes what the locks belong to, and hands in the test's leaf.
bool MakeLibrary() {
  if (DeviceList::Get().devices().empty()) return false;
  (void)Fabric::Get();
  (void)Engine::Get();
  (void)Scheduler::Get();
  HoldAcrossFork([] { test_leaf.lock(); }, [] { test_leaf.unlock(); });
  return true;
}

// Another thread holds `held` (and, once this thread is in fork(), takes
// `nested` under it, as the library nests them) while this thread forks.
// The child tries `held`.
int ForkWhileAnotherThreadHolds(const LibraryLock& held, const LibraryLock* nested) {
  if (!MakeLibrary()) return kNoDevice;
  enum Stage { kStarting, kHolding, kForking, kForkReturned };
  std::atomic<int> stage{kStarting};
  std::atomic<bool> returned_while_held{false};
  std::atomic<bool> holder_done{false};
  // Detached, and waited for through holder_done: the child of fork()
  // inherits ThreadSanitizer's record of it, and would report a joinable
  // thread that it never joins as leaked.
  std::thread([&] {
    held.lock();
    stage = kHolding;
    while (stage.load() < kForking) std::this_thread::yield();
    // A fork() that does not wait for the lock returns within microseconds.
    const auto until = steady_clock::now() + milliseconds(200);
    while (stage.load() < kForkReturned && steady_clock::now() < until) std::this_thread::yield();
    returned_while_held = stage.load() == kForkReturned;
    if (nested) {
      nested->lock();
      nested->unlock();
    }
    held.unlock();
    holder_done = true;
  }).detach();
  while (stage.load() < kHolding) std::this_thread::yield();
  stage = kForking;
  const pid_t child = fork();
  if (child == 0) _exit(held.try_lock() ? kEnded : kLockedInChild);
  stage = kForkReturned;
  while (!holder_done.load()) std::this_thread::yield();
  int status = 0;
  if (child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status)) return kChildFailed;
  if (returned_while_held) return kForkDidNotWait;
  return WEXITSTATUS(status);
}

// Runs the case in a process of its own, ended by SIGALRM after 10 s.
std::string RunCase(const LibraryLock& held, const LibraryLock* nested = nullptr) {
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(10);
    _exit(ForkWhileAnotherThreadHolds(held, nested));
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return "could not run the case";
  if (WIFSIGNALED(status)) {
    return WTERMSIG(status) == SIGALRM ? "fork() still waiting after 10 s (the locks taken out of order?)"
                                       : "the case died of signal " + std::to_string(WTERMSIG(status));
  }
  switch (WEXITSTATUS(status)) {
    case kEnded: return "";
    case kForkDidNotWait: return "fork() returned while another thread held it";
    case kLockedInChild: return "the child of fork() found it locked";
    case kNoDevice: return "the profile has no device";
    case kChildFailed: return "fork() failed, or its child died of a signal";
    default: return "the case ended with " + std::to_string(WEXITSTATUS(status));
  }
}

// Rule: a fork() waits for each process-wide lock another thread holds, and the child finds it free.
TEST(ForkLocksTest, ForkWaitsForEachProcessWideLockAnotherThreadHolds) {
  for (const LibraryLock* held : {&kAttach, &kContexts, &kEngine, &kDevice, &kLeaf}) {
    EXPECT_EQ(RunCase(*held), "") << held->name;
  }
}

// Rule: a fork() while another thread nests the locks in the library's order does not wait for ever.
TEST(ForkLocksTest, ForkWhileAnotherThreadNestsTheLocksEnds) {
  const std::pair<const LibraryLock*, const LibraryLock*> nestings[] = {
      {&kAttach, &kContexts}, {&kContexts, &kEngine}, {&kEngine, &kDevice}, {&kDevice, &kScheduler},
      {&kDevice, &kLeaf}};
  for (const auto& [outer, inner] : nestings) {
    EXPECT_EQ(RunCase(*outer, inner), "") << outer->name << ", then " << inner->name;
  }
}

}  // namespace
}  // namespace simverbs
