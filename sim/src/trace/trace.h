#pragma once

// SIMVERBS_TRACE=<file>: one line per work request executed, completion queued,
// async event raised and state change, in the order they happen. The lines
// carry no addresses, times or process ids, so the same seed and the same
// single-threaded program write the same bytes (compare two runs with cmp).
//
// Each line is one write(2) to a file opened with O_APPEND, so processes
// sharing a file never tear each other's lines; "%p" in the name is replaced by
// the process id to give each process its own file. Tracing costs a system
// call per line; with SIMVERBS_TRACE unset every hook is one predictable branch.
//
// Line format (fields are key=value, numbers in decimal unless 0x):
//   # simverbs trace seed=<seed> profile=<name>
//   <n> qp <qpn> state <FROM> -> <TO>
//   <n> qp <qpn> wqe <OPCODE> wr_id=0x.. len=.. [signaled]
//   <n> cq <handle> cqe wr_id=0x.. status=<STATUS> qp=<qpn> [opcode=<OP> len=..]
//   <n> async <EVENT> <cq|qp|srq> <id> | port <device>/<port> | device <device>
//   <n> port <device>/<port> state <FROM> -> <TO>

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>
#include <string>

namespace simverbs {

class Trace {
 public:
  // (Inline: asked on every WQE's and CQE's path.)
  static Trace& Get() {
    Trace* trace = instance_.load(std::memory_order_acquire);
    return trace ? *trace : Make();
  }
  bool enabled() const { return fd_ >= 0; }

  // Writes the header once; called when the first device list is built, after
  // the profile is known.
  void Start(const std::string& profile_name);

  void QpState(uint32_t qpn, ibv_qp_state from, ibv_qp_state to);
  void Wqe(uint32_t qpn, ibv_wr_opcode opcode, uint64_t wr_id, uint64_t length, bool signaled);
  void Cqe(uint32_t cq_handle, const ibv_wc& wc);
  void AsyncObject(ibv_event_type type, const char* kind, uint32_t id);
  void AsyncPort(ibv_event_type type, const std::string& device, int port);
  void AsyncDevice(ibv_event_type type, const std::string& device);
  void PortState(const std::string& device, int port, ibv_port_state from, ibv_port_state to);

  static const char* QpStateName(ibv_qp_state s);
  static const char* EventName(ibv_event_type t);
  static const char* StatusName(ibv_wc_status s);
  static const char* WrOpcodeName(ibv_wr_opcode op);
  static const char* WcOpcodeName(ibv_wc_opcode op);
  static const char* PortStateName(ibv_port_state s);

 private:
  static Trace& Make();  // the first Get()
  static inline std::atomic<Trace*> instance_{nullptr};
  Trace();
  void Line(const char* fmt, ...) __attribute__((format(printf, 2, 3)));

  int fd_ = -1;
  std::atomic<uint64_t> seq_{0};
  std::atomic<bool> started_{false};
};

}  // namespace simverbs
