#pragma once

#include <string>
#include <vector>

namespace conformance {

// Command-line options of verbs-conformance that are not GoogleTest flags.
struct Options {
  std::string device;  // empty: the first device in ibv_get_device_list
  int port = 1;
  int gid_index = 0;
  std::string backends_dir;  // where <backend>.json files live
  std::string backend;       // empty: detect (sim, rxe or hw)
  std::string cm_address;    // empty: find the port's IPv4 address for rdma_cm (cm_address.h)
};

// Parses the arguments InitGoogleTest left in argv. Returns false and sets
// *error on an unknown option or a bad value. Accepts "--opt VALUE" and
// "--opt=VALUE".
bool ParseOptions(const std::vector<std::string>& args, Options* options, std::string* error);

// One line per option, for --help.
std::string OptionsUsage();

// The options of this run; tests read them through the fixture.
const Options& CurrentOptions();
void SetCurrentOptions(const Options& options);

}  // namespace conformance
