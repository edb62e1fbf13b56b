#pragma once

#include <gtest/gtest.h>

#include <chrono>

namespace conformance {

// Safety net for the main process: a test that runs past its deadline (say a
// destroy stuck waiting for an ack that a bug swallowed, outside any watchdog
// child) ends the run with its name instead of hanging until an outer timeout.
//
// It uses an interval timer and SIGALRM rather than a watcher thread: the main
// process must stay single-threaded, because the watchdog forks it and a fork
// taken while another thread holds a lock (in malloc, in a sanitizer runtime)
// can deadlock the child. Timers are not inherited across fork.
class TestDeadline : public testing::EmptyTestEventListener {
 public:
  explicit TestDeadline(std::chrono::milliseconds limit);
  ~TestDeadline() override;

  // For a test that waits on purpose longer than the usual deadline (a
  // kernel timeout of a minute or more): its deadline is now `limit` from now.
  // Outside a test, or with no deadline installed, it does nothing.
  static void Extend(std::chrono::milliseconds limit);

  void OnTestStart(const testing::TestInfo& info) override;
  void OnTestEnd(const testing::TestInfo& info) override;

 private:
  const std::chrono::milliseconds limit_;
};

}  // namespace conformance
