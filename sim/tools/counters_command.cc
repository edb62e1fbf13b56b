#include "counters_command.h"

#include <cstdio>

#include "fabric/fabric.h"
#include "profile.h"

CLI::App* AddCountersCommand(CLI::App& app, std::string* fabric) {
  CLI::App* cmd = app.add_subcommand(
      "counters",
      "Print the port counters of the devices of a running fabric (SIMVERBS_FABRIC or --fabric), as sysfs names "
      "them: port_xmit_discards counts packets dropped because the receiving process had no room");
  cmd->add_option("--fabric,-f", *fabric, "The fabric (default: $SIMVERBS_FABRIC, else \"default\")");
  return cmd;
}

int RunCounters(const std::string& fabric_option) {
  const std::string fabric = simverbs::Fabric::NameFromEnvironment(fabric_option);
  const simverbs::FabricCounters counters = simverbs::Fabric::ReadCounters(fabric);
  if (!counters.error.empty()) {
    std::fprintf(stderr, "simverbs counters: %s\n", counters.error.c_str());
    return 2;
  }
  const simverbs::ProfileLoad load = simverbs::LoadProfileFile(counters.profile_path);
  if (!load.error.empty()) {
    std::fprintf(stderr, "simverbs counters: the fabric's profile: %s\n", load.error.c_str());
    return 2;
  }
  const auto& devices = load.profile.devices;
  for (size_t d = 0; d < devices.size() && d < counters.port_xmit_discards.size(); ++d) {
    const auto& ports = counters.port_xmit_discards[d];
    for (size_t p = 0; p < devices[d].ports.size() && p < ports.size(); ++p) {
      std::printf("%s port %zu port_xmit_discards %llu\n", devices[d].name.c_str(), p + 1,
                  static_cast<unsigned long long>(ports[p]));
    }
  }
  return 0;
}
