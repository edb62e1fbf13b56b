#pragma once

// `simverbs inject EVENT ...`: raises an async event in the processes that run
// on a fabric (fault/mailbox.h describes how it gets there).

#include <CLI/CLI.hpp>
#include <string>

struct InjectOptions {
  std::string event;
  std::string fabric;   // empty: SIMVERBS_FABRIC, or "default"
  std::string device;   // empty: the profile's first device
  int port = 1;
  std::string qp;       // QP number (decimal or 0x hex) for QP events
  std::string cq_of_qp; // CQ_ERR: the send CQ of this QP ...
  bool recv_cq = false; // ... or its receive CQ
  std::string srq_of_qp;
  int timeout_ms = 5000;
};

CLI::App* AddInjectCommand(CLI::App& app, InjectOptions* options);
int RunInject(const InjectOptions& options);
