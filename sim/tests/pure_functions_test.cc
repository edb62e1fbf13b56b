// The functions of libibverbs that need no device (the *_str helpers and the
// rate conversions) must answer exactly as the system's rdma-core does. Both
// libraries are loaded side by side and asked the same questions.

#include <dlfcn.h>
#include <infiniband/verbs.h>

#include <cstring>
#include <string>

#include "gtest/gtest.h"

namespace {

std::string g_sim_lib;
std::string g_system_lib;

class Library {
 public:
  explicit Library(const std::string& path) : handle_(dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) {}
  ~Library() {
    if (handle_) dlclose(handle_);
  }
  bool loaded() const { return handle_ != nullptr; }
  template <typename Fn>
  Fn Get(const char* name, const char* version) const {
    return reinterpret_cast<Fn>(dlvsym(handle_, name, version));
  }

 private:
  void* handle_;
};

class PureFunctionsTest : public ::testing::Test {
 protected:
  PureFunctionsTest() : sim_(g_sim_lib), sys_(g_system_lib) {}
  void SetUp() override {
    ASSERT_TRUE(sim_.loaded()) << g_sim_lib << ": " << dlerror();
    ASSERT_TRUE(sys_.loaded()) << g_system_lib << ": " << dlerror();
  }

  // Calls `name` in both libraries for every value in [lo, hi] and compares.
  template <typename Enum>
  void CompareStrings(const char* name, int lo, int hi) {
    using Fn = const char* (*)(Enum);
    Fn sim = sim_.Get<Fn>(name, "IBVERBS_1.1");
    Fn sys = sys_.Get<Fn>(name, "IBVERBS_1.1");
    ASSERT_NE(sim, nullptr) << name;
    ASSERT_NE(sys, nullptr) << name;
    for (int v = lo; v <= hi; ++v) {
      EXPECT_STREQ(sim(static_cast<Enum>(v)), sys(static_cast<Enum>(v))) << name << "(" << v << ")";
    }
  }

  template <typename R, typename A>
  void CompareValues(const char* name, const char* version, int lo, int hi) {
    using Fn = R (*)(A);
    Fn sim = sim_.Get<Fn>(name, version);
    Fn sys = sys_.Get<Fn>(name, version);
    ASSERT_NE(sim, nullptr) << name;
    ASSERT_NE(sys, nullptr) << name;
    for (int v = lo; v <= hi; ++v) {
      EXPECT_EQ(sim(static_cast<A>(v)), sys(static_cast<A>(v))) << name << "(" << v << ")";
    }
  }

  Library sim_;
  Library sys_;
};

TEST_F(PureFunctionsTest, EventTypeStr) { CompareStrings<ibv_event_type>("ibv_event_type_str", -1, 25); }
TEST_F(PureFunctionsTest, WcStatusStr) { CompareStrings<ibv_wc_status>("ibv_wc_status_str", -1, 30); }
TEST_F(PureFunctionsTest, PortStateStr) { CompareStrings<ibv_port_state>("ibv_port_state_str", -1, 8); }
TEST_F(PureFunctionsTest, NodeTypeStr) { CompareStrings<ibv_node_type>("ibv_node_type_str", -2, 9); }

TEST_F(PureFunctionsTest, RateToMult) { CompareValues<int, ibv_rate>("ibv_rate_to_mult", "IBVERBS_1.0", -1, 30); }
TEST_F(PureFunctionsTest, MultToRate) { CompareValues<ibv_rate, int>("mult_to_ibv_rate", "IBVERBS_1.0", -1, 500); }
TEST_F(PureFunctionsTest, RateToMbps) { CompareValues<int, ibv_rate>("ibv_rate_to_mbps", "IBVERBS_1.1", -1, 30); }

TEST_F(PureFunctionsTest, MbpsToRate) {
  using Fn = ibv_rate (*)(int);
  Fn sim = sim_.Get<Fn>("mbps_to_ibv_rate", "IBVERBS_1.1");
  Fn sys = sys_.Get<Fn>("mbps_to_ibv_rate", "IBVERBS_1.1");
  ASSERT_NE(sim, nullptr);
  ASSERT_NE(sys, nullptr);
  // Every rate's own figure, and the numbers around it.
  using ToMbps = int (*)(ibv_rate);
  ToMbps to_mbps = sys_.Get<ToMbps>("ibv_rate_to_mbps", "IBVERBS_1.1");
  for (int r = 0; r <= 30; ++r) {
    const int mbps = to_mbps(static_cast<ibv_rate>(r));
    for (int m : {mbps - 1, mbps, mbps + 1}) EXPECT_EQ(sim(m), sys(m)) << "mbps_to_ibv_rate(" << m << ")";
  }
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc != 3) {
    fprintf(stderr, "usage: %s SIM_LIBIBVERBS SYSTEM_LIBIBVERBS\n", argv[0]);
    return 2;
  }
  g_sim_lib = argv[1];
  g_system_lib = argv[2];
  return RUN_ALL_TESTS();
}
