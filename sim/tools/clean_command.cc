#include "clean_command.h"

#include <cstdio>

#include "fabric/fabric.h"

CLI::App* AddCleanCommand(CLI::App& app) {
  return app.add_subcommand(
      "clean",
      "Remove the shared memory of this user's fabrics whose programs have all exited or been killed (what a fabric "
      "whose last process was killed leaves in /dev/shm); fabrics with a live process are kept");
}

int RunClean() {
  // Any process of this user that opens a device takes each fabric's lock for
  // a moment (it sweeps too): wait for it, so that a live fabric is reported.
  const simverbs::SweepReport report = simverbs::Fabric::Sweep("", 2000);
  for (const std::string& path : report.removed) std::printf("removed %s\n", path.c_str());
  std::printf("%zu object(s) removed, %.1f MiB freed\n", report.removed.size(),
              static_cast<double>(report.bytes) / (1 << 20));
  for (const std::string& fabric : report.kept) std::printf("kept fabric %s: still in use\n", fabric.c_str());
  for (const std::string& why : report.refused) std::fprintf(stderr, "simverbs clean: %s\n", why.c_str());
  return report.refused.empty() ? 0 : 1;
}
