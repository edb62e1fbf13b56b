#include "conformance/lib/deviation_listener.h"

#include "conformance/lib/sim_control.h"

#include <cstdio>
#include <set>

namespace conformance {
namespace {

std::string FullName(const testing::TestInfo& info) { return std::string(info.test_suite_name()) + "." + info.name(); }

// The skip messages of a result, on one line.
std::string SkipReason(const testing::TestResult& result) {
  std::string reason;
  for (int i = 0; i < result.total_part_count(); ++i) {
    const testing::TestPartResult& part = result.GetTestPartResult(i);
    if (!part.skipped()) continue;
    std::string message = part.message();
    for (char& c : message) {
      if (c == '\n') c = ' ';
    }
    if (!reason.empty()) reason += "; ";
    reason += message;
  }
  return reason.empty() ? "(no reason given)" : reason;
}

}  // namespace

DeviationListener::DeviationListener(const BackendProfile& backend) : backend_(backend) {}

void DeviationListener::OnTestStart(const testing::TestInfo& info) {
  // Lands in the JUnit XML, so a reader sees why a failure there is expected.
  if (const Deviation* deviation = backend_.FindDeviation(FullName(info))) {
    testing::Test::RecordProperty("deviation", deviation->reason);
  }
}

void DeviationListener::OnTestEnd(const testing::TestInfo& info) {
  const std::string name = FullName(info);
  const testing::TestResult& result = *info.result();
  const Deviation* deviation = backend_.FindDeviation(name);
  if (result.Skipped()) {
    ++skipped_;
    std::printf("[  SKIPPED ] %s: %s\n", name.c_str(), SkipReason(result).c_str());
  } else if (result.Failed() && deviation != nullptr) {
    ++deviations_;
    testing::Test::RecordProperty("conformance_outcome", "deviation");
    std::printf("[ DEVIATION ] %s (%s) [%s]\n", name.c_str(), deviation->reason.c_str(), deviation->source.c_str());
  } else if (result.Failed()) {
    failures_.push_back(name);
    // The simulator's choices come from its seed: with it the failure replays.
    if (SimControl::Get().available()) {
      std::printf("[ SEED ] %s: replay with SIMVERBS_SEED=%llu\n", name.c_str(), SimControl::Get().Seed());
    }
  } else if (deviation != nullptr) {
    testing::Test::RecordProperty("conformance_outcome", "unexpected-pass");
    failures_.push_back(name + " (UNEXPECTED PASS)");
    std::printf("[ UNEXPECTED PASS ] %s: listed in %s as a deviation (%s) but it passed; remove the entry\n",
                name.c_str(), backend_.file().c_str(), deviation->reason.c_str());
  } else {
    ++passed_;
  }
  std::fflush(stdout);
}

void DeviationListener::Finish(const testing::UnitTest& unit_test) {
  std::set<std::string> registered;
  for (int i = 0; i < unit_test.total_test_suite_count(); ++i) {
    const testing::TestSuite& suite = *unit_test.GetTestSuite(i);
    for (int j = 0; j < suite.total_test_count(); ++j) registered.insert(FullName(*suite.GetTestInfo(j)));
    if (suite.ad_hoc_test_result().Failed()) {
      failures_.push_back(std::string(suite.name()) + " (suite set-up or tear-down)");
    }
  }
  if (unit_test.ad_hoc_test_result().Failed()) failures_.push_back("(failure outside any test)");
  for (const Deviation& deviation : backend_.deviations()) {
    if (registered.contains(deviation.test)) continue;
    failures_.push_back(deviation.test + " (STALE DEVIATION)");
    std::printf("[ STALE DEVIATION ] %s: listed in %s, but there is no such test; fix or remove the entry\n",
                deviation.test.c_str(), backend_.file().c_str());
  }
}

void DeviationListener::PrintSummary() const {
  for (const std::string& failure : failures_) std::printf("FAILED: %s\n", failure.c_str());
  std::printf("deviations: %d\n", deviations_);
  std::printf("%d passed, %d failed, %d skipped\n", passed_, failed(), skipped_);
  std::fflush(stdout);
}

}  // namespace conformance
