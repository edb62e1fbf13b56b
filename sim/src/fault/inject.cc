#include "fault/inject.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <mutex>

#include "context.h"
#include "cq.h"
#include "device.h"
#include "device_list.h"
#include "event_element.h"
#include "fault/cm_link.h"
#include "fault/device_fatal.h"
#include "fault/mailbox.h"
#include "qp.h"
#include "read_once.h"
#include "srq.h"
#include "transport/engine.h"

namespace simverbs {
namespace {

struct NamedEvent {
  const char* name;
  ibv_event_type type;
};

constexpr NamedEvent kEvents[] = {
    {"CQ_ERR", IBV_EVENT_CQ_ERR},
    {"QP_FATAL", IBV_EVENT_QP_FATAL},
    {"QP_REQ_ERR", IBV_EVENT_QP_REQ_ERR},
    {"QP_ACCESS_ERR", IBV_EVENT_QP_ACCESS_ERR},
    {"COMM_EST", IBV_EVENT_COMM_EST},
    {"SQ_DRAINED", IBV_EVENT_SQ_DRAINED},
    {"PATH_MIG", IBV_EVENT_PATH_MIG},
    {"PATH_MIG_ERR", IBV_EVENT_PATH_MIG_ERR},
    {"DEVICE_FATAL", IBV_EVENT_DEVICE_FATAL},
    {"PORT_ACTIVE", IBV_EVENT_PORT_ACTIVE},
    {"PORT_ERR", IBV_EVENT_PORT_ERR},
    {"LID_CHANGE", IBV_EVENT_LID_CHANGE},
    {"PKEY_CHANGE", IBV_EVENT_PKEY_CHANGE},
    {"SM_CHANGE", IBV_EVENT_SM_CHANGE},
    {"SRQ_ERR", IBV_EVENT_SRQ_ERR},
    {"SRQ_LIMIT_REACHED", IBV_EVENT_SRQ_LIMIT_REACHED},
    {"QP_LAST_WQE_REACHED", IBV_EVENT_QP_LAST_WQE_REACHED},
    {"CLIENT_REREGISTER", IBV_EVENT_CLIENT_REREGISTER},
    {"GID_CHANGE", IBV_EVENT_GID_CHANGE},
    {"WQ_FATAL", IBV_EVENT_WQ_FATAL},
};

// The affiliated errors that take a QP to ERR (IBTA 11.6.3.1: "the QP shall
// be placed in the Error state").
bool TakesQpToError(ibv_event_type type) {
  return type == IBV_EVENT_QP_FATAL || type == IBV_EVENT_QP_REQ_ERR || type == IBV_EVENT_QP_ACCESS_ERR;
}

// QP, CQ and SRQ events. Requires: engine lock (it keeps the QP from being
// destroyed meanwhile; lock order Engine → Cq → Srq).
int RaiseOnObjectLocked(ibv_event_type type, const FaultSite& site) {
  // A fatal context gets no event after DEVICE_FATAL (fault/device_fatal.h).
  if ((site.qp && site.qp->context()->fatal()) || (site.cq && site.cq->context()->fatal()) ||
      (site.srq && site.srq->context()->fatal())) {
    return 0;
  }
  switch (ElementOf(type)) {
    case EventElement::kQp:
      if (!site.qp) return -EINVAL;
      if (!TakesQpToError(type)) {
        site.qp->RaiseAsyncLocked(type);
        return 1;
      }
      if (site.qp->state() == IBV_QPS_ERR) return kNotRaised;  // already failed: no second event
      // A QP in RESET has nothing on the HCA to fail (as CascadeOverrunLocked
      // and simverbs_set_qp_state hold): no event, no ERR.
      if (site.qp->state() == IBV_QPS_RESET) return kNotRaised;
      site.qp->EnterErrorLocked(type);
      return 1;
    case EventElement::kCq:
      if (!site.cq) return -EINVAL;
      site.cq->SetErrorLocked();
      return 1;
    case EventElement::kSrq:
      if (!site.srq) return -EINVAL;
      site.srq->RaiseAsync(type);
      return 1;
    default:
      return -EINVAL;
  }
}

}  // namespace

int RaiseFault(ibv_event_type type, const FaultSite& site) {
  switch (ElementOf(type)) {
    case EventElement::kPort: {
      if (!site.device || !site.device->ValidPort(site.port_num)) return -EINVAL;
      int contexts = 0;
      site.device->ForEachContext([&](Context* ctx) { contexts += ctx->fatal() ? 0 : 1; });
      site.device->RaisePortEvent(site.port_num, type);
      return contexts;
    }
    case EventElement::kDevice: {
      if (!site.device) return -EINVAL;
      int contexts = 0;
      site.device->ForEachContext([&](Context* ctx) { contexts += EnterDeviceFatal(ctx) ? 1 : 0; });
      // As on mlx5, the fatal device is then removed: rdma_cm tells its ids.
      if (contexts > 0) CmRaiseEvent(site.device, 0, kCmEventDeviceRemoval);
      return contexts;
    }
    case EventElement::kQp:
    case EventElement::kCq:
    case EventElement::kSrq: {
      std::lock_guard<DataPathMutex> lock(Engine::Get().mu());
      return RaiseOnObjectLocked(type, site);
    }
    default:
      return -EINVAL;
  }
}

int RaiseOnQpNumber(ibv_event_type type, Device* device, uint32_t qpn, FaultObject object) {
  std::lock_guard<DataPathMutex> lock(Engine::Get().mu());
  Qp* qp = device->FindQp(qpn);  // only this process's QPs
  if (!qp) return 0;
  FaultSite site;
  switch (object) {
    case FaultObject::kQp: site.qp = qp; break;
    case FaultObject::kSendCq: site.cq = qp->send_cq(); break;
    case FaultObject::kRecvCq: site.cq = qp->recv_cq(); break;
    case FaultObject::kSrq:
      site.srq = qp->srq();
      if (!site.srq) return kNoSrq;
      break;
    default: break;
  }
  const int delivered = RaiseOnObjectLocked(type, site);
  return delivered > 0 || delivered == kNotRaised ? delivered : 0;
}

int HandleFaultRequest(const FaultRequest& request) {
  // Shared memory: each field is read once, then checked.
  const int32_t event = ReadOnce(request.event);
  const int32_t device_index = ReadOnce(request.device_index);
  const int32_t port_num = ReadOnce(request.port_num);
  const FaultObject object = ReadOnce(request.object);
  const uint32_t qpn = ReadOnce(request.qpn);
  const uint32_t count = ReadOnce(request.count);
  const int32_t argument = ReadOnce(request.argument);
  switch (object) {
    case FaultObject::kCmReject:
      return CmRejectRequests(count, argument) == 0 ? 1 : 0;
    case FaultObject::kCmDrop:
      return CmDropMessages(argument, count) == 0 ? 1 : 0;
    default:
      break;
  }
  const auto& devices = DeviceList::Get().devices();
  if (device_index < 0 || static_cast<size_t>(device_index) >= devices.size()) return 0;
  Device* device = devices[device_index].get();
  if (object == FaultObject::kCmEvent) {
    if (event != kCmEventAddrChange || !device->ValidPort(port_num)) return 0;
    const int reached = CmRaiseEvent(device, port_num, event);
    return reached > 0 ? reached : 0;
  }
  const auto type = static_cast<ibv_event_type>(event);
  if (object != FaultObject::kDevice) {
    const int delivered = RaiseOnQpNumber(type, device, qpn, object);
    return delivered == kNoSrq ? 0 : delivered;  // (inject says no QP of any process has an SRQ)
  }
  FaultSite site;
  site.device = device;
  site.port_num = port_num;
  const int delivered = RaiseFault(type, site);
  return delivered > 0 ? delivered : 0;
}

bool ParseQpNumber(const std::string& text, uint32_t* qpn) {
  const bool hex = text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X');
  const std::string digits = hex ? text.substr(2) : text;
  if (digits.empty() || digits.size() > 8) return false;
  for (char c : digits) {
    const auto u = static_cast<unsigned char>(c);
    if (!(hex ? std::isxdigit(u) : std::isdigit(u))) return false;
  }
  const unsigned long value = std::strtoul(digits.c_str(), nullptr, hex ? 16 : 10);
  if (value == 0 || value > 0xffffff) return false;
  *qpn = static_cast<uint32_t>(value);
  return true;
}

bool ParseEventName(const std::string& name, ibv_event_type* type) {
  std::string upper;
  for (char c : name) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (upper.rfind("IBV_EVENT_", 0) == 0) upper = upper.substr(10);
  for (const NamedEvent& e : kEvents) {
    if (upper == e.name) {
      *type = e.type;
      return true;
    }
  }
  return false;
}

const char* EventName(ibv_event_type type) {
  for (const NamedEvent& e : kEvents) {
    if (e.type == type) return e.name;
  }
  return "unknown";
}

}  // namespace simverbs
