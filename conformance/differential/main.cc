// verbs-differential: runs the differential scenarios on one device and prints their traces as
// JSON, so the same run on kernel rxe and on the simulator can be compared
// (conformance/differential/compare.py; the meson test differential-rxe does both).
//
//   verbs-differential [--device NAME] [--port N] [--gid-index N] [--scenario NAME]...
//                      [--port-down-cmd CMD --port-up-cmd CMD] [--time-limit SECS] [--output FILE]
//   verbs-differential --list
//
// Like verbs-conformance it links the system libibverbs; LD_LIBRARY_PATH (or `simverbs run`)
// decides whether that is the simulator. Without --gid-index it takes the port's first
// IPv4-mapped RoCE v2 GID, else index 0. Exit status: 0 when every scenario ran to its end,
// 1 when one could not (its "errors" say why), 2 on bad usage, 124 when the time limit hit.

#include <infiniband/verbs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "conformance/differential/scenarios.h"
#include "conformance/differential/trace.h"
#include "conformance/lib/device_opener.h"
#include "conformance/lib/sim_control.h"

namespace {

using differential::Scenario;
using differential::Scenarios;

struct Args {
  std::string device;
  int port = 1;
  int gid_index = -1;  // -1: pick one
  std::vector<std::string> scenarios;
  std::string port_down_cmd;
  std::string port_up_cmd;
  int time_limit_s = 240;
  std::string output;
  bool list = false;
};

void Usage(FILE* out) {
  std::fprintf(out,
               "usage: verbs-differential [--device NAME] [--port N] [--gid-index N] [--scenario NAME]...\n"
               "                          [--port-down-cmd CMD --port-up-cmd CMD] [--time-limit SECS]\n"
               "                          [--output FILE]\n"
               "       verbs-differential --list\n");
}

bool ParseInt(const std::string& text, int* out) {
  try {
    size_t used = 0;
    *out = std::stoi(text, &used);
    return used == text.size();
  } catch (const std::exception&) {
    return false;
  }
}

bool Parse(int argc, char** argv, Args* args) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--list") {
      args->list = true;
      continue;
    }
    if (arg == "-h" || arg == "--help") {
      Usage(stdout);
      std::exit(0);
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "verbs-differential: %s needs a value\n", arg.c_str());
      return false;
    }
    const std::string value = argv[++i];
    bool ok = true;
    if (arg == "--device") {
      args->device = value;
    } else if (arg == "--port") {
      ok = ParseInt(value, &args->port) && args->port >= 1 && args->port <= 255;
    } else if (arg == "--gid-index") {
      ok = ParseInt(value, &args->gid_index) && args->gid_index >= 0;
    } else if (arg == "--scenario") {
      args->scenarios.push_back(value);
    } else if (arg == "--port-down-cmd") {
      args->port_down_cmd = value;
    } else if (arg == "--port-up-cmd") {
      args->port_up_cmd = value;
    } else if (arg == "--time-limit") {
      ok = ParseInt(value, &args->time_limit_s) && args->time_limit_s > 0;
    } else if (arg == "--output") {
      args->output = value;
    } else {
      std::fprintf(stderr, "verbs-differential: unknown option '%s'\n", arg.c_str());
      return false;
    }
    if (!ok) {
      std::fprintf(stderr, "verbs-differential: bad value '%s' for %s\n", value.c_str(), arg.c_str());
      return false;
    }
  }
  return true;
}

// The first IPv4-mapped RoCE v2 GID of the port (the address rxe routes by), else index 0.
int PickGidIndex(ibv_context* context, uint8_t port) {
  ibv_port_attr attr = {};
  if (ibv_query_port(context, port, &attr) != 0) return 0;
  for (int i = 0; i < attr.gid_tbl_len; ++i) {
    ibv_gid_entry entry = {};
    if (ibv_query_gid_ex(context, port, static_cast<uint32_t>(i), &entry, 0) != 0) continue;
    const uint8_t* raw = entry.gid.raw;
    const bool v4_mapped = std::all_of(raw, raw + 10, [](uint8_t b) { return b == 0; }) && raw[10] == 0xff &&
                           raw[11] == 0xff;
    if (v4_mapped && entry.gid_type == IBV_GID_TYPE_ROCE_V2) return i;
  }
  return 0;
}

// Ends the process when the run outlives its limit: a verb that never returns must not hang the
// test that runs this program.
class Watchdog {
 public:
  explicit Watchdog(std::chrono::seconds limit) : thread_([this, limit] { Watch(limit); }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }
  void Now(const std::string& scenario) {
    std::lock_guard<std::mutex> lock(mu_);
    current_ = scenario;
  }

 private:
  void Watch(std::chrono::seconds limit) {
    std::unique_lock<std::mutex> lock(mu_);
    if (cv_.wait_for(lock, limit, [this] { return done_; })) return;
    std::fprintf(stderr, "verbs-differential: TIMEOUT: still in scenario '%s' after the time limit of %lld s\n",
                 current_.c_str(), static_cast<long long>(limit.count()));
    _exit(124);
  }

  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::string current_ = "(start)";
  std::thread thread_;
};

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (!Parse(argc, argv, &args)) {
    Usage(stderr);
    return 2;
  }
  if (args.list) {
    for (const Scenario& s : Scenarios()) std::printf("%-22s %s\n", s.name, s.what);
    return 0;
  }
  std::vector<const Scenario*> chosen;
  for (const Scenario& s : Scenarios()) {
    if (args.scenarios.empty()) chosen.push_back(&s);
  }
  for (const std::string& name : args.scenarios) {
    const auto it = std::find_if(Scenarios().begin(), Scenarios().end(), [&](const Scenario& s) { return name == s.name; });
    if (it == Scenarios().end()) {
      std::fprintf(stderr, "verbs-differential: no scenario '%s' (see --list)\n", name.c_str());
      return 2;
    }
    chosen.push_back(&*it);
  }

  Watchdog watchdog{std::chrono::seconds(args.time_limit_s)};
  nlohmann::json out = {{"backend", conformance::SimControl::Get().available() ? "sim" : "device"},
                        {"scenarios", nlohmann::json::object()}};
  bool all_ran = true;
  for (const Scenario* scenario : chosen) {
    watchdog.Now(scenario->name);
    // A context per scenario: nothing one leaves behind (a late event) reaches the next.
    std::string error;
    conformance::ContextPtr context = conformance::OpenDeviceByName(args.device, &error);
    if (!context) {
      std::fprintf(stderr, "verbs-differential: %s\n", error.c_str());
      return 2;
    }
    out["device"] = ibv_get_device_name(context->device);
    differential::Setup setup;
    setup.context = context.get();
    setup.port = static_cast<uint8_t>(args.port);
    setup.gid_index = args.gid_index >= 0 ? args.gid_index : PickGidIndex(context.get(), setup.port);
    setup.port_down_cmd = args.port_down_cmd;
    setup.port_up_cmd = args.port_up_cmd;
    differential::Trace trace(context.get());
    scenario->run(setup, &trace);
    if (trace.failed()) all_ran = false;
    out["scenarios"][scenario->name] = trace.ToJson();
    std::fprintf(stderr, "verbs-differential: %s: %s\n", scenario->name, trace.failed() ? "could not run" : "done");
  }
  const std::string text = out.dump(2) + "\n";
  if (args.output.empty()) {
    std::fwrite(text.data(), 1, text.size(), stdout);
  } else {
    std::ofstream file(args.output);
    file << text;
    if (!file.flush()) {
      std::fprintf(stderr, "verbs-differential: cannot write %s\n", args.output.c_str());
      return 2;
    }
  }
  return all_ran ? 0 : 1;
}
