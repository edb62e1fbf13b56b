#include "inject_command.h"

#include <cctype>
#include <cstdio>
#include <cstdlib>

#include "event_element.h"
#include "fabric/fabric.h"
#include "fault/cm_link.h"
#include "fault/inject.h"
#include "fault/mailbox.h"
#include "profile.h"

namespace {

// IBTA CM reject reason 28: consumer defined, what rdma_reject sends.
constexpr int kConsumerDefinedReject = 28;

constexpr const char* kEventList =
    "DEVICE_FATAL, PORT_ACTIVE, PORT_ERR, LID_CHANGE, PKEY_CHANGE, SM_CHANGE, CLIENT_REREGISTER, GID_CHANGE "
    "(device/port); QP_FATAL, QP_REQ_ERR, QP_ACCESS_ERR, COMM_EST, SQ_DRAINED, PATH_MIG, PATH_MIG_ERR, "
    "QP_LAST_WQE_REACHED (--qp); CQ_ERR (--cq-of-qp); SRQ_ERR, SRQ_LIMIT_REACHED (--srq-of-qp); "
    "rdma_cm: ADDR_CHANGE (device/port), CM_REJECT [--reason R] [--count N], CM_DROP --message M [--count N]";

// The rdma_cm faults and events `inject` takes besides the async events.
enum class CmKind { kNone, kAddrChange, kReject, kDrop };

CmKind CmKindOf(const std::string& event) {
  std::string upper;
  for (char c : event) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (upper.rfind("RDMA_CM_EVENT_", 0) == 0) upper = upper.substr(14);
  if (upper == "ADDR_CHANGE") return CmKind::kAddrChange;
  if (upper == "CM_REJECT") return CmKind::kReject;
  if (upper == "CM_DROP") return CmKind::kDrop;
  return CmKind::kNone;
}

// The fields of a CM fault request; an error message for options that do not fit.
std::string FillCmFault(const InjectOptions& o, CmKind kind, simverbs::FaultRequest* r, std::string* what) {
  using simverbs::FaultObject;
  if (!o.qp.empty() || !o.cq_of_qp.empty() || !o.srq_of_qp.empty()) {
    return o.event + " is not affiliated with a QP: leave out --qp, --cq-of-qp and --srq-of-qp";
  }
  if (kind == CmKind::kReject) {
    const int reason = o.reason.value_or(kConsumerDefinedReject);
    if (reason < 1 || reason > 255) {
      return "--reason " + std::to_string(reason) + " is not an IBTA CM reject reason (1..255; 28: consumer defined)";
    }
    r->object = FaultObject::kCmReject;
    r->count = static_cast<uint32_t>(o.count.value_or(1));
    r->argument = reason;
    *what = r->count == 0 ? std::string("disarmed") : "reject the next " + std::to_string(r->count) +
                                                          " connection request(s) with reason " +
                                                          std::to_string(reason);
    return "";
  }
  const std::string name = o.message.value_or("REQ");
  int message = 0;
  if (!simverbs::ParseCmMessage(name, &message)) {
    return "--message \"" + name + "\" is not a CM message the CM resends; one of " + simverbs::kCmMessageNames;
  }
  r->object = FaultObject::kCmDrop;
  r->count = static_cast<uint32_t>(o.count.value_or(16));
  r->argument = message;
  *what = r->count == 0 ? "lose no more " + name + " messages (disarmed)"
                        : "lose the next " + std::to_string(r->count) + " " + name + " message(s)";
  return "";
}

// The target options that fit the event's kind; an error message otherwise.
std::string FillTarget(const InjectOptions& o, simverbs::EventElement element, simverbs::FaultRequest* r) {
  using simverbs::EventElement;
  using simverbs::FaultObject;
  const bool any_object = !o.qp.empty() || !o.cq_of_qp.empty() || !o.srq_of_qp.empty();
  std::string number;
  switch (element) {
    case EventElement::kPort:
    case EventElement::kDevice:
      if (any_object) return o.event + " is not affiliated with an object: give --device (and --port), not --qp";
      r->object = FaultObject::kDevice;
      return "";
    case EventElement::kQp:
      if (o.qp.empty()) return o.event + " is affiliated with a QP: give --qp QPN";
      r->object = FaultObject::kQp;
      number = o.qp;
      break;
    case EventElement::kCq:
      if (o.cq_of_qp.empty()) {
        return o.event + " is affiliated with a CQ; CQs have no number, so name a QP that uses it: --cq-of-qp QPN "
                         "(its send CQ; add --recv-cq for its receive CQ)";
      }
      r->object = o.recv_cq ? FaultObject::kRecvCq : FaultObject::kSendCq;
      number = o.cq_of_qp;
      break;
    case EventElement::kSrq:
      if (o.srq_of_qp.empty()) return o.event + " is affiliated with an SRQ: name a QP attached to it, --srq-of-qp QPN";
      r->object = FaultObject::kSrq;
      number = o.srq_of_qp;
      break;
    default:
      return o.event + " cannot be injected (the simulator has no WQs)";
  }
  if (!simverbs::ParseQpNumber(number, &r->qpn)) {
    return "\"" + number + "\" is not a QP number (1..0xffffff, decimal or 0x hex)";
  }
  return "";
}

// CM_REJECT, CM_DROP: armed in every process of the fabric that uses rdma_cm.
int RunCmFault(const InjectOptions& o, CmKind kind) {
  const std::string fabric = simverbs::Fabric::NameFromEnvironment(o.fabric);
  std::string what;
  simverbs::FaultRequest check{};
  if (const std::string error = FillCmFault(o, kind, &check, &what); !error.empty()) {
    std::fprintf(stderr, "simverbs inject: %s\n", error.c_str());  // before looking for the fabric
    return 2;
  }
  const simverbs::FaultPost post = simverbs::Fabric::PostFault(
      fabric,
      [&](const std::string&, simverbs::FaultRequest* r) -> std::string { return FillCmFault(o, kind, r, &what); },
      o.timeout_ms);
  if (!post.error.empty()) {
    std::fprintf(stderr, "simverbs inject: %s\n", post.error.c_str());
    return 2;
  }
  std::printf("%s: %s; armed in %u process(es) with rdma_cm; %d of %d process(es) answered\n",
              kind == CmKind::kReject ? "CM_REJECT" : "CM_DROP", what.c_str(), post.delivered, post.answered,
              post.processes);
  if (post.answered < post.processes) {
    std::fprintf(stderr,
                 "simverbs inject: %d process(es) did not answer within %d ms (pid %s); the request stays "
                 "queued there and takes effect when they next run (do not inject it again for them)\n",
                 post.processes - post.answered, o.timeout_ms, post.silent.c_str());
    return 1;
  }
  if (post.delivered == 0) {
    std::fprintf(stderr,
                 "simverbs inject: no process on fabric \"%s\" uses rdma_cm yet (the fault is armed in a process "
                 "once it has loaded librdmacm and opened a device)\n",
                 fabric.c_str());
    return 1;
  }
  return 0;
}

// An option's value must be a whole number in [low, high]; the message says what it wants.
CLI::Validator WholeNumber(long low, long high, const std::string& wanted, const std::string& name) {
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        char* end = nullptr;
        const long value = std::strtol(text.c_str(), &end, 10);
        const bool fits = !text.empty() && *end == '\0' && value >= low && value <= high;
        return fits ? std::string() : "wants " + wanted + ", not \"" + text + "\"";
      },
      name);
}

}  // namespace

CLI::App* AddInjectCommand(CLI::App& app, InjectOptions* o) {
  CLI::App* cmd = app.add_subcommand(
      "inject", "Raise an async event in the programs running on a fabric (SIMVERBS_FABRIC or --fabric)");
  cmd->add_option("event", o->event, std::string("The event: ") + kEventList)->required();
  cmd->add_option("--fabric,-f", o->fabric, "The fabric (default: $SIMVERBS_FABRIC, else \"default\")");
  cmd->add_option("--device,-d", o->device, "The device, e.g. sim0 (default: the profile's first)");
  cmd->add_option("--port,-p", o->port, "The port of a port event (default 1)");
  cmd->add_option("--qp", o->qp, "QP events: the QP number (decimal or 0x hex)");
  cmd->add_option("--cq-of-qp", o->cq_of_qp, "CQ_ERR: the send CQ of this QP");
  cmd->add_flag("--recv-cq", o->recv_cq, "With --cq-of-qp: the QP's receive CQ instead");
  cmd->add_option("--srq-of-qp", o->srq_of_qp, "SRQ events: the SRQ this QP receives from");
  cmd->add_option("--count", o->count,
                  "CM_REJECT: how many requests (default 1); CM_DROP: how many messages (default 16: every try, "
                  "so the CM gives up); 0 disarms")
      ->check(WholeNumber(0, 1000000, "a whole number, 0..1000000 (0 disarms)", "N"));
  cmd->add_option("--reason", o->reason, "CM_REJECT: the IBTA reject reason the client sees (default 28)");
  cmd->add_option("--message", o->message, std::string("CM_DROP: the message lost, one of ") +
                                                simverbs::kCmMessageNames + " (default REQ)");
  cmd->add_option("--timeout-ms", o->timeout_ms, "How long to wait for every process to answer (default 5000)")
      ->check(WholeNumber(1, 3600000, "a whole number of milliseconds, 1..3600000", "MS"));
  return cmd;
}

int RunInject(const InjectOptions& o) {
  const CmKind cm = CmKindOf(o.event);
  // Options the event does not take are refused, not ignored.
  if (cm != CmKind::kReject && cm != CmKind::kDrop && (o.count || o.reason || o.message)) {
    std::fprintf(stderr, "simverbs inject: --count, --reason and --message are for CM_REJECT and CM_DROP, not %s\n",
                 o.event.c_str());
    return 2;
  }
  if (cm == CmKind::kReject && o.message) {
    std::fprintf(stderr, "simverbs inject: --message is for CM_DROP; CM_REJECT takes --reason and --count\n");
    return 2;
  }
  if (cm == CmKind::kDrop && o.reason) {
    std::fprintf(stderr, "simverbs inject: --reason is for CM_REJECT; CM_DROP takes --message and --count\n");
    return 2;
  }
  if ((!o.qp.empty()) + (!o.cq_of_qp.empty()) + (!o.srq_of_qp.empty()) > 1) {
    std::fprintf(stderr, "simverbs inject: give one of --qp, --cq-of-qp and --srq-of-qp (a QP, CQ or SRQ event)\n");
    return 2;
  }
  if (o.recv_cq && o.cq_of_qp.empty()) {
    std::fprintf(stderr, "simverbs inject: --recv-cq goes with --cq-of-qp QPN (a CQ event)\n");
    return 2;
  }
  if (cm == CmKind::kReject || cm == CmKind::kDrop) return RunCmFault(o, cm);
  ibv_event_type type{};
  if (cm == CmKind::kNone && !simverbs::ParseEventName(o.event, &type)) {
    std::fprintf(stderr, "simverbs inject: unknown event \"%s\"; one of %s\n", o.event.c_str(), kEventList);
    return 2;
  }
  const bool addr_change = cm == CmKind::kAddrChange;
  // ADDR_CHANGE is an rdma_cm event on a port.
  const simverbs::EventElement element = addr_change ? simverbs::EventElement::kPort : simverbs::ElementOf(type);
  const char* name = addr_change ? "ADDR_CHANGE" : simverbs::EventName(type);
  if (o.port && element != simverbs::EventElement::kPort) {
    std::fprintf(stderr, "simverbs inject: --port is for port events and ADDR_CHANGE; %s takes none\n", name);
    return 2;
  }
  const int port = o.port.value_or(1);
  const std::string fabric = simverbs::Fabric::NameFromEnvironment(o.fabric);
  std::string where;
  const simverbs::FaultPost post = simverbs::Fabric::PostFault(
      fabric,
      [&](const std::string& profile_path, simverbs::FaultRequest* r) -> std::string {
        r->event = type;
        const simverbs::ProfileLoad load = simverbs::LoadProfileFile(profile_path);
        if (!load.error.empty()) return "the fabric's profile: " + load.error;
        const auto& devices = load.profile.devices;
        std::string names;
        for (const auto& d : devices) names += (names.empty() ? "" : ", ") + d.name;
        int index = o.device.empty() && !devices.empty() ? 0 : -1;
        for (size_t i = 0; index < 0 && i < devices.size(); ++i) {
          if (devices[i].name == o.device) index = static_cast<int>(i);
        }
        if (index < 0) {
          return "no device \"" + o.device + "\" on fabric \"" + fabric + "\" (profile " + load.profile.name +
                 " has: " + names + ")";
        }
        r->device_index = index;
        where = devices[index].name;
        if (element == simverbs::EventElement::kPort) {
          const int ports = static_cast<int>(devices[index].ports.size());
          if (port < 1 || port > ports) {
            return where + " has no port " + std::to_string(port) + " (ports 1.." + std::to_string(ports) + ")";
          }
          r->port_num = port;
          where += " port " + std::to_string(port);
        }
        const std::string error = FillTarget(o, element, r);
        if (addr_change) {
          r->event = simverbs::kCmEventAddrChange;
          r->object = simverbs::FaultObject::kCmEvent;
        } else if (r->object != simverbs::FaultObject::kDevice) {
          where += " QP " + std::to_string(r->qpn);
        }
        return error;
      },
      o.timeout_ms);
  if (!post.error.empty()) {
    std::fprintf(stderr, "simverbs inject: %s\n", post.error.c_str());
    return 2;
  }
  std::printf("%s on %s: %u event(s) delivered; %d of %d process(es) answered\n", name, where.c_str(),
              post.delivered, post.answered, post.processes);
  if (post.answered < post.processes) {
    std::fprintf(stderr,
                 "simverbs inject: %d process(es) did not answer within %d ms (pid %s); the event stays queued "
                 "there and is delivered when they next run (do not inject it again for them)\n",
                 post.processes - post.answered, o.timeout_ms, post.silent.c_str());
    return 1;
  }
  if (addr_change && post.delivered == 0) {
    std::fprintf(stderr,
                 "simverbs inject: no rdma_cm id on fabric \"%s\" is bound to %s (ADDR_CHANGE reaches ids bound "
                 "to the port: run it after the program's rdma_bind_addr or rdma_resolve_addr)\n",
                 fabric.c_str(), where.c_str());
    return 1;
  }
  const bool affiliated = element != simverbs::EventElement::kPort && element != simverbs::EventElement::kDevice;
  if (affiliated && post.delivered == 0 && post.not_raised > 0) {
    std::fprintf(stderr,
                 "simverbs inject: %s is in RESET or already in ERR: no event (a QP in RESET has nothing on the HCA "
                 "to fail, one in ERR failed already)\n",
                 where.c_str());
    return 1;
  }
  if (affiliated && post.delivered == 0) {
    std::fprintf(stderr, "simverbs inject: no process on fabric \"%s\" owns %s%s (is the QP number right?)\n",
                 fabric.c_str(), where.c_str(), element == simverbs::EventElement::kSrq ? " attached to an SRQ" : "");
    return 1;
  }
  // A device or port event may end a process before it counts the delivery
  // (rping exits on the DEVICE_REMOVAL that DEVICE_FATAL brings). An
  // affiliated one names an object: a process that ended is no excuse there.
  if (post.delivered == 0 && post.exited > 0) {
    std::fprintf(stderr,
                 "simverbs inject: %d process(es) ended before they answered (perhaps on this event); no other "
                 "process had %s\n",
                 post.exited, where.c_str());
    return 0;
  }
  const bool changes_state = !addr_change && (type == IBV_EVENT_PORT_ERR || type == IBV_EVENT_PORT_ACTIVE);
  if (post.delivered == 0 && changes_state) {
    // The port's state changed all the same, in every process of the fabric.
    std::fprintf(stderr,
                 "simverbs inject: no process on fabric \"%s\" has %s's device open, so no event was delivered; "
                 "the port's state changed all the same\n",
                 fabric.c_str(), where.c_str());
  } else if (post.delivered == 0) {
    std::fprintf(stderr,
                 "simverbs inject: no process on fabric \"%s\" has %s open (an event reaches the contexts open on "
                 "the device, and none after its DEVICE_FATAL)\n",
                 fabric.c_str(), where.c_str());
    return 1;
  }
  return 0;
}
