// Unit test of the per-test safety net of the main process.

#include "conformance/lib/test_deadline.h"

#include <gtest/gtest.h>
#include <sys/select.h>
#include <unistd.h>

#include "conformance/lib/timeouts.h"
#include "conformance/lib/watchdog.h"

namespace conformance {
namespace {

TEST(TestDeadlineTest, EndsAStuckTestWithExitCode3) {
  const testing::TestInfo& info = *testing::UnitTest::GetInstance()->current_test_info();
  const ChildResult result = RunInChild(
      [&info] {
        TestDeadline deadline(100ms);
        deadline.OnTestStart(info);
        for (;;) pause();
        return 0;
      },
      5000ms, "the test deadline to fire");
  EXPECT_EQ(result.status, ChildResult::Status::kExited) << result.Describe();
  EXPECT_EQ(result.exit_code, 3);
}

TEST(TestDeadlineTest, DisarmsAtTestEnd) {
  const testing::TestInfo& info = *testing::UnitTest::GetInstance()->current_test_info();
  const ChildResult result = RunInChild(
      [&info] {
        TestDeadline deadline(100ms);
        deadline.OnTestStart(info);
        deadline.OnTestEnd(info);
        // Outlive the limit (a bounded wait for a negative): a disarmed
        // deadline must not fire.
        timeval wait = {0, 300000};
        (void)select(0, nullptr, nullptr, nullptr, &wait);
        return 0;
      },
      5000ms, "a disarmed deadline");
  EXPECT_TRUE(Passed(result));
}

TEST(TestDeadlineTest, ExtendMovesTheDeadlineLater) {
  const testing::TestInfo& info = *testing::UnitTest::GetInstance()->current_test_info();
  const ChildResult result = RunInChild(
      [&info] {
        TestDeadline deadline(100ms);
        deadline.OnTestStart(info);
        TestDeadline::Extend(1000ms);
        // Past the first limit (a bounded wait for a negative), within the new one.
        timeval wait = {0, 300000};
        (void)select(0, nullptr, nullptr, nullptr, &wait);
        deadline.OnTestEnd(info);
        return 0;
      },
      5000ms, "an extended deadline");
  EXPECT_TRUE(Passed(result));
  // And it still fires, with the new limit.
  const ChildResult fired = RunInChild(
      [&info] {
        TestDeadline deadline(100ms);
        deadline.OnTestStart(info);
        TestDeadline::Extend(200ms);
        for (;;) pause();
        return 0;
      },
      5000ms, "the extended deadline to fire");
  EXPECT_EQ(fired.status, ChildResult::Status::kExited) << fired.Describe();
  EXPECT_EQ(fired.exit_code, 3);
}

TEST(TestDeadlineTest, ExtendWithoutADeadlineDoesNothing) {
  const ChildResult result = RunInChild(
      [] {
        TestDeadline::Extend(100ms);
        // Past that time (a bounded wait for a negative): no SIGALRM may end the process.
        timeval wait = {0, 300000};
        (void)select(0, nullptr, nullptr, nullptr, &wait);
        return 0;
      },
      5000ms, "Extend with no deadline installed");
  EXPECT_TRUE(Passed(result));
}

}  // namespace
}  // namespace conformance
