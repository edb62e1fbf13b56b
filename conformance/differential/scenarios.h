#pragma once

// The differential scenarios: each drives one behaviour where HCAs differ (CQ overrun, error
// flushes, RNR, port changes, SRQ limit) on a fresh device context and records what the verbs
// API shows (trace.h). Every scenario is deterministic by construction: it posts everything
// up front, waits for a completion or event it can name, and reads the rest only after the
// device has settled.

#include <infiniband/verbs.h>

#include <cstdint>
#include <string>
#include <vector>

#include "conformance/differential/trace.h"

namespace differential {

// Where a scenario runs and how it takes the port's link down and up.
struct Setup {
  ibv_context* context = nullptr;
  uint8_t port = 1;
  int gid_index = 0;
  // Shell commands that take the port's link down / up (e.g. "ip link set dummy0 down");
  // unused on the simulator, whose control API changes the port.
  std::string port_down_cmd;
  std::string port_up_cmd;
};

struct Scenario {
  const char* name;
  const char* what;
  void (*run)(const Setup& setup, Trace* trace);
};

const std::vector<Scenario>& Scenarios();

}  // namespace differential
