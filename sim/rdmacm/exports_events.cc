// librdmacm's event channel, event, device and option calls (rdma_cma.h).

#include <rdma/rdma_cma.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "api.h"
#include "cm_id.h"
#include "cm_service.h"
#include "event_channel.h"
#include "port_addresses.h"

using simverbs::rdmacm::CmEvent;
using simverbs::rdmacm::CmId;
using simverbs::rdmacm::CmService;
using simverbs::rdmacm::EventChannel;
using simverbs::rdmacm::Fail;
using simverbs::rdmacm::Guarded;
using simverbs::rdmacm::MulticastGroup;
using simverbs::rdmacm::PortAddresses;

extern "C" {

rdma_event_channel* rdma_create_event_channel(void) {
  EventChannel* channel = EventChannel::Create();
  return channel ? channel->pub() : nullptr;
}

void rdma_destroy_event_channel(rdma_event_channel* channel) {
  if (channel) delete EventChannel::From(channel);
}

int rdma_get_cm_event(rdma_event_channel* channel, rdma_cm_event** event) {
  return Guarded([&] {
    if (!channel || !event) return Fail(EINVAL);
    CmEvent* e = EventChannel::From(channel)->Pop();
    if (!e) return -1;  // errno from the read: EAGAIN on a non-blocking channel
    *event = &e->pub;
    return 0;
  });
}

int rdma_ack_cm_event(rdma_cm_event* event) {
  return Guarded([&] {
    if (!event) return Fail(EINVAL);
    CmEvent* e = CmEvent::From(event);
    {
      std::lock_guard<std::mutex> lock(CmService::Get().mu());
      if (e->id) {
        --e->id->unacked;
        ++e->id->acks;
        e->id->acked.notify_all();
      }
    }
    delete e;
    return 0;
  });
}

const char* rdma_event_str(rdma_cm_event_type event) {
  switch (event) {
    case RDMA_CM_EVENT_ADDR_RESOLVED: return "RDMA_CM_EVENT_ADDR_RESOLVED";
    case RDMA_CM_EVENT_ADDR_ERROR: return "RDMA_CM_EVENT_ADDR_ERROR";
    case RDMA_CM_EVENT_ROUTE_RESOLVED: return "RDMA_CM_EVENT_ROUTE_RESOLVED";
    case RDMA_CM_EVENT_ROUTE_ERROR: return "RDMA_CM_EVENT_ROUTE_ERROR";
    case RDMA_CM_EVENT_CONNECT_REQUEST: return "RDMA_CM_EVENT_CONNECT_REQUEST";
    case RDMA_CM_EVENT_CONNECT_RESPONSE: return "RDMA_CM_EVENT_CONNECT_RESPONSE";
    case RDMA_CM_EVENT_CONNECT_ERROR: return "RDMA_CM_EVENT_CONNECT_ERROR";
    case RDMA_CM_EVENT_UNREACHABLE: return "RDMA_CM_EVENT_UNREACHABLE";
    case RDMA_CM_EVENT_REJECTED: return "RDMA_CM_EVENT_REJECTED";
    case RDMA_CM_EVENT_ESTABLISHED: return "RDMA_CM_EVENT_ESTABLISHED";
    case RDMA_CM_EVENT_DISCONNECTED: return "RDMA_CM_EVENT_DISCONNECTED";
    case RDMA_CM_EVENT_DEVICE_REMOVAL: return "RDMA_CM_EVENT_DEVICE_REMOVAL";
    case RDMA_CM_EVENT_MULTICAST_JOIN: return "RDMA_CM_EVENT_MULTICAST_JOIN";
    case RDMA_CM_EVENT_MULTICAST_ERROR: return "RDMA_CM_EVENT_MULTICAST_ERROR";
    case RDMA_CM_EVENT_ADDR_CHANGE: return "RDMA_CM_EVENT_ADDR_CHANGE";
    case RDMA_CM_EVENT_TIMEWAIT_EXIT: return "RDMA_CM_EVENT_TIMEWAIT_EXIT";
  }
  return "UNKNOWN EVENT";
}

__be16 rdma_get_src_port(rdma_cm_id* id) {
  return id ? htons(simverbs::rdmacm::AddressPort(&id->route.addr.src_addr)) : 0;
}

__be16 rdma_get_dst_port(rdma_cm_id* id) {
  return id ? htons(simverbs::rdmacm::AddressPort(&id->route.addr.dst_addr)) : 0;
}

ibv_context** rdma_get_devices(int* num_devices) {
  try {
    const std::vector<ibv_context*> contexts = PortAddresses::Get().Contexts();
    auto** list = static_cast<ibv_context**>(std::calloc(contexts.size() + 1, sizeof(ibv_context*)));
    if (!list) {
      errno = ENOMEM;
      return nullptr;
    }
    for (size_t i = 0; i < contexts.size(); ++i) list[i] = contexts[i];
    if (num_devices) *num_devices = static_cast<int>(contexts.size());
    return list;
  } catch (...) {
    errno = ENOMEM;
    return nullptr;
  }
}

void rdma_free_devices(ibv_context** list) { std::free(list); }

int rdma_set_option(rdma_cm_id* id, int level, int optname, void* optval, size_t optlen) {
  if (!id || !optval) return Fail(EINVAL);
  if (level == RDMA_OPTION_ID) {
    switch (optname) {
      case RDMA_OPTION_ID_TOS:
        return optlen == sizeof(uint8_t) ? 0 : Fail(EINVAL);
      case RDMA_OPTION_ID_REUSEADDR:
      case RDMA_OPTION_ID_AFONLY:
        return optlen == sizeof(int) ? 0 : Fail(EINVAL);
      case RDMA_OPTION_ID_ACK_TIMEOUT: {
        // The kernel takes values up to 31 (the QP's 5-bit timeout field).
        if (optlen != sizeof(uint8_t) || *static_cast<uint8_t*>(optval) > 31) return Fail(EINVAL);
        std::lock_guard<std::mutex> lock(CmService::Get().mu());
        CmId::From(id)->ack_timeout = *static_cast<uint8_t*>(optval);
        return 0;
      }
      default:
        return Fail(ENOSYS);
    }
  }
  if (level == RDMA_OPTION_IB && optname == RDMA_OPTION_IB_PATH) return 0;
  return Fail(ENOSYS);
}

int rdma_notify(rdma_cm_id* id, ibv_event_type event) {
  if (!id) return Fail(EINVAL);
  // Only IBV_EVENT_COMM_EST means anything to the CM; the simulated connection is already up.
  return event == IBV_EVENT_COMM_EST ? 0 : Fail(EINVAL);
}

int rdma_join_multicast_ex(rdma_cm_id* pub, rdma_cm_join_mc_attr_ex* attr, void* context) {
  return Guarded([&] {
    // As librdmacm: the address and the join flags are both required.
    if (!pub || !attr || !(attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS) || !attr->addr ||
        !(attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS) || attr->join_flags >= RDMA_MC_JOIN_FLAG_RESERVED) {
      return Fail(EINVAL);
    }
    CmId* id = CmId::From(pub);
    CmService& service = CmService::Get();
    std::lock_guard<std::mutex> lock(service.mu());
    // Multicast is for UD port spaces, on an id that resolution or a bind put on a port.
    if (!id->port || pub->qp_type != IBV_QPT_UD) return Fail(EINVAL);
    MulticastGroup group;
    if (!simverbs::rdmacm::GroupOf(attr->addr, id->port->ethernet, pub->ps == RDMA_PS_UDP, &group)) {
      return Fail(EINVAL);
    }
    group.context = context;
    int status = 0;
    // A send-only member is not attached (librdmacm's ucma_process_join does the same).
    if (pub->qp && attr->join_flags != RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER) {
      status = ibv_attach_mcast(pub->qp, &group.mgid, group.mlid);
      group.attached = status == 0;
    }
    if (status != 0) {
      service.QueueEvent(id, RDMA_CM_EVENT_MULTICAST_ERROR, -status);
      return 0;
    }
    id->groups.push_back(group);
    service.QueueMulticastJoin(id, id->groups.back());
    return 0;
  });
}

int rdma_join_multicast(rdma_cm_id* pub, sockaddr* addr, void* context) {
  rdma_cm_join_mc_attr_ex attr = {};
  attr.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
  attr.join_flags = RDMA_MC_JOIN_FLAG_FULLMEMBER;
  attr.addr = addr;
  return rdma_join_multicast_ex(pub, &attr, context);
}

int rdma_leave_multicast(rdma_cm_id* pub, sockaddr* addr) {
  return Guarded([&] {
    if (!pub || !addr) return Fail(EINVAL);
    CmId* id = CmId::From(pub);
    std::lock_guard<std::mutex> lock(CmService::Get().mu());
    const socklen_t len = addr->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    for (auto it = id->groups.begin(); it != id->groups.end(); ++it) {
      if (it->addr.ss_family != addr->sa_family || std::memcmp(&it->addr, addr, len) != 0) continue;
      if (it->attached && pub->qp) ibv_detach_mcast(pub->qp, &it->mgid, it->mlid);
      id->groups.erase(it);
      return 0;
    }
    return Fail(EADDRNOTAVAIL);  // as librdmacm: not a group this id joined
  });
}

// ECE (enhanced connection establishment): the simulated device offers no options.
int rdma_set_local_ece(rdma_cm_id* id, ibv_ece* ece) { return id && ece ? 0 : Fail(EINVAL); }
int rdma_get_remote_ece(rdma_cm_id* id, ibv_ece* ece) {
  if (!id || !ece) return Fail(EINVAL);
  std::memset(ece, 0, sizeof *ece);
  return 0;
}
int rdma_reject_ece(rdma_cm_id* id, const void* private_data, uint8_t private_data_len) {
  return rdma_reject(id, private_data, private_data_len);
}

}  // extern "C"
