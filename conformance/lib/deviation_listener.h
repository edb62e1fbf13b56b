#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "conformance/lib/backend_profile.h"

namespace conformance {

// Turns GoogleTest results into conformance results using the backend's
// deviation list:
//   listed test fails    -> DEVIATION (reason), not a failure
//   listed test passes   -> UNEXPECTED PASS, a failure (the list must not go stale)
//   unlisted test fails  -> a failure
//   skipped              -> skipped, with the reason printed
// main() returns ExitCode() instead of RUN_ALL_TESTS()'s verdict.
class DeviationListener : public testing::EmptyTestEventListener {
 public:
  explicit DeviationListener(const BackendProfile& backend);

  void OnTestStart(const testing::TestInfo& info) override;
  void OnTestEnd(const testing::TestInfo& info) override;

  // Counts what happened outside tests (suite set-up, global failures) and
  // deviation entries that name no test at all. Call once after the run.
  void Finish(const testing::UnitTest& unit_test);

  // "deviations: N" and then "N passed, N failed, N skipped".
  void PrintSummary() const;

  int passed() const { return passed_; }
  int failed() const { return static_cast<int>(failures_.size()); }
  int skipped() const { return skipped_; }
  int deviations() const { return deviations_; }
  int ExitCode() const { return failures_.empty() ? 0 : 1; }

 private:
  const BackendProfile& backend_;
  int passed_ = 0;
  int skipped_ = 0;
  int deviations_ = 0;
  std::vector<std::string> failures_;  // what failed and why it counts
};

}  // namespace conformance
