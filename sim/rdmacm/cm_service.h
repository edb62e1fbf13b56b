#pragma once

// The connection manager of this process: no daemon and no kernel, the
// processes of a fabric talk to each other directly.
//
// A listening id binds an abstract Unix SEQPACKET socket named after the user,
// the fabric (SIMVERBS_FABRIC), the port space, the address ("any" for the
// wildcard) and the port; rdma_connect connects to the socket of the address
// it resolved, else to the wildcard one, and the two ids then exchange the
// CM's messages (cm_message.h) over that connection. Abstract sockets are
// reachable by any user of the network namespace, so each side checks the
// other's uid (SO_PEERCRED) and drops a stranger. A peer that exits or is
// killed closes its sockets: the survivor sees DISCONNECTED (connected) or
// UNREACHABLE (connecting), never a hang.
//
// One thread per process (started by the first listen or connect) waits on
// every socket with epoll and turns messages into events on the ids' channels.
//
// Time, as the IBTA CM keeps it: a message that needs an answer (REQ, REP,
// DREQ, SIDR REQ) and was lost (a fault, cm_faults.h) is sent again after
// kResponseTimeout, up to kMaxRetries times, then the CM gives up (the
// events simverbs_rdmacm.h lists). So is a DREQ the peer's program has not
// answered (its DREP waits for that program's rdma_disconnect), after
// kDreqAnswerTimeout each time. A
// connection that has ended (DREP sent or received) stays in timewait for
// kTimewait, then its id gets TIMEWAIT_EXIT.
// All CM state is guarded by one lock, mu(). A forked child starts afresh:
// none of the parent's connections, a thread of its own once it needs one.

#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "cm_faults.h"
#include "cm_message.h"
#include "cm_timers.h"
#include "event_channel.h"
#include "multicast_group.h"

namespace simverbs::rdmacm {

class CmId;

class CmService {
 public:
  // How long the CM waits for an answer before it resends (the kernel's
  // rdma_cm waits about 4 s, CMA_CM_RESPONSE_TIMEOUT; shorter here so that a
  // test of a lost message does not take a minute), and how often it resends
  // (CMA_MAX_CM_RETRIES).
  static constexpr std::chrono::milliseconds kResponseTimeout{100};
  static constexpr int kMaxRetries = 15;
  // How long a DREQ that arrived waits for the peer program's answer before
  // it is sent again: longer than a lost message's wait, so that a program
  // that answers its DISCONNECTED late still disconnects cleanly within
  // 16 s (the kernel: about 100 s in all).
  static constexpr std::chrono::milliseconds kDreqAnswerTimeout{1000};
  // Timewait: twice the packet lifetime; measured on rxe (kernel 6.1),
  // TIMEWAIT_EXIT comes about 2 s after the disconnect.
  static constexpr std::chrono::milliseconds kTimewait{2048};

  static CmService& Get();
  std::mutex& mu() { return mu_; }
  // Requires: mu().
  CmFaults& faults() { return faults_; }

  // Every id of the process, for the events that reach all ids on a device.
  // Requires: mu().
  void Adopt(CmId* id) { ids_.insert(id); }
  // The id is being destroyed: no timer fires for it any more. Requires: mu().
  void Forget(CmId* id);

  // Takes id->src()'s port in id's port space for the life of the id
  // (rdma_bind_addr, rdma_resolve_addr): EADDRINUSE when an id of the fabric
  // has that address and port, EADDRNOTAVAIL when the wildcard has that port
  // (or, for the wildcard, any address has it). Requires: mu().
  int Reserve(CmId* id);
  // id->src() changed from the wildcard to an address (route resolution): its
  // port is held under that address now, as the kernel compares an id's
  // current address (cma_check_port). Requires: mu().
  void MoveReservation(CmId* id);
  // Requires: mu(). 0 or an errno.
  int Listen(CmId* id);
  // Connects to the peer of id->dst() and sends `req`; 0, or an errno when the
  // address has no listener (ECONNREFUSED) or the socket layer failed. A
  // listener whose queue is full is tried again later, as a lost REQ is
  // (`lost`: the tries so far). Requires: mu().
  int Connect(CmId* id, const CmMessage& req, int lost = 0);
  // The answer to a request nobody listens for: REJECTED (invalid service
  // ID), or UNREACHABLE for a SIDR REQ. Requires: mu().
  void Refuse(CmId* id);
  int Send(CmId* id, const CmMessage& m);
  // Closes the id's socket; nothing more arrives for it.
  void Close(CmId* id);

  // Queues an event for `id` on its channel (or `channel`: a request goes to
  // the listener's). Requires: mu().
  void QueueEvent(CmId* id, rdma_cm_event_type type, int status, const CmMessage* from = nullptr,
                  CmId* listen_id = nullptr, EventChannel* channel = nullptr);

  // MULTICAST_JOIN for a group `id` joined: the group's address handle, QPN
  // 0xffffff, the id's qkey, and the program's context as private_data.
  // Requires: mu().
  void QueueMulticastJoin(CmId* id, const MulticastGroup& group);

  // A port number no id of this process uses (ephemeral range).
  uint16_t EphemeralPort();

  // The connection of `id` has ended (DREP sent or received, or the CM gave
  // up on the DREQ): TIMEWAIT_EXIT follows after kTimewait. Requires: mu().
  void StartTimewait(CmId* id);

  // ADDR_CHANGE on the ids bound to port `port` of the device named
  // `device`, or DEVICE_REMOVAL on all its ids (that device's addresses stop
  // resolving). Returns the ids reached. Requires: mu().
  int RaiseOnDevice(const std::string& device, int port, rdma_cm_event_type type);

 private:
  CmService() = default;
  void EnsureThread();
  // An event of `type` for `id` (its data from the peer's message `from`), not queued yet.
  CmEvent* NewEvent(CmId* id, rdma_cm_event_type type, int status, const CmMessage* from, CmId* listen_id);
  // Queues e on id's channel (or `channel`), counting it against id's acks.
  void Deliver(CmId* id, CmEvent* e, EventChannel* channel);
  // pthread_atfork's child handler: forgets the parent's sockets and thread.
  void AfterForkInChild();
  void Run();
  void OnTimers();
  // Resends a message that was lost, or gives up on it after kMaxRetries.
  void Resend(const CmTimer& timer);
  void GiveUp(CmId* id, CmMessageType type);
  // Sends m on sock unless a fault loses it; a lost message that needs an
  // answer is resent by a timer. `lost`: how often it was lost before.
  int SendOrLose(CmId* id, int sock, const CmMessage& m, int lost);
  // Sends m for id again after kResponseTimeout (Resend); `lost`: the tries that failed so far.
  void ResendLater(CmId* id, const CmMessage& m, int lost, std::chrono::milliseconds after = kResponseTimeout);
  void Register(CmId* id, int sock, bool listener);
  void OnListener(CmId* listener);
  void OnConnection(uint64_t token);
  void OnMessage(CmId* id, const CmMessage& m);
  void OnRequest(CmId* listener, uint64_t token, const CmMessage& req);
  // Stops watching an entry's socket, closes it and forgets the entry.
  void Drop(uint64_t token);
  void OnPeerGone(CmId* id);
  std::string SocketName(uint16_t ps, const std::string& address, uint16_t port) const;
  // True when some id of the fabric holds this name.
  bool NameTaken(const std::string& name) const;

  struct Entry {
    CmId* id = nullptr;  // nullptr: an accepted socket whose REQ has not come yet, or is held
    int sock = -1;
    bool listener = false;
    CmId* listen_id = nullptr;  // for an accepted socket: the listener it came through
    // A REQ the listener had no room for (its backlog of unread requests is
    // full): the kernel drops it and the active side sends it again after its
    // response timeout; here the passive side looks at it again every
    // kResponseTimeout, up to kMaxRetries times (OnHeldRequest).
    bool held = false;
    CmMessage request;
  };
  void OnHeldRequest(const CmTimer& timer);

  std::mutex mu_;
  int epoll_fd_ = -1;
  std::thread thread_;
  uint64_t next_token_ = 1;
  std::map<uint64_t, Entry> entries_;
  uint16_t next_port_ = 0;
  CmFaults faults_;
  CmTimers timers_;
  std::set<CmId*> ids_;
};

}  // namespace simverbs::rdmacm
