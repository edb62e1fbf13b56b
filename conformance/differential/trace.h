#pragma once

// The observable trace of one differential scenario, read through the verbs API only, so the
// same program records it on kernel rxe and on the simulator.
//
// Objects are named by their role in the scenario ("cq.a.send", "qp.b", "srq", "port.1"),
// never by a number that differs between backends (QP numbers, keys, addresses). Per object:
//   completions  what ibv_poll_cq returned, in order: wr_id, status and qp (the role of qp_num)
//                always; opcode and wc_flags only on success, byte_len only for receive opcodes
//                and imm_data only with IBV_WC_WITH_IMM (ibv_poll_cq(3): the other fields are
//                not valid otherwise)
//   events       the async events whose element is that object, in the order read
//   other keys   facts the scenario records (QP state, CQ size, results of calls), and
//                poll_failed when ibv_poll_cq returned a negative value
//
// Timing is not part of the trace: events and completions are compared per object, and a
// scenario reaches a defined point (Settle) before it reads anything that races.

#include <infiniband/verbs.h>

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace differential {

using std::chrono_literals::operator""ms;

// Quiescence: a scenario has settled when this long passes with no new event and, when CQs are
// polled, no new completion. Long enough for rxe under QEMU TCG to deliver a pending ACK.
inline constexpr std::chrono::milliseconds kQuietWindow = 500ms;
// A scenario that is still producing after this long has a bug (a loop of events, say).
inline constexpr std::chrono::milliseconds kSettleLimit = 15000ms;
// How long a completion or event the scenario waits for may take.
inline constexpr std::chrono::milliseconds kWaitLimit = 10000ms;

class Trace {
 public:
  explicit Trace(ibv_context* context);

  // Gives an object its role; completions and events that name it are recorded under it.
  void Name(ibv_cq* cq, const std::string& role);
  void Name(ibv_qp* qp, const std::string& role);
  void Name(ibv_srq* srq, const std::string& role);

  // objects[role][key] = value.
  void Set(const std::string& role, const std::string& key, nlohmann::json value);
  // Appends {"verb": verb, "result": "0" | errno name} to objects[role]["calls"].
  void Call(const std::string& role, const std::string& verb, int rc);
  // Records the QP's state (ibv_query_qp) as objects[role][key].
  void RecordState(ibv_qp* qp, const std::string& key = "state");
  // A scenario step that could not be done; the scenario's trace is then not comparable.
  void Fail(const std::string& what);
  bool failed() const { return !errors_.empty(); }

  // Polls cq (recording what it returns, reading async events as they come) until it has
  // yielded `count` completions since this call; false (and Fail) after kWaitLimit.
  bool WaitForCompletions(ibv_cq* cq, int count, const std::string& what);
  // Reads async events (recording them) until one of `type` arrives for `role`.
  bool WaitForEvent(ibv_event_type type, const std::string& role, const std::string& what);
  // Reads async events and, with poll_cqs, polls every named CQ, until kQuietWindow passes with
  // nothing new. Without poll_cqs the CQs are left alone (an overrun must not be polled away).
  bool Settle(bool poll_cqs);

  nlohmann::json ToJson() const;

 private:
  // Reads the events already queued, or waits up to `wait` for one; returns how many it read.
  int ReadEvents(std::chrono::milliseconds wait);
  // Polls every named CQ until it is empty; returns how many completions it took.
  int PollAll();
  int PollCq(ibv_cq* cq);
  void RecordCompletion(const std::string& cq_role, const ibv_wc& wc);
  void RecordEvent(const ibv_async_event& event);
  std::string RoleOfQpNum(uint32_t qp_num) const;
  std::string RoleOf(const void* object) const;

  ibv_context* context_;
  std::map<const void*, std::string> roles_;
  std::map<uint32_t, std::string> qp_roles_;
  std::vector<std::pair<ibv_cq*, std::string>> cqs_;
  nlohmann::json objects_ = nlohmann::json::object();
  std::vector<std::string> errors_;
};

// Names for the JSON: "IBV_WC_RECV", "IBV_QPS_ERR", "IBV_EVENT_CQ_ERR", "EINVAL".
std::string WcOpcodeName(ibv_wc_opcode opcode);
std::string QpStateName(ibv_qp_state state);
std::string EventName(ibv_event_type type);
std::string ResultName(int rc);

}  // namespace differential
