#pragma once

// A device profile: what a simulated HCA reports and how it behaves.
// The file format is documented in fixtures/FORMAT.md.

#include <infiniband/verbs.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "result.h"

namespace simverbs {

// Values as ibv_query_gid_type reports them (rdma-core's enum ibv_gid_type_sysfs).
enum class GidKind { kIbRoceV1 = 0, kRoceV2 = 1 };

struct GidProfile {
  ibv_gid gid{};
  GidKind kind = GidKind::kIbRoceV1;
};

struct PortProfile {
  ibv_port_attr attr{};
  std::vector<GidProfile> gids;  // index = GID index
  std::vector<uint16_t> pkeys;   // index = P_Key index
};

struct DeviceProfile {
  std::string name;  // sim0, sim1, ...
  ibv_node_type node_type = IBV_NODE_CA;
  ibv_transport_type transport_type = IBV_TRANSPORT_IB;
  int num_comp_vectors = 1;
  ibv_device_attr_ex attr_ex{};  // attr_ex.orig_attr is ibv_query_device
  std::map<std::string, std::string> sysfs;  // files under the ibdev sysfs dir
  std::vector<PortProfile> ports;            // index 0 = port 1
};

struct Profile {
  std::string name;
  std::string path;
  std::string description;
  std::vector<DeviceProfile> devices;
};

// Parses a profile file. On failure the error text names the file and the field.
struct ProfileLoad {
  Profile profile;
  std::string error;  // empty on success
};
ProfileLoad LoadProfileFile(const std::string& path);

// Loads a profile by name ("sim-ib", looked up in SIMVERBS_PROFILE_DIR, the
// source tree's fixtures/devices and the installed data dir) or by path to a
// .json file; an empty name means the default profile.
ProfileLoad LoadProfile(const std::string& name_or_path);
std::vector<std::string> ProfileSearchDirs();
std::vector<std::string> AvailableProfiles();

inline constexpr const char* kDefaultProfileName = "sim-ib";

}  // namespace simverbs
