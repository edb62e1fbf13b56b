#pragma once

// What an async event type is affiliated with: the one classification that
// ibv_get_async_event (which union member of event.element to set),
// ibv_ack_async_event (which counter to bump) and the control API (which
// object may raise it) all follow.

#include <infiniband/verbs.h>

namespace simverbs {

enum class EventElement { kCq, kQp, kSrq, kWq, kPort, kDevice, kUnknown };

constexpr EventElement ElementOf(ibv_event_type type) {
  switch (type) {
    case IBV_EVENT_CQ_ERR:
      return EventElement::kCq;
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_QP_LAST_WQE_REACHED:
      return EventElement::kQp;
    case IBV_EVENT_SRQ_ERR:
    case IBV_EVENT_SRQ_LIMIT_REACHED:
      return EventElement::kSrq;
    case IBV_EVENT_WQ_FATAL:
      return EventElement::kWq;
    case IBV_EVENT_PORT_ACTIVE:
    case IBV_EVENT_PORT_ERR:
    case IBV_EVENT_LID_CHANGE:
    case IBV_EVENT_PKEY_CHANGE:
    case IBV_EVENT_SM_CHANGE:
    case IBV_EVENT_CLIENT_REREGISTER:
    case IBV_EVENT_GID_CHANGE:
      return EventElement::kPort;
    case IBV_EVENT_DEVICE_FATAL:
      return EventElement::kDevice;
  }
  return EventElement::kUnknown;
}

}  // namespace simverbs
