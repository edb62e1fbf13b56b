#include "conformance/differential/scenarios.h"

#include <arpa/inet.h>

#include <chrono>
#include <cstdlib>
#include <vector>

#include "conformance/lib/qp_pair.h"
#include "conformance/lib/sim_control.h"
#include "conformance/lib/verbs_handles.h"

namespace differential {
namespace {

using conformance::Buffer;
using conformance::ConnectParams;
using conformance::EndConfig;
using conformance::QpEnd;

// Completions a CQ gets beyond its size in the overrun scenarios.
constexpr int kExtra = 4;
// A CQ size every backend keeps as asked: rxe rounds a ring to 2^n - 1 entries.
constexpr int kSmallCq = 7;
constexpr uint32_t kDeepQueue = 64;

// Two connected RC QPs, a and b, on one port (loopback), each with its own send and receive
// CQ, plus a local and a remote buffer. Members are destroyed in reverse: QPs, SRQ, MRs, PD.
struct Pair {
  conformance::PdPtr pd;
  Buffer local;
  Buffer remote;
  conformance::SrqPtr srq;
  QpEnd a;
  QpEnd b;
  ibv_ah_attr address = {};  // the port's own (loopback)

  bool AllocPd(const Setup& setup, Trace* trace) {
    pd.reset(ibv_alloc_pd(setup.context));
    if (!pd) trace->Fail("ibv_alloc_pd failed");
    return pd != nullptr;
  }

  // Create, then connect a <-> b (RESET -> INIT -> RTR -> RTS).
  bool Make(const Setup& setup, Trace* trace, const EndConfig& a_config = {}, const EndConfig& b_config = {},
            const ConnectParams& a_params = {}, const ConnectParams& b_params = {}) {
    if (!Create(setup, trace, a_config, b_config)) return false;
    auto ok = conformance::BringUp(a.get(), setup.port, b.qp_num(), address, a_params);
    if (ok) ok = conformance::BringUp(b.get(), setup.port, a.qp_num(), address, b_params);
    if (!ok) trace->Fail(ok.message());
    return ok;
  }

  // Creates what AllocPd has not (buffers, CQs, QPs in RESET), names it in the trace and reads
  // the port's address.
  bool Create(const Setup& setup, Trace* trace, const EndConfig& a_config = {}, const EndConfig& b_config = {}) {
    if (!pd && !AllocPd(setup, trace)) return false;
    for (auto ok : {local.Register(pd.get(), 4096), remote.Register(pd.get(), 4096)}) {
      if (!ok) {
        trace->Fail(ok.message());
        return false;
      }
    }
    for (auto ok : {conformance::CreateEndOn(setup.context, pd.get(), &a, a_config),
                    conformance::CreateEndOn(setup.context, pd.get(), &b, b_config)}) {
      if (!ok) {
        trace->Fail(ok.message());
        return false;
      }
    }
    trace->Name(a.qp.get(), "qp.a");
    trace->Name(b.qp.get(), "qp.b");
    trace->Name(a.send_cq.get(), "cq.a.send");
    trace->Name(a.recv_cq.get(), "cq.a.recv");
    trace->Name(b.send_cq.get(), "cq.b.send");
    trace->Name(b.recv_cq.get(), "cq.b.recv");
    auto ok = conformance::PortAddress(setup.context, setup.port, setup.gid_index, false, &address);
    if (!ok) trace->Fail(ok.message());
    return ok;
  }

  void RecordStates(Trace* trace) const {
    trace->RecordState(a.get());
    trace->RecordState(b.get());
  }
};

// Posts a list of WRs and records the result under `role`.
void PostSendList(Trace* trace, const std::string& role, ibv_qp* qp, std::vector<ibv_send_wr>& wrs) {
  for (size_t i = 0; i + 1 < wrs.size(); ++i) wrs[i].next = &wrs[i + 1];
  ibv_send_wr* bad = nullptr;
  trace->Call(role, "ibv_post_send", ibv_post_send(qp, wrs.data(), &bad));
}

// Posts `count` SENDs of sge from qp.a as one list.
void PostSends(Trace* trace, ibv_qp* qp, ibv_sge* sge, uint64_t first_wr_id, int count,
               unsigned flags = IBV_SEND_SIGNALED) {
  std::vector<ibv_send_wr> wrs;
  for (int i = 0; i < count; ++i) wrs.push_back(conformance::SendWr(first_wr_id + i, sge, 1, flags));
  PostSendList(trace, "qp.a", qp, wrs);
}

// Posts `count` receives one by one; records one call: the first failure, else 0.
void PostRecvs(Trace* trace, const std::string& role, ibv_qp* qp, ibv_sge* sge, uint64_t first_wr_id, int count) {
  int rc = 0;
  for (int i = 0; i < count && rc == 0; ++i) rc = conformance::PostRecv(qp, first_wr_id + i, sge, 1);
  trace->Call(role, "ibv_post_recv x" + std::to_string(count), rc);
}

// cqe + 4 signaled WRITEs into a send CQ of cqe entries that nobody polls; the last carries
// immediate data, so b's receive completion says every WRITE has reached b. The requester's
// completions follow with the ACKs, so the CQs are read only after the device settles. Then
// one more WRITE shows whether the CQ and the QP still work.
void CqOverflowSend(const Setup& setup, Trace* trace) {
  Pair pair;
  EndConfig a_config;
  a_config.send_cqe = kSmallCq;
  a_config.caps.max_send_wr = kDeepQueue;
  if (!pair.Make(setup, trace, a_config)) return;
  ibv_sge rsge = pair.remote.Sge(2048, 8);
  PostRecvs(trace, "qp.b", pair.b.get(), &rsge, 1000, 1);
  const int count = pair.a.send_cq->cqe + kExtra;
  std::vector<ibv_sge> sges(static_cast<size_t>(count), pair.local.Sge(0, 8));
  std::vector<ibv_send_wr> wrs;
  for (int i = 0; i < count; ++i) {
    const ibv_wr_opcode op = i + 1 == count ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
    wrs.push_back(conformance::RdmaWr(i, op, &sges[i], 1, pair.remote.addr(static_cast<size_t>(i) * 8),
                                      pair.remote.rkey()));
    wrs.back().imm_data = htonl(7);
  }
  PostSendList(trace, "qp.a", pair.a.get(), wrs);
  if (!trace->WaitForCompletions(pair.b.recv_cq.get(), 1, "receive completion of the last WRITE")) return;
  trace->Settle(false);
  trace->Settle(true);
  std::vector<ibv_send_wr> after = {
      conformance::RdmaWr(100, IBV_WR_RDMA_WRITE, &sges[0], 1, pair.remote.addr(), pair.remote.rkey())};
  PostSendList(trace, "qp.a", pair.a.get(), after);
  trace->Settle(true);
  pair.RecordStates(trace);
}

// cqe + 4 SENDs into a receiver whose receive CQ has cqe entries and is not polled. The
// sender's CQ is deep and every SEND is signaled, so it gets one completion per SEND, however
// the receiver fails (a lost ACK ends in a transport retry error: retry_cnt 1).
void CqOverflowRecv(const Setup& setup, Trace* trace) {
  Pair pair;
  EndConfig a_config;
  a_config.send_cqe = static_cast<int>(kDeepQueue);
  a_config.caps.max_send_wr = kDeepQueue;
  EndConfig b_config;
  b_config.recv_cqe = kSmallCq;
  b_config.caps.max_recv_wr = kDeepQueue;
  ConnectParams a_params;
  a_params.timeout = 14;
  a_params.retry_cnt = 1;
  if (!pair.Make(setup, trace, a_config, b_config, a_params)) return;
  const int count = pair.b.recv_cq->cqe + kExtra;
  ibv_sge rsge = pair.remote.Sge(0, 8);
  PostRecvs(trace, "qp.b", pair.b.get(), &rsge, 0, count);
  ibv_sge sge = pair.local.Sge(0, 8);
  PostSends(trace, pair.a.get(), &sge, 0, count);
  if (!trace->WaitForCompletions(pair.a.send_cq.get(), count, "a completion for every SEND")) return;
  trace->Settle(false);
  trace->Settle(true);
  pair.RecordStates(trace);
}

// An RDMA WRITE with the R_Key of a deregistered MR, then a SEND behind it; b has one receive
// posted, so a flush of b's receive queue shows.
void RemoteAccessError(const Setup& setup, Trace* trace) {
  Pair pair;
  if (!pair.AllocPd(setup, trace)) return;
  uint32_t dead_rkey = 0;
  {
    Buffer dead;
    if (auto ok = dead.Register(pair.pd.get(), 64); !ok) return trace->Fail(ok.message());
    dead_rkey = dead.rkey();
  }
  if (!pair.Make(setup, trace)) return;
  ibv_sge rsge = pair.remote.Sge(0, 8);
  PostRecvs(trace, "qp.b", pair.b.get(), &rsge, 100, 1);
  ibv_sge sge = pair.local.Sge(0, 8);
  std::vector<ibv_send_wr> wrs = {
      conformance::RdmaWr(1, IBV_WR_RDMA_WRITE, &sge, 1, pair.remote.addr(), dead_rkey),
      conformance::SendWr(2, &sge, 1),
  };
  PostSendList(trace, "qp.a", pair.a.get(), wrs);
  if (!trace->WaitForCompletions(pair.a.send_cq.get(), 2, "completions of the WRITE and the SEND")) return;
  trace->Settle(true);
  pair.RecordStates(trace);
}

// a is moved to ERR with two receives posted; then a signaled and an unsignaled SEND are posted
// in ERR, and, once that has settled, one more receive.
void FlushAfterErr(const Setup& setup, Trace* trace) {
  Pair pair;
  if (!pair.Make(setup, trace)) return;
  ibv_sge sge = pair.local.Sge(0, 8);
  PostRecvs(trace, "qp.a", pair.a.get(), &sge, 10, 2);
  ibv_qp_attr to_err = {};
  to_err.qp_state = IBV_QPS_ERR;
  trace->Call("qp.a", "ibv_modify_qp(IBV_QPS_ERR)", ibv_modify_qp(pair.a.get(), &to_err, IBV_QP_STATE));
  std::vector<ibv_send_wr> wrs = {conformance::SendWr(1, &sge, 1), conformance::SendWr(2, &sge, 1, 0)};
  PostSendList(trace, "qp.a", pair.a.get(), wrs);
  trace->Settle(true);
  PostRecvs(trace, "qp.a", pair.a.get(), &sge, 12, 1);
  trace->Settle(true);
  pair.RecordStates(trace);
}

// Two SENDs to b, which has no receive posted, with rnr_retry 0: the first RNR NAK ends it.
void RnrRetryExceeded(const Setup& setup, Trace* trace) {
  Pair pair;
  ConnectParams a_params;
  a_params.rnr_retry = 0;
  if (!pair.Make(setup, trace, {}, {}, a_params)) return;
  ibv_sge sge = pair.local.Sge(0, 8);
  PostSends(trace, pair.a.get(), &sge, 1, 2);
  if (!trace->WaitForCompletions(pair.a.send_cq.get(), 2, "completions of both SENDs")) return;
  trace->Settle(true);
  pair.RecordStates(trace);
}

// Takes the link down and up: the simulator's control API, else the shell commands.
std::string ChangeLink(const Setup& setup, bool up) {
  const conformance::SimControl& sim = conformance::SimControl::Get();
  if (sim.available()) {
    const int rc = sim.RaisePortEvent(setup.context, setup.port, up ? IBV_EVENT_PORT_ACTIVE : IBV_EVENT_PORT_ERR);
    return rc == 0 ? "" : "simverbs_raise_port_event returned " + ResultName(rc);
  }
  const std::string& command = up ? setup.port_up_cmd : setup.port_down_cmd;
  if (command.empty()) return "no --port-down-cmd / --port-up-cmd given, and not on the simulator";
  const int status = std::system(command.c_str());
  return status == 0 ? "" : "'" + command + "' failed (system() status " + std::to_string(status) + ")";
}

std::string PortStateName(const Setup& setup) {
  ibv_port_attr attr = {};
  if (ibv_query_port(setup.context, setup.port, &attr) != 0) return "ibv_query_port failed";
  return ibv_port_state_str(attr.state);
}

// The link goes down and comes back with a connected pair in place; then a SEND shows whether
// the pair survived.
void PortDownUp(const Setup& setup, Trace* trace) {
  Pair pair;
  if (!pair.Make(setup, trace)) return;
  const std::string port = "port." + std::to_string(setup.port);
  trace->Set(port, "events", nlohmann::json::array());
  if (const std::string error = ChangeLink(setup, false); !error.empty()) return trace->Fail(error);
  // A commanded link change is machine-wide: whatever happens next, the link comes back up.
  struct LinkBackUp {
    const Setup& setup;
    bool done = false;
    ~LinkBackUp() {
      if (!done) ChangeLink(setup, true);
    }
  } back_up{setup};
  if (!trace->WaitForEvent(IBV_EVENT_PORT_ERR, port, "after taking the link down")) return;
  trace->Set(port, "state_when_down", PortStateName(setup));
  back_up.done = true;
  if (const std::string error = ChangeLink(setup, true); !error.empty()) return trace->Fail(error);
  if (!trace->WaitForEvent(IBV_EVENT_PORT_ACTIVE, port, "after bringing the link up")) return;
  trace->Settle(false);
  trace->Set(port, "state_when_up", PortStateName(setup));
  ibv_sge rsge = pair.remote.Sge(0, 8);
  PostRecvs(trace, "qp.b", pair.b.get(), &rsge, 100, 1);
  ibv_sge sge = pair.local.Sge(0, 8);
  PostSends(trace, pair.a.get(), &sge, 1, 1);
  if (!trace->WaitForCompletions(pair.b.recv_cq.get(), 1, "the SEND after the link came back")) return;
  trace->Settle(true);
  pair.RecordStates(trace);
}

int SrqLimit(ibv_srq* srq) {
  ibv_srq_attr attr = {};
  return ibv_query_srq(srq, &attr) == 0 ? static_cast<int>(attr.srq_limit) : -1;
}

// b takes its receives from an SRQ of 8 WQEs armed with limit 4; 5 SENDs take it below the
// limit, 3 more empty it.
void SrqLimitReached(const Setup& setup, Trace* trace) {
  Pair pair;
  if (!pair.AllocPd(setup, trace)) return;
  ibv_srq_init_attr init = {};
  init.attr.max_wr = 16;
  init.attr.max_sge = 1;
  pair.srq.reset(ibv_create_srq(pair.pd.get(), &init));
  if (!pair.srq) return trace->Fail("ibv_create_srq failed");
  trace->Name(pair.srq.get(), "srq");
  EndConfig b_config;
  b_config.srq = pair.srq.get();
  if (!pair.Make(setup, trace, {}, b_config)) return;
  ibv_sge rsge = pair.remote.Sge(0, 8);
  int rc = 0;
  for (int i = 0; i < 8 && rc == 0; ++i) rc = conformance::PostSrqRecv(pair.srq.get(), i, &rsge, 1);
  trace->Call("srq", "ibv_post_srq_recv x8", rc);
  ibv_srq_attr arm = {};
  arm.srq_limit = 4;
  trace->Call("srq", "ibv_modify_srq(IBV_SRQ_LIMIT)", ibv_modify_srq(pair.srq.get(), &arm, IBV_SRQ_LIMIT));
  trace->Set("srq", "limit_when_armed", SrqLimit(pair.srq.get()));
  ibv_sge sge = pair.local.Sge(0, 8);
  PostSends(trace, pair.a.get(), &sge, 0, 5);
  if (!trace->WaitForCompletions(pair.b.recv_cq.get(), 5, "receive completions of the first 5 SENDs")) return;
  trace->Settle(true);
  trace->Set("srq", "limit_after_5", SrqLimit(pair.srq.get()));
  PostSends(trace, pair.a.get(), &sge, 5, 3);
  if (!trace->WaitForCompletions(pair.b.recv_cq.get(), 3, "receive completions of the last 3 SENDs")) return;
  trace->Settle(true);
  pair.RecordStates(trace);
}

// Records a step's result as a call; a step that fails ends the scenario.
bool Step(Trace* trace, const std::string& role, const std::string& what, const testing::AssertionResult& ok) {
  trace->Call(role, what, ok ? 0 : EINVAL);
  if (!ok) trace->Fail(ok.message());
  return ok;
}

// A SEND posted while a is in INIT and one while it is in RTR, then a is moved to RTS and posts a
// third: does the post fail, does it name the WR, and do the refused WRs run later anyway.
void PostSendBeforeRts(const Setup& setup, Trace* trace) {
  Pair pair;
  if (!pair.Create(setup, trace)) return;
  ibv_sge rsge = pair.remote.Sge(0, 8);
  const ConnectParams params;
  if (!Step(trace, "qp.b", "bring up", conformance::BringUp(pair.b.get(), setup.port, pair.a.qp_num(), pair.address,
                                                            params))) {
    return;
  }
  PostRecvs(trace, "qp.b", pair.b.get(), &rsge, 100, 3);
  ibv_sge sge = pair.local.Sge(0, 8);
  const auto post = [&](uint64_t wr_id, const char* state) {
    ibv_send_wr wr = conformance::SendWr(wr_id, &sge, 1);
    ibv_send_wr* bad = nullptr;
    trace->Call("qp.a", std::string("ibv_post_send in ") + state, ibv_post_send(pair.a.get(), &wr, &bad));
    trace->Set("qp.a", std::string("bad_wr in ") + state, bad == &wr ? "the WR" : bad ? "another pointer" : "NULL");
  };
  if (!Step(trace, "qp.a", "to INIT", conformance::ModifyToInit(pair.a.get(), setup.port, params))) return;
  post(1, "INIT");
  if (!Step(trace, "qp.a", "to RTR", conformance::ModifyToRtr(pair.a.get(), pair.b.qp_num(), pair.address, params))) {
    return;
  }
  post(2, "RTR");
  if (!Step(trace, "qp.a", "to RTS", conformance::ModifyToRts(pair.a.get(), params))) return;
  trace->Settle(true);
  post(3, "RTS");
  if (!trace->WaitForCompletions(pair.a.send_cq.get(), 1, "a completion after the SEND in RTS")) return;
  trace->Settle(true);
  pair.RecordStates(trace);
}

// b is left in RTR while a sends to it, then moved to RTS: Communication Established or not.
void ReceiveInRtr(const Setup& setup, Trace* trace) {
  Pair pair;
  if (!pair.Create(setup, trace)) return;
  const ConnectParams params;
  if (!Step(trace, "qp.b", "to INIT", conformance::ModifyToInit(pair.b.get(), setup.port, params)) ||
      !Step(trace, "qp.b", "to RTR", conformance::ModifyToRtr(pair.b.get(), pair.a.qp_num(), pair.address, params)) ||
      !Step(trace, "qp.a", "bring up",
            conformance::BringUp(pair.a.get(), setup.port, pair.b.qp_num(), pair.address, params))) {
    return;
  }
  ibv_sge rsge = pair.remote.Sge(0, 8);
  PostRecvs(trace, "qp.b", pair.b.get(), &rsge, 100, 1);
  ibv_sge sge = pair.local.Sge(0, 8);
  PostSends(trace, pair.a.get(), &sge, 1, 1);
  if (!trace->WaitForCompletions(pair.a.send_cq.get(), 1, "the SEND to the QP in RTR")) return;
  trace->Settle(true);
  Step(trace, "qp.b", "to RTS", conformance::ModifyToRts(pair.b.get(), params));
  trace->Settle(true);
  pair.RecordStates(trace);
}

// a drains its send queue (RTS -> SQD without en_sqd_async_notify) after two SENDs, then goes
// back to RTS and sends once more.
void SqDrain(const Setup& setup, Trace* trace) {
  Pair pair;
  if (!pair.Make(setup, trace)) return;
  ibv_sge rsge = pair.remote.Sge(0, 8);
  PostRecvs(trace, "qp.b", pair.b.get(), &rsge, 100, 3);
  ibv_sge sge = pair.local.Sge(0, 8);
  PostSends(trace, pair.a.get(), &sge, 1, 2);
  if (!trace->WaitForCompletions(pair.a.send_cq.get(), 2, "completions of both SENDs")) return;
  ibv_qp_attr attr = {};
  attr.qp_state = IBV_QPS_SQD;
  trace->Call("qp.a", "ibv_modify_qp(IBV_QPS_SQD)", ibv_modify_qp(pair.a.get(), &attr, IBV_QP_STATE));
  trace->Settle(true);
  trace->RecordState(pair.a.get(), "state_when_drained");
  attr.qp_state = IBV_QPS_RTS;
  trace->Call("qp.a", "ibv_modify_qp(IBV_QPS_RTS)", ibv_modify_qp(pair.a.get(), &attr, IBV_QP_STATE));
  PostSends(trace, pair.a.get(), &sge, 3, 1);
  if (!trace->WaitForCompletions(pair.b.recv_cq.get(), 1, "the SEND after SQD at b")) return;
  trace->Settle(true);
  pair.RecordStates(trace);
}

}  // namespace

const std::vector<Scenario>& Scenarios() {
  static const std::vector<Scenario> kScenarios = {
      {"cq-overflow-send", "cqe + 4 signaled WRITEs into an unpolled send CQ, then one more WRITE", CqOverflowSend},
      {"cq-overflow-recv", "cqe + 4 SENDs into a receiver whose receive CQ is not polled", CqOverflowRecv},
      {"remote-access-error", "an RDMA WRITE with a dead R_Key, a SEND behind it", RemoteAccessError},
      {"flush-after-err", "receives and sends on a QP moved to ERR", FlushAfterErr},
      {"rnr-retry-exceeded", "SENDs to a QP without receives, rnr_retry 0", RnrRetryExceeded},
      {"port-down-up", "the link goes down and up under a connected pair", PortDownUp},
      {"srq-limit", "an SRQ armed with a limit drained below it and to empty", SrqLimitReached},
      {"post-send-before-rts", "SENDs posted in INIT and RTR, then the QP moved to RTS", PostSendBeforeRts},
      {"receive-in-rtr", "a SEND reaches a QP in RTR, which then moves to RTS", ReceiveInRtr},
      {"sq-drain", "RTS -> SQD without en_sqd_async_notify after two SENDs, then back to RTS", SqDrain},
  };
  return kScenarios;
}

}  // namespace differential
