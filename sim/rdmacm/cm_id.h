#pragma once

// An rdma_cm_id and its connection state. Every field after pub_ is guarded by
// CmService::mu() (one lock for the whole control path: it is never on the
// data path).
//
// States, as the kernel's rdma_cm: idle → addr bound / resolved → route
// resolved → connecting (REQ sent) → connected; listen; on the passive side a
// new id starts at request received (REQ in, CONNECT_REQUEST queued) →
// accepted (REP sent) → connected (RTU in). Disconnect sends DREQ (or DREP if
// the peer's DREQ came first); each side sees one DISCONNECTED.

#include <rdma/rdma_cma.h>

#include <atomic>
#include <condition_variable>
#include <vector>
#include <cstdint>

#include "cm_message.h"
#include "multicast_group.h"

namespace simverbs::rdmacm {

class EventChannel;
struct LocalPort;

class CmId {
 public:
  enum class State {
    kIdle,
    kAddrBound,
    kAddrResolved,
    kRouteResolved,
    kListen,
    kConnecting,     // REQ sent, REP awaited
    kRequestReceived,
    kAccepted,       // REP sent, RTU awaited
    kConnected,
    kDisconnecting,  // DREQ sent, DREP awaited
    kDisconnected,
    kRemoved,        // DEVICE_REMOVAL: only rdma_destroy_id is left
  };

  CmId(EventChannel* channel, void* context, rdma_port_space ps, ibv_qp_type qp_type, bool sync);
  static CmId* From(rdma_cm_id* id) { return reinterpret_cast<CmId*>(id); }
  rdma_cm_id* pub() { return &pub_; }

  // Uses `port`'s device and port for this id (id->verbs, port_num, pd, the GIDs).
  void AttachPort(const LocalPort* port);
  sockaddr* src() { return reinterpret_cast<sockaddr*>(&pub_.route.addr.src_storage); }
  sockaddr* dst() { return reinterpret_cast<sockaddr*>(&pub_.route.addr.dst_storage); }

  // The QP transitions of a connection, as the kernel's rdma_init_qp_attr
  // gives them: what `state` needs, for the QP of this id.
  int QpAttr(ibv_qp_state state, ibv_qp_attr* attr, int* mask) const;
  // Moves id->qp (if the id has one) to `state`; 0 or an errno.
  int ModifyQp(ibv_qp_state state) const;
  // A message of `type` that describes this end (QP, PSN, LID, GID, addresses).
  CmMessage Message(CmMessageType type) const;

  rdma_cm_id pub_ = {};  // first: the program's pointer is ours
  bool sync = false;     // created without a channel: calls wait for their events
  const LocalPort* port = nullptr;
  State state = State::kIdle;
  uint64_t token = 0;     // the service's handle for this id's socket (0: none)
  int sock = -1;          // connection or listening socket
  int bound_sock = -1;    // rdma_bind_addr's reservation of the port; rdma_listen listens on it
  int backlog = 0;        // rdma_listen's, within 1..kMaxBacklog
  // CONNECT_REQUESTs of this listener queued and not read yet (read by the
  // program's thread without the service lock: EventChannel::Pop; one moved
  // to another channel by rdma_migrate_id still counts).
  std::atomic<int> unread_requests{0};
  uint32_t psn = 0;       // our starting PSN
  CmMessage remote;       // what the peer said of itself (REQ or REP)
  bool have_remote = false;
  CmMessage request;      // our REQ or SIDR REQ (rdma_connect), for a resend
  int requests_lost = 0;  // of them, lost at the listener's end so far (kLost)
  uint8_t responder_resources = 0;
  uint8_t initiator_depth = 0;
  uint8_t retry_count = 7;
  int ack_timeout = -1;   // RDMA_OPTION_ID_ACK_TIMEOUT (-1: not set)
  uint8_t rnr_retry_count = 7;
  uint32_t qkey = 0x01234567;  // RDMA_UDP_QKEY
  bool peer_dreq = false;      // the peer asked to disconnect first
  // A connection request whose requester went (its id destroyed, its process
  // gone) before we answered: the kernel's CM sends a REJ then, which resets
  // our CM id without an event; rdma_create_qp, rdma_accept and rdma_reject
  // on the id fail with EINVAL from then on.
  bool request_withdrawn = false;
  // Events handed out and not acked (rdma_destroy_id waits for 0).
  int unacked = 0;
  uint64_t acks = 0;  // events acked so far (rdma_migrate_id waits on it)
  std::condition_variable acked;
  ibv_qp_init_attr_ex* ep_qp_attr = nullptr;  // rdma_create_ep on a passive id: for rdma_get_request
  bool own_cqs = false;  // rdma_create_qp made the CQs and their channels
  std::vector<MulticastGroup> groups;  // joined with rdma_join_multicast(_ex)

  // Detaches the QP from every group it is attached to (leaving them is the caller's).
  void DetachGroups();
};

}  // namespace simverbs::rdmacm
