#pragma once

// Raising an event on this process's objects as an HCA would: the one place
// that `simverbs inject` (through the fabric's mailbox), fault plans
// (SIMVERBS_FAULTS) and the control API's device fatal go through.
//
// What each event does besides being delivered:
//   PORT_ERR / PORT_ACTIVE   take the port DOWN / bring it ACTIVE (ibv_query_port)
//   DEVICE_FATAL             every context of the device becomes fatal (fault/device_fatal.h),
//                            and rdma_cm's ids on the device get DEVICE_REMOVAL (fault/cm_link.h)
//   QP_FATAL, QP_REQ_ERR, QP_ACCESS_ERR
//                            the QP enters ERR and is flushed first: these are the IBTA
//                            affiliated *errors* ("it transitioned to error state",
//                            ibv_get_async_event(3)); the event is raised once
//   CQ_ERR                   the CQ enters the error state (as simverbs_raise_cq_event)
//   other QP / SRQ events    only delivered (COMM_EST, SQ_DRAINED, PATH_MIG, PATH_MIG_ERR,
//                            QP_LAST_WQE_REACHED, SRQ_ERR, SRQ_LIMIT_REACHED)

#include <infiniband/verbs.h>

#include <cstdint>
#include <string>

namespace simverbs {

class Cq;
class Device;
class Qp;
class Srq;
struct FaultRequest;

// What an event is raised on; the event's kind says which member counts.
struct FaultSite {
  Device* device = nullptr;  // port and device events
  int port_num = 0;          // port events
  Qp* qp = nullptr;
  Cq* cq = nullptr;
  Srq* srq = nullptr;
};

// Raises `type` on `site`. Returns the number of async events delivered
// (contexts reached), -EINVAL when the site does not fit the event, or
// kNotRaised (below) for a QP whose state takes no such event.
// Must not be called with the engine lock held.
int RaiseFault(ibv_event_type type, const FaultSite& site);

// Raises `type` on the QP numbered `qpn` of `device` in this process (or on
// the CQ or SRQ `object` says it uses). Returns the events delivered: 0 when
// this process has no such QP, kNotRaised when it has, but the QP's state
// takes no such event (in RESET, or already in ERR), kNoSrq for an SRQ event
// on a QP without an SRQ. Must not be called with the engine lock held.
enum class FaultObject : int32_t;
constexpr int kNotRaised = -1;
constexpr int kNoSrq = -2;
int RaiseOnQpNumber(ibv_event_type type, Device* device, uint32_t qpn, FaultObject object);

// Handles a request from the fabric's mailbox: finds the object on this
// process's devices and raises the event, or arms the connection manager's
// fault. Returns the events delivered (0 when this process does not own the
// object, kNotRaised when it does but its state takes no such event), or for
// a CM fault 1 when this process has rdma_cm and armed it.
int HandleFaultRequest(const FaultRequest& request);

// A QP number as plans and inject take it: decimal, or hexadecimal after 0x, 1..0xffffff, nothing else
// (no sign, no spaces, no octal).
bool ParseQpNumber(const std::string& text, uint32_t* qpn);

// "PORT_ERR", "port_err" or "IBV_EVENT_PORT_ERR" → the event type. False for
// names that are not an async event type.
bool ParseEventName(const std::string& name, ibv_event_type* type);
// "PORT_ERR" (without the IBV_EVENT_ prefix).
const char* EventName(ibv_event_type type);

}  // namespace simverbs
