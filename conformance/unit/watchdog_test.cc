// Unit tests of the watchdog: the conformance suite's guarantee that a stuck
// verbs call fails one test instead of hanging the run rests on it.

#include "conformance/lib/watchdog.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <future>

#include "conformance/lib/blocking_call.h"
#include "conformance/lib/timeouts.h"

namespace conformance {
namespace {

using ::testing::HasSubstr;

TEST(WatchdogTest, ReportsExitCode) {
  const ChildResult result = RunInChild([] { return 3; }, 5000ms, "an exit code");
  EXPECT_EQ(result.status, ChildResult::Status::kExited);
  EXPECT_EQ(result.exit_code, 3);
  EXPECT_FALSE(result.ok());
  EXPECT_TRUE(RunInChild([] { return 0; }, 5000ms, "success").ok());
}

TEST(WatchdogTest, ReportsFailedChecksWithTheirLocation) {
  const ChildResult result = RunChecksInChild([] { EXPECT_EQ(1, 2) << "marker-text"; }, 5000ms, "a failing check");
  EXPECT_EQ(result.status, ChildResult::Status::kExited);
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.output, HasSubstr("watchdog_test.cc"));
  EXPECT_THAT(result.output, HasSubstr("marker-text"));
  EXPECT_THAT(result.Describe(), HasSubstr("marker-text"));
}

TEST(WatchdogTest, KillsChildOnTimeout) {
  const auto started = std::chrono::steady_clock::now();
  const ChildResult result = RunInChild(
      [] {
        for (;;) pause();
        return 0;
      },
      150ms, "something that never happens");
  const auto took = std::chrono::steady_clock::now() - started;
  EXPECT_EQ(result.status, ChildResult::Status::kTimedOut);
  EXPECT_THAT(result.Describe(), HasSubstr("timed out after 150 ms waiting for something that never happens"));
  EXPECT_LT(took, 5000ms);
  EXPECT_GE(took, 150ms);
}

TEST(WatchdogTest, ReportsSignals) {
  const ChildResult result = RunInChild(
      [] {
        kill(getpid(), SIGKILL);
        return 0;
      },
      5000ms, "a signal");
  EXPECT_EQ(result.status, ChildResult::Status::kKilledBySignal);
  EXPECT_EQ(result.signal, SIGKILL);
}

TEST(WatchdogTest, ExpectBlocksFailsForACallThatReturns) {
  const int call_line = __LINE__ + 4;  // the ExpectBlocks line below
  const ChildResult result = RunChecksInChild(
      [] {
        BlockingCall call([] { return 7; });
        ExpectBlocks(call, 200ms);
      },
      5000ms, "a call that returns at once");
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.output, HasSubstr("expected the call to block"));
  // The failure points at the test's line, not into watchdog.cc.
  EXPECT_THAT(result.output, HasSubstr("watchdog_test.cc:" + std::to_string(call_line) + ":"));
}

TEST(WatchdogTest, ExpectReturnsAfterUnblocks) {
  const ChildResult result = RunChecksInChild(
      [] {
        auto gate = std::make_shared<std::promise<void>>();
        std::shared_future<void> opened = gate->get_future().share();
        BlockingCall call([opened] {
          opened.wait();
          return 5;
        });
        ASSERT_TRUE(ExpectBlocks(call, 100ms));
        ASSERT_TRUE(ExpectReturnsAfter(
            call, [gate] { gate->set_value(); }, 2000ms));
        EXPECT_EQ(call.result(), 5);
      },
      5000ms, "a gated call");
  EXPECT_TRUE(Passed(result));
}

TEST(WatchdogTest, ExpectReturnsAfterFailsWhenStillBlocked) {
  const ChildResult result = RunChecksInChild(
      [] {
        BlockingCall call([] {
          for (;;) pause();
          return 0;
        });
        ExpectReturnsAfter(
            call, [] {}, 100ms);
      },
      5000ms, "a call nothing unblocks");
  EXPECT_EQ(result.status, ChildResult::Status::kExited);
  EXPECT_THAT(result.output, HasSubstr("still blocked 100 ms after it was unblocked"));
}

}  // namespace
}  // namespace conformance
