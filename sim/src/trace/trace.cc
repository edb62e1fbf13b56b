#include "trace/trace.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "sched/scheduler.h"

namespace simverbs {

Trace& Trace::Make() {
  static Trace* trace = new Trace();  // never destroyed: objects may trace from atexit handlers
  instance_.store(trace, std::memory_order_release);
  return *trace;
}

Trace::Trace() {
  const char* env = std::getenv("SIMVERBS_TRACE");
  if (!env || !*env) return;
  std::string path = env;
  for (size_t at = path.find("%p"); at != std::string::npos; at = path.find("%p", at)) {
    const std::string pid = std::to_string(getpid());
    path.replace(at, 2, pid);
    at += pid.size();
  }
  fd_ = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    std::fprintf(stderr, "simverbs: SIMVERBS_TRACE=%s: cannot open %s: %s; tracing is off\n", env, path.c_str(),
                 std::strerror(errno));
  }
}

void Trace::Start(const std::string& profile_name) {
  if (!enabled() || started_.exchange(true)) return;
  char buf[256];
  const int n = std::snprintf(buf, sizeof buf, "# simverbs trace seed=%llu profile=%s\n",
                              static_cast<unsigned long long>(Scheduler::Get().seed()), profile_name.c_str());
  if (n > 0) (void)!write(fd_, buf, static_cast<size_t>(n) < sizeof buf ? static_cast<size_t>(n) : sizeof buf - 1);
}

void Trace::Line(const char* fmt, ...) {
  char buf[512];
  int n = std::snprintf(buf, sizeof buf, "%llu ", static_cast<unsigned long long>(++seq_));
  va_list ap;
  va_start(ap, fmt);
  const int m = std::vsnprintf(buf + n, sizeof buf - static_cast<size_t>(n) - 1, fmt, ap);
  va_end(ap);
  if (m < 0) return;
  n += m;
  if (n > static_cast<int>(sizeof buf) - 2) n = static_cast<int>(sizeof buf) - 2;
  buf[n++] = '\n';
  (void)!write(fd_, buf, static_cast<size_t>(n));
}

void Trace::QpState(uint32_t qpn, ibv_qp_state from, ibv_qp_state to) {
  if (!enabled() || from == to) return;
  Line("qp %u state %s -> %s", qpn, QpStateName(from), QpStateName(to));
}

void Trace::Wqe(uint32_t qpn, ibv_wr_opcode opcode, uint64_t wr_id, uint64_t length, bool signaled) {
  if (!enabled()) return;
  Line("qp %u wqe %s wr_id=0x%llx len=%llu%s", qpn, WrOpcodeName(opcode), static_cast<unsigned long long>(wr_id),
       static_cast<unsigned long long>(length), signaled ? " signaled" : "");
}

void Trace::Cqe(uint32_t cq_handle, const ibv_wc& wc) {
  if (!enabled()) return;
  if (wc.status == IBV_WC_SUCCESS) {
    Line("cq %u cqe wr_id=0x%llx status=%s qp=%u opcode=%s len=%u", cq_handle,
         static_cast<unsigned long long>(wc.wr_id), StatusName(wc.status), wc.qp_num, WcOpcodeName(wc.opcode),
         wc.byte_len);
  } else {
    // Only wr_id, status and qp_num are valid on error (ibv_poll_cq(3)).
    Line("cq %u cqe wr_id=0x%llx status=%s qp=%u", cq_handle, static_cast<unsigned long long>(wc.wr_id),
         StatusName(wc.status), wc.qp_num);
  }
}

void Trace::AsyncObject(ibv_event_type type, const char* kind, uint32_t id) {
  if (!enabled()) return;
  Line("async %s %s %u", EventName(type), kind, id);
}

void Trace::AsyncPort(ibv_event_type type, const std::string& device, int port) {
  if (!enabled()) return;
  Line("async %s port %s/%d", EventName(type), device.c_str(), port);
}

void Trace::AsyncDevice(ibv_event_type type, const std::string& device) {
  if (!enabled()) return;
  Line("async %s device %s", EventName(type), device.c_str());
}

void Trace::PortState(const std::string& device, int port, ibv_port_state from, ibv_port_state to) {
  if (!enabled() || from == to) return;
  Line("port %s/%d state %s -> %s", device.c_str(), port, PortStateName(from), PortStateName(to));
}

const char* Trace::QpStateName(ibv_qp_state s) {
  switch (s) {
    case IBV_QPS_RESET: return "RESET";
    case IBV_QPS_INIT: return "INIT";
    case IBV_QPS_RTR: return "RTR";
    case IBV_QPS_RTS: return "RTS";
    case IBV_QPS_SQD: return "SQD";
    case IBV_QPS_SQE: return "SQE";
    case IBV_QPS_ERR: return "ERR";
    case IBV_QPS_UNKNOWN: break;
  }
  return "UNKNOWN";
}

const char* Trace::PortStateName(ibv_port_state s) {
  switch (s) {
    case IBV_PORT_NOP: return "NOP";
    case IBV_PORT_DOWN: return "DOWN";
    case IBV_PORT_INIT: return "INIT";
    case IBV_PORT_ARMED: return "ARMED";
    case IBV_PORT_ACTIVE: return "ACTIVE";
    case IBV_PORT_ACTIVE_DEFER: return "ACTIVE_DEFER";
  }
  return "UNKNOWN";
}

const char* Trace::EventName(ibv_event_type t) {
  switch (t) {
    case IBV_EVENT_CQ_ERR: return "CQ_ERR";
    case IBV_EVENT_QP_FATAL: return "QP_FATAL";
    case IBV_EVENT_QP_REQ_ERR: return "QP_REQ_ERR";
    case IBV_EVENT_QP_ACCESS_ERR: return "QP_ACCESS_ERR";
    case IBV_EVENT_COMM_EST: return "COMM_EST";
    case IBV_EVENT_SQ_DRAINED: return "SQ_DRAINED";
    case IBV_EVENT_PATH_MIG: return "PATH_MIG";
    case IBV_EVENT_PATH_MIG_ERR: return "PATH_MIG_ERR";
    case IBV_EVENT_DEVICE_FATAL: return "DEVICE_FATAL";
    case IBV_EVENT_PORT_ACTIVE: return "PORT_ACTIVE";
    case IBV_EVENT_PORT_ERR: return "PORT_ERR";
    case IBV_EVENT_LID_CHANGE: return "LID_CHANGE";
    case IBV_EVENT_PKEY_CHANGE: return "PKEY_CHANGE";
    case IBV_EVENT_SM_CHANGE: return "SM_CHANGE";
    case IBV_EVENT_SRQ_ERR: return "SRQ_ERR";
    case IBV_EVENT_SRQ_LIMIT_REACHED: return "SRQ_LIMIT_REACHED";
    case IBV_EVENT_QP_LAST_WQE_REACHED: return "QP_LAST_WQE_REACHED";
    case IBV_EVENT_CLIENT_REREGISTER: return "CLIENT_REREGISTER";
    case IBV_EVENT_GID_CHANGE: return "GID_CHANGE";
    case IBV_EVENT_WQ_FATAL: return "WQ_FATAL";
  }
  return "UNKNOWN";
}

const char* Trace::StatusName(ibv_wc_status s) {
  switch (s) {
    case IBV_WC_SUCCESS: return "SUCCESS";
    case IBV_WC_LOC_LEN_ERR: return "LOC_LEN_ERR";
    case IBV_WC_LOC_QP_OP_ERR: return "LOC_QP_OP_ERR";
    case IBV_WC_LOC_EEC_OP_ERR: return "LOC_EEC_OP_ERR";
    case IBV_WC_LOC_PROT_ERR: return "LOC_PROT_ERR";
    case IBV_WC_WR_FLUSH_ERR: return "WR_FLUSH_ERR";
    case IBV_WC_MW_BIND_ERR: return "MW_BIND_ERR";
    case IBV_WC_BAD_RESP_ERR: return "BAD_RESP_ERR";
    case IBV_WC_LOC_ACCESS_ERR: return "LOC_ACCESS_ERR";
    case IBV_WC_REM_INV_REQ_ERR: return "REM_INV_REQ_ERR";
    case IBV_WC_REM_ACCESS_ERR: return "REM_ACCESS_ERR";
    case IBV_WC_REM_OP_ERR: return "REM_OP_ERR";
    case IBV_WC_RETRY_EXC_ERR: return "RETRY_EXC_ERR";
    case IBV_WC_RNR_RETRY_EXC_ERR: return "RNR_RETRY_EXC_ERR";
    case IBV_WC_LOC_RDD_VIOL_ERR: return "LOC_RDD_VIOL_ERR";
    case IBV_WC_REM_INV_RD_REQ_ERR: return "REM_INV_RD_REQ_ERR";
    case IBV_WC_REM_ABORT_ERR: return "REM_ABORT_ERR";
    case IBV_WC_INV_EECN_ERR: return "INV_EECN_ERR";
    case IBV_WC_INV_EEC_STATE_ERR: return "INV_EEC_STATE_ERR";
    case IBV_WC_FATAL_ERR: return "FATAL_ERR";
    case IBV_WC_RESP_TIMEOUT_ERR: return "RESP_TIMEOUT_ERR";
    case IBV_WC_GENERAL_ERR: return "GENERAL_ERR";
    case IBV_WC_TM_ERR: return "TM_ERR";
    case IBV_WC_TM_RNDV_INCOMPLETE: return "TM_RNDV_INCOMPLETE";
  }
  return "UNKNOWN";
}

const char* Trace::WrOpcodeName(ibv_wr_opcode op) {
  switch (op) {
    case IBV_WR_RDMA_WRITE: return "RDMA_WRITE";
    case IBV_WR_RDMA_WRITE_WITH_IMM: return "RDMA_WRITE_WITH_IMM";
    case IBV_WR_SEND: return "SEND";
    case IBV_WR_SEND_WITH_IMM: return "SEND_WITH_IMM";
    case IBV_WR_RDMA_READ: return "RDMA_READ";
    case IBV_WR_ATOMIC_CMP_AND_SWP: return "ATOMIC_CMP_AND_SWP";
    case IBV_WR_ATOMIC_FETCH_AND_ADD: return "ATOMIC_FETCH_AND_ADD";
    case IBV_WR_LOCAL_INV: return "LOCAL_INV";
    case IBV_WR_BIND_MW: return "BIND_MW";
    case IBV_WR_SEND_WITH_INV: return "SEND_WITH_INV";
    case IBV_WR_TSO: return "TSO";
    case IBV_WR_DRIVER1: return "DRIVER1";
    case IBV_WR_ATOMIC_WRITE: return "ATOMIC_WRITE";
  }
  return "UNKNOWN";
}

const char* Trace::WcOpcodeName(ibv_wc_opcode op) {
  switch (op) {
    case IBV_WC_SEND: return "SEND";
    case IBV_WC_RDMA_WRITE: return "RDMA_WRITE";
    case IBV_WC_RDMA_READ: return "RDMA_READ";
    case IBV_WC_COMP_SWAP: return "COMP_SWAP";
    case IBV_WC_FETCH_ADD: return "FETCH_ADD";
    case IBV_WC_BIND_MW: return "BIND_MW";
    case IBV_WC_LOCAL_INV: return "LOCAL_INV";
    case IBV_WC_TSO: return "TSO";
    case IBV_WC_ATOMIC_WRITE: return "ATOMIC_WRITE";
    case IBV_WC_RECV: return "RECV";
    case IBV_WC_RECV_RDMA_WITH_IMM: return "RECV_RDMA_WITH_IMM";
    case IBV_WC_TM_ADD: return "TM_ADD";
    case IBV_WC_TM_DEL: return "TM_DEL";
    case IBV_WC_TM_SYNC: return "TM_SYNC";
    case IBV_WC_TM_RECV: return "TM_RECV";
    case IBV_WC_TM_NO_TAG: return "TM_NO_TAG";
    case IBV_WC_DRIVER1: return "DRIVER1";
    case IBV_WC_DRIVER2: return "DRIVER2";
    case IBV_WC_DRIVER3: return "DRIVER3";
  }
  return "UNKNOWN";
}

}  // namespace simverbs
