#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>

#include "conformance/lib/blocking_call.h"

namespace conformance {

// How a watchdog child ended.
struct ChildResult {
  enum class Status { kNotStarted, kExited, kKilledBySignal, kTimedOut };

  Status status = Status::kNotStarted;
  int exit_code = -1;  // kExited
  int signal = 0;      // kKilledBySignal
  std::chrono::milliseconds elapsed{0};
  std::chrono::milliseconds timeout{0};
  std::string what;    // what the child was waiting for / checking
  std::string output;  // the failures the child reported, one per line
  std::string error;   // kNotStarted: why

  bool ok() const { return status == Status::kExited && exit_code == 0; }
  std::string Describe() const;
};

// Forks; the child runs body and _exits with its return value. Any gtest
// failure the child records (on any thread) is sent to the parent and turns
// a 0 into 1. The parent waits on a pidfd (or the report pipe) for at most
// timeout and SIGKILLs the child when it runs out, so a call stuck forever
// (say in libibverbs' pthread_cond_wait) can never hang the run.
ChildResult RunInChild(std::function<int()> body, std::chrono::milliseconds timeout, std::string what);

// RunInChild for a body made of gtest checks (ASSERT_* works inside).
ChildResult RunChecksInChild(std::function<void()> body, std::chrono::milliseconds timeout, std::string what);

// For EXPECT_TRUE(Passed(RunInChild(...))): the child's report on failure.
testing::AssertionResult Passed(const ChildResult& result);

// The caller's file and line, for failures reported at the call site. Not
// std::source_location: clang 14 (the ThreadSanitizer build, see scripts/test)
// cannot compile libstdc++ 12's. Both compilers fill these builtins in at the
// call site when they are default arguments.
struct CallSite {
  static constexpr CallSite Here(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    return CallSite{file, line};
  }
  const char* file;
  int line;
};

// Blocking checks on a BlockingCall, for use inside a watchdog child. Each
// records a gtest failure at the caller's line and returns false when the
// check fails.

// The call has not returned within window (a bounded wait for a negative).
bool ExpectBlocks(BlockingCall& call, std::chrono::milliseconds window,
                  CallSite where = CallSite::Here());

// The call is still blocked; after unblock() it returns within `within`.
// unblock is not run when the call already returned.
bool ExpectReturnsAfter(BlockingCall& call, const std::function<void()>& unblock, std::chrono::milliseconds within,
                        CallSite where = CallSite::Here());

// The call returns within `within` without help.
bool ExpectReturnsWithin(BlockingCall& call, std::chrono::milliseconds within,
                         CallSite where = CallSite::Here());

}  // namespace conformance
