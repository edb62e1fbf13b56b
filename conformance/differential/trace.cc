#include "conformance/differential/trace.h"

#include <arpa/inet.h>

#include <cstring>

#include "conformance/lib/fd_poll.h"
#include "conformance/lib/qp_pair.h"

namespace differential {
namespace {

using Clock = std::chrono::steady_clock;

// Between two polls of CQs that have no completion channel: a poll interval inside a
// deadline loop, not a synchronisation.
constexpr std::chrono::milliseconds kPollInterval = 1ms;

bool IsPortEvent(ibv_event_type type) {
  switch (type) {
    case IBV_EVENT_PORT_ACTIVE:
    case IBV_EVENT_PORT_ERR:
    case IBV_EVENT_LID_CHANGE:
    case IBV_EVENT_PKEY_CHANGE:
    case IBV_EVENT_SM_CHANGE:
    case IBV_EVENT_CLIENT_REREGISTER:
    case IBV_EVENT_GID_CHANGE:
      return true;
    default:
      return false;
  }
}

nlohmann::json WcFlagNames(unsigned flags) {
  static constexpr std::pair<unsigned, const char*> kNames[] = {
      {IBV_WC_GRH, "IBV_WC_GRH"},
      {IBV_WC_WITH_IMM, "IBV_WC_WITH_IMM"},
      {IBV_WC_IP_CSUM_OK, "IBV_WC_IP_CSUM_OK"},
      {IBV_WC_WITH_INV, "IBV_WC_WITH_INV"},
      {IBV_WC_TM_SYNC_REQ, "IBV_WC_TM_SYNC_REQ"},
      {IBV_WC_TM_MATCH, "IBV_WC_TM_MATCH"},
      {IBV_WC_TM_DATA_VALID, "IBV_WC_TM_DATA_VALID"},
  };
  nlohmann::json names = nlohmann::json::array();
  for (const auto& [bit, name] : kNames) {
    if (flags & bit) {
      names.push_back(name);
      flags &= ~bit;
    }
  }
  if (flags) names.push_back("0x" + std::to_string(flags));
  return names;
}

}  // namespace

std::string WcOpcodeName(ibv_wc_opcode opcode) {
  switch (opcode) {
    case IBV_WC_SEND: return "IBV_WC_SEND";
    case IBV_WC_RDMA_WRITE: return "IBV_WC_RDMA_WRITE";
    case IBV_WC_RDMA_READ: return "IBV_WC_RDMA_READ";
    case IBV_WC_COMP_SWAP: return "IBV_WC_COMP_SWAP";
    case IBV_WC_FETCH_ADD: return "IBV_WC_FETCH_ADD";
    case IBV_WC_BIND_MW: return "IBV_WC_BIND_MW";
    case IBV_WC_LOCAL_INV: return "IBV_WC_LOCAL_INV";
    case IBV_WC_TSO: return "IBV_WC_TSO";
    case IBV_WC_ATOMIC_WRITE: return "IBV_WC_ATOMIC_WRITE";
    case IBV_WC_RECV: return "IBV_WC_RECV";
    case IBV_WC_RECV_RDMA_WITH_IMM: return "IBV_WC_RECV_RDMA_WITH_IMM";
    default: return "opcode " + std::to_string(static_cast<int>(opcode));
  }
}

std::string QpStateName(ibv_qp_state state) { return std::string("IBV_QPS_") + conformance::QpStateName(state); }

std::string EventName(ibv_event_type type) {
  switch (type) {
    case IBV_EVENT_CQ_ERR: return "IBV_EVENT_CQ_ERR";
    case IBV_EVENT_QP_FATAL: return "IBV_EVENT_QP_FATAL";
    case IBV_EVENT_QP_REQ_ERR: return "IBV_EVENT_QP_REQ_ERR";
    case IBV_EVENT_QP_ACCESS_ERR: return "IBV_EVENT_QP_ACCESS_ERR";
    case IBV_EVENT_COMM_EST: return "IBV_EVENT_COMM_EST";
    case IBV_EVENT_SQ_DRAINED: return "IBV_EVENT_SQ_DRAINED";
    case IBV_EVENT_PATH_MIG: return "IBV_EVENT_PATH_MIG";
    case IBV_EVENT_PATH_MIG_ERR: return "IBV_EVENT_PATH_MIG_ERR";
    case IBV_EVENT_DEVICE_FATAL: return "IBV_EVENT_DEVICE_FATAL";
    case IBV_EVENT_PORT_ACTIVE: return "IBV_EVENT_PORT_ACTIVE";
    case IBV_EVENT_PORT_ERR: return "IBV_EVENT_PORT_ERR";
    case IBV_EVENT_LID_CHANGE: return "IBV_EVENT_LID_CHANGE";
    case IBV_EVENT_PKEY_CHANGE: return "IBV_EVENT_PKEY_CHANGE";
    case IBV_EVENT_SM_CHANGE: return "IBV_EVENT_SM_CHANGE";
    case IBV_EVENT_SRQ_ERR: return "IBV_EVENT_SRQ_ERR";
    case IBV_EVENT_SRQ_LIMIT_REACHED: return "IBV_EVENT_SRQ_LIMIT_REACHED";
    case IBV_EVENT_QP_LAST_WQE_REACHED: return "IBV_EVENT_QP_LAST_WQE_REACHED";
    case IBV_EVENT_CLIENT_REREGISTER: return "IBV_EVENT_CLIENT_REREGISTER";
    case IBV_EVENT_GID_CHANGE: return "IBV_EVENT_GID_CHANGE";
    case IBV_EVENT_WQ_FATAL: return "IBV_EVENT_WQ_FATAL";
    default: return "event " + std::to_string(static_cast<int>(type));
  }
}

std::string ResultName(int rc) {
  if (rc == 0) return "0";
  const char* name = strerrorname_np(rc);
  return name ? name : std::to_string(rc);
}

Trace::Trace(ibv_context* context) : context_(context) {
  if (conformance::SetNonBlocking(context->async_fd) != 0) Fail("cannot set O_NONBLOCK on the async fd");
}

void Trace::Name(ibv_cq* cq, const std::string& role) {
  roles_[cq] = role;
  cqs_.emplace_back(cq, role);
  objects_[role]["cqe"] = cq->cqe;
  objects_[role]["completions"] = nlohmann::json::array();
  objects_[role]["events"] = nlohmann::json::array();
}

void Trace::Name(ibv_qp* qp, const std::string& role) {
  roles_[qp] = role;
  qp_roles_[qp->qp_num] = role;
  objects_[role]["events"] = nlohmann::json::array();
}

void Trace::Name(ibv_srq* srq, const std::string& role) {
  roles_[srq] = role;
  objects_[role]["events"] = nlohmann::json::array();
}

void Trace::Set(const std::string& role, const std::string& key, nlohmann::json value) {
  objects_[role][key] = std::move(value);
}

void Trace::Call(const std::string& role, const std::string& verb, int rc) {
  objects_[role]["calls"].push_back({{"verb", verb}, {"result", ResultName(rc)}});
}

void Trace::RecordState(ibv_qp* qp, const std::string& key) {
  ibv_qp_state state = IBV_QPS_UNKNOWN;
  if (auto ok = conformance::QueryQpState(qp, &state); !ok) Fail(ok.message());
  objects_[RoleOf(qp)][key] = QpStateName(state);
}

void Trace::Fail(const std::string& what) { errors_.push_back(what); }

std::string Trace::RoleOfQpNum(uint32_t qp_num) const {
  const auto it = qp_roles_.find(qp_num);
  return it == qp_roles_.end() ? "unnamed qp" : it->second;
}

std::string Trace::RoleOf(const void* object) const {
  const auto it = roles_.find(object);
  return it == roles_.end() ? "unnamed" : it->second;
}

void Trace::RecordCompletion(const std::string& cq_role, const ibv_wc& wc) {
  nlohmann::json entry = {
      {"wr_id", wc.wr_id},
      {"status", ibv_wc_status_str(wc.status)},
      {"qp", RoleOfQpNum(wc.qp_num)},
  };
  if (wc.status == IBV_WC_SUCCESS) {
    entry["opcode"] = WcOpcodeName(wc.opcode);
    entry["wc_flags"] = WcFlagNames(wc.wc_flags);
    if (wc.opcode & IBV_WC_RECV) entry["byte_len"] = wc.byte_len;
    if (wc.wc_flags & IBV_WC_WITH_IMM) entry["imm_data"] = ntohl(wc.imm_data);
  }
  objects_[cq_role]["completions"].push_back(std::move(entry));
}

void Trace::RecordEvent(const ibv_async_event& event) {
  std::string role;
  if (IsPortEvent(event.event_type)) {
    role = "port." + std::to_string(event.element.port_num);
  } else if (event.event_type == IBV_EVENT_DEVICE_FATAL) {
    role = "device";
  } else {
    role = RoleOf(conformance::EventElement(event));
  }
  objects_[role]["events"].push_back(EventName(event.event_type));
}

int Trace::ReadEvents(std::chrono::milliseconds wait) {
  int read = 0;
  for (;;) {
    if (!conformance::WaitReadable(context_->async_fd, read == 0 ? wait : 0ms)) return read;
    ibv_async_event event = {};
    // The fd is O_NONBLOCK (see the constructor), so a spurious wake-up is EAGAIN, never a block.
    if (ibv_get_async_event(context_, &event) != 0) return read;
    RecordEvent(event);
    // Acknowledged at once: nothing is kept, and a destroy never waits for an ack.
    ibv_ack_async_event(&event);
    ++read;
  }
}

int Trace::PollCq(ibv_cq* cq) {
  int taken = 0;
  for (;;) {
    ibv_wc wc[16];
    const int n = ibv_poll_cq(cq, 16, wc);
    if (n < 0) {
      // A flag, not a count: a CQ in error fails every poll, and how often it is polled is timing.
      objects_[RoleOf(cq)]["poll_failed"] = true;
      return taken;
    }
    for (int i = 0; i < n; ++i) RecordCompletion(RoleOf(cq), wc[i]);
    taken += n;
    if (n < 16) return taken;
  }
}

int Trace::PollAll() {
  int taken = 0;
  for (const auto& [cq, role] : cqs_) taken += PollCq(cq);
  return taken;
}

bool Trace::WaitForCompletions(ibv_cq* cq, int count, const std::string& what) {
  const auto deadline = Clock::now() + kWaitLimit;
  int taken = 0;
  while (taken < count) {
    taken += PollCq(cq);
    if (taken >= count) break;
    if (Clock::now() >= deadline) {
      Fail("no " + what + " within " + std::to_string(kWaitLimit.count()) + " ms (" + std::to_string(taken) + " of " +
           std::to_string(count) + " completions on " + RoleOf(cq) + ")");
      return false;
    }
    ReadEvents(kPollInterval);
  }
  return true;
}

bool Trace::WaitForEvent(ibv_event_type type, const std::string& role, const std::string& what) {
  const auto deadline = Clock::now() + kWaitLimit;
  const std::string name = EventName(type);
  size_t seen = objects_[role]["events"].size();
  for (;;) {
    const nlohmann::json& events = objects_[role]["events"];
    for (; seen < events.size(); ++seen) {
      if (events[seen] == name) return true;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) break;
    ReadEvents(left);
  }
  Fail("no " + name + " for " + role + " within " + std::to_string(kWaitLimit.count()) + " ms (" + what + ")");
  return false;
}

bool Trace::Settle(bool poll_cqs) {
  const auto start = Clock::now();
  auto last_activity = start;
  for (;;) {
    const auto now = Clock::now();
    if (now - last_activity >= kQuietWindow) return true;
    if (now - start >= kSettleLimit) {
      Fail("still producing events or completions after " + std::to_string(kSettleLimit.count()) + " ms");
      return false;
    }
    // Without CQs to poll, the async fd is the only source: wait on it for the rest of the window.
    const auto rest = std::chrono::ceil<std::chrono::milliseconds>(kQuietWindow - (now - last_activity));
    const int got = (poll_cqs ? PollAll() : 0) + ReadEvents(poll_cqs ? kPollInterval : rest);
    if (got > 0) last_activity = Clock::now();
  }
}

nlohmann::json Trace::ToJson() const {
  nlohmann::json out = {{"objects", objects_}};
  if (!errors_.empty()) out["errors"] = errors_;
  return out;
}

}  // namespace differential
