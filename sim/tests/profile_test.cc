// Profiles: the shipped ones load, and a broken one is an error that names
// the file and the field.

#include "profile.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace simverbs {
namespace {

using ::testing::HasSubstr;
using nlohmann::json;

std::string FixturePath(const std::string& name) {
  const char* dir = std::getenv("SIMVERBS_TEST_FIXTURES");
  return std::string(dir ? dir : "fixtures") + "/devices/" + name + ".json";
}

json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

// Writes `j` (or raw text) to a temporary file that lives as long as the object.
class TempProfile {
 public:
  explicit TempProfile(const std::string& text) {
    char name[] = "/tmp/simverbs-profile-XXXXXX.json";
    const int fd = mkstemps(name, 5);
    path_ = name;
    (void)!write(fd, text.data(), text.size());
    close(fd);
  }
  explicit TempProfile(const json& j) : TempProfile(j.dump(2)) {}
  ~TempProfile() { unlink(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string LoadError(const json& j) {
  TempProfile t(j);
  ProfileLoad load = LoadProfileFile(t.path());
  EXPECT_THAT(load.error, HasSubstr(t.path())) << "the error must name the file";
  return load.error;
}

TEST(ProfileTest, DefaultProfileIsInfiniBandWithLid) {
  ProfileLoad load = LoadProfileFile(FixturePath("sim-ib"));
  ASSERT_EQ(load.error, "");
  ASSERT_EQ(load.profile.devices.size(), 2u) << "sim0 and sim1 on one fabric";
  const DeviceProfile& d = load.profile.devices[0];
  EXPECT_EQ(d.name, "sim0");
  EXPECT_EQ(load.profile.devices[1].name, "sim1");
  EXPECT_NE(load.profile.devices[1].ports[0].attr.lid, d.ports[0].attr.lid);
  ASSERT_EQ(d.ports.size(), 1u);
  EXPECT_EQ(d.ports[0].attr.state, IBV_PORT_ACTIVE);
  EXPECT_EQ(d.ports[0].attr.link_layer, IBV_LINK_LAYER_INFINIBAND);
  EXPECT_NE(d.ports[0].attr.lid, 0);
  EXPECT_EQ(d.attr_ex.orig_attr.phys_port_cnt, 1);
}

TEST(ProfileTest, RoceProfileHasIpv4MappedAndLinkLocalRoceV2Gids) {
  ProfileLoad load = LoadProfileFile(FixturePath("sim-roce"));
  ASSERT_EQ(load.error, "");
  const PortProfile& port = load.profile.devices[0].ports[0];
  EXPECT_EQ(port.attr.link_layer, IBV_LINK_LAYER_ETHERNET);
  bool link_local_v2 = false, ipv4_mapped_v2 = false;
  for (const GidProfile& g : port.gids) {
    if (g.kind != GidKind::kRoceV2) continue;
    link_local_v2 |= g.gid.raw[0] == 0xfe && g.gid.raw[1] == 0x80;
    ipv4_mapped_v2 |= g.gid.raw[10] == 0xff && g.gid.raw[11] == 0xff && g.gid.raw[0] == 0;
  }
  EXPECT_TRUE(link_local_v2);
  EXPECT_TRUE(ipv4_mapped_v2);
}

TEST(ProfileTest, LoadByNameFindsShippedProfile) {
  ProfileLoad load = LoadProfile("sim-roce");
  ASSERT_EQ(load.error, "");
  EXPECT_EQ(load.profile.name, "sim-roce");
}

TEST(ProfileTest, BehaviourDefaultsAndChoices) {
  json j = ReadJson(FixturePath("sim-ib"));
  {
    TempProfile t(j);
    ProfileLoad load = LoadProfileFile(t.path());
    ASSERT_EQ(load.error, "");
    EXPECT_EQ(load.profile.behaviour.cq_overrun, Behaviour::CqOverrun::kCascade);
  }
  j["behaviour"] = {{"cq_overrun", "rxe-6.1"}, {"qp_access_err_event", false}};
  TempProfile t(j);
  ProfileLoad load = LoadProfileFile(t.path());
  ASSERT_EQ(load.error, "");
  EXPECT_EQ(load.profile.behaviour.cq_overrun, Behaviour::CqOverrun::kRxe61);
  EXPECT_FALSE(load.profile.behaviour.qp_access_err_event);
}

TEST(ProfileTest, BadBehaviourIsNamed) {
  json j = ReadJson(FixturePath("sim-ib"));
  j["behaviour"] = {{"cq_overrun", "explode"}};
  EXPECT_THAT(LoadError(j), HasSubstr("behaviour.cq_overrun: unknown value \"explode\""));
}

TEST(ProfileTest, UnknownNameListsAvailableProfiles) {
  ProfileLoad load = LoadProfile("no-such-profile");
  EXPECT_THAT(load.error, HasSubstr("unknown profile \"no-such-profile\""));
  EXPECT_THAT(load.error, HasSubstr("sim-ib"));
}

TEST(ProfileTest, MissingFieldIsNamed) {
  json j = ReadJson(FixturePath("sim-ib"));
  j["devices"][0]["device"].erase("max_cqe");
  EXPECT_THAT(LoadError(j), HasSubstr("devices[0].device.max_cqe: missing field"));
}

TEST(ProfileTest, WrongTypeIsNamed) {
  json j = ReadJson(FixturePath("sim-ib"));
  j["devices"][0]["ports"][0]["lid"] = "one";
  EXPECT_THAT(LoadError(j), HasSubstr("devices[0].ports[0].lid: expected an unsigned integer"));
}

TEST(ProfileTest, UnknownFieldIsRejected) {
  json j = ReadJson(FixturePath("sim-ib"));
  j["devices"][0]["device"]["max_cqes"] = 5;
  EXPECT_THAT(LoadError(j), HasSubstr("devices[0].device.max_cqes: unknown field"));
}

TEST(ProfileTest, BadEnumListsChoices) {
  json j = ReadJson(FixturePath("sim-ib"));
  j["devices"][0]["ports"][0]["state"] = "UP";
  EXPECT_THAT(LoadError(j), HasSubstr("devices[0].ports[0].state: unknown value \"UP\" (expected one of: DOWN"));
}

TEST(ProfileTest, BadMtuIsRejected) {
  json j = ReadJson(FixturePath("sim-ib"));
  j["devices"][0]["ports"][0]["active_mtu"] = 1500;
  EXPECT_THAT(LoadError(j), HasSubstr("devices[0].ports[0].active_mtu: expected one of 256"));
}

TEST(ProfileTest, ValueOutOfRangeIsRejected) {
  json j = ReadJson(FixturePath("sim-ib"));
  j["devices"][0]["ports"][0]["lid"] = 70000;
  EXPECT_THAT(LoadError(j), HasSubstr("devices[0].ports[0].lid: value 70000 does not fit"));
}

TEST(ProfileTest, BadGidIsRejected) {
  json j = ReadJson(FixturePath("sim-ib"));
  j["devices"][0]["ports"][0]["gids"][0]["gid"] = "fe80::zz";
  EXPECT_THAT(LoadError(j), HasSubstr("devices[0].ports[0].gids[0].gid: not an IPv6-style GID"));
}

TEST(ProfileTest, DuplicateDeviceNameIsRejected) {
  json j = ReadJson(FixturePath("sim-ib"));
  j["devices"][1]["name"] = "sim0";
  EXPECT_THAT(LoadError(j), HasSubstr("devices[1].name: duplicate device name"));
}

TEST(ProfileTest, InvalidJsonNamesTheFile) {
  TempProfile t(std::string("{ \"profile\": "));
  ProfileLoad load = LoadProfileFile(t.path());
  EXPECT_THAT(load.error, HasSubstr(t.path()));
  EXPECT_THAT(load.error, HasSubstr("not valid JSON"));
}

TEST(ProfileTest, MissingFileNamesTheFile) {
  ProfileLoad load = LoadProfileFile("/nonexistent/dir/p.json");
  EXPECT_THAT(load.error, HasSubstr("/nonexistent/dir/p.json: cannot open"));
}

}  // namespace
}  // namespace simverbs
