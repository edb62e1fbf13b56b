// verbs-conformance: checks the verbs semantics of whatever libibverbs the
// loader picks (the simulator through LD_LIBRARY_PATH, rxe or real hardware).

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "conformance/lib/backend_profile.h"
#include "conformance/lib/backend_selection.h"
#include "conformance/lib/banner.h"
#include "conformance/lib/deviation_listener.h"
#include "conformance/lib/device_opener.h"
#include "conformance/lib/options.h"
#include "conformance/lib/sim_control.h"
#include "conformance/lib/test_deadline.h"
#include "conformance/lib/timeouts.h"

#ifndef VERBS_CONFORMANCE_BACKENDS_DIR
#define VERBS_CONFORMANCE_BACKENDS_DIR "fixtures/backends"
#endif

namespace {

// Exit code for a run that could not start (bad option, no device, broken
// backend file), as opposed to 1 for failed tests.
constexpr int kUsageError = 2;

bool WantsHelp(const std::vector<std::string>& args) {
  for (const std::string& arg : args) {
    if (arg == "--help" || arg == "-h" || arg == "-?") return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  // Takes the --gtest_* and --gmock_* flags out of argv; ours remain.
  testing::InitGoogleMock(&argc, argv);
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (WantsHelp(args)) {
    std::printf("\n%s", conformance::OptionsUsage().c_str());
    return 0;
  }

  conformance::Options options;
  options.backends_dir = VERBS_CONFORMANCE_BACKENDS_DIR;
  std::string error;
  if (!conformance::ParseOptions(args, &options, &error)) {
    std::fprintf(stderr, "verbs-conformance: %s\n%s", error.c_str(), conformance::OptionsUsage().c_str());
    return kUsageError;
  }
  conformance::SetCurrentOptions(options);
  if (GTEST_FLAG_GET(list_tests)) return RUN_ALL_TESTS();

  conformance::ContextPtr context = conformance::OpenDeviceByName(options.device, &error);
  if (!context) {
    std::fprintf(stderr, "verbs-conformance: %s\n", error.c_str());
    return kUsageError;
  }
  const char* device_name = ibv_get_device_name(context->device);
  const conformance::BackendSelection selection =
      conformance::SelectBackend(options.backend, conformance::SimControl::Get().available(),
                                 device_name ? device_name : "", options.backends_dir);
  if (std::filesystem::exists(selection.path)) {
    std::optional<conformance::BackendProfile> profile =
        conformance::BackendProfile::Load(selection.name, selection.path, &error);
    if (!profile) {
      std::fprintf(stderr, "verbs-conformance: bad backend file: %s\n", error.c_str());
      return kUsageError;
    }
    conformance::SetBackend(std::move(*profile));
  } else {
    conformance::SetBackend(conformance::BackendProfile(selection.name));
  }
  if (!conformance::PrintBanner(context.get(), options, selection, conformance::Backend())) {
    return kUsageError;
  }
  // Every test opens its own context.
  context.reset();

  testing::TestEventListeners& listeners = testing::UnitTest::GetInstance()->listeners();
  auto* results = new conformance::DeviationListener(conformance::Backend());
  listeners.Append(results);  // owned by GoogleTest from here on
  auto* deadline = new conformance::TestDeadline(conformance::kTestDeadline);
  listeners.Append(deadline);

  // The verdict is the listener's: GoogleTest counts deviations as failures.
  [[maybe_unused]] const int gtest_verdict = RUN_ALL_TESTS();

  delete listeners.Release(deadline);
  results->Finish(*testing::UnitTest::GetInstance());
  if (GTEST_FLAG_GET(filter) == "*") {
    for (const std::string& question : conformance::Backend().UnaskedQuestions()) {
      std::printf("note: %s answers %s, but no test asked it\n", conformance::Backend().file().c_str(),
                  question.c_str());
    }
  }
  results->PrintSummary();
  if (testing::UnitTest::GetInstance()->test_to_run_count() == 0) {
    // A filter that names no test (a typo, a renamed test) must not pass for a run.
    std::fprintf(stderr, "verbs-conformance: --gtest_filter=%s selects no test (--gtest_list_tests lists them)\n",
                 GTEST_FLAG_GET(filter).c_str());
    return kUsageError;
  }
  return results->ExitCode();
}
