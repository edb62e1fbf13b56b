#pragma once

// `simverbs inject EVENT ...`: raises an async event in the processes that run
// on a fabric (fault/mailbox.h describes how it gets there), or arms a fault
// of their connection managers (CM_REJECT, CM_DROP; ADDR_CHANGE is an rdma_cm
// event).

#include <CLI/CLI.hpp>
#include <optional>
#include <string>

struct InjectOptions {
  std::string event;
  std::string fabric;   // empty: SIMVERBS_FABRIC, or "default"
  std::string device;   // empty: the profile's first device
  std::optional<int> port;  // port events and ADDR_CHANGE (default 1)
  std::string qp;       // QP number (decimal or 0x hex) for QP events
  std::string cq_of_qp; // CQ_ERR: the send CQ of this QP ...
  bool recv_cq = false; // ... or its receive CQ
  std::string srq_of_qp;
  std::optional<int> count;            // CM_REJECT (default 1), CM_DROP (default 16: the CM gives up); 0 disarms
  std::optional<int> reason;           // CM_REJECT: the IBTA reject reason (default 28: consumer defined)
  std::optional<std::string> message;  // CM_DROP: the message lost (default REQ)
  int timeout_ms = 5000;
};

CLI::App* AddInjectCommand(CLI::App& app, InjectOptions* options);
int RunInject(const InjectOptions& options);
