// simverbs: the command line of the simulator.
//   simverbs run [--profile P] [--sysfs] -- CMD ARGS...
//                                               run a program on simulated devices
//   simverbs devices [--profile P]              list the devices a profile gives
//   simverbs profiles                           list the profiles that can be named
//   simverbs record [--device D] [--stable-identity] [--stable-mac MAC] [--name N] [OUT.json]
//                                               write a profile of a device this machine has
//   simverbs inject EVENT [--device D] ...      raise an async event in running programs
//   simverbs clean                              remove what dead programs left in /dev/shm
//   simverbs counters [--fabric F]              the port counters of a running fabric

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "clean_command.h"
#include "counters_command.h"
#include "inject_command.h"
#include "profile.h"
#include "../rdmacm/port_ipv4.h"
#include "record.h"
#include "sysfs_namespace.h"

namespace {

// The directory holding the simulator's libibverbs.so.1: SIMVERBS_LIBDIR, the
// build tree this binary came from, or the installed location.
std::string FindLibDir() {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("SIMVERBS_LIBDIR"); env && *env) candidates.push_back(env);
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) candidates.push_back((self.parent_path().parent_path()).string());  // build tree: sim/tools/..
  candidates.push_back(SIMVERBS_INSTALLED_LIBDIR);
  for (const auto& dir : candidates) {
    if (access((dir + "/libibverbs.so.1").c_str(), R_OK) == 0) return dir;
  }
  return {};
}

// The profile a command uses: --profile, else the SIMVERBS_PROFILE the
// library itself would take (a nested `simverbs run` keeps the outer one's).
std::string ChosenProfile(const std::string& option) {
  if (!option.empty()) return option;
  const char* env = std::getenv("SIMVERBS_PROFILE");
  return env ? env : "";
}

// A profile that did not load, said with where its name came from.
void ReportProfileError(const std::string& option, const std::string& error) {
  const char* env = std::getenv("SIMVERBS_PROFILE");
  const bool from_env = option.empty() && env && *env;
  std::fprintf(stderr, "simverbs: %s%s\n", error.c_str(),
               from_env ? " (the profile $SIMVERBS_PROFILE names; unset it or give --profile)" : "");
}

int Run(const std::string& option_profile, bool sysfs, const std::vector<std::string>& command) {
  const std::string profile = ChosenProfile(option_profile);
  if (command.empty()) {
    std::fprintf(stderr,
                 "simverbs run: no program given; usage: simverbs run [--profile P] [--sysfs] -- PROGRAM [ARGS...]\n");
    return 2;
  }
  // Fail early on a broken profile: the program would only see no devices.
  const simverbs::ProfileLoad load = simverbs::LoadProfile(profile);
  if (!load.error.empty()) {
    ReportProfileError(option_profile, load.error);
    return 2;
  }
  const std::string libdir = FindLibDir();
  if (libdir.empty()) {
    std::fprintf(stderr,
                 "simverbs: cannot find the simulator's libibverbs.so.1 (set SIMVERBS_LIBDIR to the directory "
                 "that holds it)\n");
    return 2;
  }
  if (sysfs) {
    if (std::string error = simverbs::EnterSysfsNamespace(load.profile.devices); !error.empty()) {
      std::fprintf(stderr, "simverbs run --sysfs: %s\n", error.c_str());
      return 2;
    }
  }
  std::string path = libdir;
  if (const char* old = std::getenv("LD_LIBRARY_PATH"); old && *old) path += std::string(":") + old;
  setenv("LD_LIBRARY_PATH", path.c_str(), 1);
  // Absolute: the program, and `simverbs inject` or `counters` run from
  // another directory, find the same file.
  std::error_code ec;
  const std::filesystem::path absolute = std::filesystem::absolute(load.profile.path, ec);
  setenv("SIMVERBS_PROFILE", ec ? load.profile.path.c_str() : absolute.c_str(), 1);

  std::vector<char*> argv;
  for (const auto& arg : command) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  std::fprintf(stderr, "simverbs: cannot run '%s': %s\n", argv[0], std::strerror(errno));
  return 127;
}

int Devices(const std::string& option_profile) {
  const simverbs::ProfileLoad load = simverbs::LoadProfile(ChosenProfile(option_profile));
  if (!load.error.empty()) {
    ReportProfileError(option_profile, load.error);
    return 2;
  }
  std::printf("profile %s (%s)\n", load.profile.name.c_str(), load.profile.path.c_str());
  for (const auto& dev : load.profile.devices) {
    for (size_t i = 0; i < dev.ports.size(); ++i) {
      const ibv_port_attr& a = dev.ports[i].attr;
      const uint32_t ip = simverbs::rdmacm::PortIpv4(
          dev.ports[i].gids, [](const simverbs::GidProfile& g) { return g.gid; }, a.lid);
      std::printf("  %s port %zu: %s, %s, lid %u, %zu GIDs, rdma_cm address %s\n", dev.name.c_str(), i + 1,
                  a.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand",
                  a.state == IBV_PORT_ACTIVE ? "ACTIVE" : "not active", a.lid, dev.ports[i].gids.size(),
                  simverbs::rdmacm::Ipv4Text(ip).c_str());
    }
  }
  return 0;
}

}  // namespace

// `simverbs run [--profile P] [--] PROGRAM ARGS...`: everything from PROGRAM on
// belongs to the program, verbatim (so it is parsed here, not by CLI11, which
// would reorder the program's own options).
int RunCommand(int argc, char** argv) {
  std::string profile;
  bool sysfs = false;
  int i = 2;
  for (; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg == "--profile" || arg == "-p") {
      if (i + 1 >= argc || argv[i + 1][0] == '-') {
        std::fprintf(stderr, "simverbs run: %s needs a profile name or a .json path\n", arg.c_str());
        return 2;
      }
      profile = argv[++i];
    } else if (arg.rfind("--profile=", 0) == 0) {
      profile = arg.substr(10);
    } else if (arg == "--sysfs") {
      sysfs = true;
    } else if (arg == "-h" || arg == "--help") {
      std::printf("usage: simverbs run [--profile P] [--sysfs] [--] PROGRAM [ARGS...]\n"
                  "Runs PROGRAM with the simulator's libibverbs.so.1 and the device profile P\n"
                  "(a name from 'simverbs profiles' or a path to a .json file; default sim-ib).\n"
                  "--sysfs: in a private mount namespace, list the simulated devices under\n"
                  "/sys/class/infiniband, each with the loopback interface as its net device\n"
                  "(device/net/lo), as tools such as pyverbs' tests look for one.\n");
      return 0;
    } else if (arg[0] == '-') {
      std::fprintf(stderr, "simverbs run: unknown option '%s'; usage: simverbs run [--profile P] [--sysfs] -- PROGRAM [ARGS...]\n",
                   arg.c_str());
      return 2;
    } else {
      break;
    }
  }
  return Run(profile, sysfs, std::vector<std::string>(argv + i, argv + argc));
}

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "run") return RunCommand(argc, argv);

  CLI::App app{"simverbs: a simulated RDMA HCA for unmodified verbs programs"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "simverbs " SIMVERBS_VERSION);

  std::string profile;
  app.add_subcommand("run",
                     "Run PROGRAM with the simulator in place of libibverbs: run [--profile P] [--sysfs] -- PROGRAM "
                     "ARGS... (without --profile: $SIMVERBS_PROFILE, else sim-ib)");
  CLI::App* devices = app.add_subcommand("devices", "List the simulated devices of a profile");
  devices->add_option("--profile,-p", profile, "Device profile: a name or a .json path");
  app.add_subcommand("profiles", "List the profiles that can be given by name");
  simverbs::RecordOptions record_options;
  CLI::App* record = app.add_subcommand(
      "record",
      "Write a device profile of a device this machine has, read through the system libibverbs; an existing "
      "OUT.json keeps its behaviour and description");
  record->add_option("--device,-d", record_options.device, "The device (default: the first)");
  record->add_option("--name", record_options.name, "The profile's name (default: OUT.json's, else its stem)");
  bool stable_identity = false;
  record->add_flag("--stable-identity", stable_identity,
                   "Replace the node GUID and link-local GIDs by those of MAC " +
                       std::string(simverbs::kDefaultStableMac) +
                       " (or --stable-mac), so the file does not change from boot to boot");
  std::string stable_mac = simverbs::kDefaultStableMac;
  CLI::Option* stable_mac_option =
      record->add_option("--stable-mac", stable_mac, "The MAC for --stable-identity (implies it)");
  record->add_option("output", record_options.output, "The profile to write (default: stdout)");

  InjectOptions inject_options;
  CLI::App* inject = AddInjectCommand(app, &inject_options);
  CLI::App* clean = AddCleanCommand(app);
  std::string counters_fabric;
  CLI::App* counters = AddCountersCommand(app, &counters_fabric);


  // An unknown command named, with the ones there are (CLI11 would only say one is required).
  if (argc >= 2 && argv[1][0] != '-') {
    std::string names;
    bool known = false;
    for (const CLI::App* command : app.get_subcommands([](const CLI::App*) { return true; })) {
      names += (names.empty() ? "" : ", ") + command->get_name();
      known = known || command->get_name() == argv[1];
    }
    if (!known) {
      std::fprintf(stderr, "simverbs: unknown command '%s'; the commands are %s (simverbs --help, simverbs "
                   "COMMAND --help)\n", argv[1], names.c_str());
      return 2;
    }
  }
  CLI11_PARSE(app, argc, argv);
  if (devices->parsed()) return Devices(profile);
  if (inject->parsed()) return RunInject(inject_options);
  if (clean->parsed()) return RunClean();
  if (counters->parsed()) return RunCounters(counters_fabric);
  if (record->parsed()) {
    if (stable_identity || stable_mac_option->count() > 0) record_options.stable_mac = stable_mac;
    return simverbs::Record(record_options);
  }
  for (const auto& name : simverbs::AvailableProfiles()) std::printf("%s\n", name.c_str());
  return 0;
}
