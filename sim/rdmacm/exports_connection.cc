// librdmacm's id and connection calls (rdma_cma.h), on the simulated devices.

#include <rdma/rdma_cma.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <vector>

#include "api.h"
#include "cm_id.h"
#include "cm_service.h"
#include "event_channel.h"
#include "port_addresses.h"

using simverbs::rdmacm::CmEvent;
using simverbs::rdmacm::CmId;
using simverbs::rdmacm::CmMessage;
using simverbs::rdmacm::CmMessageType;
using simverbs::rdmacm::CmService;
using simverbs::rdmacm::EventChannel;
using simverbs::rdmacm::Fail;
using simverbs::rdmacm::Guarded;
using simverbs::rdmacm::LocalPort;
using simverbs::rdmacm::PortAddresses;
using State = simverbs::rdmacm::CmId::State;
namespace cm = simverbs::rdmacm;

namespace {

uint32_t RandomPsn() { return std::random_device()() & 0xffffff; }

ibv_qp_type QpTypeOf(rdma_port_space ps) {
  return ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB ? IBV_QPT_UD : IBV_QPT_RC;
}

bool KnownPortSpace(rdma_port_space ps) {
  return ps == RDMA_PS_TCP || ps == RDMA_PS_UDP || ps == RDMA_PS_IB || ps == RDMA_PS_IPOIB;
}

// Copies `addr` into `out`, giving it an ephemeral port if it has none.
int TakeAddress(const sockaddr* addr, sockaddr* out) {
  const socklen_t len = cm::AddressLength(addr);
  if (len == 0) return EAFNOSUPPORT;
  std::memset(out, 0, sizeof(sockaddr_storage));
  std::memcpy(out, addr, len);
  if (cm::AddressPort(out) == 0) cm::SetAddressPort(out, CmService::Get().EphemeralPort());
  return 0;
}

// Binds id to `addr` (rdma_bind_addr, and rdma_resolve_addr's source as the
// kernel's cma_bind_addr does): an address a simulated port has, or the
// wildcard; its port is reserved (CmService::Reserve), port 0 getting a free
// one (rdma_bind_addr(3)), others tried when one is taken. 0 or an errno.
// Requires: mu().
int BindLocked(CmId* id, const sockaddr* addr) {
  if (cm::AddressLength(addr) == 0) return EAFNOSUPPORT;
  const LocalPort* port = cm::IsWildcard(addr) ? nullptr : PortAddresses::Get().Find(addr);
  if (!cm::IsWildcard(addr) && !port) return EADDRNOTAVAIL;  // no simulated port has this address
  if (int err = TakeAddress(addr, id->src())) return err;
  int err = CmService::Get().Reserve(id);
  for (int tries = 0; (err == EADDRINUSE || err == EADDRNOTAVAIL) && cm::AddressPort(addr) == 0 && tries < 64;
       ++tries) {
    cm::SetAddressPort(id->src(), CmService::Get().EphemeralPort());
    err = CmService::Get().Reserve(id);
  }
  if (err) return err;
  if (port) id->AttachPort(port);
  id->state = State::kAddrBound;
  return 0;
}

// The device's RDMA read/atomic limits, as librdmacm keeps them per device
// (cma_dev->max_responder_resources, max_initiator_depth).
struct RdAtomicLimits {
  int responder_resources = 0;  // max_qp_rd_atom
  int initiator_depth = 0;      // max_qp_init_rd_atom
};

RdAtomicLimits DeviceLimits(ibv_context* verbs) {
  ibv_device_attr attr = {};
  if (!verbs || ibv_query_device(verbs, &attr) != 0) return {};
  return {attr.max_qp_rd_atom, attr.max_qp_init_rd_atom};
}

// librdmacm's ucma_valid_param: on RDMA_PS_TCP, depths above the device's
// (other than RDMA_MAX_RESP_RES / RDMA_MAX_INIT_DEPTH, "as much as there is")
// are EINVAL (rdma_connect(3): they "must be less than or equal to" the
// device attributes).
bool ValidRdAtomic(const CmId* id, const rdma_conn_param* param, const RdAtomicLimits& max) {
  if (id->pub_.ps != RDMA_PS_TCP || !param) return true;
  if (param->responder_resources != RDMA_MAX_RESP_RES && param->responder_resources > max.responder_resources) {
    return false;
  }
  return param->initiator_depth == RDMA_MAX_INIT_DEPTH || param->initiator_depth <= max.initiator_depth;
}

// rdma_connect's depths (librdmacm): what the parameter asks for, or the
// device's maximum when there is no parameter or it asks for RDMA_MAX_*.
void TakeConnectRdAtomic(CmId* id, const rdma_conn_param* param, const RdAtomicLimits& max) {
  id->initiator_depth = static_cast<uint8_t>(
      param && param->initiator_depth != RDMA_MAX_INIT_DEPTH ? param->initiator_depth : max.initiator_depth);
  id->responder_resources = static_cast<uint8_t>(param && param->responder_resources != RDMA_MAX_RESP_RES
                                                     ? param->responder_resources
                                                     : max.responder_resources);
}

// rdma_accept's depths (librdmacm): what the parameter asks for, or what the
// request offered within the device's maximum.
void TakeAcceptRdAtomic(CmId* id, const rdma_conn_param* param, const RdAtomicLimits& max) {
  if (!param || param->initiator_depth == RDMA_MAX_INIT_DEPTH) {
    id->initiator_depth = static_cast<uint8_t>(std::min<int>(id->initiator_depth, max.initiator_depth));
  } else {
    id->initiator_depth = param->initiator_depth;
  }
  if (!param || param->responder_resources == RDMA_MAX_RESP_RES) {
    id->responder_resources = static_cast<uint8_t>(std::min<int>(id->responder_resources, max.responder_resources));
  } else {
    id->responder_resources = param->responder_resources;
  }
}

// Frees what an id holds once nothing refers to it. Requires: no event of it is queued or unacked.
void FreeId(CmId* id) {
  delete id->pub_.route.path_rec;
  delete id->ep_qp_attr;
  if (id->sync) delete EventChannel::From(id->pub_.channel);
  delete id;
}

// The answer that refuses id's request: a REJ, consumer defined, or for a UD
// lookup a SIDR REP with IB_SIDR_REJECT.
CmMessage RejectionOf(const CmId* id) {
  const bool ud = id->pub_.qp_type == IBV_QPT_UD;
  CmMessage rej = id->Message(ud ? CmMessageType::kSidrRep : CmMessageType::kRej);
  rej.reason = ud ? cm::kSidrReject : cm::kRejConsumerDefined;
  return rej;
}

// An id destroyed before it answered its request: the IB CM rejects the
// request of a destroyed id (cm_destroy_id in REQ_RCVD, consumer defined), or
// for a UD lookup answers a SIDR REP with IB_SIDR_REJECT (in SIDR_REQ_RCVD).
// Requires: mu().
void RejectIfUnanswered(CmService& service, CmId* id) {
  if (id->state != State::kRequestReceived) return;
  service.Send(id, RejectionOf(id));
}

// A request whose id the program never saw (its CONNECT_REQUEST was not read
// when the listener went): rejected and its id destroyed, as the kernel's
// ucma_cleanup_ctx_events destroys the id. Requires: mu().
void DropRequest(CmService& service, CmId* conn) {
  RejectIfUnanswered(service, conn);
  service.Close(conn);
  service.Forget(conn);
  // Its events queued meanwhile (DEVICE_REMOVAL, ADDR_CHANGE) go with it, as
  // ucma_cleanup_ctx_events removes them: none may name a freed id.
  for (CmEvent* e : EventChannel::From(conn->pub_.channel)->Withdraw(conn)) delete e;
  FreeId(conn);
}

// Destroys the CQs and channels rdma_create_qp made for the id (it was given none).
void DestroyOwnCqs(rdma_cm_id* pub) {
  if (pub->send_cq) ibv_destroy_cq(pub->send_cq);
  if (pub->recv_cq) ibv_destroy_cq(pub->recv_cq);
  if (pub->send_cq_channel) ibv_destroy_comp_channel(pub->send_cq_channel);
  if (pub->recv_cq_channel) ibv_destroy_comp_channel(pub->recv_cq_channel);
  pub->send_cq = pub->recv_cq = nullptr;
  pub->send_cq_channel = pub->recv_cq_channel = nullptr;
}

void CopyPrivateData(CmMessage* m, const void* data, uint8_t len) {
  m->private_data_len = len;
  if (data && len) std::memcpy(m->private_data, data, len);
}

}  // namespace

int cm::CompleteSync(CmId* id) {
  if (!id->sync) return 0;
  if (id->pub_.event) {
    rdma_ack_cm_event(id->pub_.event);
    id->pub_.event = nullptr;
  }
  CmEvent* e = EventChannel::From(id->pub_.channel)->Pop();
  if (!e) return -1;
  id->pub_.event = &e->pub;
  // librdmacm's ucma_complete: the event's status decides, not its type.
  const int status = e->pub.status;
  if (status == 0) return 0;
  if (e->pub.event == RDMA_CM_EVENT_REJECTED) return Fail(ECONNREFUSED);
  return Fail(status < 0 ? -status : status);
}

extern "C" {

int rdma_create_id(rdma_event_channel* channel, rdma_cm_id** id, void* context, rdma_port_space ps) {
  return Guarded([&] {
    if (!id || !KnownPortSpace(ps)) return Fail(EINVAL);
    EventChannel* events = channel ? EventChannel::From(channel) : EventChannel::Create();
    if (!events) return -1;
    auto* cm_id = new (std::nothrow) CmId(events, context, ps, QpTypeOf(ps), channel == nullptr);
    if (!cm_id) {
      if (!channel) delete events;
      return Fail(ENOMEM);
    }
    {
      std::lock_guard<std::mutex> lock(CmService::Get().mu());
      CmService::Get().Adopt(cm_id);
    }
    *id = cm_id->pub();
    return 0;
  });
}

int rdma_destroy_id(rdma_cm_id* pub) {
  return Guarded([&] {
    if (!pub) return Fail(EINVAL);
    CmId* id = CmId::From(pub);
    if (id->sync && pub->event) {
      rdma_ack_cm_event(pub->event);
      pub->event = nullptr;
    }
    CmService& service = CmService::Get();
    std::unique_lock<std::mutex> lock(service.mu());
    RejectIfUnanswered(service, id);
    service.Close(id);  // a connected peer sees the socket close: its DISCONNECTED
    service.Forget(id);
    EventChannel* channel = EventChannel::From(pub->channel);
    // Events not read yet go with the id; events read must be acked first (rdma_ack_cm_event(3)).
    for (CmEvent* e : channel->Withdraw(id)) {
      --id->unacked;
      if (e->pub.event == RDMA_CM_EVENT_CONNECT_REQUEST && e->pub.id != pub) DropRequest(service, CmId::From(e->pub.id));
      delete e;
    }
    id->acked.wait(lock, [id] { return id->unacked <= 0; });
    lock.unlock();
    FreeId(id);
    return 0;
  });
}

int rdma_bind_addr(rdma_cm_id* pub, sockaddr* addr) {
  return Guarded([&] {
    if (!pub || !addr) return Fail(EINVAL);
    CmId* id = CmId::From(pub);
    std::lock_guard<std::mutex> lock(CmService::Get().mu());
    if (id->state != State::kIdle) return Fail(EINVAL);
    if (int err = BindLocked(id, addr)) return Fail(err);
    return 0;
  });
}

int rdma_resolve_addr(rdma_cm_id* pub, sockaddr* src_addr, sockaddr* dst_addr, int /*timeout_ms*/) {
  const int rc = Guarded([&] {
    if (!pub || !dst_addr || cm::AddressLength(dst_addr) == 0) return Fail(EINVAL);
    CmId* id = CmId::From(pub);
    CmService& service = CmService::Get();
    std::lock_guard<std::mutex> lock(service.mu());
    if (id->state != State::kIdle && id->state != State::kAddrBound) return Fail(EINVAL);
    if (id->state == State::kIdle) {
      sockaddr_storage any = {};
      any.ss_family = dst_addr->sa_family;
      const sockaddr* src = src_addr ? src_addr : reinterpret_cast<sockaddr*>(&any);
      if (int err = BindLocked(id, src)) return Fail(err);
    }
    std::memset(id->dst(), 0, sizeof(sockaddr_storage));
    std::memcpy(id->dst(), dst_addr, cm::AddressLength(dst_addr));
    if (cm::IsMulticastAddress(dst_addr)) {
      // A group is reached through the source's port (the kernel resolves it on the route's device).
      if (!id->port) id->AttachPort(&PortAddresses::Get().ports().front());
      cm::MulticastGroup group;
      cm::GroupOf(dst_addr, id->port->ethernet, pub->ps == RDMA_PS_UDP, &group);
      pub->route.addr.addr.ibaddr.dgid = group.mgid;
      id->state = State::kAddrResolved;
      service.QueueEvent(id, RDMA_CM_EVENT_ADDR_RESOLVED, 0);
      return 0;
    }
    const LocalPort* remote = PortAddresses::Get().Find(dst_addr);
    if (!remote) {
      // No simulated port has the address: as an ARP that is never answered.
      service.QueueEvent(id, RDMA_CM_EVENT_ADDR_ERROR, -EHOSTUNREACH);
      return 0;
    }
    if (!id->port) id->AttachPort(remote);
    // The route's source (the kernel's addr4_resolve): every simulated port's
    // address is this host's, which the route reaches from that address, so
    // a wildcard source becomes the destination's address (its port stays).
    if (cm::IsWildcard(id->src()) && id->src()->sa_family == dst_addr->sa_family) {
      const uint16_t source_port = cm::AddressPort(id->src());
      std::memcpy(id->src(), dst_addr, cm::AddressLength(dst_addr));
      cm::SetAddressPort(id->src(), source_port);
      service.MoveReservation(id);
    }
    pub->route.addr.addr.ibaddr.dgid = remote->ConnectionGid();
    id->state = State::kAddrResolved;
    service.QueueEvent(id, RDMA_CM_EVENT_ADDR_RESOLVED, 0);
    return 0;
  });
  if (rc != 0) return rc;
  return cm::CompleteSync(CmId::From(pub));
}

int rdma_resolve_route(rdma_cm_id* pub, int /*timeout_ms*/) {
  const int rc = Guarded([&] {
    if (!pub) return Fail(EINVAL);
    CmId* id = CmId::From(pub);
    CmService& service = CmService::Get();
    std::lock_guard<std::mutex> lock(service.mu());
    if (id->state != State::kAddrResolved) return Fail(EINVAL);
    if (!pub->route.path_rec) pub->route.path_rec = new ibv_sa_path_rec();
    ibv_sa_path_rec& path = *pub->route.path_rec;
    path = {};
    path.dgid = pub->route.addr.addr.ibaddr.dgid;
    path.sgid = pub->route.addr.addr.ibaddr.sgid;
    const LocalPort* remote = PortAddresses::Get().Find(id->dst());
    path.dlid = htobe16(remote ? remote->lid : 0);
    path.slid = htobe16(id->port->lid);
    path.pkey = htobe16(0xffff);
    path.mtu = static_cast<uint8_t>(id->port->active_mtu);
    path.mtu_selector = 2;  // exactly
    path.reversible = 1;
    path.numb_path = 1;
    path.hop_limit = id->port->ethernet ? 64 : 0;
    pub->route.num_paths = 1;
    id->state = State::kRouteResolved;
    service.QueueEvent(id, RDMA_CM_EVENT_ROUTE_RESOLVED, 0);
    return 0;
  });
  if (rc != 0) return rc;
  return cm::CompleteSync(CmId::From(pub));
}

int rdma_create_qp_ex(rdma_cm_id* pub, ibv_qp_init_attr_ex* attr) {
  return Guarded([&] {
    if (!pub || !attr || !pub->verbs || pub->qp) return Fail(EINVAL);
    CmId* id = CmId::From(pub);
    if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd) {
      attr->comp_mask |= IBV_QP_INIT_ATTR_PD;
      attr->pd = pub->pd;
    } else if (attr->pd->context != pub->verbs) {
      return Fail(EINVAL);
    }
    if (!attr->pd) return Fail(EINVAL);
    if (!attr->srq && pub->srq) attr->srq = pub->srq;
    // CQs the program does not give are made here, each with a channel (librdmacm's ucma_create_cqs).
    bool own = false;
    if (!attr->send_cq || !attr->recv_cq) {
      if (!pub->recv_cq) {
        pub->recv_cq_channel = ibv_create_comp_channel(pub->verbs);
        if (!pub->recv_cq_channel) return -1;
        pub->recv_cq = ibv_create_cq(pub->verbs, std::max<int>(attr->cap.max_recv_wr, 1), pub, pub->recv_cq_channel, 0);
        pub->send_cq_channel = ibv_create_comp_channel(pub->verbs);
        pub->send_cq = ibv_create_cq(pub->verbs, std::max<int>(attr->cap.max_send_wr, 1), pub, pub->send_cq_channel, 0);
        own = true;
        if (!pub->recv_cq || !pub->send_cq || !pub->send_cq_channel) {
          const int err = errno ? errno : ENOMEM;
          DestroyOwnCqs(pub);
          return Fail(err);
        }
      }
      if (!attr->send_cq) attr->send_cq = pub->send_cq;
      if (!attr->recv_cq) attr->recv_cq = pub->recv_cq;
    }
    ibv_qp* qp = ibv_create_qp_ex(pub->verbs, attr);
    if (!qp) {
      const int err = errno;
      if (own) DestroyOwnCqs(pub);  // as librdmacm: the CQs made for a QP that failed go with it
      return Fail(err);
    }
    std::lock_guard<std::mutex> lock(CmService::Get().mu());
    pub->qp = qp;
    // librdmacm asks the kernel for the QP's INIT attributes, which a CM id
    // reset by the requester's REJ does not give (ib_cm_init_qp_attr: EINVAL).
    int err = id->request_withdrawn ? EINVAL : id->ModifyQp(IBV_QPS_INIT);
    if (!err && pub->qp_type == IBV_QPT_UD) {
      err = id->ModifyQp(IBV_QPS_RTR);
      if (!err) err = id->ModifyQp(IBV_QPS_RTS);
    }
    if (err) {
      pub->qp = nullptr;
      ibv_destroy_qp(qp);
      if (own) DestroyOwnCqs(pub);
      return Fail(err);
    }
    id->own_cqs = id->own_cqs || own;
    pub->pd = qp->pd;
    return 0;
  });
}

int rdma_create_qp(rdma_cm_id* pub, ibv_pd* pd, ibv_qp_init_attr* qp_init_attr) {
  return Guarded([&] {
    if (!pub || !qp_init_attr) return Fail(EINVAL);
    ibv_qp_init_attr_ex attr = {};
    std::memcpy(&attr, qp_init_attr, sizeof *qp_init_attr);
    attr.comp_mask = IBV_QP_INIT_ATTR_PD;
    attr.pd = pd;
    if (rdma_create_qp_ex(pub, &attr) != 0) return -1;
    qp_init_attr->cap = attr.cap;
    qp_init_attr->send_cq = attr.send_cq;
    qp_init_attr->recv_cq = attr.recv_cq;
    return 0;
  });
}

void rdma_destroy_qp(rdma_cm_id* pub) {
  Guarded([&] {
    if (!pub || !pub->qp) return 0;
    ibv_qp* qp = nullptr;
    {
      // The CM's thread moves the id's QP (to ERR on a REJ, say) under this
      // lock: once it sees none, the QP may go (ibv_destroy_qp may wait for
      // event acks: not under the lock).
      std::lock_guard<std::mutex> lock(CmService::Get().mu());
      CmId::From(pub)->DetachGroups();
      qp = pub->qp;
      pub->qp = nullptr;
    }
    ibv_destroy_qp(qp);
    CmId* id = CmId::From(pub);
    if (id->own_cqs) {
      DestroyOwnCqs(pub);
      id->own_cqs = false;
    }
    return 0;
  });
}

int rdma_connect(rdma_cm_id* pub, rdma_conn_param* param) {
  const int rc = Guarded([&] {
    if (!pub) return Fail(EINVAL);
    CmId* id = CmId::From(pub);
    CmService& service = CmService::Get();
    std::lock_guard<std::mutex> lock(service.mu());
    if (id->state != State::kRouteResolved) return Fail(EINVAL);
    const bool ud = pub->qp_type == IBV_QPT_UD;
    const size_t header = cm::UserDataOffset(id->src()->sa_family);
    const size_t limit = (ud ? cm::kSidrReqPrivateData : cm::kReqPrivateData) - header;
    if (param && param->private_data_len > limit) return Fail(EINVAL);
    if (!ud && !pub->qp && !param) return Fail(EINVAL);  // nothing says which QP connects
    const RdAtomicLimits max = DeviceLimits(pub->verbs);
    if (!ValidRdAtomic(id, param, max)) return Fail(EINVAL);
    TakeConnectRdAtomic(id, param, max);
    if (param) {
      id->retry_count = std::min<uint8_t>(param->retry_count, 7);
      id->rnr_retry_count = std::min<uint8_t>(param->rnr_retry_count, 7);
    }
    id->psn = RandomPsn();
    CmMessage req = id->Message(ud ? CmMessageType::kSidrReq : CmMessageType::kReq);
    req.responder_resources = id->responder_resources;
    req.initiator_depth = id->initiator_depth;
    req.retry_count = id->retry_count;
    req.rnr_retry_count = id->rnr_retry_count;
    if (param) {
      if (!pub->qp) req.qpn = param->qp_num & 0xffffff;
      req.flow_control = param->flow_control;
      req.srq = param->srq;
      CopyPrivateData(&req, param->private_data, param->private_data_len);
    }
    id->state = State::kConnecting;
    if (service.Connect(id, req) != 0) service.Refuse(id);
    return 0;
  });
  if (rc != 0) return rc;
  return cm::CompleteSync(CmId::From(pub));
}

int rdma_listen(rdma_cm_id* pub, int backlog) {
  return Guarded([&] {
    if (!pub) return Fail(EINVAL);
    CmId* id = CmId::From(pub);
    CmService& service = CmService::Get();
    std::lock_guard<std::mutex> lock(service.mu());
    if (id->state == State::kIdle) {
      // The kernel's rdma_listen binds an unbound id to the IPv4 wildcard
      // and a port of its choosing (and leaves it bound if listening fails).
      sockaddr_in any = {};
      any.sin_family = AF_INET;
      if (int err = BindLocked(id, reinterpret_cast<sockaddr*>(&any))) return Fail(err);
    }
    if (id->state != State::kAddrBound) return Fail(EINVAL);
    // The kernel's ucma_listen: a backlog outside 1..max_backlog (the
    // net.rdma_ucm.max_backlog sysctl, 1024 by default) is max_backlog.
    id->backlog = backlog > 0 && backlog < cm::kMaxBacklog ? backlog : cm::kMaxBacklog;
    if (int err = service.Listen(id)) return Fail(err);
    id->state = State::kListen;
    return 0;
  });
}

int rdma_get_request(rdma_cm_id* listen, rdma_cm_id** id) {
  return Guarded([&] {
    if (!listen || !id) return Fail(EINVAL);
    CmId* listener = CmId::From(listen);
    if (!listener->sync) return Fail(EINVAL);
    // As librdmacm's rdma_get_request: the listener's last event is acked
    // first, and any event but a request ends the call with an error, the
    // event left in listen->event (DEVICE_REMOVAL must not be swallowed by a
    // server waiting here).
    if (listen->event) {
      rdma_ack_cm_event(listen->event);
      listen->event = nullptr;
    }
    CmEvent* e = EventChannel::From(listen->channel)->Pop();
    if (!e) return -1;
    int err = 0;
    if (e->pub.event == RDMA_CM_EVENT_REJECTED) {
      err = ECONNREFUSED;
    } else if (e->pub.status != 0) {
      err = e->pub.status < 0 ? -e->pub.status : e->pub.status;
    } else if (e->pub.event != RDMA_CM_EVENT_CONNECT_REQUEST) {
      err = EINVAL;
    }
    if (err) {
      listen->event = &e->pub;
      return Fail(err);
    }
    if (listener->ep_qp_attr) {
      ibv_qp_init_attr_ex attr = *listener->ep_qp_attr;
      if (rdma_create_qp_ex(e->pub.id, &attr) != 0) {
        const int create_err = errno;
        listen->event = &e->pub;  // (librdmacm keeps the request there too)
        return Fail(create_err);
      }
    }
    *id = e->pub.id;
    (*id)->event = &e->pub;
    return 0;
  });
}

int rdma_accept(rdma_cm_id* pub, rdma_conn_param* param) {
  const int rc = Guarded([&] {
    if (!pub) return Fail(EINVAL);
    CmId* id = CmId::From(pub);
    CmService& service = CmService::Get();
    std::lock_guard<std::mutex> lock(service.mu());
    if (id->state != State::kRequestReceived || id->request_withdrawn) return Fail(EINVAL);
    const bool ud = pub->qp_type == IBV_QPT_UD;
    if (param && param->private_data_len > (ud ? cm::kSidrRepPrivateData : cm::kRepPrivateData)) return Fail(EINVAL);
    if (!ud && !pub->qp && !param) return Fail(EINVAL);
    const RdAtomicLimits max = DeviceLimits(pub->verbs);
    if (!ValidRdAtomic(id, param, max)) return Fail(EINVAL);
    TakeAcceptRdAtomic(id, param, max);
    if (id->sock < 0) {
      // The lookup's requester left before the answer.
      service.QueueEvent(id, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT);
      return 0;
    }
    CmMessage rep = id->Message(ud ? CmMessageType::kSidrRep : CmMessageType::kRep);
    rep.responder_resources = id->responder_resources;
    rep.initiator_depth = id->initiator_depth;
    rep.qkey = id->qkey;
    if (param) {
      if (!pub->qp) rep.qpn = param->qp_num & 0xffffff;
      rep.flow_control = param->flow_control;
      rep.srq = param->srq;
      rep.retry_count = id->retry_count;
      rep.rnr_retry_count = std::min<uint8_t>(param->rnr_retry_count, 7);
      CopyPrivateData(&rep, param->private_data, param->private_data_len);
    }
    if (!ud) {
      if (int err = id->ModifyQp(IBV_QPS_RTR)) return Fail(err);
      if (int err = id->ModifyQp(IBV_QPS_RTS)) return Fail(err);
    }
    // A requester gone meanwhile: its REJ (which resets our CM id) is on the way.
    if (service.Send(id, rep) != 0 && !ud) {
      id->request_withdrawn = true;
      return Fail(EINVAL);
    }
    id->state = ud ? State::kConnected : State::kAccepted;
    if (ud) service.Close(id);
    return 0;
  });
  if (rc != 0 || pub->qp_type == IBV_QPT_UD) return rc;
  return cm::CompleteSync(CmId::From(pub));
}

int rdma_reject(rdma_cm_id* pub, const void* private_data, uint8_t private_data_len) {
  return Guarded([&] {
    if (!pub) return Fail(EINVAL);
    CmId* id = CmId::From(pub);
    CmService& service = CmService::Get();
    std::lock_guard<std::mutex> lock(service.mu());
    if (id->state != State::kRequestReceived || id->request_withdrawn) return Fail(EINVAL);
    const bool ud = pub->qp_type == IBV_QPT_UD;
    if (private_data_len > (ud ? cm::kSidrRepPrivateData : cm::kRejPrivateData)) return Fail(EINVAL);
    CmMessage rej = RejectionOf(id);
    CopyPrivateData(&rej, private_data, private_data_len);
    service.Send(id, rej);  // a peer that is gone does not need the answer
    service.Close(id);
    id->state = State::kIdle;
    return 0;
  });
}

int rdma_disconnect(rdma_cm_id* pub) {
  const int rc = Guarded([&] {
    if (!pub) return Fail(EINVAL);
    CmId* id = CmId::From(pub);
    CmService& service = CmService::Get();
    std::lock_guard<std::mutex> lock(service.mu());
    const bool answering = id->state == State::kDisconnected && id->peer_dreq;
    if (id->state != State::kConnected && !answering) {
      // The kernel's rdma_disconnect: EINVAL only for an id that never had a
      // connection attempt; otherwise the QP goes to ERR, a DREQ or DREP is
      // tried (the IB CM refuses both outside their states) and it returns 0.
      switch (id->state) {
        case State::kConnecting:
        case State::kRequestReceived:
        case State::kAccepted:
        case State::kDisconnecting:
        case State::kDisconnected:
          id->ModifyQp(IBV_QPS_ERR);
          return 0;
        default:
          return Fail(EINVAL);
      }
    }
    // The QP stops first: nothing completes after the disconnect but flushes.
    id->ModifyQp(IBV_QPS_ERR);
    if (service.Send(id, id->Message(answering ? CmMessageType::kDrep : CmMessageType::kDreq)) != 0 && !answering) {
      // The peer is gone: our end of the connection ends now.
      service.Close(id);
      id->state = State::kDisconnected;
      service.QueueEvent(id, RDMA_CM_EVENT_DISCONNECTED, 0);
      service.StartTimewait(id);
      return 0;
    }
    if (answering) {
      // The DREP is sent: the connection is over, timewait begins.
      id->peer_dreq = false;
      service.StartTimewait(id);
      return 0;
    }
    id->state = State::kDisconnecting;
    return 0;
  });
  if (rc != 0) return rc;
  // librdmacm's ucma_complete: a synchronous id waits for its next event.
  return cm::CompleteSync(CmId::From(pub));
}

int rdma_establish(rdma_cm_id* pub) {
  return Guarded([&] {
    if (!pub) return Fail(EINVAL);
    CmId* id = CmId::From(pub);
    CmService& service = CmService::Get();
    std::lock_guard<std::mutex> lock(service.mu());
    if (id->state != State::kConnecting || !id->have_remote) return Fail(EINVAL);
    // The RTU tells the passive side (its ESTABLISHED); this side has had its
    // CONNECT_RESPONSE and gets no event, as with the kernel's rdma_cm.
    if (int err = service.Send(id, id->Message(CmMessageType::kRtu))) return Fail(err);
    id->state = State::kConnected;
    return 0;
  });
}

int rdma_init_qp_attr(rdma_cm_id* pub, ibv_qp_attr* qp_attr, int* qp_attr_mask) {
  return Guarded([&] {
    if (!pub || !qp_attr || !qp_attr_mask) return Fail(EINVAL);
    std::lock_guard<std::mutex> lock(CmService::Get().mu());
    if (int err = CmId::From(pub)->QpAttr(qp_attr->qp_state, qp_attr, qp_attr_mask)) return Fail(err);
    return 0;
  });
}

int rdma_migrate_id(rdma_cm_id* pub, rdma_event_channel* channel) {
  return Guarded([&] {
    if (!pub) return Fail(EINVAL);
    CmId* id = CmId::From(pub);
    // librdmacm: a synchronous id moves to a channel only.
    if (id->sync && !channel) return Fail(EINVAL);
    EventChannel* target = channel ? EventChannel::From(channel) : EventChannel::Create();
    if (!target) return -1;
    // A synchronous id's last event is acked first, as librdmacm does.
    if (id->sync && pub->event) {
      rdma_ack_cm_event(pub->event);
      pub->event = nullptr;
    }
    std::unique_lock<std::mutex> lock(CmService::Get().mu());
    EventChannel* old = EventChannel::From(pub->channel);
    // At once, as the kernel moves an id to another file: events not read yet
    // move along, and every new one goes to the new channel.
    std::vector<CmEvent*> moving = old->Withdraw(id);
    const bool old_private = id->sync;
    pub->channel = target->pub();
    id->sync = channel == nullptr;
    for (CmEvent* e : moving) target->Push(e);
    // Then, as librdmacm, it waits until the events read from the old
    // channel are acked (no new one is counted there any more).
    const int read_before = id->unacked - static_cast<int>(moving.size());
    const uint64_t acked_enough = id->acks + static_cast<uint64_t>(std::max(read_before, 0));
    id->acked.wait(lock, [id, acked_enough] { return id->acks >= acked_enough; });
    if (old_private && old != target) delete old;
    return 0;
  });
}

}  // extern "C"
