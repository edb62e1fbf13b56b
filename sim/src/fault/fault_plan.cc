#include "fault/fault_plan.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "context.h"
#include "cq.h"
#include "device.h"
#include "device_list.h"
#include "event_element.h"
#include "fault/cm_link.h"
#include "fault/device_fatal.h"
#include "fault/inject.h"
#include "fault/mailbox.h"
#include "fork_locks.h"
#include "json_error.h"
#include "qp.h"
#include "quiet_thread.h"
#include "trace/trace.h"
#include "transport/engine.h"

namespace simverbs {
namespace fault_plan {
namespace {

constexpr uint64_t kMaxAfterMs = 365ull * 24 * 3600 * 1000;

using nlohmann::json;

struct PlanError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] void Fail(const std::string& field, const std::string& what) { throw PlanError(field + ": " + what); }

// The fields of one JSON object; Finish() rejects those nobody read, so a
// typo is an error rather than a fault that silently never fires.
class Fields {
 public:
  Fields(const json& j, std::string where) : j_(j), where_(std::move(where)) {
    if (!j_.is_object()) Fail(where_, "expected an object");
  }
  std::string Path(const std::string& key) const { return where_ + "." + key; }
  const json* Find(const std::string& key) {
    seen_.insert(key);
    auto it = j_.find(key);
    return it == j_.end() ? nullptr : &*it;
  }
  // A whole number from 1 to INT32_MAX: every count and port is stored in an int or unsigned, where a
  // larger one would wrap (4294967297 would be 1).
  uint64_t Count(const std::string& key, const json& v) const {
    if (!v.is_number_unsigned() || v.get<uint64_t>() == 0 || v.get<uint64_t>() > INT32_MAX) {
      Fail(Path(key), "expected a whole number from 1 to " + std::to_string(INT32_MAX));
    }
    return v.get<uint64_t>();
  }
  void Finish() const {
    for (auto it = j_.begin(); it != j_.end(); ++it) {
      if (!seen_.count(it.key())) Fail(Path(it.key()), "unknown field");
    }
  }

 private:
  const json& j_;
  std::string where_;
  std::set<std::string> seen_;
};

// A QP named in a plan: "#2" is the second QP the process created, a number
// (or "0x.." string) is a QP number.
struct QpRef {
  bool set = false;
  bool by_order = false;
  uint32_t value = 0;
};

QpRef ParseQpRef(const json& v, const std::string& field) {
  QpRef ref;
  ref.set = true;
  if (v.is_number_unsigned() && v.get<uint64_t>() > 0 && v.get<uint64_t>() <= 0xffffff) {
    ref.value = static_cast<uint32_t>(v.get<uint64_t>());
    return ref;
  }
  const std::string s = v.is_string() ? v.get<std::string>() : "";
  ref.by_order = s.rfind('#', 0) == 0;
  const std::string number = ref.by_order ? s.substr(1) : s;
  // (#N counts in decimal only.)
  const bool decimal = number.find_first_not_of("0123456789") == std::string::npos;
  if ((ref.by_order && !decimal) || !ParseQpNumber(number, &ref.value)) {
    Fail(field, "expected a QP: \"#N\" (the Nth QP created, from 1) or a QP number (decimal, or 0x hex)");
  }
  return ref;
}

// What a trigger involves; the action picks what it needs.
struct Involved {
  Device* device = nullptr;
  Cq* cq = nullptr;   // the CQ that was polled
  uint32_t qpn = 0;   // the QP that posted, or the QP of the completion
};

struct Action;
struct ActionKind {
  const char* field;  // the field of "action" that names this kind
  void (*parse)(Fields& fields, const json& value, Action* out);
  void (*run)(const Action& action, const Involved& involved);
  bool on_qp;         // acts on a QP: the trigger must involve one, or the action name it
};

struct Action {
  const ActionKind* kind = nullptr;
  std::string where;
  // "event"
  ibv_event_type event = IBV_EVENT_PORT_ERR;
  std::string device;  // empty: the involved object's device, else the first
  int port = 1;
  QpRef qp;            // overrides the involved QP
  bool cq_named = false;  // "cq": the send or receive CQ of the QP, not the CQ that was polled
  bool recv_cq = false;
  // "wc_error", "qp_state"
  ibv_wc_status wc_status = IBV_WC_GENERAL_ERR;
  ibv_qp_state qp_state = IBV_QPS_ERR;
  // "cm_reject", "cm_drop" (fault/cm_link.h)
  int cm_reason = 0;
  int cm_message = 0;
  unsigned cm_count = 0;
};

struct Trigger {
  enum class Kind { kCompletions, kAfterMs, kPostSend } kind = Kind::kCompletions;
  uint64_t n = 0;
  QpRef qp;
};

struct Fault {
  Trigger trigger;
  Action action;
  bool fired = false;
};

struct Plan {
  std::string path;
  std::vector<Fault> faults;
  bool wants_polls = false;
  bool wants_posts = false;
};

// ---- the state of the process's plan

std::mutex g_mu;
// A leaf lock: held across fork (fork_locks.h).
const bool g_held_across_fork = (HoldAcrossFork([] { g_mu.lock(); }, [] { g_mu.unlock(); }), true);
bool g_loaded = false;
std::string g_error;
Plan& g_plan = *new Plan();  // leaked: the detached timer thread may outlive exit()
std::atomic<bool> g_active{false};     // a plan with faults is loaded
std::vector<std::pair<int, uint32_t>> g_created;  // (device index, QPN) in creation order
std::map<std::pair<int, uint32_t>, uint64_t> g_posts;  // post_send calls per QP
uint64_t g_completions = 0;
decltype(ibv_context_ops::poll_cq) g_poll_cq = nullptr;
decltype(ibv_context_ops::post_send) g_post_send = nullptr;

Device* DeviceNamed(const std::string& name) { return name.empty() ? nullptr : DeviceList::Get().Find(name); }

Device* FirstDevice() {
  const auto& devices = DeviceList::Get().devices();
  return devices.empty() ? nullptr : devices.front().get();
}

// The QP number `ref` names, 0 if none (yet). Requires: g_mu.
std::pair<int, uint32_t> ResolveLocked(const QpRef& ref, Device* device) {
  if (!ref.by_order) return {device ? device->index() : -1, ref.value};
  if (ref.value > g_created.size()) return {-1, 0};
  return g_created[ref.value - 1];
}

// ---- actions: one row each

void ParseEvent(Fields& fields, const json& value, Action* a) {
  if (!value.is_string() || !ParseEventName(value.get<std::string>(), &a->event)) {
    Fail(fields.Path("event"),
         "expected an async event name such as \"PORT_ERR\" or \"QP_FATAL\", not " + value.dump());
  }
  const EventElement element = ElementOf(a->event);
  if (element == EventElement::kWq) Fail(fields.Path("event"), "WQ_FATAL: the simulator has no WQs");
  const bool unaffiliated = element == EventElement::kPort || element == EventElement::kDevice;
  if (const json* v = fields.Find("device")) {
    if (!v->is_string() || !DeviceNamed(v->get<std::string>())) {
      Fail(fields.Path("device"), "expected the name of a device of the profile, e.g. \"sim0\"");
    }
    if (!unaffiliated) Fail(fields.Path("device"), "only port and device events name a device");
    a->device = v->get<std::string>();
  }
  if (const json* v = fields.Find("port")) {
    if (element != EventElement::kPort) Fail(fields.Path("port"), "only port events name a port");
    a->port = static_cast<int>(fields.Count("port", *v));
    Device* d = a->device.empty() ? FirstDevice() : DeviceNamed(a->device);
    if (d && !d->ValidPort(a->port)) Fail(fields.Path("port"), "the device has no such port");
  }
  if (const json* v = fields.Find("qp")) {
    if (unaffiliated) Fail(fields.Path("qp"), "port and device events are not affiliated with a QP");
    a->qp = ParseQpRef(*v, fields.Path("qp"));
  }
  if (const json* v = fields.Find("cq")) {
    if (element != EventElement::kCq) Fail(fields.Path("cq"), "only CQ_ERR names a CQ");
    if (!v->is_string() || (*v != "send" && *v != "recv")) {
      Fail(fields.Path("cq"), "expected \"send\" or \"recv\" (which CQ of the QP)");
    }
    a->cq_named = true;
    a->recv_cq = *v == "recv";
  }
}

void RunEvent(const Action& a, const Involved& involved) {
  const EventElement element = ElementOf(a.event);
  FaultSite site;
  site.device = DeviceNamed(a.device);
  if (!site.device) site.device = involved.device ? involved.device : FirstDevice();
  site.port_num = a.port;
  if (element == EventElement::kPort || element == EventElement::kDevice) {
    RaiseFault(a.event, site);
    return;
  }
  // CQ_ERR on the CQ that was polled, unless the action names a QP or which CQ of the completion's QP.
  if (element == EventElement::kCq && involved.cq && !a.qp.set && !a.cq_named) {
    site.cq = involved.cq;
    RaiseFault(a.event, site);
    return;
  }
  std::pair<int, uint32_t> qp{site.device ? site.device->index() : -1, involved.qpn};
  if (a.qp.set) {
    std::lock_guard<std::mutex> lock(g_mu);
    qp = ResolveLocked(a.qp, site.device);
  }
  const auto& devices = DeviceList::Get().devices();
  if (qp.first < 0 || static_cast<size_t>(qp.first) >= devices.size() || qp.second == 0) return;
  FaultObject object = FaultObject::kQp;
  if (element == EventElement::kCq) object = a.recv_cq ? FaultObject::kRecvCq : FaultObject::kSendCq;
  if (element == EventElement::kSrq) object = FaultObject::kSrq;
  const int delivered = RaiseOnQpNumber(a.event, devices[qp.first].get(), qp.second, object);
  if (delivered == kNotRaised || delivered == kNoSrq) {
    std::fprintf(stderr, "simverbs: fault plan %s: %s not raised on QP %u: %s\n", a.where.c_str(),
                 EventName(a.event), qp.second,
                 delivered == kNoSrq ? "the QP has no SRQ" : "the QP is in RESET or already in ERR");
  }
}

// "wc_error": "<status>": the next send WR of the QP (the one just posted, for a
// post_send trigger) completes with that status (simverbs_fail_send_wr).
// "qp_state": "ERR" | "SQE": the HCA moves the QP (simverbs_set_qp_state).
void ParseQpTarget(Fields& fields, Action* a) {
  if (const json* v = fields.Find("qp")) a->qp = ParseQpRef(*v, fields.Path("qp"));
}

void ParseWcError(Fields& fields, const json& value, Action* a) {
  const std::string name = value.is_string() ? value.get<std::string>() : "";
  bool found = false;
  for (int s = IBV_WC_LOC_LEN_ERR; s <= IBV_WC_TM_RNDV_INCOMPLETE && !found; ++s) {
    const auto status = static_cast<ibv_wc_status>(s);
    if (name == Trace::StatusName(status) || name == std::string("IBV_WC_") + Trace::StatusName(status)) {
      a->wc_status = status;
      found = true;
    }
  }
  if (!found) Fail(fields.Path("wc_error"), "expected an error status such as \"REM_OP_ERR\" or \"WR_FLUSH_ERR\"");
  ParseQpTarget(fields, a);
}

void ParseQpState(Fields& fields, const json& value, Action* a) {
  if (value == "ERR") {
    a->qp_state = IBV_QPS_ERR;
  } else if (value == "SQE") {
    a->qp_state = IBV_QPS_SQE;
  } else {
    Fail(fields.Path("qp_state"), "expected \"ERR\" or \"SQE\"");
  }
  ParseQpTarget(fields, a);
}

// Runs `fn` on the QP the action names or the trigger involved, if this process has it.
template <typename Fn>
void OnTargetQp(const Action& a, const Involved& involved, Fn fn) {
  Device* device = involved.device ? involved.device : FirstDevice();
  std::pair<int, uint32_t> qp{device ? device->index() : -1, involved.qpn};
  if (a.qp.set) {
    std::lock_guard<std::mutex> lock(g_mu);
    qp = ResolveLocked(a.qp, device);
  }
  const auto& devices = DeviceList::Get().devices();
  if (qp.first < 0 || static_cast<size_t>(qp.first) >= devices.size() || qp.second == 0) return;
  std::lock_guard<DataPathMutex> lock(Engine::Get().mu());
  if (Qp* q = devices[qp.first]->FindQp(qp.second)) fn(q);
}

void RunWcError(const Action& a, const Involved& involved) {
  OnTargetQp(a, involved, [&](Qp* q) { q->FailNthSendLocked(1, a.wc_status); });
}

void RunQpState(const Action& a, const Involved& involved) {
  OnTargetQp(a, involved, [&](Qp* q) {
    const ibv_qp_state was = q->state();
    if (q->InjectStateLocked(a.qp_state) == 0) return;
    std::fprintf(stderr,
                 "simverbs: fault plan %s: QP %u (in %s) not moved to %s: ERR takes a QP in any state but RESET and "
                 "ERR, SQE a UC or UD QP in RTS\n",
                 a.where.c_str(), q->qp_num(), Trace::QpStateName(was), Trace::QpStateName(a.qp_state));
  });
}

// "cm_reject": <reason>: the next `count` (default 1) connection requests
// that reach this process's rdma_cm listeners are rejected by the CM with that
// reason (simverbs_cm_reject_requests).
void ParseCmReject(Fields& fields, const json& value, Action* a) {
  if (!value.is_number_unsigned() || value.get<uint64_t>() < 1 || value.get<uint64_t>() > 255) {
    Fail(fields.Path("cm_reject"), "expected an IBTA CM reject reason, 1..255 (28: consumer defined)");
  }
  a->cm_reason = value.get<int>();
  a->cm_count = 1;
  if (const json* v = fields.Find("count")) a->cm_count = static_cast<unsigned>(fields.Count("count", *v));
}

void RunCmReject(const Action& a, const Involved&) { CmRejectRequests(a.cm_count, a.cm_reason); }

// "cm_drop": "<message>": the next `count` (default 16: every try, so the CM
// gives up) CM messages of that kind this process sends are lost
// (simverbs_cm_drop_messages).
void ParseCmDrop(Fields& fields, const json& value, Action* a) {
  if (!value.is_string() || !ParseCmMessage(value.get<std::string>(), &a->cm_message)) {
    Fail(fields.Path("cm_drop"), std::string("expected a CM message the CM resends: ") + kCmMessageNames);
  }
  a->cm_count = 16;
  if (const json* v = fields.Find("count")) a->cm_count = static_cast<unsigned>(fields.Count("count", *v));
}

void RunCmDrop(const Action& a, const Involved&) { CmDropMessages(a.cm_message, a.cm_count); }

// "cm_event": "ADDR_CHANGE": on the rdma_cm ids bound to `port` (default 1) of
// `device` (default: the involved object's, else the first).
void ParseCmEvent(Fields& fields, const json& value, Action* a) {
  if (value != "ADDR_CHANGE" && value != "RDMA_CM_EVENT_ADDR_CHANGE") {
    Fail(fields.Path("cm_event"), "expected \"ADDR_CHANGE\" (DEVICE_REMOVAL comes with \"event\": \"DEVICE_FATAL\")");
  }
  if (const json* v = fields.Find("device")) {
    if (!v->is_string() || !DeviceNamed(v->get<std::string>())) {
      Fail(fields.Path("device"), "expected the name of a device of the profile, e.g. \"sim0\"");
    }
    a->device = v->get<std::string>();
  }
  if (const json* v = fields.Find("port")) {
    a->port = static_cast<int>(fields.Count("port", *v));
    Device* d = a->device.empty() ? FirstDevice() : DeviceNamed(a->device);
    if (d && !d->ValidPort(a->port)) Fail(fields.Path("port"), "the device has no such port");
  }
}

void RunCmEvent(const Action& a, const Involved& involved) {
  Device* device = DeviceNamed(a.device);
  if (!device) device = involved.device ? involved.device : FirstDevice();
  if (device) CmRaiseEvent(device, a.port, kCmEventAddrChange);
}

// To add an action: a row here (its field in "action", how to read it, how
// to run it on what the trigger involves) and its line in fixtures/FORMAT.md.
const ActionKind kActions[] = {
    {"event", ParseEvent, RunEvent, false},  // its QP events check for a QP below
    {"wc_error", ParseWcError, RunWcError, true},
    {"qp_state", ParseQpState, RunQpState, true},
    {"cm_reject", ParseCmReject, RunCmReject, false},
    {"cm_drop", ParseCmDrop, RunCmDrop, false},
    {"cm_event", ParseCmEvent, RunCmEvent, false},
};

// ---- parsing

Trigger ParseTrigger(const json& j, const std::string& where) {
  Fields fields(j, where);
  Trigger t;
  int kinds = 0;
  if (const json* v = fields.Find("completions")) {
    t.kind = Trigger::Kind::kCompletions;
    t.n = fields.Count("completions", *v);
    ++kinds;
  }
  if (const json* v = fields.Find("after_ms")) {
    t.kind = Trigger::Kind::kAfterMs;
    if (!v->is_number_unsigned()) Fail(fields.Path("after_ms"), "expected a whole number of milliseconds");
    t.n = v->get<uint64_t>();
    // Past this the steady clock's time point would wrap into the past and fire at once.
    if (t.n > kMaxAfterMs) {
      Fail(fields.Path("after_ms"), "at most " + std::to_string(kMaxAfterMs) + " (a year); leave the fault out to "
                                    "never fire it");
    }
    ++kinds;
  }
  if (const json* v = fields.Find("post_send")) {
    t.kind = Trigger::Kind::kPostSend;
    t.n = fields.Count("post_send", *v);
    ++kinds;
  }
  if (kinds != 1) Fail(where, "expected exactly one of \"completions\", \"after_ms\", \"post_send\"");
  const json* qp = fields.Find("qp");
  if (t.kind == Trigger::Kind::kPostSend) {
    if (!qp) Fail(fields.Path("qp"), "missing field (post_send counts the posts of one QP: \"#1\" or a QP number)");
    t.qp = ParseQpRef(*qp, fields.Path("qp"));
  } else if (qp) {
    Fail(fields.Path("qp"), "only a post_send trigger names a QP");
  }
  fields.Finish();
  return t;
}

Action ParseAction(const json& j, const std::string& where) {
  Fields fields(j, where);
  Action a;
  a.where = where;
  for (const ActionKind& kind : kActions) {
    const json* v = fields.Find(kind.field);
    if (!v) continue;
    if (a.kind) Fail(where, std::string("more than one action: \"") + a.kind->field + "\" and \"" + kind.field + "\"");
    a.kind = &kind;
    kind.parse(fields, *v, &a);
  }
  if (!a.kind) {
    std::string names;
    for (const ActionKind& kind : kActions) names += std::string(names.empty() ? "\"" : ", \"") + kind.field + "\"";
    std::string found;
    if (j.is_object()) {
      for (auto it = j.begin(); it != j.end(); ++it) {
        found += std::string(found.empty() ? "\"" : ", \"") + it.key() + "\"";
      }
    }
    Fail(where, "no action: expected one of " + names + (found.empty() ? "" : "; it has " + found));
  }
  fields.Finish();
  return a;
}

Plan Parse(const std::string& path, const std::string& text) {
  // Comments are taken, as in profiles (fixtures/FORMAT.md shows plans with them).
  const json j = json::parse(text, nullptr, true, /*ignore_comments=*/true);
  Fields top(j, "plan");
  Plan plan;
  plan.path = path;
  if (const json* d = top.Find("description"); d && !d->is_string()) Fail("plan.description", "expected a string");
  const json* faults = top.Find("faults");
  if (!faults) Fail("plan.faults", "missing field");
  if (!faults->is_array()) Fail("plan.faults", "expected an array");
  for (size_t i = 0; i < faults->size(); ++i) {
    const std::string where = "faults[" + std::to_string(i) + "]";
    Fields f((*faults)[i], where);
    Fault fault;
    const json* trigger = f.Find("trigger");
    const json* action = f.Find("action");
    if (const json* d = f.Find("description"); d && !d->is_string()) Fail(f.Path("description"), "expected a string");
    if (!trigger) Fail(f.Path("trigger"), "missing field");
    if (!action) Fail(f.Path("action"), "missing field");
    f.Finish();
    fault.trigger = ParseTrigger(*trigger, f.Path("trigger"));
    fault.action = ParseAction(*action, f.Path("action"));
    const EventElement element = ElementOf(fault.action.event);
    const bool needs_qp = element == EventElement::kQp || element == EventElement::kSrq ||
                          (element == EventElement::kCq && fault.trigger.kind != Trigger::Kind::kCompletions);
    if (fault.action.kind == &kActions[0] && needs_qp && fault.trigger.kind == Trigger::Kind::kAfterMs &&
        !fault.action.qp.set) {
      Fail(f.Path("action.qp"), "an after_ms trigger involves no QP: name one (\"#1\" or a QP number)");
    }
    if (fault.action.kind->on_qp && fault.trigger.kind != Trigger::Kind::kPostSend && !fault.action.qp.set) {
      Fail(f.Path("action.qp"), "only a post_send trigger involves a QP: name one (\"#1\" or a QP number)");
    }
    plan.wants_polls |= fault.trigger.kind == Trigger::Kind::kCompletions;
    plan.wants_posts |= fault.trigger.kind == Trigger::Kind::kPostSend;
    plan.faults.push_back(fault);
  }
  top.Finish();
  return plan;
}

std::string ParseToError(const std::string& path, const std::string& text, Plan* out) {
  try {
    *out = Parse(path, text);
  } catch (const json::exception& e) {
    return "SIMVERBS_FAULTS=" + path + ": not valid JSON: " + JsonErrorText(e);
  } catch (const PlanError& e) {
    return "SIMVERBS_FAULTS=" + path + ": " + e.what();
  }
  return "";
}

// ---- firing

void Fire(const std::vector<std::pair<const Action*, Involved>>& due) {
  for (const auto& [action, involved] : due) action->kind->run(*action, involved);
}

// `n` completions of `cq` were handed to the program; qp_num(i) is the QP of
// the i-th. Adds the faults that fall due to `due`. Requires: g_mu.
template <typename QpNumOf>
void CountCompletionsLocked(Cq* cq, int n, QpNumOf qp_num, std::vector<std::pair<const Action*, Involved>>* due) {
  const uint64_t before = g_completions;
  g_completions += static_cast<uint64_t>(n);
  for (Fault& f : g_plan.faults) {
    if (f.fired || f.trigger.kind != Trigger::Kind::kCompletions) continue;
    if (f.trigger.n <= before || f.trigger.n > g_completions) continue;
    f.fired = true;
    Involved involved;
    involved.cq = cq;
    involved.device = cq ? cq->context()->device() : nullptr;
    involved.qpn = qp_num(static_cast<int>(f.trigger.n - before - 1));
    due->emplace_back(&f.action, involved);
  }
}

// Faults due from ibv_start_poll / ibv_next_poll, fired by ibv_end_poll
// (the CQ stays locked until then). Requires: g_mu.
std::vector<std::pair<const Action*, Involved>> g_due_at_end_poll;

int PlanPollCq(ibv_cq* cq, int num_entries, ibv_wc* wc) {
  const int n = g_poll_cq(cq, num_entries, wc);
  if (n <= 0) return n;
  std::vector<std::pair<const Action*, Involved>> due;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    CountCompletionsLocked(Cq::From(cq), n, [wc](int i) { return wc[i].qp_num; }, &due);
  }
  Fire(due);
  return n;
}

// One ibv_post_send (or ibv_wr_complete) call on `q`: fires the post_send
// faults that fall due, before the post is executed.
void CountPost(Qp* q) {
  std::vector<std::pair<const Action*, Involved>> due;
  if (q) {
    std::lock_guard<std::mutex> lock(g_mu);
    const std::pair<int, uint32_t> key{q->device()->index(), q->qp_num()};
    const uint64_t count = ++g_posts[key];
    for (Fault& f : g_plan.faults) {
      if (f.fired || f.trigger.kind != Trigger::Kind::kPostSend || f.trigger.n != count) continue;
      if (ResolveLocked(f.trigger.qp, q->device()) != key) continue;
      f.fired = true;
      Involved involved;
      involved.device = q->device();
      involved.qpn = q->qp_num();
      due.emplace_back(&f.action, involved);
    }
  }
  // The fault happens before the post is executed (a QP it took to ERR
  // flushes this WR; a fatal device drops it).
  Fire(due);
}

int PlanPostSend(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  CountPost(Qp::From(qp));
  const auto op = qp->context->ops.post_send;
  return op != PlanPostSend ? op(qp, wr, bad_wr) : g_post_send(qp, wr, bad_wr);
}

void TimerThread(std::vector<const Fault*> timed) {
  const auto start = std::chrono::steady_clock::now();
  std::sort(timed.begin(), timed.end(), [](const Fault* a, const Fault* b) { return a->trigger.n < b->trigger.n; });
  for (const Fault* f : timed) {
    std::this_thread::sleep_until(start + std::chrono::milliseconds(f->trigger.n));
    Involved involved;
    Fire({{&f->action, involved}});
  }
}

}  // namespace

std::string Check(const std::string& path, const std::string& text) {
  Plan plan;
  return ParseToError(path, text, &plan);
}

std::string OnContextOpen(Context* ctx) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_loaded) {
    g_loaded = true;
    const char* env = std::getenv("SIMVERBS_FAULTS");
    if (env && *env) {
      std::ifstream in(env);
      if (!in) {
        g_error = std::string("SIMVERBS_FAULTS=") + env + ": cannot read the fault plan: " + std::strerror(errno);
      } else {
        std::stringstream text;
        text << in.rdbuf();
        g_error = ParseToError(env, text.str(), &g_plan);
      }
      g_active = g_error.empty() && !g_plan.faults.empty();
    }
  }
  if (!g_error.empty()) return g_error;
  if (!g_active || !ctx) return "";
  static bool timer_started = false;
  if (!timer_started) {
    // The clock starts when the first context exists, so that an event at
    // 0 ms has a context to reach.
    timer_started = true;
    std::vector<const Fault*> timed;
    for (const Fault& f : g_plan.faults) {
      if (f.trigger.kind == Trigger::Kind::kAfterMs) timed.push_back(&f);
    }
    // Sleeps until its last fault; the process may end before.
    if (!timed.empty()) QuietThread([timed] { TimerThread(timed); }).detach();
  }
  ibv_context_ops& ops = ctx->ibv()->ops;
  if (g_plan.wants_polls && ops.poll_cq != PlanPollCq) {
    g_poll_cq = ops.poll_cq;
    ops.poll_cq = PlanPollCq;
  }
  if (g_plan.wants_posts && ops.post_send != PlanPostSend) {
    g_post_send = ops.post_send;
    ops.post_send = PlanPostSend;
  }
  return "";
}

void OnWrComplete(Qp* qp) {
  if (!g_active.load(std::memory_order_acquire) || !g_plan.wants_posts) return;
  CountPost(qp);
}

void OnPolledEx(Cq* cq, uint32_t qp_num) {
  if (!g_active.load(std::memory_order_acquire) || !g_plan.wants_polls) return;
  std::lock_guard<std::mutex> lock(g_mu);
  CountCompletionsLocked(cq, 1, [qp_num](int) { return qp_num; }, &g_due_at_end_poll);
}

void OnEndPoll() {
  if (!g_active.load(std::memory_order_acquire) || !g_plan.wants_polls) return;
  std::vector<std::pair<const Action*, Involved>> due;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    due.swap(g_due_at_end_poll);
  }
  Fire(due);
}

void OnQpCreated(const Qp* qp) {
  if (!g_active.load(std::memory_order_relaxed)) return;
  std::lock_guard<std::mutex> lock(g_mu);
  const std::pair<int, uint32_t> key{qp->device()->index(), qp->qp_num()};
  g_created.push_back(key);
  g_posts.erase(key);  // a reused number starts counting again
}

}  // namespace fault_plan
}  // namespace simverbs
