// Unit tests of the command-line options.

#include "conformance/lib/options.h"

#include <gtest/gtest.h>

namespace conformance {
namespace {

TEST(OptionsTest, ParsesAllOptionsInBothForms) {
  Options options;
  std::string error;
  ASSERT_TRUE(
      ParseOptions({"--device", "mlx5_0", "--port=2", "--gid-index", "3", "--backend=rxe", "--backends-dir", "/x"},
                   &options, &error))
      << error;
  EXPECT_EQ(options.device, "mlx5_0");
  EXPECT_EQ(options.port, 2);
  EXPECT_EQ(options.gid_index, 3);
  EXPECT_EQ(options.backend, "rxe");
  EXPECT_EQ(options.backends_dir, "/x");
}

TEST(OptionsTest, Defaults) {
  Options options;
  std::string error;
  ASSERT_TRUE(ParseOptions({}, &options, &error));
  EXPECT_EQ(options.device, "");
  EXPECT_EQ(options.port, 1);
  EXPECT_EQ(options.gid_index, 0);
}

TEST(OptionsTest, RejectsUnknownAndBadValues) {
  Options options;
  std::string error;
  EXPECT_FALSE(ParseOptions({"--devcie", "x"}, &options, &error));
  EXPECT_NE(error.find("--devcie"), std::string::npos);
  EXPECT_FALSE(ParseOptions({"--port", "0"}, &options, &error));
  EXPECT_FALSE(ParseOptions({"--port", "1x"}, &options, &error));
  EXPECT_FALSE(ParseOptions({"--gid-index"}, &options, &error));
  EXPECT_NE(error.find("needs a value"), std::string::npos);
}

}  // namespace
}  // namespace conformance
