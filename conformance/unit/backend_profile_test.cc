// Unit tests of backend answer files and backend selection.

#include "conformance/lib/backend_profile.h"

#include <gmock/gmock.h>
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "conformance/lib/backend_selection.h"

namespace conformance {
namespace {

using ::testing::HasSubstr;

class BackendProfileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/backend-profile-test.XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }

  std::filesystem::path dir_;
};

TEST_F(BackendProfileTest, LoadsAnswersAndDeviations) {
  const std::string path = Write("b.json", R"({"backend": "b", "description": "d",
      "questions": {"Flag": false, "Text": "x"},
      "deviations": [{"test": "A.B", "reason": "r", "source": "s"}]})");
  std::string error;
  auto profile = BackendProfile::Load("b", path, &error);
  ASSERT_TRUE(profile.has_value()) << error;
  EXPECT_EQ(profile->file(), path);
  EXPECT_FALSE(profile->Answer("Flag", true));
  EXPECT_EQ(profile->Answer("Text", "y"), "x");
  EXPECT_TRUE(profile->Answer("Missing", true));
  EXPECT_EQ(profile->Answer("MissingText", "spec"), "spec");
  ASSERT_NE(profile->FindDeviation("A.B"), nullptr);
  EXPECT_EQ(profile->FindDeviation("A.B")->reason, "r");
  EXPECT_EQ(profile->FindDeviation("A.C"), nullptr);
  EXPECT_TRUE(profile->UnaskedQuestions().empty());
}

TEST_F(BackendProfileTest, ReportsUnaskedQuestions) {
  std::string error;
  auto profile = BackendProfile::Load("b", Write("b.json", R"({"questions": {"Asked": true, "Stale": true}})"), &error);
  ASSERT_TRUE(profile.has_value()) << error;
  profile->Answer("Asked", false);
  EXPECT_THAT(profile->UnaskedQuestions(), ::testing::ElementsAre("Stale"));
}

TEST_F(BackendProfileTest, RejectsMalformedFiles) {
  std::string error;
  EXPECT_FALSE(BackendProfile::Load("b", Write("a.json", "{"), &error).has_value());
  EXPECT_FALSE(BackendProfile::Load("b", Write("b.json", R"({"questions": {"Q": 1}})"), &error).has_value());
  EXPECT_THAT(error, HasSubstr("questions.Q"));
  EXPECT_FALSE(BackendProfile::Load("b", Write("c.json", R"({"deviations": [{"test": "A.B"}]})"), &error).has_value());
  EXPECT_THAT(error, HasSubstr("deviations[0].reason"));
  EXPECT_FALSE(BackendProfile::Load("b", (dir_ / "missing.json").string(), &error).has_value());
}

TEST_F(BackendProfileTest, WrongAnswerTypeIsAFailure) {
  std::string error;
  auto profile = BackendProfile::Load("b", Write("b.json", R"({"questions": {"Q": "yes"}})"), &error);
  ASSERT_TRUE(profile.has_value()) << error;
  EXPECT_NONFATAL_FAILURE(profile->Answer("Q", true), "answered with a string");
}

TEST_F(BackendProfileTest, SpecDefaultsWithoutAFile) {
  BackendProfile profile("hw");
  EXPECT_TRUE(profile.file().empty());
  EXPECT_TRUE(profile.Answer("Anything", true));
  EXPECT_FALSE(profile.Answer("Anything", false));
  EXPECT_TRUE(profile.deviations().empty());
}

TEST_F(BackendProfileTest, SelectsBackend) {
  const std::string dir = dir_.string();
  EXPECT_EQ(SelectBackend("", true, "sim0", dir).name, "sim");
  EXPECT_EQ(SelectBackend("", true, "sim0", dir).path, dir + "/sim.json");
  EXPECT_EQ(SelectBackend("", false, "mlx5_0", dir).name, "hw");
  EXPECT_EQ(SelectBackend("custom", true, "sim0", dir).path, dir + "/custom.json");
  const BackendSelection rxe = SelectBackend("", false, "rxe0", dir);
  EXPECT_EQ(rxe.name, "rxe");
  EXPECT_FALSE(rxe.kernel.empty());
  EXPECT_EQ(rxe.path, dir + "/rxe.json") << "no per-kernel file exists yet";
}

TEST_F(BackendProfileTest, SelectsPerKernelRxeFile) {
  const std::string kernel = KernelRelease();
  const size_t first = kernel.find('.');
  ASSERT_NE(first, std::string::npos);
  size_t end = first + 1;
  while (end < kernel.size() && std::isdigit(static_cast<unsigned char>(kernel[end]))) ++end;
  const std::string series = kernel.substr(0, end);
  Write("rxe-" + series + ".json", "{}");
  EXPECT_EQ(SelectBackend("", false, "rxe0", dir_.string()).path, (dir_ / ("rxe-" + series + ".json")).string());
}

}  // namespace
}  // namespace conformance
