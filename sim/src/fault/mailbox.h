#pragma once

// The fault mailbox in a fabric's shared segment (fabric/fabric.h): how
// `simverbs inject` reaches processes that run unmodified programs.
//
// The injector does not join the fabric. It takes the segment's mutex, writes
// a request into the next slot of a small ring, publishes its sequence number
// last, and wakes every attached process's progress thread (the futex of its
// packet ring). Each process handles every request it has not seen, in order,
// on its progress thread: it raises the event on its own objects, then sets
// its bit in `answered` and adds what it delivered to `delivered`. So an
// unaffiliated event reaches every process, and an affiliated one only the
// process that owns the object (the others find no such QP and deliver
// nothing), as on a real HCA. The injector waits until every process that was
// attached when it posted has answered, and reports. A process that falls
// more than kRequests requests behind skips the ones overwritten meanwhile.
//
// Port states set by injected PORT_ERR / PORT_ACTIVE are also kept here, so a
// process that joins afterwards sees the same port state as the others.

#include <atomic>
#include <cstdint>

#include "fabric/fabric_limits.h"

namespace simverbs {

// What an injected event is raised on.
enum class FaultObject : int32_t {
  kDevice,     // unaffiliated: DEVICE_FATAL, or a port event on port_num
  kQp,         // the QP numbered `qpn` on the device
  kSendCq,     // the send CQ of that QP (CQs have no number of their own)
  kRecvCq,     // its receive CQ
  kSrq,        // the SRQ that QP receives from
  // The connection manager (rdma_cm) of each process, fault/cm_link.h:
  kCmEvent,    // `event` is an rdma_cm_event_type (ADDR_CHANGE) on device_index / port_num
  kCmReject,   // reject the next `count` connection requests with reason `argument`
  kCmDrop,     // lose the next `count` CM messages of type `argument` (enum simverbs_cm_message)
};

struct FaultRequest {
  std::atomic<uint64_t> seq;  // written last by the injector; 0: never used
  int32_t event;              // ibv_event_type (rdma_cm_event_type for kCmEvent)
  int32_t device_index;
  int32_t port_num;
  FaultObject object;
  uint32_t qpn;
  uint32_t count;     // kCmReject, kCmDrop
  int32_t argument;   // kCmReject: the reason; kCmDrop: the message
  static constexpr int kAnswerWords = kMaxFabricProcesses / 64;
  std::atomic<uint64_t> answered[kAnswerWords];  // bit per process slot that has handled it
  std::atomic<uint32_t> delivered;  // async events raised, over all processes
  // Processes that own the object, whose state takes no such event (new in
  // the segment version "SIMFABRI", fabric.cc kMagic).
  std::atomic<uint32_t> not_raised;
};

struct FaultMailbox {
  static constexpr int kRequests = 32;
  static constexpr int kMaxDevices = 16;
  static constexpr int kMaxPorts = 8;

  std::atomic<uint64_t> last_seq;  // the newest published request
  FaultRequest requests[kRequests];  // request `seq` lives at seq % kRequests
  // 0: the state the profile gives; otherwise the ibv_port_state an injected
  // PORT_ERR / PORT_ACTIVE left. [device_index][port_num - 1]
  std::atomic<int32_t> port_state[kMaxDevices][kMaxPorts];
};

}  // namespace simverbs
