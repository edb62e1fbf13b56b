#include "cm_service.h"

#include <pthread.h>
#include <sys/epoll.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <functional>
#include <random>
#include <vector>

#include "cm_id.h"
#include "port_addresses.h"
#include "port_ipv4.h"
#include "src/quiet_thread.h"

namespace simverbs::rdmacm {

namespace {

std::string FabricName() {
  const char* env = std::getenv("SIMVERBS_FABRIC");
  return env && *env ? env : "default";
}

bool PeerIsUs(int sock) {
  ucred cred = {};
  socklen_t len = sizeof cred;
  return getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && cred.uid == getuid();
}

sockaddr_un AbstractAddress(const std::string& name, socklen_t* len) {
  sockaddr_un a = {};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path + 1, name.data(), name.size());  // sun_path[0] = 0: abstract
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return a;
}

// A SEQPACKET socket bound to the abstract `name`; -1 with errno when it cannot be.
int BoundSocket(const std::string& name) {
  const int sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (sock < 0) return -1;
  socklen_t len = 0;
  sockaddr_un a = AbstractAddress(name, &len);
  if (bind(sock, reinterpret_cast<sockaddr*>(&a), len) != 0) {
    const int err = errno;
    close(sock);
    errno = err;
    return -1;
  }
  return sock;
}

// The size of the private data field a message of `type` carries to the
// program: the whole field, zero-padded, for the messages whose data the
// kernel reports (REQ, REP, REJ and the SIDR ones); none for the RTU, DREQ
// and DREP behind ESTABLISHED and DISCONNECTED (cma_ib_handler leaves
// private_data_len 0 there).
size_t ReportedPrivateData(CmMessageType type, sa_family_t family) {
  const size_t header = UserDataOffset(family);
  switch (type) {
    case CmMessageType::kReq: return kReqPrivateData - header;
    case CmMessageType::kRep: return kRepPrivateData;
    case CmMessageType::kRej: return kRejPrivateData;
    case CmMessageType::kSidrReq: return kSidrReqPrivateData - header;
    case CmMessageType::kSidrRep: return kSidrRepPrivateData;
    case CmMessageType::kRtu:
    case CmMessageType::kDreq:
    case CmMessageType::kDrep:
    case CmMessageType::kLost: return 0;
  }
  return 0;
}

// The epoll token of the timerfd (sockets' tokens start at 1).
constexpr uint64_t kTimersToken = 0;

// The CM's own answer, on the request's connection, to a request no id took:
// a REJ with `rej_reason`, or for a SIDR REQ a SIDR REP with `sidr_status`.
void AnswerRequest(int sock, const CmMessage& req, uint8_t rej_reason, uint8_t sidr_status) {
  const bool sidr = req.type == CmMessageType::kSidrReq;
  CmMessage answer;
  answer.type = sidr ? CmMessageType::kSidrRep : CmMessageType::kRej;
  answer.reason = sidr ? sidr_status : rej_reason;
  answer.port_space = req.port_space;
  answer.src = req.dst;
  answer.dst = req.src;
  send(sock, &answer, sizeof answer, MSG_NOSIGNAL | MSG_DONTWAIT);
}

}  // namespace

CmService& CmService::Get() {
  static CmService* service = [] {
    auto* s = new CmService();  // leaked: its thread lives to the end
    // A forked child has none of the parent's threads: it starts with no
    // connections and its own thread, as a fresh process does with the real
    // librdmacm (a new event channel opens its own /dev/infiniband/rdma_cm).
    // The lock is held across fork so the child never copies it held.
    pthread_atfork([] { Get().mu_.lock(); }, [] { Get().mu_.unlock(); }, [] { Get().AfterForkInChild(); });
    return s;
  }();
  return *service;
}

void CmService::AfterForkInChild() {
  for (auto& [token, entry] : entries_) {
    close(entry.sock);  // the child's copy; the parent's stays open
    if (entry.id) {
      entry.id->sock = -1;
      entry.id->token = 0;
    }
  }
  entries_.clear();
  if (epoll_fd_ >= 0) close(epoll_fd_);
  epoll_fd_ = -1;
  timers_.Forget();
  mu_.unlock();
}

std::string CmService::SocketName(uint16_t ps, const std::string& address, uint16_t port) const {
  std::string name = "simverbs-cm-" + std::to_string(getuid()) + "-" + FabricName() + "-" + std::to_string(ps) +
                     "-" + address + "-" + std::to_string(port);
  if (name.size() > 100) {
    name = "simverbs-cm-" + std::to_string(getuid()) + "-h" + std::to_string(std::hash<std::string>()(name));
  }
  return name;
}

uint16_t CmService::EphemeralPort() {
  if (next_port_ == 0) next_port_ = static_cast<uint16_t>(32768 + std::random_device()() % 28000);
  if (++next_port_ >= 60999) next_port_ = 32768;
  return next_port_;
}

void CmService::EnsureThread() {
  if (epoll_fd_ >= 0) return;
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd_ < 0) return;
  epoll_event ev = {};
  ev.events = EPOLLIN;
  ev.data.u64 = kTimersToken;
  if (timers_.fd() >= 0) epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, timers_.fd(), &ev);
  thread_ = QuietThread([this] { Run(); });
  thread_.detach();
}

void CmService::Register(CmId* id, int sock, bool listener) {
  EnsureThread();
  const uint64_t token = next_token_++;
  Entry entry;
  entry.id = id;
  entry.sock = sock;
  entry.listener = listener;
  entries_[token] = entry;
  if (id) {
    id->token = token;
    id->sock = sock;
  }
  epoll_event ev = {};
  ev.events = EPOLLIN;
  ev.data.u64 = token;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, sock, &ev);
}

bool CmService::NameTaken(const std::string& name) const {
  const int sock = BoundSocket(name);
  if (sock < 0) return errno == EADDRINUSE;
  close(sock);
  return false;
}

int CmService::Reserve(CmId* id) {
  const uint16_t ps = id->pub_.ps;
  const uint16_t port = AddressPort(id->src());
  // The names that conflict with this one: the wildcard's for an address, every address's for the wildcard
  // (IPv4 and IPv6: the kernel binds no rdma_cm id to one family only). A conflict with a wildcard on
  // either side is EADDRNOTAVAIL, the same address EADDRINUSE (the kernel's cma_check_port).
  std::vector<std::string> others;
  if (IsWildcard(id->src())) {
    others = {"127.0.0.1", "::1"};
    for (const LocalPort& p : PortAddresses::Get().ports()) {
      others.push_back(Ipv4Text(p.ipv4));
      for (const ibv_gid& gid : p.gids) {
        sockaddr_in6 a = {};
        a.sin6_family = AF_INET6;
        std::memcpy(&a.sin6_addr, gid.raw, sizeof gid.raw);
        if (!IsWildcard(reinterpret_cast<const sockaddr*>(&a))) {
          others.push_back(AddressText(reinterpret_cast<const sockaddr*>(&a)));
        }
      }
    }
  } else {
    others.push_back("any");
  }
  for (const std::string& other : others) {
    if (NameTaken(SocketName(ps, other, port))) return EADDRNOTAVAIL;
  }
  const int sock = BoundSocket(SocketName(ps, AddressText(id->src()), port));
  // (Our own name taken: the same address, or for the wildcard another wildcard.)
  if (sock < 0) return errno == EADDRINUSE && IsWildcard(id->src()) ? EADDRNOTAVAIL : errno;
  id->bound_sock = sock;
  return 0;
}

void CmService::MoveReservation(CmId* id) {
  if (id->bound_sock < 0) return;
  close(id->bound_sock);
  id->bound_sock = -1;
  Reserve(id);  // (our wildcard held the port: no id took the address on it meanwhile)
}

int CmService::Listen(CmId* id) {
  if (id->bound_sock < 0) {
    if (int err = Reserve(id)) return err;
  }
  // The socket's queue is as long as the system allows: the backlog is
  // the count of requests not read yet (OnRequest), as the kernel keeps it.
  if (listen(id->bound_sock, SOMAXCONN) != 0) return errno;
  const int sock = id->bound_sock;
  id->bound_sock = -1;
  Register(id, sock, true);
  return 0;
}

int CmService::Connect(CmId* id, const CmMessage& req, int lost) {
  id->request = req;
  if (lost == 0) id->requests_lost = 0;  // a new rdma_connect
  int sock = -1;
  for (const std::string& address : {AddressText(id->dst()), std::string("any")}) {
    // Non-blocking: a listener whose queue is full must not stop this
    // process's CM (its thread needs mu(), held here) nor the caller.
    sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (sock < 0) return errno;
    socklen_t len = 0;
    sockaddr_un a = AbstractAddress(SocketName(id->pub_.ps, address, AddressPort(id->dst())), &len);
    const int rc = connect(sock, reinterpret_cast<sockaddr*>(&a), len);
    const int err = rc == 0 ? 0 : errno;
    if (rc == 0 && PeerIsUs(sock)) break;
    close(sock);
    sock = -1;
    if (err == EAGAIN) {
      // The listener has not taken the requests before ours yet: as a REQ
      // lost on the way, sent again after kResponseTimeout (Resend).
      ResendLater(id, req, lost + 1);
      EnsureThread();
      return 0;
    }
  }
  if (sock < 0) return ECONNREFUSED;
  Register(id, sock, false);
  if (int err = SendOrLose(id, sock, req, 0)) {
    Drop(id->token);
    id->sock = -1;
    id->token = 0;
    return err;
  }
  return 0;
}

void CmService::ResendLater(CmId* id, const CmMessage& m, int lost, std::chrono::milliseconds after) {
  CmTimer timer;
  timer.kind = CmTimer::Kind::kResend;
  timer.id = id;
  timer.message = m;
  timer.lost = lost;
  timers_.Add(after, timer);
}

int CmService::Send(CmId* id, const CmMessage& m) {
  if (id->sock < 0) return ENOTCONN;
  return SendOrLose(id, id->sock, m, 0);
}

int CmService::SendOrLose(CmId* id, int sock, const CmMessage& m, int lost) {
  if (CmFaults::Resent(m.type) && faults_.TakeDrop(m.type)) {
    // (A request's losses at either end count together: kLost.)
    if (m.type == CmMessageType::kReq || m.type == CmMessageType::kSidrReq) id->requests_lost = lost + 1;
    ResendLater(id, m, lost + 1);
    return 0;
  }
  if (send(sock, &m, sizeof m, MSG_NOSIGNAL | MSG_DONTWAIT) != static_cast<ssize_t>(sizeof m)) {
    // A DREQ that finds the peer's queue full (a stopped process): as lost on the way.
    if (m.type != CmMessageType::kDreq || (errno != EAGAIN && errno != EWOULDBLOCK)) return errno;
  }
  // The DREP comes only once the peer's program answers (its rdma_disconnect
  // or rdma_destroy_id): a DREQ is sent again until then, each time after
  // kDreqAnswerTimeout, and given up (DISCONNECTED, -ETIMEDOUT) as the IB CM does.
  if (m.type == CmMessageType::kDreq) ResendLater(id, m, lost + 1, kDreqAnswerTimeout);
  return 0;
}

void CmService::Forget(CmId* id) {
  ids_.erase(id);
  timers_.Cancel(id);
}

void CmService::StartTimewait(CmId* id) {
  if (id->pub_.qp_type == IBV_QPT_UD) return;  // datagrams have no connection to wait out
  CmTimer timer;
  timer.kind = CmTimer::Kind::kTimewait;
  timer.id = id;
  timers_.Add(kTimewait, timer);
}

void CmService::OnTimers() {
  for (const CmTimer& timer : timers_.TakeDue()) {
    if (timer.kind == CmTimer::Kind::kHeldRequest) {
      OnHeldRequest(timer);
      continue;
    }
    if (!ids_.count(timer.id)) continue;
    if (timer.kind == CmTimer::Kind::kResend) {
      Resend(timer);
    } else if (timer.id->state == CmId::State::kDisconnected) {
      QueueEvent(timer.id, RDMA_CM_EVENT_TIMEWAIT_EXIT, 0);
    }
  }
}

void CmService::OnHeldRequest(const CmTimer& timer) {
  auto it = entries_.find(timer.token);
  if (it == entries_.end() || !it->second.held || !it->second.listen_id) return;
  if (timer.lost >= kMaxRetries) {
    // The active side gave up on it (IB_CM_REQ_ERROR): its UNREACHABLE when the connection closes.
    Drop(timer.token);
    return;
  }
  const CmMessage req = it->second.request;
  OnRequest(it->second.listen_id, timer.token, req);
  it = entries_.find(timer.token);
  if (it == entries_.end()) return;
  if (it->second.held) {
    CmTimer next = timer;
    ++next.lost;
    timers_.Add(kResponseTimeout, next);
  } else if (!it->second.id) {
    Drop(timer.token);  // refused (a fault)
  }
}

void CmService::Resend(const CmTimer& timer) {
  using S = CmId::State;
  CmId* id = timer.id;
  bool waiting = false;  // does the id still wait for the answer to this message?
  switch (timer.message.type) {
    case CmMessageType::kReq:
    case CmMessageType::kSidrReq: waiting = id->state == S::kConnecting && !id->have_remote; break;
    case CmMessageType::kRep: waiting = id->state == S::kAccepted; break;
    case CmMessageType::kDreq: waiting = id->state == S::kDisconnecting; break;
    default: break;
  }
  if (!waiting) return;
  if (timer.lost > kMaxRetries) {
    GiveUp(id, timer.message.type);
    return;
  }
  if (id->sock < 0) {
    // A request that found the listener's queue full: connect again.
    if (timer.message.type != CmMessageType::kReq && timer.message.type != CmMessageType::kSidrReq) return;
    if (Connect(id, timer.message, timer.lost) != 0) Refuse(id);
    return;
  }
  SendOrLose(id, id->sock, timer.message, timer.lost);  // a broken socket: OnPeerGone tells
}

void CmService::Refuse(CmId* id) {
  // Nobody listens there: the remote CM rejects the request (invalid service
  // ID; a SIDR REQ gets "service ID not supported").
  id->state = CmId::State::kRouteResolved;
  if (id->pub_.qp_type == IBV_QPT_UD) {
    QueueEvent(id, RDMA_CM_EVENT_UNREACHABLE, kSidrUnsupported);
    return;
  }
  CmMessage rej;
  rej.type = CmMessageType::kRej;
  rej.port_space = static_cast<uint16_t>(id->pub_.ps);
  QueueEvent(id, RDMA_CM_EVENT_REJECTED, kRejInvalidServiceId, &rej);
}

void CmService::GiveUp(CmId* id, CmMessageType type) {
  using S = CmId::State;
  switch (type) {
    case CmMessageType::kReq:
    case CmMessageType::kSidrReq:
      Close(id);
      id->state = S::kRouteResolved;
      QueueEvent(id, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT);
      return;
    case CmMessageType::kRep:
      // The peer sees the connection close while it waits for the REP: its UNREACHABLE.
      Close(id);
      id->state = S::kIdle;
      QueueEvent(id, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT);
      return;
    case CmMessageType::kDreq:
      // The kernel's IB_CM_DREQ_ERROR: DISCONNECTED with -ETIMEDOUT.
      id->state = S::kDisconnected;
      QueueEvent(id, RDMA_CM_EVENT_DISCONNECTED, -ETIMEDOUT);
      StartTimewait(id);
      return;
    default:
      return;
  }
}

int CmService::RaiseOnDevice(const std::string& device, int port, rdma_cm_event_type type) {
  int reached = 0;
  for (CmId* id : ids_) {
    if (!id->port || id->state == CmId::State::kRemoved) continue;
    if (device != ibv_get_device_name(id->port->verbs->device)) continue;
    if (type == RDMA_CM_EVENT_ADDR_CHANGE) {
      if (id->port->port != port) continue;
    } else {
      // The device is gone: so is every connection on it (the peer sees the socket close).
      Close(id);
      timers_.Cancel(id);
      id->state = CmId::State::kRemoved;
    }
    QueueEvent(id, type, 0);
    ++reached;
  }
  if (type == RDMA_CM_EVENT_DEVICE_REMOVAL) PortAddresses::Get().MarkRemoved(device);
  return reached;
}

void CmService::Drop(uint64_t token) {
  auto it = entries_.find(token);
  if (it == entries_.end()) return;
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, it->second.sock, nullptr);
  close(it->second.sock);
  entries_.erase(it);
}

void CmService::Close(CmId* id) {
  if (id->bound_sock >= 0) close(id->bound_sock);
  id->bound_sock = -1;
  if (id->sock < 0) return;
  Drop(id->token);
  // Accepted sockets that came through this listener and have not said REQ
  // yet, or whose REQ is held: nobody listens there any more (a REQ sent
  // again would be rejected with "invalid service ID").
  std::vector<uint64_t> pending;
  for (const auto& [token, entry] : entries_) {
    if (entry.listen_id == id && !entry.id) pending.push_back(token);
  }
  for (uint64_t token : pending) {
    const Entry& entry = entries_[token];
    if (entry.held) AnswerRequest(entry.sock, entry.request, kRejInvalidServiceId, kSidrUnsupported);
    Drop(token);
  }
  id->sock = -1;
  id->token = 0;
}

CmEvent* CmService::NewEvent(CmId* id, rdma_cm_event_type type, int status, const CmMessage* from,
                            CmId* listen_id) {
  auto* e = new CmEvent();
  e->id = id;
  e->pub.id = id->pub();
  e->pub.listen_id = listen_id ? listen_id->pub() : nullptr;
  e->pub.event = type;
  e->pub.status = status;
  if (from) {
    std::memcpy(e->private_data, from->private_data, std::min<size_t>(from->private_data_len, kMaxPrivateData));
    const auto reported = static_cast<uint8_t>(ReportedPrivateData(from->type, from->src.ss_family));
    if (id->pub_.qp_type == IBV_QPT_UD) {
      rdma_ud_param& ud = e->pub.param.ud;
      // NULL without any (librdmacm's ucma_copy_ud_event; libfabric tells the sides apart by it).
      ud.private_data = reported ? e->private_data : nullptr;
      ud.private_data_len = reported;
      ud.qp_num = from->qpn;
      ud.qkey = from->qkey;
      if (type == RDMA_CM_EVENT_ESTABLISHED && id->port) ud.ah_attr = id->port->AhTo(from->lid, from->gid);
    } else {
      rdma_conn_param& c = e->pub.param.conn;
      c.private_data = reported ? e->private_data : nullptr;  // (ucma_copy_conn_event)
      c.private_data_len = reported;
      // What the peer offers is what we may use: its initiator depth is our responder resources.
      c.responder_resources = from->initiator_depth;
      c.initiator_depth = from->responder_resources;
      c.flow_control = from->flow_control;
      c.retry_count = from->retry_count;
      c.rnr_retry_count = from->rnr_retry_count;
      c.srq = from->srq;
      c.qp_num = from->qpn;
    }
  }
  return e;
}

void CmService::Deliver(CmId* id, CmEvent* e, EventChannel* channel) {
  ++id->unacked;
  (channel ? channel : EventChannel::From(id->pub_.channel))->Push(e);
}

void CmService::QueueEvent(CmId* id, rdma_cm_event_type type, int status, const CmMessage* from, CmId* listen_id,
                           EventChannel* channel) {
  Deliver(id, NewEvent(id, type, status, from, listen_id), channel);
}

void CmService::QueueMulticastJoin(CmId* id, const MulticastGroup& group) {
  CmEvent* e = NewEvent(id, RDMA_CM_EVENT_MULTICAST_JOIN, 0, nullptr, nullptr);
  rdma_ud_param& ud = e->pub.param.ud;
  ud.private_data = group.context;
  ud.private_data_len = 0;
  ud.qp_num = 0xffffff;
  ud.qkey = id->qkey;
  ud.ah_attr = id->port->AhTo(group.mlid, group.mgid.raw);
  // A group's address handle has a GRH on InfiniBand too (ib_init_ah_from_mcmember).
  ud.ah_attr.is_global = 1;
  ud.ah_attr.grh.dgid = group.mgid;
  ud.ah_attr.grh.hop_limit = ud.ah_attr.grh.hop_limit ? ud.ah_attr.grh.hop_limit : 1;
  Deliver(id, e, nullptr);
}

void CmService::Run() {
  for (;;) {
    epoll_event events[16];
    const int n = epoll_wait(epoll_fd_, events, 16, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    std::lock_guard<std::mutex> lock(mu_);
    for (int i = 0; i < n; ++i) {
      if (events[i].data.u64 == kTimersToken) {
        OnTimers();
        continue;
      }
      auto it = entries_.find(events[i].data.u64);
      if (it == entries_.end()) continue;  // closed since
      if (it->second.listener) {
        OnListener(it->second.id);
      } else {
        OnConnection(it->first);
      }
    }
  }
}

void CmService::OnListener(CmId* listener) {
  for (;;) {
    const int sock = accept4(listener->sock, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (sock < 0) return;
    if (!PeerIsUs(sock)) {
      close(sock);
      continue;
    }
    Register(nullptr, sock, false);
    entries_[next_token_ - 1].listen_id = listener;
  }
}

void CmService::OnConnection(uint64_t token) {
  for (;;) {
    auto it = entries_.find(token);
    if (it == entries_.end()) return;
    Entry entry = it->second;
    CmMessage m;
    const ssize_t n = recv(entry.sock, &m, sizeof m, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (n != static_cast<ssize_t>(sizeof m) || !m.Valid()) {
      // Gone (0), broken, or not one of us: the connection ends here.
      if (entry.id) {
        OnPeerGone(entry.id);
      } else {
        Drop(token);
      }
      return;
    }
    if (!entry.id) {
      if ((m.type == CmMessageType::kReq || m.type == CmMessageType::kSidrReq) && entry.listen_id) {
        if (faults_.TakeDrop(m.type)) {
          // Lost on its way in (a fault armed here): the listener hears
          // nothing, the sender's CM hears of the loss and resends it.
          CmMessage lost;
          lost.type = CmMessageType::kLost;
          lost.reason = static_cast<uint8_t>(m.type);
          lost.port_space = m.port_space;
          lost.src = m.dst;
          lost.dst = m.src;
          send(entry.sock, &lost, sizeof lost, MSG_NOSIGNAL | MSG_DONTWAIT);
          continue;
        }
        OnRequest(entry.listen_id, token, m);
        it = entries_.find(token);
        if (it != entries_.end() && !it->second.id && !it->second.held) {  // refused
          Drop(token);
          return;
        }
      }
      continue;
    }
    OnMessage(entry.id, m);
  }
}

void CmService::OnRequest(CmId* listener, uint64_t token, const CmMessage& req) {
  const LocalPort* port = listener->port ? listener->port : PortAddresses::Get().Find(
                                                                reinterpret_cast<const sockaddr*>(&req.dst));
  if (!port) return;
  // The kernel's ucma takes no more unread CONNECT_REQUESTs than the listen
  // backlog (ucma_event_handler: ENOMEM) and the request is dropped; the
  // active side sends it again later (measured on rxe: about 4 s later).
  if (listener->unread_requests.load() >= listener->backlog) {
    Entry& held = entries_[token];
    // One look timer per held request: OnHeldRequest, which looks again
    // through here, arms the next one itself.
    const bool first_look = !held.held;
    held.held = true;
    held.request = req;
    if (first_look) {
      CmTimer timer;
      timer.kind = CmTimer::Kind::kHeldRequest;
      timer.token = token;
      timers_.Add(kResponseTimeout, timer);
    }
    return;
  }
  entries_[token].held = false;
  uint8_t reason = 0;
  if (faults_.TakeReject(&reason)) {
    // The CM answers for the listener, which never hears of the request.
    AnswerRequest(entries_[token].sock, req, reason, kSidrReject);
    return;  // the caller drops the connection
  }
  EventChannel* channel = EventChannel::From(listener->pub_.channel);
  if (listener->sync) {
    channel = EventChannel::Create();  // the new id's own events (librdmacm migrates it)
    if (!channel) return;
  }
  auto* id = new CmId(channel, listener->pub_.context, listener->pub_.ps, listener->pub_.qp_type, listener->sync);
  Adopt(id);
  id->AttachPort(port);
  std::memcpy(id->src(), &req.dst, sizeof req.dst);
  std::memcpy(id->dst(), &req.src, sizeof req.src);
  std::memcpy(id->pub_.route.addr.addr.ibaddr.dgid.raw, req.gid, 16);
  id->remote = req;
  id->have_remote = true;
  id->responder_resources = req.initiator_depth;
  id->initiator_depth = req.responder_resources;
  id->retry_count = req.retry_count;
  id->rnr_retry_count = req.rnr_retry_count;
  id->psn = std::random_device()() & 0xffffff;
  id->state = CmId::State::kRequestReceived;
  Entry& entry = entries_[token];
  entry.id = id;
  id->sock = entry.sock;
  id->token = token;
  // The request is the listener's event, about the new id: its ack counts
  // against the listener (librdmacm's ucma_process_conn_req), so the new id
  // can be destroyed before the ack, and the listener's destroy waits for it.
  CmEvent* e = NewEvent(id, RDMA_CM_EVENT_CONNECT_REQUEST, 0, &req, listener);
  e->id = listener;
  ++listener->unread_requests;
  Deliver(listener, e, EventChannel::From(listener->pub_.channel));
}

void CmService::OnMessage(CmId* id, const CmMessage& m) {
  using S = CmId::State;
  switch (m.type) {
    case CmMessageType::kRep:
      if (id->state != S::kConnecting) return;
      id->remote = m;
      id->have_remote = true;
      // What the passive side granted (the kernel's cm_rep_handler): its
      // responder resources bound our initiator depth, and the other way.
      id->initiator_depth = m.responder_resources;
      id->responder_resources = m.initiator_depth;
      // How often our sends are retried on an RNR NAK is the peer's to say
      // (rdma_accept(3) rnr_retry_count; cm_rep_handler takes it from the REP).
      id->rnr_retry_count = m.rnr_retry_count;
      std::memcpy(id->pub_.route.addr.addr.ibaddr.dgid.raw, m.gid, 16);
      if (!id->pub_.qp) {
        // A QP the program manages: it moves it and calls rdma_establish.
        QueueEvent(id, RDMA_CM_EVENT_CONNECT_RESPONSE, 0, &m);
        return;
      }
      if (id->ModifyQp(IBV_QPS_RTR) != 0 || id->ModifyQp(IBV_QPS_RTS) != 0) {
        CmMessage rej = id->Message(CmMessageType::kRej);
        rej.reason = kRejConsumerDefined;
        Send(id, rej);
        id->state = S::kRouteResolved;
        QueueEvent(id, RDMA_CM_EVENT_CONNECT_ERROR, -EINVAL);
        return;
      }
      Send(id, id->Message(CmMessageType::kRtu));
      id->state = S::kConnected;
      QueueEvent(id, RDMA_CM_EVENT_ESTABLISHED, 0, &m);
      return;
    case CmMessageType::kSidrRep:
      if (id->state != S::kConnecting) return;
      id->state = S::kRouteResolved;
      Close(id);
      if (m.reason != 0) {
        // The SIDR status is the event's status, as the kernel's cma_sidr_rep_handler reports it.
        QueueEvent(id, RDMA_CM_EVENT_UNREACHABLE, m.reason, &m);
      } else {
        QueueEvent(id, RDMA_CM_EVENT_ESTABLISHED, 0, &m);
      }
      return;
    case CmMessageType::kRtu:
      if (id->state != S::kAccepted) return;
      id->state = S::kConnected;
      QueueEvent(id, RDMA_CM_EVENT_ESTABLISHED, 0, &m);
      return;
    case CmMessageType::kRej:
      if (id->state != S::kConnecting && id->state != S::kAccepted) return;
      id->state = S::kRouteResolved;
      Close(id);
      id->ModifyQp(IBV_QPS_ERR);  // as librdmacm does on REJECTED (ucma_modify_qp_err)
      QueueEvent(id, RDMA_CM_EVENT_REJECTED, m.reason, &m);
      return;
    case CmMessageType::kDreq:
      if (id->state == S::kConnected) {
        id->peer_dreq = true;
        id->state = S::kDisconnected;
        QueueEvent(id, RDMA_CM_EVENT_DISCONNECTED, 0, &m);
      } else if (id->state == S::kDisconnecting) {
        // Both asked at once: answer, and this is our end of it.
        Send(id, id->Message(CmMessageType::kDrep));
        id->state = S::kDisconnected;
        QueueEvent(id, RDMA_CM_EVENT_DISCONNECTED, 0, &m);
        StartTimewait(id);
      } else if (id->state == S::kDisconnected && !id->peer_dreq) {
        // Our end is over (in timewait): the IBTA CM answers a DREQ there with a DREP, and no event.
        Send(id, id->Message(CmMessageType::kDrep));
      }
      return;
    case CmMessageType::kDrep:
      if (id->state != S::kDisconnecting) return;
      id->state = S::kDisconnected;
      QueueEvent(id, RDMA_CM_EVENT_DISCONNECTED, 0, &m);
      StartTimewait(id);
      return;
    case CmMessageType::kLost: {
      // Our request, lost at the listener's end: sent again as one lost here is.
      const auto type = static_cast<CmMessageType>(m.reason);
      if (type != id->request.type || id->state != S::kConnecting || id->have_remote) return;
      ResendLater(id, id->request, ++id->requests_lost);  // counted with the losses at our end
      return;
    }
    case CmMessageType::kReq:
    case CmMessageType::kSidrReq:
      return;  // only as the first message of a connection
  }
}

void CmService::OnPeerGone(CmId* id) {
  using S = CmId::State;
  Close(id);
  switch (id->state) {
    case S::kConnecting:
    case S::kAccepted:
      id->state = S::kRouteResolved;
      QueueEvent(id, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT);
      return;
    case S::kConnected:
      // The kernel's rdma_cm sends the DREQ for an id whose process is gone:
      // rdma_disconnect answers it, and timewait follows.
      id->peer_dreq = true;
      id->state = S::kDisconnected;
      QueueEvent(id, RDMA_CM_EVENT_DISCONNECTED, 0);
      return;
    case S::kDisconnecting:
      id->state = S::kDisconnected;
      QueueEvent(id, RDMA_CM_EVENT_DISCONNECTED, 0);
      StartTimewait(id);
      return;
    case S::kRequestReceived:
      // (A lookup's requester sends nothing when it goes: its SIDR REQ stays answerable.)
      if (id->pub()->qp_type != IBV_QPT_UD) id->request_withdrawn = true;
      return;
    default:
      return;
  }
}

}  // namespace simverbs::rdmacm
