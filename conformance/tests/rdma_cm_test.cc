// rdma_cm (librdmacm): the event channel, address and route resolution, and
// connections on the device and port under test, reached by their IPv4
// address (cm_address.h). Client and server are two ids on one device, the
// way rping runs on one host. Every test runs in a watchdog child, so a CM
// that never answers, or an rdma_destroy_id that never returns, fails the
// test instead of hanging the run; each side's events have their own channel.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netdb.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "conformance/lib/blocking_call.h"
#include "conformance/lib/cm_address.h"
#include "conformance/lib/cm_event_wait.h"
#include "conformance/lib/cm_handles.h"
#include "conformance/lib/device_opener.h"
#include "conformance/lib/errno_capture.h"
#include "conformance/lib/fd_poll.h"
#include "conformance/lib/options.h"
#include "conformance/lib/pipe.h"
#include "conformance/lib/skip_if.h"
#include "conformance/lib/test_deadline.h"
#include "conformance/lib/timeouts.h"
#include "conformance/lib/ud_constants.h"
#include "conformance/lib/verbs_handles.h"
#include "conformance/lib/verbs_matchers.h"
#include "conformance/lib/verbs_test.h"
#include "conformance/lib/watchdog.h"

namespace conformance {
namespace {

// The IB CM reject reasons rdma_cm reports as the status of REJECTED (IBTA Vol 1 12.6.7.2).
constexpr int kRejInvalidServiceId = 8;
constexpr int kRejConsumerDefined = 28;
// SIDR REP statuses (IBTA Vol 1 12.11.2): no listener for the service ID, and rejected.
constexpr int kSidrUnsupported = 1;
constexpr int kSidrReject = 2;
// Private data a program may send (IBTA CM field sizes less rdma_cm's 36-byte header for REQ).
constexpr size_t kReqPrivateData = 56;
constexpr size_t kRepPrivateData = 196;
constexpr size_t kRejPrivateData = 148;
// rdma_cm's resolve timeouts, in ms.
constexpr int kResolveTimeoutMs = 2000;
// How long a disconnected id may stay in timewait before TIMEWAIT_EXIT, and the
// watchdog of a test that waits for it twice.
constexpr std::chrono::milliseconds kTimewaitWindow = 10s;
constexpr std::chrono::milliseconds kTimewaitChildTimeout = 30s;

std::array<uint8_t, 256> Pattern(uint8_t seed) {
  std::array<uint8_t, 256> bytes = {};
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(seed + i * 7);
  return bytes;
}

// One side of a connection: its channel, its id, and (once made) its PD and QP.
struct CmSide {
  CmChannelPtr channel;
  CmIdPtr id;
  PdPtr pd;
  // Declared last: acknowledged before the id goes.
  CmEventPtr event;
};

class RdmaCmTest : public VerbsTest {
 protected:
  void SetUp() override {
    VerbsTest::SetUp();
    if (HasFatalFailure()) return;
    static const Found found = FindInChild(device_name(), port());
    if (!found.ok) {
      // The simulator always gives its ports an address: not finding one is a bug there.
      if (Sim()) FAIL() << found.why;
      GTEST_SKIP() << found.why;
    }
    address_ = found.address;
  }

  sockaddr_in Address(uint16_t port_number) const {
    sockaddr_in sin = {};
    sin.sin_family = AF_INET;
    sin.sin_addr = address_;
    sin.sin_port = htons(port_number);
    return sin;
  }

  // A channel and an id on it.
  static void NewSide(CmSide* side, rdma_port_space ps) {
    side->channel.reset(rdma_create_event_channel());
    ASSERT_NE(side->channel, nullptr) << "rdma_create_event_channel: " << ErrnoName(errno);
    rdma_cm_id* id = nullptr;
    ASSERT_EQ(rdma_create_id(side->channel.get(), &id, nullptr, ps), 0) << "rdma_create_id: " << ErrnoName(errno);
    side->id.reset(id);
  }

  // A listener on the port's address, on a port rdma_cm chose; *port_number is that port.
  void Listen(CmSide* server, rdma_port_space ps, uint16_t* port_number) const {
    ASSERT_NO_FATAL_FAILURE(NewSide(server, ps));
    sockaddr_in sin = Address(0);
    ASSERT_EQ(rdma_bind_addr(server->id.get(), reinterpret_cast<sockaddr*>(&sin)), 0)
        << "rdma_bind_addr: " << ErrnoName(errno);
    ASSERT_EQ(rdma_listen(server->id.get(), 4), 0) << "rdma_listen: " << ErrnoName(errno);
    *port_number = ntohs(rdma_get_src_port(server->id.get()));
    ASSERT_NE(*port_number, 0) << "rdma_get_src_port of a listener bound to port 0";
  }

  // A client id with its address and route to port_number resolved.
  void Resolve(CmSide* client, rdma_port_space ps, uint16_t port_number) const {
    ASSERT_NO_FATAL_FAILURE(NewSide(client, ps));
    sockaddr_in dst = Address(port_number);
    ASSERT_EQ(rdma_resolve_addr(client->id.get(), nullptr, reinterpret_cast<sockaddr*>(&dst), kResolveTimeoutMs), 0)
        << "rdma_resolve_addr: " << ErrnoName(errno);
    ASSERT_TRUE(GetCmEventWithin(client->channel.get(), RDMA_CM_EVENT_ADDR_RESOLVED, kReturnWindow, &client->event));
    client->event.reset();
    ASSERT_EQ(rdma_resolve_route(client->id.get(), kResolveTimeoutMs), 0) << "rdma_resolve_route: " << ErrnoName(errno);
    ASSERT_TRUE(GetCmEventWithin(client->channel.get(), RDMA_CM_EVENT_ROUTE_RESOLVED, kReturnWindow, &client->event));
    client->event.reset();
  }

  // A PD on the id's device and a QP of `type` made by rdma_create_qp.
  static void CreateQp(CmSide* side, ibv_qp_type type) {
    ASSERT_NE(side->id->verbs, nullptr) << "the id has no device after address resolution";
    side->pd.reset(ibv_alloc_pd(side->id->verbs));
    ASSERT_NE(side->pd, nullptr) << "ibv_alloc_pd: " << ErrnoName(errno);
    ibv_qp_init_attr attr = {};
    attr.qp_type = type;
    attr.cap.max_send_wr = 4;
    attr.cap.max_recv_wr = 4;
    attr.cap.max_send_sge = 1;
    attr.cap.max_recv_sge = 1;
    attr.sq_sig_all = 1;
    ASSERT_EQ(rdma_create_qp(side->id.get(), side->pd.get(), &attr), 0) << "rdma_create_qp: " << ErrnoName(errno);
  }

  // A listener in port space ps, and a client with its route to it resolved and
  // a QP from rdma_create_qp (RC for RDMA_PS_TCP, UD for RDMA_PS_UDP).
  void ListenAndResolve(CmSide* server, CmSide* client, rdma_port_space ps) const {
    uint16_t port_number = 0;
    ASSERT_NO_FATAL_FAILURE(Listen(server, ps, &port_number));
    ASSERT_NO_FATAL_FAILURE(Resolve(client, ps, port_number));
    ASSERT_NO_FATAL_FAILURE(CreateQp(client, ps == RDMA_PS_UDP ? IBV_QPT_UD : IBV_QPT_RC));
  }

  // Waits for the server's CONNECT_REQUEST and gives its new id to request,
  // acknowledging the event (it is the new id's: its destroy waits for the ack).
  static void TakeRequest(CmSide* server, CmSide* request) {
    ASSERT_TRUE(GetCmEventWithin(server->channel.get(), RDMA_CM_EVENT_CONNECT_REQUEST, kReturnWindow,
                                 &server->event));
    request->id.reset(server->event->id);
    server->event.reset();
  }

  // The client's rdma_connect, with retries allowed.
  static void StartConnect(CmSide* client) {
    rdma_conn_param param = {};
    param.retry_count = 7;
    param.rnr_retry_count = 7;
    ASSERT_EQ(rdma_connect(client->id.get(), &param), 0) << "rdma_connect: " << ErrnoName(errno);
  }

  // A client's connection request (RDMA_PS_TCP) queued, unread, on the server's channel.
  void QueueUnreadRequest(CmSide* server, CmSide* client) const {
    ASSERT_NO_FATAL_FAILURE(ListenAndResolve(server, client, RDMA_PS_TCP));
    ASSERT_NO_FATAL_FAILURE(StartConnect(client));
    ASSERT_TRUE(WaitReadable(server->channel->fd, kReturnWindow)) << "no connection request arrived";
  }

  // An RC QP for the accepted id, and its rdma_accept.
  static void Accept(CmSide* conn) {
    ASSERT_NO_FATAL_FAILURE(CreateQp(conn, IBV_QPT_RC));
    rdma_conn_param accept = {};
    accept.retry_count = 7;
    accept.rnr_retry_count = 7;
    ASSERT_EQ(rdma_accept(conn->id.get(), &accept), 0) << "rdma_accept: " << ErrnoName(errno);
  }

  // rdma_connect in port space ps to a port rdma_cm handed out and that was freed again: nobody
  // listens there. The client's answer is the next event on its channel.
  void ConnectWithoutListener(CmSide* client, rdma_port_space ps) const {
    uint16_t port_number = 0;
    {
      CmSide probe;
      ASSERT_NO_FATAL_FAILURE(Listen(&probe, ps, &port_number));
    }
    ASSERT_NO_FATAL_FAILURE(Resolve(client, ps, port_number));
    ASSERT_NO_FATAL_FAILURE(CreateQp(client, ps == RDMA_PS_UDP ? IBV_QPT_UD : IBV_QPT_RC));
    rdma_conn_param param = {};
    ASSERT_EQ(rdma_connect(client->id.get(), &param), 0) << "rdma_connect: " << ErrnoName(errno);
  }

  // The client connects, the server accepts; both see ESTABLISHED. server_conn
  // (the accepted id) ends up with a QP of its own.
  void Connect(CmSide* server, CmSide* server_conn, CmSide* client) const {
    ASSERT_NO_FATAL_FAILURE(ListenAndResolve(server, client, RDMA_PS_TCP));
    ASSERT_NO_FATAL_FAILURE(StartConnect(client));
    ASSERT_NO_FATAL_FAILURE(TakeRequest(server, server_conn));
    ASSERT_NO_FATAL_FAILURE(Accept(server_conn));
    ASSERT_TRUE(GetCmEventWithin(client->channel.get(), RDMA_CM_EVENT_ESTABLISHED, kReturnWindow, &client->event));
    ASSERT_TRUE(GetCmEventWithin(server->channel.get(), RDMA_CM_EVENT_ESTABLISHED, kReturnWindow,
                                 &server_conn->event));
  }

  // Connect, then the client's rdma_disconnect: the server's DISCONNECTED is
  // in server_conn->event, client->event is empty.
  void ConnectThenDisconnectClient(CmSide* server, CmSide* server_conn, CmSide* client) const {
    ASSERT_NO_FATAL_FAILURE(Connect(server, server_conn, client));
    client->event.reset();
    server_conn->event.reset();
    ASSERT_EQ(rdma_disconnect(client->id.get()), 0) << ErrnoName(errno);
    ASSERT_TRUE(
        GetCmEventWithin(server->channel.get(), RDMA_CM_EVENT_DISCONNECTED, kReturnWindow, &server_conn->event));
  }

  // Binds to the port's address, resolves the group, makes a UD QP and joins;
  // side->event is MULTICAST_JOIN (nullptr and a failure when a step failed).
  void JoinGroup(CmSide* side, const sockaddr_in* group) const {
    ASSERT_NO_FATAL_FAILURE(NewSide(side, RDMA_PS_UDP));
    sockaddr_in src = Address(0);
    ASSERT_EQ(rdma_bind_addr(side->id.get(), reinterpret_cast<sockaddr*>(&src)), 0) << ErrnoName(errno);
    sockaddr_in dst = *group;
    ASSERT_EQ(rdma_resolve_addr(side->id.get(), reinterpret_cast<sockaddr*>(&src), reinterpret_cast<sockaddr*>(&dst),
                                kResolveTimeoutMs),
              0)
        << ErrnoName(errno);
    ASSERT_TRUE(GetCmEventWithin(side->channel.get(), RDMA_CM_EVENT_ADDR_RESOLVED, kReturnWindow, &side->event));
    side->event.reset();
    ASSERT_NO_FATAL_FAILURE(CreateQp(side, IBV_QPT_UD));
    ASSERT_EQ(rdma_join_multicast(side->id.get(), reinterpret_cast<sockaddr*>(&dst), nullptr), 0) << ErrnoName(errno);
    ASSERT_TRUE(GetCmEventWithin(side->channel.get(), RDMA_CM_EVENT_MULTICAST_JOIN, kReturnWindow, &side->event));
  }

  in_addr address_ = {};

 private:
  struct Found {
    bool ok = false;
    in_addr address = {};
    std::string why;
  };

  // FindCmAddress, once, in a child: librdmacm opens every device when it is
  // first used, and the kernel refuses write(2) on a uverbs fd from a process
  // other than the one that opened it (ib_safe_file_access), so the tests'
  // children must be the first users of rdma_cm, not inherit the parent's.
  static Found FindInChild(const std::string& device, uint8_t port_number) {
    Found found;
    Pipe answer;
    if (answer.fds[0] < 0) {
      found.why = "pipe: " + ErrnoName(errno);
      return found;
    }
    const ChildResult child = RunInChild(
        [&] {
          ContextPtr context = OpenDeviceByName(device, &found.why);
          if (context) {
            found.ok = FindCmAddress(context.get(), port_number, CurrentOptions().cm_address, &found.address,
                                     &found.why);
          }
          std::string out = std::string(found.ok ? "1" : "0") +
                            std::string(reinterpret_cast<const char*>(&found.address), sizeof found.address) +
                            found.why;
          return write(answer.fds[1], out.data(), out.size()) == static_cast<ssize_t>(out.size()) ? 0 : 1;
        },
        kChildTimeout, "finding the port's rdma_cm address");
    char buf[4096] = {};
    const ssize_t n = child.ok() ? read(answer.fds[0], buf, sizeof buf) : -1;
    if (n < 1 + static_cast<ssize_t>(sizeof(in_addr))) {
      found.why = "finding the port's rdma_cm address failed: " + child.Describe();
      return found;
    }
    found.ok = buf[0] == '1';
    std::memcpy(&found.address, buf + 1, sizeof found.address);
    found.why.assign(buf + 1 + sizeof found.address, static_cast<size_t>(n) - 1 - sizeof found.address);
    return found;
  }
};

ibv_qp_state QpState(ibv_qp* qp) {
  ibv_qp_attr attr = {};
  ibv_qp_init_attr init = {};
  if (ibv_query_qp(qp, &attr, IBV_QP_STATE, &init) != 0) return static_cast<ibv_qp_state>(-1);
  return attr.qp_state;
}

// Rule: rdma_create_event_channel(3): "Each event channel is mapped to a file descriptor. ... Users
//   may make the fd non-blocking, poll or select the fd"; rdma_get_cm_event(3): "The default
//   synchronous behavior of this routine can be changed by modifying the file descriptor".
// Checks: on a fresh channel with O_NONBLOCK, rdma_get_cm_event fails at once with EAGAIN and the
//   fd is not readable; after rdma_resolve_addr the fd becomes readable and the event is
//   ADDR_RESOLVED for that id, with status 0.
TEST_F(RdmaCmTest, ChannelFdIsPollableAndNonBlocking) {
  const ChildResult result = RunChecksInChild(
      [&] {
        CmSide client;
        ASSERT_NO_FATAL_FAILURE(NewSide(&client, RDMA_PS_TCP));
        ASSERT_EQ(SetNonBlocking(client.channel->fd), 0) << ErrnoName(errno);
        EXPECT_FALSE(WaitReadable(client.channel->fd, kQuietWindow)) << "readable with no event";
        rdma_cm_event* event = nullptr;
        IntCall call = CaptureErrno([&] { return rdma_get_cm_event(client.channel.get(), &event); });
        EXPECT_EQ(call.rc, -1);
        EXPECT_EQ(call.err, EAGAIN) << ErrnoName(call.err);
        if (call.rc == 0) rdma_ack_cm_event(event);
        sockaddr_in dst = Address(1);
        ASSERT_EQ(rdma_resolve_addr(client.id.get(), nullptr, reinterpret_cast<sockaddr*>(&dst), kResolveTimeoutMs),
                  0)
            << ErrnoName(errno);
        ASSERT_TRUE(WaitReadable(client.channel->fd, kReturnWindow)) << "no event after rdma_resolve_addr";
        ASSERT_TRUE(GetCmEventWithin(client.channel.get(), RDMA_CM_EVENT_ADDR_RESOLVED, kQuietWindow, &client.event));
        EXPECT_EQ(client.event->id, client.id.get());
        EXPECT_EQ(client.event->status, 0);
      },
      kChildTimeout, "rdma_cm event channel fd");
  EXPECT_TRUE(Passed(result));
}

// Rule: rdma_get_cm_event(3) blocks until an event arrives; librdmacm waits in the kernel
//   (ucma_get_event: wait_event_interruptible), so a signal whose handler was installed without
//   SA_RESTART ends the wait: -1 with errno EINTR (signal(7), "Interruption of system calls").
// Checks: with nothing on the channel, a SIGALRM handler installed by sigaction without SA_RESTART
//   and a timer that fires after 100 ms, rdma_get_cm_event returns -1 with errno EINTR, after the
//   handler ran (not checked under ThreadSanitizer, which defers handlers).
TEST_F(RdmaCmTest, GetEventInterruptedBySignalReturnsEintr) {
  const ChildResult result = RunChecksInChild(
      [&] {
        CmSide side;
        ASSERT_NO_FATAL_FAILURE(NewSide(&side, RDMA_PS_TCP));
        static volatile sig_atomic_t handled = 0;
        struct sigaction action = {};
        action.sa_handler = [](int) { handled = 1; };
        sigemptyset(&action.sa_mask);
        action.sa_flags = 0;  // no SA_RESTART
        ASSERT_EQ(sigaction(SIGALRM, &action, nullptr), 0);
        itimerval timer = {};
        timer.it_value.tv_usec = 100000;
        ASSERT_EQ(setitimer(ITIMER_REAL, &timer, nullptr), 0);
        rdma_cm_event* event = nullptr;
        errno = 0;
        const int ret = rdma_get_cm_event(side.channel.get(), &event);
        const int err = errno;
        EXPECT_EQ(ret, -1) << "rdma_get_cm_event returned an event of type " << (event ? event->event : -1);
        EXPECT_EQ(err, EINTR) << ErrnoName(err);
        // (Under ThreadSanitizer the handler runs when it sees fit: not looked for there.)
        if (!kThreadSanitizedBuild) {
          EXPECT_EQ(handled, 1) << "the SIGALRM handler has not run";
        }
        if (ret == 0) rdma_ack_cm_event(event);
      },
      kChildTimeout, "rdma_get_cm_event interrupted by SIGALRM");
  EXPECT_TRUE(Passed(result));
}

// Rule: rdma_resolve_addr(3): "If successful, the specified rdma_cm_id will be bound to a local
//   device"; without src_addr it "will be bound to a source address based on the local routing
//   tables" (the kernel's addr4_resolve takes the route's source, which for an address of this host
//   is that address); rdma_resolve_route(3) completes with RDMA_CM_EVENT_ROUTE_RESOLVED.
// Checks: resolving the port's own address (no source given) binds the id to the device and port
//   under test (id->verbs names it, id->port_num is the port), and the route then resolves with
//   status 0; rdma_get_peer_addr is the address resolved, rdma_get_local_addr the same address (not
//   the wildcard) with a port rdma_cm chose.
TEST_F(RdmaCmTest, ResolveBindsTheIdToTheDeviceAndPort) {
  const ChildResult result = RunChecksInChild(
      [&] {
        CmSide client;
        ASSERT_NO_FATAL_FAILURE(Resolve(&client, RDMA_PS_TCP, 7471));
        ASSERT_NE(client.id->verbs, nullptr);
        EXPECT_EQ(ibv_get_device_name(client.id->verbs->device), device_name());
        EXPECT_EQ(client.id->port_num, port());
        const auto* peer = reinterpret_cast<const sockaddr_in*>(rdma_get_peer_addr(client.id.get()));
        EXPECT_EQ(peer->sin_family, AF_INET);
        EXPECT_EQ(peer->sin_addr.s_addr, address_.s_addr);
        EXPECT_EQ(ntohs(rdma_get_dst_port(client.id.get())), 7471);
        const auto* local = reinterpret_cast<const sockaddr_in*>(rdma_get_local_addr(client.id.get()));
        EXPECT_EQ(local->sin_family, AF_INET);
        EXPECT_EQ(local->sin_addr.s_addr, address_.s_addr) << "the id's source is not the route's";
        EXPECT_NE(rdma_get_src_port(client.id.get()), 0);
      },
      kChildTimeout, "rdma_resolve_addr and rdma_resolve_route");
  EXPECT_TRUE(Passed(result));
}

// Rule: rdma_getaddrinfo(3): "If node is not given, rdma_getaddrinfo will attempt to resolve the RDMA
//   address, route, and connection data to the given hints.ai_src_addr, hints.ai_dst_addr, or
//   hints.ai_route" (librdmacm's addrinfo.c copies the hints' flags, family, QP type, port space and
//   addresses into the result).
// Checks: with node and service NULL and hints that give a destination (the port's address, port
//   7472) and a source (the same address, port 0), RC, RDMA_PS_TCP, AF_INET: the result holds both
//   addresses byte for byte with their lengths, and the hints' QP type, port space and family.
TEST_F(RdmaCmTest, GetaddrinfoWithHintsAloneGivesTheirAddresses) {
  const ChildResult result = RunChecksInChild(
      [&] {
        sockaddr_in dst = Address(7472);
        sockaddr_in src = Address(0);
        rdma_addrinfo hints = {};
        hints.ai_family = AF_INET;
        hints.ai_qp_type = IBV_QPT_RC;
        hints.ai_port_space = RDMA_PS_TCP;
        hints.ai_dst_addr = reinterpret_cast<sockaddr*>(&dst);
        hints.ai_dst_len = sizeof dst;
        hints.ai_src_addr = reinterpret_cast<sockaddr*>(&src);
        hints.ai_src_len = sizeof src;
        rdma_addrinfo* res = nullptr;
        ASSERT_EQ(rdma_getaddrinfo(nullptr, nullptr, &hints, &res), 0) << ErrnoName(errno);
        ASSERT_NE(res, nullptr);
        ASSERT_EQ(res->ai_dst_len, sizeof dst);
        ASSERT_NE(res->ai_dst_addr, nullptr) << "the hints' destination was dropped";
        EXPECT_EQ(std::memcmp(res->ai_dst_addr, &dst, sizeof dst), 0);
        ASSERT_EQ(res->ai_src_len, sizeof src);
        ASSERT_NE(res->ai_src_addr, nullptr);
        EXPECT_EQ(std::memcmp(res->ai_src_addr, &src, sizeof src), 0);
        EXPECT_EQ(res->ai_qp_type, IBV_QPT_RC);
        EXPECT_EQ(res->ai_port_space, RDMA_PS_TCP);
        EXPECT_EQ(res->ai_family, AF_INET);
        rdma_freeaddrinfo(res);
      },
      kChildTimeout, "rdma_getaddrinfo");
  EXPECT_TRUE(Passed(result));
}

// Rule: rdma_getaddrinfo(3): RAI_NUMERICHOST "The node parameter is a numeric address" (librdmacm passes it
//   to getaddrinfo as AI_NUMERICHOST), and RETURN VALUE: "Returns 0 on success, or -1 on error ... If an
//   error occurs, errno will be set" with, for lookups, getaddrinfo's own code returned (librdmacm's
//   ucma_getaddrinfo returns it, so rdma_client prints it with gai_strerror); without a port space in the
//   hints, a UD QP type gives RDMA_PS_UDP (ucma_get_port_space).
// Checks: node "localhost" with RAI_NUMERICHOST returns EAI_NONAME and no result; node "127.0.0.1" with
//   QP type UD and no port space gives a result in RDMA_PS_UDP with QP type UD.
TEST_F(RdmaCmTest, GetaddrinfoFollowsItsHints) {
  const ChildResult result = RunChecksInChild(
      [&] {
        rdma_addrinfo hints = {};
        hints.ai_flags = RAI_NUMERICHOST;
        rdma_addrinfo* res = nullptr;
        EXPECT_EQ(rdma_getaddrinfo("localhost", "7471", &hints, &res), EAI_NONAME)
            << "a name for a numeric host";
        EXPECT_EQ(res, nullptr);
        if (res) rdma_freeaddrinfo(res);
        res = nullptr;
        rdma_addrinfo ud = {};
        ud.ai_qp_type = IBV_QPT_UD;
        ASSERT_EQ(rdma_getaddrinfo("127.0.0.1", "7471", &ud, &res), 0) << ErrnoName(errno);
        ASSERT_NE(res, nullptr);
        EXPECT_EQ(res->ai_port_space, RDMA_PS_UDP);
        EXPECT_EQ(res->ai_qp_type, IBV_QPT_UD);
        rdma_freeaddrinfo(res);
      },
      kChildTimeout, "rdma_getaddrinfo with RAI_NUMERICHOST, and with a UD QP type");
  EXPECT_TRUE(Passed(result));
}

// Rule: rdma_get_cm_event(3): REJECTED "Indicates that a connection request or response was
//   rejected by the remote end point. ... Under InfiniBand, this is the reject reason carried in
//   the IB CM REJ message"; the IB CM answers a REQ for a service ID nobody listens on with
//   reason 8, invalid service ID (IBTA Vol 1 12.6.7.2).
// Checks: rdma_connect to a port nobody listens on gives REJECTED with status 8, and the id can be
//   destroyed after.
TEST_F(RdmaCmTest, ConnectWithoutListenerIsRejectedWithInvalidServiceId) {
  const ChildResult result = RunChecksInChild(
      [&] {
        CmSide client;
        ASSERT_NO_FATAL_FAILURE(ConnectWithoutListener(&client, RDMA_PS_TCP));
        ASSERT_TRUE(GetCmEventWithin(client.channel.get(), RDMA_CM_EVENT_REJECTED, kReturnWindow, &client.event));
        EXPECT_EQ(client.event->status, kRejInvalidServiceId);
      },
      kChildTimeout, "rdma_connect to a port with no listener");
  EXPECT_TRUE(Passed(result));
}

// Rule: rdma_connect(3): private_data "The contents of the buffer are copied and transparently
//   passed to the remote side as part of the communication request"; rdma_accept(3) likewise for
//   the reply; rdma_get_cm_event(3): CONNECT_REQUEST's id "references a new id for that
//   communication" and listen_id "the corresponding listening request identifier". The IBTA CM
//   carries 56 bytes of a program's data in a REQ (92 less rdma_cm's header) and 196 in a REP.
// Checks: with the largest private data on both sides, the server's CONNECT_REQUEST has a new
//   id, listen_id the listener, and the client's 56 bytes; the client's ESTABLISHED has the
//   server's 196 bytes; both ends' QPs are in RTS.
TEST_F(RdmaCmTest, ConnectAndAcceptCarryTheirPrivateData) {
  const ChildResult result = RunChecksInChild(
      [&] {
        const auto req = Pattern(1);
        const auto rep = Pattern(99);
        CmSide server, conn, client;
        ASSERT_NO_FATAL_FAILURE(ListenAndResolve(&server, &client, RDMA_PS_TCP));
        rdma_conn_param param = {};
        param.private_data = req.data();
        param.private_data_len = kReqPrivateData;
        ASSERT_EQ(rdma_connect(client.id.get(), &param), 0) << ErrnoName(errno);
        ASSERT_TRUE(GetCmEventWithin(server.channel.get(), RDMA_CM_EVENT_CONNECT_REQUEST, kReturnWindow,
                                     &server.event));
        conn.id.reset(server.event->id);
        EXPECT_NE(conn.id.get(), server.id.get());
        EXPECT_EQ(server.event->listen_id, server.id.get());
        const rdma_conn_param& got_req = server.event->param.conn;
        ASSERT_GE(got_req.private_data_len, kReqPrivateData);
        EXPECT_EQ(std::memcmp(got_req.private_data, req.data(), kReqPrivateData), 0) << "REQ private data differs";
        server.event.reset();
        ASSERT_NO_FATAL_FAILURE(CreateQp(&conn, IBV_QPT_RC));
        rdma_conn_param accept = {};
        accept.private_data = rep.data();
        accept.private_data_len = kRepPrivateData;
        ASSERT_EQ(rdma_accept(conn.id.get(), &accept), 0) << ErrnoName(errno);
        ASSERT_TRUE(GetCmEventWithin(client.channel.get(), RDMA_CM_EVENT_ESTABLISHED, kReturnWindow, &client.event));
        const rdma_conn_param& got_rep = client.event->param.conn;
        ASSERT_GE(got_rep.private_data_len, kRepPrivateData);
        EXPECT_EQ(std::memcmp(got_rep.private_data, rep.data(), kRepPrivateData), 0) << "REP private data differs";
        ASSERT_TRUE(GetCmEventWithin(server.channel.get(), RDMA_CM_EVENT_ESTABLISHED, kReturnWindow, &conn.event));
        EXPECT_EQ(conn.event->id, conn.id.get());
        EXPECT_EQ(QpState(client.id->qp), IBV_QPS_RTS);
        EXPECT_EQ(QpState(conn.id->qp), IBV_QPS_RTS);
      },
      kChildTimeout, "rdma_connect/rdma_accept with private data");
  EXPECT_TRUE(Passed(result));
}

// Rule: the IBTA CM has room for 56 bytes of a program's data in a REQ (92 less rdma_cm's 36-byte
//   header, which the kernel leaves out for AF_IB addresses only, whatever the port space:
//   cma_user_data_offset); the kernel's rdma_connect refuses more with EINVAL (ib_send_cm_req).
// Checks: in RDMA_PS_TCP and in RDMA_PS_IB, over IPv4 addresses: rdma_connect with 57 bytes of private
//   data fails with EINVAL, and the same id then connects with 56 (the failed call changed nothing): the
//   server sees its CONNECT_REQUEST.
TEST_F(RdmaCmTest, ConnectWithTooMuchPrivateDataIsEinval) {
  const ChildResult result = RunChecksInChild(
      [&] {
        const auto req = Pattern(5);
        for (const rdma_port_space ps : {RDMA_PS_TCP, RDMA_PS_IB}) {
          SCOPED_TRACE(ps == RDMA_PS_TCP ? "RDMA_PS_TCP" : "RDMA_PS_IB");
          CmSide server, client;
          ASSERT_NO_FATAL_FAILURE(ListenAndResolve(&server, &client, ps));
          rdma_conn_param param = {};
          param.private_data = req.data();
          param.private_data_len = kReqPrivateData + 1;
          IntCall call = CaptureErrno([&] { return rdma_connect(client.id.get(), &param); });
          EXPECT_EQ(call.rc, -1);
          EXPECT_EQ(call.err, EINVAL) << ErrnoName(call.err);
          param.private_data_len = kReqPrivateData;
          ASSERT_EQ(rdma_connect(client.id.get(), &param), 0) << ErrnoName(errno);
          CmSide request;
          ASSERT_NO_FATAL_FAILURE(TakeRequest(&server, &request));
          rdma_reject(request.id.get(), nullptr, 0);
        }
      },
      kChildTimeout, "rdma_connect with 57 bytes of private data");
  EXPECT_TRUE(Passed(result));
}

// Rule: rdma_reject(3): "If the underlying RDMA transport supports private data in the reject
//   message, the specified data will be passed to the remote side"; rdma_get_cm_event(3):
//   REJECTED's status is the reason of the IB CM REJ, which for a consumer's reject is 28
//   (IBTA Vol 1 12.6.7.2); the REJ carries 148 bytes of private data.
//   librdmacm moves the QP of a rejected id to the error state (ucma_modify_qp_err on REJECTED).
// Checks: the server rejects with 148 bytes; the client gets REJECTED, status 28, with those bytes,
//   and the client's QP is then in ERROR.
TEST_F(RdmaCmTest, RejectCarriesConsumerReasonAndPrivateData) {
  const ChildResult result = RunChecksInChild(
      [&] {
        const auto rej = Pattern(42);
        CmSide server, conn, client;
        ASSERT_NO_FATAL_FAILURE(ListenAndResolve(&server, &client, RDMA_PS_TCP));
        rdma_conn_param param = {};
        ASSERT_EQ(rdma_connect(client.id.get(), &param), 0) << ErrnoName(errno);
        ASSERT_NO_FATAL_FAILURE(TakeRequest(&server, &conn));
        ASSERT_EQ(rdma_reject(conn.id.get(), rej.data(), kRejPrivateData), 0) << ErrnoName(errno);
        ASSERT_TRUE(GetCmEventWithin(client.channel.get(), RDMA_CM_EVENT_REJECTED, kReturnWindow, &client.event));
        EXPECT_EQ(client.event->status, kRejConsumerDefined);
        const rdma_conn_param& got = client.event->param.conn;
        ASSERT_GE(got.private_data_len, kRejPrivateData);
        EXPECT_EQ(std::memcmp(got.private_data, rej.data(), kRejPrivateData), 0) << "REJ private data differs";
        EXPECT_EQ(QpState(client.id->qp), IBV_QPS_ERR);
      },
      kChildTimeout, "rdma_reject with private data");
  EXPECT_TRUE(Passed(result));
}

// Rule: rdma_disconnect(3): "Disconnects a connection and transitions any associated QP to the
//   error state ... After successfully disconnecting, an RDMA_CM_EVENT_DISCONNECTED event will be
//   generated on both sides of the connection."
//   The kernel reports no private data with DISCONNECTED (cma_ib_handler sets private_data_len for
//   REQ, REP and REJ only), and librdmacm then leaves private_data NULL (ucma_copy_conn_event sets
//   it only for a length above 0).
// Checks: after the client's rdma_disconnect its QP is in ERROR at once, and both ends get
//   DISCONNECTED with private_data_len 0 and private_data NULL; the server's rdma_disconnect then
//   returns 0.
TEST_F(RdmaCmTest, DisconnectReachesBothSides) {
  const ChildResult result = RunChecksInChild(
      [&] {
        CmSide server, conn, client;
        ASSERT_NO_FATAL_FAILURE(Connect(&server, &conn, &client));
        client.event.reset();
        conn.event.reset();
        ASSERT_EQ(rdma_disconnect(client.id.get()), 0) << ErrnoName(errno);
        EXPECT_EQ(QpState(client.id->qp), IBV_QPS_ERR);
        ASSERT_TRUE(GetCmEventWithin(server.channel.get(), RDMA_CM_EVENT_DISCONNECTED, kReturnWindow, &conn.event));
        EXPECT_EQ(conn.event->id, conn.id.get());
        EXPECT_EQ(conn.event->param.conn.private_data_len, 0);
        EXPECT_EQ(conn.event->param.conn.private_data, nullptr);
        EXPECT_EQ(rdma_disconnect(conn.id.get()), 0) << ErrnoName(errno);
        ASSERT_TRUE(GetCmEventWithin(client.channel.get(), RDMA_CM_EVENT_DISCONNECTED, kReturnWindow, &client.event));
        EXPECT_EQ(client.event->id, client.id.get());
        EXPECT_EQ(client.event->param.conn.private_data_len, 0);
        EXPECT_EQ(client.event->param.conn.private_data, nullptr);
      },
      kChildTimeout, "rdma_disconnect");
  EXPECT_TRUE(Passed(result));
}

// Rule: rdma_connect(3) and rdma_accept(3): rnr_retry_count is "The maximum number of times that a send
//   operation from the remote peer should be retried on a connection after receiving a receiver not ready
//   (RNR) error": each side's value sets the other side's QP (the kernel's cm_req_handler and
//   cm_rep_handler take it from the REQ and the REP).
// Checks: a client connecting with rnr_retry_count 6 and a server accepting with 2: the client's QP has
//   rnr_retry 2 and the server's QP rnr_retry 6.
TEST_F(RdmaCmTest, EachQpRetriesRnrAsThePeerAsked) {
  const ChildResult result = RunChecksInChild(
      [&] {
        CmSide server, conn, client;
        ASSERT_NO_FATAL_FAILURE(ListenAndResolve(&server, &client, RDMA_PS_TCP));
        rdma_conn_param param = {};
        param.retry_count = 7;
        param.rnr_retry_count = 6;
        ASSERT_EQ(rdma_connect(client.id.get(), &param), 0) << "rdma_connect: " << ErrnoName(errno);
        ASSERT_NO_FATAL_FAILURE(TakeRequest(&server, &conn));
        ASSERT_NO_FATAL_FAILURE(CreateQp(&conn, IBV_QPT_RC));
        rdma_conn_param accept = {};
        accept.retry_count = 7;
        accept.rnr_retry_count = 2;
        ASSERT_EQ(rdma_accept(conn.id.get(), &accept), 0) << "rdma_accept: " << ErrnoName(errno);
        ASSERT_TRUE(GetCmEventWithin(client.channel.get(), RDMA_CM_EVENT_ESTABLISHED, kReturnWindow, &client.event));
        ASSERT_TRUE(GetCmEventWithin(server.channel.get(), RDMA_CM_EVENT_ESTABLISHED, kReturnWindow, &conn.event));
        ibv_qp_attr attr = {};
        ibv_qp_init_attr init = {};
        ASSERT_EQ(ibv_query_qp(client.id->qp, &attr, IBV_QP_RNR_RETRY, &init), 0);
        EXPECT_EQ(attr.rnr_retry, 2) << "the client's QP";
        ASSERT_EQ(ibv_query_qp(conn.id->qp, &attr, IBV_QP_RNR_RETRY, &init), 0);
        EXPECT_EQ(attr.rnr_retry, 6) << "the server's QP";
      },
      kChildTimeout, "rnr_retry_count of rdma_connect and rdma_accept");
  EXPECT_TRUE(Passed(result));
}

// Rule: rdma_get_cm_event(3): RDMA_CM_EVENT_TIMEWAIT_EXIT "The QP associated with a connection has
//   exited its timewait state and is now ready to be re-used. After a QP has been disconnected, it is
//   maintained in a timewait state to allow any in flight packets to exit the network."
// Checks: after a disconnect both ends have seen DISCONNECTED, each id that is kept gets
//   TIMEWAIT_EXIT next (within 10 s: the kernel waits about twice the packet lifetime).
TEST_F(RdmaCmTest, TimewaitExitFollowsDisconnect) {
  const ChildResult result = RunChecksInChild(
      [&] {
        CmSide server, conn, client;
        ASSERT_NO_FATAL_FAILURE(ConnectThenDisconnectClient(&server, &conn, &client));
        conn.event.reset();
        ASSERT_EQ(rdma_disconnect(conn.id.get()), 0) << ErrnoName(errno);
        ASSERT_TRUE(GetCmEventWithin(client.channel.get(), RDMA_CM_EVENT_DISCONNECTED, kReturnWindow, &client.event));
        client.event.reset();
        ASSERT_TRUE(GetCmEventWithin(client.channel.get(), RDMA_CM_EVENT_TIMEWAIT_EXIT, kTimewaitWindow, &client.event));
        EXPECT_EQ(client.event->id, client.id.get());
        EXPECT_EQ(client.event->status, 0);
        ASSERT_TRUE(GetCmEventWithin(server.channel.get(), RDMA_CM_EVENT_TIMEWAIT_EXIT, kTimewaitWindow, &conn.event));
        EXPECT_EQ(conn.event->id, conn.id.get());
        EXPECT_EQ(conn.event->status, 0);
      },
      kTimewaitChildTimeout, "TIMEWAIT_EXIT after rdma_disconnect");
  EXPECT_TRUE(Passed(result));
}

// Rule: rdma_create_qp(3): the QP is "allocated and bound to the rdma_cm_id" and rdma_cm moves
//   it through the states a connection needs; rdma_post_send(3)/rdma_post_recv(3) post on it.
// Checks: on a connection made by rdma_cm, a 64-byte SEND posted with rdma_post_send arrives
//   whole in the buffer of the server's rdma_post_recv, both completions are successful.
TEST_F(RdmaCmTest, SendArrivesOverTheConnection) {
  const ChildResult result = RunChecksInChild(
      [&] {
        CmSide server, conn, client;
        ASSERT_NO_FATAL_FAILURE(Connect(&server, &conn, &client));
        const auto sent = Pattern(17);
        std::array<uint8_t, 64> send_buf = {};
        std::array<uint8_t, 64> recv_buf = {};
        std::memcpy(send_buf.data(), sent.data(), send_buf.size());
        MrPtr send_mr(rdma_reg_msgs(client.id.get(), send_buf.data(), send_buf.size()));
        ASSERT_NE(send_mr, nullptr) << ErrnoName(errno);
        MrPtr recv_mr(rdma_reg_msgs(conn.id.get(), recv_buf.data(), recv_buf.size()));
        ASSERT_NE(recv_mr, nullptr) << ErrnoName(errno);
        ASSERT_EQ(rdma_post_recv(conn.id.get(), nullptr, recv_buf.data(), recv_buf.size(), recv_mr.get()), 0)
            << ErrnoName(errno);
        ASSERT_EQ(rdma_post_send(client.id.get(), nullptr, send_buf.data(), send_buf.size(), send_mr.get(), 0), 0)
            << ErrnoName(errno);
        ibv_wc wc = {};
        ASSERT_EQ(rdma_get_send_comp(client.id.get(), &wc), 1) << ErrnoName(errno);
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
        ASSERT_EQ(rdma_get_recv_comp(conn.id.get(), &wc), 1) << ErrnoName(errno);
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
        EXPECT_EQ(wc.byte_len, send_buf.size());
        EXPECT_EQ(recv_buf, send_buf);
      },
      kChildTimeout, "SEND over an rdma_cm connection");
  EXPECT_TRUE(Passed(result));
}

// Rule: rdma_get_cm_event(3): "All events that are reported must be acknowledged by calling
//   rdma_ack_cm_event. Destruction of an rdma_cm_id will block until related events have been
//   acknowledged."
// Checks: with ADDR_RESOLVED read and not acknowledged, rdma_destroy_id is still blocked after
//   200 ms; after rdma_ack_cm_event it returns 0 within 2 s.
TEST_F(RdmaCmTest, DestroyIdWaitsForUnackedEvent) {
  const ChildResult result = RunChecksInChild(
      [&] {
        CmSide client;
        ASSERT_NO_FATAL_FAILURE(NewSide(&client, RDMA_PS_TCP));
        sockaddr_in dst = Address(1);
        ASSERT_EQ(rdma_resolve_addr(client.id.get(), nullptr, reinterpret_cast<sockaddr*>(&dst), kResolveTimeoutMs),
                  0)
            << ErrnoName(errno);
        ASSERT_TRUE(GetCmEventWithin(client.channel.get(), RDMA_CM_EVENT_ADDR_RESOLVED, kReturnWindow, &client.event));
        rdma_cm_id* id = client.id.release();
        rdma_cm_event* event = client.event.release();
        BlockingCall destroy([id] { return rdma_destroy_id(id); });
        if (!ExpectBlocks(destroy, kBlockWindow)) return;
        if (!ExpectReturnsAfter(destroy, [event] { rdma_ack_cm_event(event); }, kReturnWindow)) return;
        EXPECT_EQ(destroy.result(), 0);
      },
      kChildTimeout, "rdma_destroy_id with an unacknowledged event");
  EXPECT_TRUE(Passed(result));
}

// Rule: rdma_bind_addr(3): "If used to bind to port 0, the rdma_cm will select an available
//   port"; a port in use cannot be bound again (rdma_cm's port spaces are like TCP's: EADDRINUSE).
// Checks: a second id binding the port the first one got fails with EADDRINUSE; once the first is
//   destroyed the port can be bound again.
TEST_F(RdmaCmTest, BindingAPortInUseIsEaddrinuse) {
  const ChildResult result = RunChecksInChild(
      [&] {
        CmSide first, second;
        uint16_t port_number = 0;
        ASSERT_NO_FATAL_FAILURE(Listen(&first, RDMA_PS_TCP, &port_number));
        ASSERT_NO_FATAL_FAILURE(NewSide(&second, RDMA_PS_TCP));
        sockaddr_in sin = Address(port_number);
        IntCall call = CaptureErrno([&] { return rdma_bind_addr(second.id.get(), reinterpret_cast<sockaddr*>(&sin)); });
        EXPECT_EQ(call.rc, -1);
        EXPECT_EQ(call.err, EADDRINUSE) << ErrnoName(call.err);
        first.id.reset();
        CmSide third;
        ASSERT_NO_FATAL_FAILURE(NewSide(&third, RDMA_PS_TCP));
        EXPECT_EQ(rdma_bind_addr(third.id.get(), reinterpret_cast<sockaddr*>(&sin)), 0) << ErrnoName(errno);
      },
      kChildTimeout, "rdma_bind_addr on a port in use");
  EXPECT_TRUE(Passed(result));
}

// Rule: rdma_listen(3) "Initiates a listen for incoming connection requests or datagram service lookup";
//   the kernel's rdma_listen binds an id that is not bound yet to the IPv4 wildcard address and a port it
//   chooses (cma.c: "if (id_priv->state == RDMA_CM_IDLE) ... rdma_bind_addr(id, cma_src_addr(id_priv))"),
//   and librdmacm then reads the address back (ucma_query_addr).
// Checks: rdma_listen on an id never bound returns 0; rdma_get_local_addr is then AF_INET, INADDR_ANY, a
//   port other than 0; a client that resolves the port's address with that port and connects is seen by the
//   listener as a CONNECT_REQUEST.
TEST_F(RdmaCmTest, ListenOnAnUnboundIdBindsTheWildcard) {
  const ChildResult result = RunChecksInChild(
      [&] {
        CmSide server, client, request;
        ASSERT_NO_FATAL_FAILURE(NewSide(&server, RDMA_PS_TCP));
        ASSERT_EQ(rdma_listen(server.id.get(), 4), 0) << "rdma_listen on an unbound id: " << ErrnoName(errno);
        const sockaddr* local = rdma_get_local_addr(server.id.get());
        ASSERT_EQ(local->sa_family, AF_INET);
        const auto* sin = reinterpret_cast<const sockaddr_in*>(local);
        EXPECT_EQ(sin->sin_addr.s_addr, htonl(INADDR_ANY));
        const uint16_t port_number = ntohs(sin->sin_port);
        ASSERT_NE(port_number, 0) << "the listener got no port";
        ASSERT_NO_FATAL_FAILURE(Resolve(&client, RDMA_PS_TCP, port_number));
        ASSERT_NO_FATAL_FAILURE(CreateQp(&client, IBV_QPT_RC));
        ASSERT_NO_FATAL_FAILURE(StartConnect(&client));
        ASSERT_NO_FATAL_FAILURE(TakeRequest(&server, &request));
      },
      kChildTimeout, "rdma_listen on an unbound id");
  EXPECT_TRUE(Passed(result));
}

// Rule: rdma_bind_addr(3) and rdma_resolve_addr(3) (which binds an unbound id to its source address); a port
//   is shared as the kernel's cma_check_port allows: an id binding a port another id has fails with
//   EADDRNOTAVAIL when either of them is bound to the wildcard address, and with EADDRINUSE when both are
//   bound to the same address.
// Checks: with the port's address bound on port P, the wildcard on P gives EADDRNOTAVAIL; with the
//   wildcard bound on port Q, the port's address on Q gives EADDRNOTAVAIL; with rdma_resolve_addr given
//   the port's address and port R as its source, an rdma_bind_addr of that address and R gives
//   EADDRINUSE; with an id resolved from no source, once ADDR_RESOLVED gave it the port's address and a
//   port S, an rdma_bind_addr of that address and S gives EADDRINUSE; with [::1] bound on port T, the
//   IPv4 wildcard on T gives EADDRNOTAVAIL. (P, Q, R and T: ports rdma_cm handed out for port 0 and
//   freed again.)
TEST_F(RdmaCmTest, PortsAreSharedAsTheKernelAllows) {
  const ChildResult result = RunChecksInChild(
      [&] {
        const auto free_port = [&] {
          CmSide probe;
          uint16_t number = 0;
          Listen(&probe, RDMA_PS_TCP, &number);
          return number;
        };
        const auto bind = [](CmSide* side, sockaddr_in sin) {
          return CaptureErrno([&] { return rdma_bind_addr(side->id.get(), reinterpret_cast<sockaddr*>(&sin)); });
        };
        sockaddr_in any = {};
        any.sin_family = AF_INET;
        {
          const uint16_t p = free_port();
          ASSERT_NE(p, 0);
          CmSide specific, wildcard;
          ASSERT_NO_FATAL_FAILURE(NewSide(&specific, RDMA_PS_TCP));
          ASSERT_NO_FATAL_FAILURE(NewSide(&wildcard, RDMA_PS_TCP));
          ASSERT_EQ(bind(&specific, Address(p)).rc, 0) << ErrnoName(errno);
          any.sin_port = htons(p);
          EXPECT_THAT(bind(&wildcard, any), FailsWithErrno(EADDRNOTAVAIL)) << "the wildcard after an address";
        }
        {
          const uint16_t q = free_port();
          ASSERT_NE(q, 0);
          CmSide wildcard, specific;
          ASSERT_NO_FATAL_FAILURE(NewSide(&wildcard, RDMA_PS_TCP));
          ASSERT_NO_FATAL_FAILURE(NewSide(&specific, RDMA_PS_TCP));
          any.sin_port = htons(q);
          ASSERT_EQ(bind(&wildcard, any).rc, 0) << ErrnoName(errno);
          EXPECT_THAT(bind(&specific, Address(q)), FailsWithErrno(EADDRNOTAVAIL)) << "an address after the wildcard";
        }
        {
          const uint16_t r = free_port();
          ASSERT_NE(r, 0);
          CmSide resolved, bound;
          ASSERT_NO_FATAL_FAILURE(NewSide(&resolved, RDMA_PS_TCP));
          ASSERT_NO_FATAL_FAILURE(NewSide(&bound, RDMA_PS_TCP));
          sockaddr_in src = Address(r);
          sockaddr_in dst = Address(free_port());
          ASSERT_EQ(rdma_resolve_addr(resolved.id.get(), reinterpret_cast<sockaddr*>(&src),
                                      reinterpret_cast<sockaddr*>(&dst), kResolveTimeoutMs),
                    0)
              << "rdma_resolve_addr: " << ErrnoName(errno);
          EXPECT_THAT(bind(&bound, Address(r)), FailsWithErrno(EADDRINUSE)) << "the source port of a resolved id";
        }
        {
          CmSide resolved, bound;
          ASSERT_NO_FATAL_FAILURE(NewSide(&resolved, RDMA_PS_TCP));
          ASSERT_NO_FATAL_FAILURE(NewSide(&bound, RDMA_PS_TCP));
          sockaddr_in dst = Address(free_port());
          ASSERT_EQ(rdma_resolve_addr(resolved.id.get(), nullptr, reinterpret_cast<sockaddr*>(&dst), kResolveTimeoutMs),
                    0)
              << "rdma_resolve_addr: " << ErrnoName(errno);
          ASSERT_TRUE(GetCmEventWithin(resolved.channel.get(), RDMA_CM_EVENT_ADDR_RESOLVED, kReturnWindow,
                                       &resolved.event));
          const uint16_t s = ntohs(rdma_get_src_port(resolved.id.get()));
          ASSERT_NE(s, 0) << "a resolved id without a source port";
          EXPECT_THAT(bind(&bound, Address(s)), FailsWithErrno(EADDRINUSE)) << "the port of an id resolved from no source";
        }
        {
          const uint16_t t = free_port();
          ASSERT_NE(t, 0);
          CmSide loopback6, wildcard;
          ASSERT_NO_FATAL_FAILURE(NewSide(&loopback6, RDMA_PS_TCP));
          ASSERT_NO_FATAL_FAILURE(NewSide(&wildcard, RDMA_PS_TCP));
          sockaddr_in6 six = {};
          six.sin6_family = AF_INET6;
          six.sin6_addr = in6addr_loopback;
          six.sin6_port = htons(t);
          ASSERT_EQ(rdma_bind_addr(loopback6.id.get(), reinterpret_cast<sockaddr*>(&six)), 0)
              << "rdma_bind_addr [::1]: " << ErrnoName(errno);
          any.sin_port = htons(t);
          EXPECT_THAT(bind(&wildcard, any), FailsWithErrno(EADDRNOTAVAIL)) << "the IPv4 wildcard after [::1]";
        }
      },
      kChildTimeout, "rdma_bind_addr and rdma_resolve_addr on ports in use");
  EXPECT_TRUE(Passed(result));
}

// Rule: rdma_connect(3): "For an rdma_cm_id of type RDMA_PS_UDP, it initiates a lookup of the
//   remote QP providing the datagram service"; rdma_get_cm_event(3), UD EVENT DATA: ESTABLISHED
//   gives "qp_num ... The QP number of the remote endpoint" and its qkey; rdma_cm's UD QPs use
//   RDMA_UDP_QKEY.
// Checks: after the server accepts the lookup, the client's ESTABLISHED names the server's QP
//   number and qkey RDMA_UDP_QKEY, and a datagram sent with the address handle made from the
//   event's ah_attr arrives in the server's receive buffer.
TEST_F(RdmaCmTest, UdLookupGivesTheRemoteQpAndQkey) {
  const ChildResult result = RunChecksInChild(
      [&] {
        CmSide server, conn, client;
        ASSERT_NO_FATAL_FAILURE(ListenAndResolve(&server, &client, RDMA_PS_UDP));
        rdma_conn_param param = {};
        ASSERT_EQ(rdma_connect(client.id.get(), &param), 0) << ErrnoName(errno);
        ASSERT_NO_FATAL_FAILURE(TakeRequest(&server, &conn));
        ASSERT_NO_FATAL_FAILURE(CreateQp(&conn, IBV_QPT_UD));
        std::array<uint8_t, kGrhBytes + 64> recv_buf = {};
        MrPtr recv_mr(rdma_reg_msgs(conn.id.get(), recv_buf.data(), recv_buf.size()));
        ASSERT_NE(recv_mr, nullptr) << ErrnoName(errno);
        ASSERT_EQ(rdma_post_recv(conn.id.get(), nullptr, recv_buf.data(), recv_buf.size(), recv_mr.get()), 0)
            << ErrnoName(errno);
        rdma_conn_param accept = {};
        accept.qp_num = conn.id->qp->qp_num;
        ASSERT_EQ(rdma_accept(conn.id.get(), &accept), 0) << ErrnoName(errno);
        ASSERT_TRUE(GetCmEventWithin(client.channel.get(), RDMA_CM_EVENT_ESTABLISHED, kReturnWindow, &client.event));
        const rdma_ud_param ud = client.event->param.ud;
        EXPECT_EQ(ud.qp_num, conn.id->qp->qp_num);
        EXPECT_EQ(ud.qkey, RDMA_UDP_QKEY);
        AhPtr ah(ibv_create_ah(client.pd.get(), const_cast<ibv_ah_attr*>(&ud.ah_attr)));
        ASSERT_NE(ah, nullptr) << "ibv_create_ah from the event's ah_attr: " << ErrnoName(errno);
        const auto sent = Pattern(77);
        std::array<uint8_t, 64> send_buf = {};
        std::memcpy(send_buf.data(), sent.data(), send_buf.size());
        MrPtr send_mr(rdma_reg_msgs(client.id.get(), send_buf.data(), send_buf.size()));
        ASSERT_NE(send_mr, nullptr) << ErrnoName(errno);
        ASSERT_EQ(rdma_post_ud_send(client.id.get(), nullptr, send_buf.data(), send_buf.size(), send_mr.get(), 0,
                                    ah.get(), ud.qp_num),
                  0)
            << ErrnoName(errno);
        ibv_wc wc = {};
        ASSERT_EQ(rdma_get_send_comp(client.id.get(), &wc), 1) << ErrnoName(errno);
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
        ASSERT_EQ(rdma_get_recv_comp(conn.id.get(), &wc), 1) << ErrnoName(errno);
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
        EXPECT_EQ(wc.byte_len, kGrhBytes + send_buf.size());
        EXPECT_EQ(std::memcmp(recv_buf.data() + kGrhBytes, send_buf.data(), send_buf.size()), 0) << "datagram differs";
      },
      kChildTimeout, "RDMA_PS_UDP lookup and a datagram");
  EXPECT_TRUE(Passed(result));
}

// Rule: rdma_reject(3) on an RDMA_PS_UDP id answers the lookup with a SIDR REP whose status is
//   "rejected" (IBTA Vol 1 12.11.2, status 2; the kernel's cma_send_sidr_rep(IB_SIDR_REJECT));
//   rdma_get_cm_event(3): UNREACHABLE "the remote server is not reachable or unable to respond",
//   and the kernel reports the SIDR status as the event's status (cma_sidr_rep_handler).
// Checks: the server rejects the client's lookup; the client gets UNREACHABLE with status 2.
TEST_F(RdmaCmTest, UdLookupRejectedGivesUnreachableWithSidrStatus) {
  const ChildResult result = RunChecksInChild(
      [&] {
        CmSide server, conn, client;
        ASSERT_NO_FATAL_FAILURE(ListenAndResolve(&server, &client, RDMA_PS_UDP));
        rdma_conn_param param = {};
        ASSERT_EQ(rdma_connect(client.id.get(), &param), 0) << ErrnoName(errno);
        ASSERT_NO_FATAL_FAILURE(TakeRequest(&server, &conn));
        ASSERT_EQ(rdma_reject(conn.id.get(), nullptr, 0), 0) << ErrnoName(errno);
        ASSERT_TRUE(GetCmEventWithin(client.channel.get(), RDMA_CM_EVENT_UNREACHABLE, kReturnWindow, &client.event));
        EXPECT_EQ(client.event->status, kSidrReject);
      },
      kChildTimeout, "rdma_reject of an RDMA_PS_UDP lookup");
  EXPECT_TRUE(Passed(result));
}

// Rule: rdma_destroy_id(3) of an id whose lookup (RDMA_PS_UDP) was never answered: the IB CM answers it
//   with a SIDR REP whose status is "rejected" (the kernel's cm_destroy_id in IB_CM_SIDR_REQ_RCVD:
//   cm_reject_sidr_req(IB_SIDR_REJECT)), which the client gets as UNREACHABLE with status 2; a UD QP has
//   no connection to break.
// Checks: the server destroys the id of the client's lookup without answering; the client gets
//   UNREACHABLE with status 2, and its UD QP stays in RTS.
TEST_F(RdmaCmTest, UdLookupOfADestroyedIdGivesUnreachableWithSidrStatus) {
  const ChildResult result = RunChecksInChild(
      [&] {
        CmSide server, conn, client;
        ASSERT_NO_FATAL_FAILURE(ListenAndResolve(&server, &client, RDMA_PS_UDP));
        rdma_conn_param param = {};
        ASSERT_EQ(rdma_connect(client.id.get(), &param), 0) << ErrnoName(errno);
        ASSERT_NO_FATAL_FAILURE(TakeRequest(&server, &conn));
        conn.id.reset();
        ASSERT_TRUE(GetCmEventWithin(client.channel.get(), RDMA_CM_EVENT_UNREACHABLE, kReturnWindow, &client.event));
        EXPECT_EQ(client.event->status, kSidrReject);
        ibv_qp_attr attr = {};
        ibv_qp_init_attr init = {};
        ASSERT_EQ(ibv_query_qp(client.id->qp, &attr, IBV_QP_STATE, &init), 0);
        EXPECT_EQ(attr.qp_state, IBV_QPS_RTS);
      },
      kChildTimeout, "rdma_destroy_id of an unanswered RDMA_PS_UDP lookup");
  EXPECT_TRUE(Passed(result));
}

// Rule: rdma_destroy_id(3) of an id whose connection request is unanswered: the IB CM withdraws the
//   request (the kernel's cm_destroy_id in IB_CM_REQ_SENT sends a REJ), which resets the listener side's
//   CM id (cm_rej_handler: cm_reset_to_idle); the request's id then takes no answer: rdma_create_qp
//   (librdmacm asks for the QP's INIT attributes: ib_cm_init_qp_attr), rdma_accept and rdma_reject fail
//   with EINVAL. Measured on rxe 6.1: so, and no event reaches the listener's channel within 20 s.
// Checks: the client destroys its id once the server holds the request; rdma_create_qp on the request's
//   id fails with EINVAL within the return window (tried again until it does: the REJ travels), then
//   rdma_accept and rdma_reject fail with EINVAL, and the server's channel stays quiet.
TEST_F(RdmaCmTest, RequestWithdrawnByItsRequesterTakesNoAnswer) {
  const ChildResult result = RunChecksInChild(
      [&] {
        CmSide server, conn, client;
        ASSERT_NO_FATAL_FAILURE(ListenAndResolve(&server, &client, RDMA_PS_TCP));
        ASSERT_NO_FATAL_FAILURE(StartConnect(&client));
        ASSERT_NO_FATAL_FAILURE(TakeRequest(&server, &conn));
        client.id.reset();
        conn.pd.reset(ibv_alloc_pd(conn.id->verbs));
        ASSERT_NE(conn.pd, nullptr) << "ibv_alloc_pd: " << ErrnoName(errno);
        // Fresh attributes each time: rdma_create_qp writes the CQs it made into them, and
        // rdma_destroy_qp destroys those.
        const auto create_qp = [&] {
          ibv_qp_init_attr attr = {};
          attr.qp_type = IBV_QPT_RC;
          attr.cap.max_send_wr = attr.cap.max_recv_wr = 4;
          attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
          return rdma_create_qp(conn.id.get(), conn.pd.get(), &attr);
        };
        const auto deadline = std::chrono::steady_clock::now() + kReturnWindow;
        int rc = 0;
        while ((rc = create_qp()) == 0 && std::chrono::steady_clock::now() < deadline) {
          rdma_destroy_qp(conn.id.get());  // (the REJ is not here yet)
        }
        const int err = errno;
        ASSERT_EQ(rc, -1) << "rdma_create_qp still succeeds " << kReturnWindow.count()
                          << " ms after the requester destroyed its id";
        EXPECT_EQ(err, EINVAL) << ErrnoName(err);
        rdma_conn_param param = {};
        EXPECT_THAT(CaptureErrno([&] { return rdma_accept(conn.id.get(), &param); }), FailsWithErrno(EINVAL));
        EXPECT_THAT(CaptureErrno([&] { return rdma_reject(conn.id.get(), nullptr, 0); }), FailsWithErrno(EINVAL));
        EXPECT_TRUE(NoCmEventWithin(server.channel.get(), kQuietWindow)) << "the listener got an event";
      },
      kChildTimeout, "a connection request withdrawn by its requester");
  EXPECT_TRUE(Passed(result));
}

// Rule: the IB CM answers a SIDR REQ for a service ID nobody listens on with status 1, "service ID
//   not supported" (IBTA Vol 1 12.11.2; the kernel's cm_sidr_req_handler); rdma_cm reports it as
//   UNREACHABLE with that status.
// Checks: an RDMA_PS_UDP rdma_connect to a port nobody listens on gives UNREACHABLE, status 1.
TEST_F(RdmaCmTest, UdLookupWithoutListenerGivesUnreachableWithSidrStatus) {
  const ChildResult result = RunChecksInChild(
      [&] {
        CmSide client;
        ASSERT_NO_FATAL_FAILURE(ConnectWithoutListener(&client, RDMA_PS_UDP));
        ASSERT_TRUE(GetCmEventWithin(client.channel.get(), RDMA_CM_EVENT_UNREACHABLE, kReturnWindow, &client.event));
        EXPECT_EQ(client.event->status, kSidrUnsupported);
      },
      kChildTimeout, "RDMA_PS_UDP rdma_connect to a port with no listener");
  EXPECT_TRUE(Passed(result));
}

// Rule: rdma_set_option(3): RDMA_OPTION_ID_ACK_TIMEOUT "QP ACK timeout. The value calculated according
//   to the formula 4.096 * 2^(ack_timeout) usec"; rdma_cm applies it when it moves the id's QP to RTS.
// Checks: with ACK_TIMEOUT 21 set on the client id before rdma_connect, its QP's timeout
//   (ibv_query_qp IBV_QP_TIMEOUT) is 21 once ESTABLISHED.
TEST_F(RdmaCmTest, AckTimeoutOptionSetsTheQpTimeout) {
  const ChildResult result = RunChecksInChild(
      [&] {
        CmSide server, conn, client;
        ASSERT_NO_FATAL_FAILURE(ListenAndResolve(&server, &client, RDMA_PS_TCP));
        uint8_t timeout = 21;
        ASSERT_EQ(rdma_set_option(client.id.get(), RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &timeout,
                                  sizeof timeout),
                  0)
            << ErrnoName(errno);
        rdma_conn_param param = {};
        ASSERT_EQ(rdma_connect(client.id.get(), &param), 0) << ErrnoName(errno);
        ASSERT_NO_FATAL_FAILURE(TakeRequest(&server, &conn));
        ASSERT_NO_FATAL_FAILURE(CreateQp(&conn, IBV_QPT_RC));
        rdma_conn_param accept = {};
        ASSERT_EQ(rdma_accept(conn.id.get(), &accept), 0) << ErrnoName(errno);
        ASSERT_TRUE(GetCmEventWithin(client.channel.get(), RDMA_CM_EVENT_ESTABLISHED, kReturnWindow, &client.event));
        ibv_qp_attr attr = {};
        ibv_qp_init_attr init = {};
        ASSERT_EQ(ibv_query_qp(client.id->qp, &attr, IBV_QP_TIMEOUT, &init), 0);
        EXPECT_EQ(attr.timeout, 21);
        ASSERT_TRUE(GetCmEventWithin(server.channel.get(), RDMA_CM_EVENT_ESTABLISHED, kReturnWindow, &conn.event));
      },
      kChildTimeout, "RDMA_OPTION_ID_ACK_TIMEOUT");
  EXPECT_TRUE(Passed(result));
}

// Rule: rdma_establish(3): "Complete an active connection request. If a QP has not been created on
//   the rdma_cm_id, this function should be called by the active side to complete the connection,
//   after getting connect response event. This will trigger a connection established event on
//   the passive side"; rdma_get_cm_event(3): CONNECT_RESPONSE "is only generated on rdma_cm_id's
//   that do not have a QP associated with them".
// Checks: a client whose QP is its own (not rdma_create_qp's) gets CONNECT_RESPONSE; after it moves
//   the QP to RTS with rdma_init_qp_attr's attributes and calls rdma_establish, the server gets
//   ESTABLISHED and the client no further event.
TEST_F(RdmaCmTest, EstablishCompletesAConnectionWithTheProgramsQp) {
  const ChildResult result = RunChecksInChild(
      [&] {
        CmSide server, conn, client;
        uint16_t port_number = 0;
        ASSERT_NO_FATAL_FAILURE(Listen(&server, RDMA_PS_TCP, &port_number));
        ASSERT_NO_FATAL_FAILURE(Resolve(&client, RDMA_PS_TCP, port_number));
        client.pd.reset(ibv_alloc_pd(client.id->verbs));
        ASSERT_NE(client.pd, nullptr) << ErrnoName(errno);
        CqPtr cq(ibv_create_cq(client.id->verbs, 4, nullptr, nullptr, 0));
        ASSERT_NE(cq, nullptr) << ErrnoName(errno);
        ibv_qp_init_attr init = {};
        init.qp_type = IBV_QPT_RC;
        init.send_cq = cq.get();
        init.recv_cq = cq.get();
        init.cap.max_send_wr = init.cap.max_recv_wr = 4;
        init.cap.max_send_sge = init.cap.max_recv_sge = 1;
        QpPtr qp(ibv_create_qp(client.pd.get(), &init));
        ASSERT_NE(qp, nullptr) << ErrnoName(errno);
        rdma_conn_param param = {};
        param.qp_num = qp->qp_num;
        ASSERT_EQ(rdma_connect(client.id.get(), &param), 0) << ErrnoName(errno);
        ASSERT_NO_FATAL_FAILURE(TakeRequest(&server, &conn));
        ASSERT_NO_FATAL_FAILURE(CreateQp(&conn, IBV_QPT_RC));
        rdma_conn_param accept = {};
        ASSERT_EQ(rdma_accept(conn.id.get(), &accept), 0) << ErrnoName(errno);
        ASSERT_TRUE(
            GetCmEventWithin(client.channel.get(), RDMA_CM_EVENT_CONNECT_RESPONSE, kReturnWindow, &client.event));
        client.event.reset();
        for (ibv_qp_state state : {IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS}) {
          ibv_qp_attr attr = {};
          attr.qp_state = state;
          int mask = 0;
          ASSERT_EQ(rdma_init_qp_attr(client.id.get(), &attr, &mask), 0) << ErrnoName(errno);
          ASSERT_EQ(ibv_modify_qp(qp.get(), &attr, mask), 0) << "to state " << state;
        }
        ASSERT_EQ(rdma_establish(client.id.get()), 0) << ErrnoName(errno);
        ASSERT_TRUE(GetCmEventWithin(server.channel.get(), RDMA_CM_EVENT_ESTABLISHED, kReturnWindow, &conn.event));
        EXPECT_TRUE(NoCmEventWithin(client.channel.get(), kQuietWindow));
        // The connection ends before the QP it uses goes.
        EXPECT_EQ(rdma_disconnect(client.id.get()), 0) << ErrnoName(errno);
        client.id.reset();
      },
      kChildTimeout, "rdma_establish with the program's QP");
  EXPECT_TRUE(Passed(result));
}

// Rule: rdma_join_multicast(3): "Joins a multicast group and attaches an associated QP to the
//   group"; the MULTICAST_JOIN event's UD data (rdma_get_cm_event(3)) gives the address handle,
//   QPN and qkey to send to the group with; a datagram sent to a group reaches every QP attached
//   to it (IBTA Vol 1 10.5), here one in another process.
// Checks: a process joins 230.1.2.3 and posts a receive; this one joins too and sends 64 bytes to the
//   group with the event's ah_attr, QPN 0xffffff and qkey; the other process receives them intact.
TEST_F(RdmaCmTest, MulticastDatagramReachesAMemberInAnotherProcess) {
  const ChildResult result = RunChecksInChild(
      [&] {
        sockaddr_in group = {};
        group.sin_family = AF_INET;
        group.sin_addr.s_addr = htonl(0xe6010203);  // 230.1.2.3
        const auto sent = Pattern(23);
        Pipe ready, done;
        ASSERT_GE(ready.fds[0], 0) << ErrnoName(errno);
        ASSERT_GE(done.fds[0], 0) << ErrnoName(errno);
        const pid_t member_pid = fork();
        ASSERT_GE(member_pid, 0) << ErrnoName(errno);
        if (member_pid == 0) {
          // The other member: join, post a receive, say so, report what arrived.
          CmSide member;
          JoinGroup(&member, &group);
          if (!member.id || !member.id->qp) _exit(1);
          std::array<uint8_t, kGrhBytes + 64> recv_buf = {};
          MrPtr mr(rdma_reg_msgs(member.id.get(), recv_buf.data(), recv_buf.size()));
          if (!mr || rdma_post_recv(member.id.get(), nullptr, recv_buf.data(), recv_buf.size(), mr.get()) != 0) {
            _exit(2);
          }
          const char go = 1;
          if (write(ready.fds[1], &go, 1) != 1) _exit(3);
          ibv_wc wc = {};
          char verdict = 'x';
          if (rdma_get_recv_comp(member.id.get(), &wc) == 1 && wc.status == IBV_WC_SUCCESS) {
            verdict = wc.byte_len == recv_buf.size() && std::memcmp(recv_buf.data() + kGrhBytes, sent.data(), 64) == 0 ? 'y'
                                                                                                                 : 'n';
          }
          if (write(done.fds[1], &verdict, 1) != 1) _exit(4);
          for (;;) pause();
        }
        char go = 0;
        const bool member_ready = WaitReadable(ready.fds[0], kReturnWindow) && read(ready.fds[0], &go, 1) == 1;
        CmSide sender;
        if (member_ready) JoinGroup(&sender, &group);
        char verdict = 0;
        if (sender.event) {
          const rdma_ud_param ud = sender.event->param.ud;
          EXPECT_EQ(ud.qp_num, kMulticastQpn);
          AhPtr ah(ibv_create_ah(sender.pd.get(), const_cast<ibv_ah_attr*>(&ud.ah_attr)));
          EXPECT_NE(ah, nullptr) << "ibv_create_ah from MULTICAST_JOIN's ah_attr: " << ErrnoName(errno);
          std::array<uint8_t, 64> send_buf = {};
          std::memcpy(send_buf.data(), sent.data(), send_buf.size());
          MrPtr mr(rdma_reg_msgs(sender.id.get(), send_buf.data(), send_buf.size()));
          EXPECT_NE(mr, nullptr) << ErrnoName(errno);
          if (ah && mr) {
            ibv_sge sge = {reinterpret_cast<uintptr_t>(send_buf.data()), static_cast<uint32_t>(send_buf.size()),
                           mr->lkey};
            ibv_send_wr wr = {};
            wr.sg_list = &sge;
            wr.num_sge = 1;
            wr.opcode = IBV_WR_SEND;
            wr.send_flags = IBV_SEND_SIGNALED;
            wr.wr.ud.ah = ah.get();
            wr.wr.ud.remote_qpn = ud.qp_num;
            wr.wr.ud.remote_qkey = ud.qkey;
            ibv_send_wr* bad = nullptr;
            EXPECT_EQ(ibv_post_send(sender.id->qp, &wr, &bad), 0);
            ibv_wc wc = {};
            EXPECT_EQ(rdma_get_send_comp(sender.id.get(), &wc), 1) << ErrnoName(errno);
            EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
          }
          if (!WaitReadable(done.fds[0], kReturnWindow) || read(done.fds[0], &verdict, 1) != 1) verdict = 0;
        }
        kill(member_pid, SIGKILL);
        waitpid(member_pid, nullptr, 0);
        ASSERT_TRUE(member_ready) << "the member process never joined";
        ASSERT_NE(sender.event, nullptr) << "this process could not join";
        EXPECT_EQ(verdict, 'y') << (verdict == 0 ? "nothing arrived at the member within 2 s"
                                                 : "the member received a failed or different datagram");
      },
      kChildTimeout, "rdma_cm multicast between two processes");
  EXPECT_TRUE(Passed(result));
}

// Rule: a connection whose peer process dies ends: the kernel's rdma_cm destroys the dead
//   process's ids and sends a DREQ, so the survivor gets RDMA_CM_EVENT_DISCONNECTED
//   (rdma_get_cm_event(3): "The connection has been disconnected").
// Checks: a server in a child process accepts, then is killed with SIGKILL; the client gets
//   DISCONNECTED within 2 s.
TEST_F(RdmaCmTest, PeerKilledGivesDisconnected) {
  const ChildResult result = RunChecksInChild(
      [&] {
        Pipe ready;
        ASSERT_GE(ready.fds[0], 0) << ErrnoName(errno);
        const pid_t server_pid = fork();
        ASSERT_GE(server_pid, 0) << ErrnoName(errno);
        if (server_pid == 0) {
          // The server: listen, say the port, accept, wait to be killed.
          CmSide server, conn;
          uint16_t port_number = 0;
          Listen(&server, RDMA_PS_TCP, &port_number);
          if (port_number == 0 || write(ready.fds[1], &port_number, sizeof port_number) != sizeof port_number) _exit(1);
          if (!GetCmEventWithin(server.channel.get(), RDMA_CM_EVENT_CONNECT_REQUEST, kChildTimeout, &server.event)) {
            _exit(2);
          }
          conn.id.reset(server.event->id);
          server.event.reset();
          CreateQp(&conn, IBV_QPT_RC);
          rdma_conn_param accept = {};
          if (rdma_accept(conn.id.get(), &accept) != 0) _exit(3);
          for (;;) pause();
        }
        uint16_t port_number = 0;
        const bool got_port = WaitReadable(ready.fds[0], kReturnWindow) &&
                              read(ready.fds[0], &port_number, sizeof port_number) == sizeof port_number;
        CmSide client;
        if (got_port) {
          Resolve(&client, RDMA_PS_TCP, port_number);
          if (client.id && client.id->verbs) CreateQp(&client, IBV_QPT_RC);
        }
        bool established = false;
        if (client.id && client.id->qp) {
          rdma_conn_param param = {};
          EXPECT_EQ(rdma_connect(client.id.get(), &param), 0) << ErrnoName(errno);
          established =
              GetCmEventWithin(client.channel.get(), RDMA_CM_EVENT_ESTABLISHED, kReturnWindow, &client.event);
          EXPECT_TRUE(established) << "the server in the child never accepted";
          client.event.reset();
        }
        kill(server_pid, SIGKILL);
        waitpid(server_pid, nullptr, 0);
        ASSERT_TRUE(got_port) << "the server in the child never said its port";
        if (!established) return;
        EXPECT_TRUE(GetCmEventWithin(client.channel.get(), RDMA_CM_EVENT_DISCONNECTED, kReturnWindow, &client.event));
      },
      kChildTimeout, "a peer killed while connected");
  EXPECT_TRUE(Passed(result));
}

// Rule: rdma_connect(3) and rdma_accept(3) take conn_param NULL when the id has a QP; librdmacm then
//   uses the device's limits: rdma_connect asks for max_qp_init_rd_atom and max_qp_rd_atom, rdma_accept
//   grants what the request offered within them (cma.c: rdma_connect, rdma_accept), so RDMA READ works.
// Checks: connected with rdma_connect(id, NULL) and rdma_accept(id, NULL), both QPs have
//   max_rd_atomic >= 1 and max_dest_rd_atomic >= 1, and a 64-byte RDMA READ of the server's buffer
//   completes successfully with its bytes.
TEST_F(RdmaCmTest, NullConnectionParamsAllowRdmaRead) {
  const ChildResult result = RunChecksInChild(
      [&] {
        CmSide server, conn, client;
        ASSERT_NO_FATAL_FAILURE(ListenAndResolve(&server, &client, RDMA_PS_TCP));
        ASSERT_EQ(rdma_connect(client.id.get(), nullptr), 0) << ErrnoName(errno);
        ASSERT_NO_FATAL_FAILURE(TakeRequest(&server, &conn));
        ASSERT_NO_FATAL_FAILURE(CreateQp(&conn, IBV_QPT_RC));
        ASSERT_EQ(rdma_accept(conn.id.get(), nullptr), 0) << ErrnoName(errno);
        ASSERT_TRUE(GetCmEventWithin(client.channel.get(), RDMA_CM_EVENT_ESTABLISHED, kReturnWindow, &client.event));
        ASSERT_TRUE(GetCmEventWithin(server.channel.get(), RDMA_CM_EVENT_ESTABLISHED, kReturnWindow, &conn.event));
        for (rdma_cm_id* id : {client.id.get(), conn.id.get()}) {
          ibv_qp_attr attr = {};
          ibv_qp_init_attr init = {};
          ASSERT_EQ(ibv_query_qp(id->qp, &attr, IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC, &init), 0);
          EXPECT_GE(attr.max_rd_atomic, 1) << (id == client.id.get() ? "client" : "server");
          EXPECT_GE(attr.max_dest_rd_atomic, 1) << (id == client.id.get() ? "client" : "server");
        }
        const auto served = Pattern(31);
        std::array<uint8_t, 64> remote = {};
        std::memcpy(remote.data(), served.data(), remote.size());
        std::array<uint8_t, 64> local = {};
        MrPtr remote_mr(rdma_reg_read(conn.id.get(), remote.data(), remote.size()));
        ASSERT_NE(remote_mr, nullptr) << ErrnoName(errno);
        MrPtr local_mr(rdma_reg_msgs(client.id.get(), local.data(), local.size()));
        ASSERT_NE(local_mr, nullptr) << ErrnoName(errno);
        ASSERT_EQ(rdma_post_read(client.id.get(), nullptr, local.data(), local.size(), local_mr.get(), 0,
                                 reinterpret_cast<uintptr_t>(remote.data()), remote_mr->rkey),
                  0)
            << ErrnoName(errno);
        ibv_wc wc = {};
        ASSERT_EQ(rdma_get_send_comp(client.id.get(), &wc), 1) << ErrnoName(errno);
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
        EXPECT_EQ(local, remote);
      },
      kChildTimeout, "rdma_connect and rdma_accept with NULL conn_param");
  EXPECT_TRUE(Passed(result));
}

// Rule: rdma_connect(3): responder_resources "must be less than or equal to the local RDMA device
//   attribute max_qp_rd_atom" (RDMA_MAX_RESP_RES asks for the maximum); librdmacm refuses more with
//   EINVAL (cma.c: ucma_valid_param).
// Checks: rdma_connect with responder_resources max_qp_rd_atom + 1 returns -1 with errno EINVAL; the
//   same id then connects with max_qp_rd_atom (the server gets its CONNECT_REQUEST).
TEST_F(RdmaCmTest, ConnectWithReadDepthAboveTheDeviceIsEinval) {
  SKIP_IF(device_attr().max_qp_rd_atom >= 254) << "(max_qp_rd_atom + 1 would be RDMA_MAX_RESP_RES)";
  const ChildResult result = RunChecksInChild(
      [&] {
        CmSide server, client, request;
        ASSERT_NO_FATAL_FAILURE(ListenAndResolve(&server, &client, RDMA_PS_TCP));
        rdma_conn_param param = {};
        param.responder_resources = static_cast<uint8_t>(device_attr().max_qp_rd_atom + 1);
        IntCall call = CaptureErrno([&] { return rdma_connect(client.id.get(), &param); });
        EXPECT_EQ(call.rc, -1);
        EXPECT_EQ(call.err, EINVAL) << ErrnoName(call.err);
        param.responder_resources = static_cast<uint8_t>(device_attr().max_qp_rd_atom);
        ASSERT_EQ(rdma_connect(client.id.get(), &param), 0) << ErrnoName(errno);
        ASSERT_NO_FATAL_FAILURE(TakeRequest(&server, &request));
        rdma_reject(request.id.get(), nullptr, 0);
      },
      kChildTimeout, "rdma_connect asking for more RDMA READ depth than the device has");
  EXPECT_TRUE(Passed(result));
}

// Rule: rdma_get_cm_event(3): every reported event "must be acknowledged"; librdmacm counts a
//   CONNECT_REQUEST against the listening id (ucma_process_conn_req keeps evt->id_priv the listener),
//   so "Destruction of an rdma_cm_id will block until related events have been acknowledged" holds
//   for the listener, not the new id; the IB CM rejects the request of a destroyed id
//   (cm.c: cm_destroy_id in REQ_RCVD sends a REJ, consumer defined).
// Checks: with the CONNECT_REQUEST read and not acknowledged, rdma_destroy_id of its new id returns 0
//   within the return window, and the client gets REJECTED with status 28.
TEST_F(RdmaCmTest, NewIdDestroyedBeforeTheAckRejectsTheRequest) {
  const ChildResult result = RunChecksInChild(
      [&] {
        CmSide server, client;
        ASSERT_NO_FATAL_FAILURE(ListenAndResolve(&server, &client, RDMA_PS_TCP));
        ASSERT_NO_FATAL_FAILURE(StartConnect(&client));
        ASSERT_TRUE(GetCmEventWithin(server.channel.get(), RDMA_CM_EVENT_CONNECT_REQUEST, kReturnWindow,
                                     &server.event));
        rdma_cm_id* fresh = server.event->id;
        BlockingCall destroy([fresh] { return rdma_destroy_id(fresh); });
        if (!ExpectReturnsWithin(destroy, kReturnWindow)) return;
        EXPECT_EQ(destroy.result(), 0);
        server.event.reset();
        ASSERT_TRUE(GetCmEventWithin(client.channel.get(), RDMA_CM_EVENT_REJECTED, kReturnWindow, &client.event));
        EXPECT_EQ(client.event->status, kRejConsumerDefined);
      },
      kChildTimeout, "rdma_destroy_id of a new id before its CONNECT_REQUEST is acked");
  EXPECT_TRUE(Passed(result));
}

// Rule: the kernel's ucma_destroy_id destroys, with the listener, the new id of every CONNECT_REQUEST
//   not read yet (ucma_cleanup_ctx_events), and the IB CM rejects their requests (cm_destroy_id in
//   REQ_RCVD); rdma_destroy_id(3): the id's unread events go with it.
// Checks: a listener is destroyed while a client's CONNECT_REQUEST is queued unread: rdma_destroy_id
//   returns 0, the server's channel then has no event, and the client gets REJECTED with status 28.
TEST_F(RdmaCmTest, ListenerDestroyedWithAnUnreadRequestRejectsIt) {
  const ChildResult result = RunChecksInChild(
      [&] {
        CmSide server, client;
        ASSERT_NO_FATAL_FAILURE(QueueUnreadRequest(&server, &client));
        EXPECT_EQ(rdma_destroy_id(server.id.release()), 0) << ErrnoName(errno);
        EXPECT_TRUE(NoCmEventWithin(server.channel.get(), kQuietWindow)) << "an event of the destroyed listener";
        ASSERT_TRUE(GetCmEventWithin(client.channel.get(), RDMA_CM_EVENT_REJECTED, kReturnWindow, &client.event));
        EXPECT_EQ(client.event->status, kRejConsumerDefined);
      },
      kChildTimeout, "rdma_destroy_id of a listener with an unread CONNECT_REQUEST");
  EXPECT_TRUE(Passed(result));
}

// Rule: the kernel's rdma_disconnect fails only for an id that never had a connection (EINVAL without
//   an IB CM id); otherwise it moves the QP to the error state, tries a DREQ and then a DREP, and
//   returns 0 even when the IB CM refuses both (drivers/infiniband/core/cma.c: rdma_disconnect).
// Checks: on a connection the client has disconnected (DISCONNECTED seen on both ends), a second
//   rdma_disconnect on the client returns 0; rdma_disconnect on an id that only resolved its route
//   returns -1 with errno EINVAL.
TEST_F(RdmaCmTest, SecondDisconnectReturnsZero) {
  const ChildResult result = RunChecksInChild(
      [&] {
        CmSide server, conn, client, idle;
        ASSERT_NO_FATAL_FAILURE(ConnectThenDisconnectClient(&server, &conn, &client));
        ASSERT_EQ(rdma_disconnect(conn.id.get()), 0) << ErrnoName(errno);
        ASSERT_TRUE(GetCmEventWithin(client.channel.get(), RDMA_CM_EVENT_DISCONNECTED, kReturnWindow, &client.event));
        EXPECT_EQ(rdma_disconnect(client.id.get()), 0) << "a second rdma_disconnect: " << ErrnoName(errno);
        uint16_t port_number = ntohs(rdma_get_src_port(server.id.get()));
        ASSERT_NO_FATAL_FAILURE(Resolve(&idle, RDMA_PS_TCP, port_number));
        IntCall call = CaptureErrno([&] { return rdma_disconnect(idle.id.get()); });
        EXPECT_EQ(call.rc, -1);
        EXPECT_EQ(call.err, EINVAL) << ErrnoName(call.err);
      },
      kChildTimeout, "rdma_disconnect twice");
  EXPECT_TRUE(Passed(result));
}

// How long the IB CM may wait for a DREP before it gives up on the DREQ: the kernel waits a CM
// response timeout for each of 16 tries (rxe 6.1: DISCONNECTED about 100 s after rdma_disconnect).
constexpr std::chrono::milliseconds kDreqGiveUpWindow = 180s;

// Rule: the peer's CM sends the DREP only when its program answers the DREQ (rdma_disconnect, or
//   rdma_destroy_id: drivers/infiniband/core/cm.c sends it from IB_CM_DREQ_RCVD only there); a DREQ
//   that gets no DREP is resent and then given up (IB_CM_DREQ_ERROR), which rdma_cm reports as
//   DISCONNECTED with status -ETIMEDOUT (cma.c: cma_ib_handler).
// Checks: the server gets DISCONNECTED and does not answer it: the client's DISCONNECTED comes
//   within the give-up window (not within the block window) with status -ETIMEDOUT, then its
//   TIMEWAIT_EXIT; the server's late rdma_disconnect returns 0 and the client sees nothing more.
TEST_F(RdmaCmTest, DisconnectRequestNobodyAnswersEndsWithEtimedout) {
  TestDeadline::Extend(kChildTimeout + kDreqGiveUpWindow + kTimewaitWindow + kTestDeadline);
  const ChildResult result = RunChecksInChild(
      [&] {
        CmSide server, conn, client;
        ASSERT_NO_FATAL_FAILURE(ConnectThenDisconnectClient(&server, &conn, &client));
        EXPECT_TRUE(NoCmEventWithin(client.channel.get(), kBlockWindow))
            << "the client's DISCONNECTED came before any DREP could";
        ASSERT_TRUE(
            GetCmEventWithin(client.channel.get(), RDMA_CM_EVENT_DISCONNECTED, kDreqGiveUpWindow, &client.event));
        EXPECT_EQ(client.event->status, -ETIMEDOUT) << ErrnoName(-client.event->status);
        client.event.reset();
        ASSERT_TRUE(GetCmEventWithin(client.channel.get(), RDMA_CM_EVENT_TIMEWAIT_EXIT, kTimewaitWindow, &client.event));
        client.event.reset();
        EXPECT_EQ(rdma_disconnect(conn.id.get()), 0) << ErrnoName(errno);
        EXPECT_TRUE(NoCmEventWithin(client.channel.get(), kQuietWindow)) << "an event after TIMEWAIT_EXIT";
      },
      kChildTimeout + kDreqGiveUpWindow + kTimewaitWindow, "an unanswered DREQ");
  EXPECT_TRUE(Passed(result));
}

// Rule: rdma_disconnect(3) on an id made without a channel (synchronous, rdma_create_id(3) with
//   channel NULL) returns once the disconnect is done: librdmacm's rdma_disconnect ends in
//   ucma_complete, which waits for the id's next event (DISCONNECTED, after the peer's DREP).
// Checks: a synchronous client connected to the server: its rdma_disconnect is still blocked after the
//   block window, returns 0 within the return window of the server's rdma_disconnect, and its
//   id->event is then DISCONNECTED.
TEST_F(RdmaCmTest, SynchronousDisconnectWaitsForThePeer) {
  const ChildResult result = RunChecksInChild(
      [&] {
        uint16_t port_number = 0;
        CmSide server, conn;
        ASSERT_NO_FATAL_FAILURE(Listen(&server, RDMA_PS_TCP, &port_number));
        rdma_cm_id* sync_id = nullptr;
        ASSERT_EQ(rdma_create_id(nullptr, &sync_id, nullptr, RDMA_PS_TCP), 0) << ErrnoName(errno);
        CmIdPtr client(sync_id);
        sockaddr_in dst = Address(port_number);
        ASSERT_EQ(rdma_resolve_addr(sync_id, nullptr, reinterpret_cast<sockaddr*>(&dst), kResolveTimeoutMs), 0)
            << ErrnoName(errno);
        ASSERT_EQ(rdma_resolve_route(sync_id, kResolveTimeoutMs), 0) << ErrnoName(errno);
        PdPtr pd(ibv_alloc_pd(sync_id->verbs));
        ASSERT_NE(pd, nullptr) << ErrnoName(errno);
        ibv_qp_init_attr attr = {};
        attr.qp_type = IBV_QPT_RC;
        attr.cap.max_send_wr = attr.cap.max_recv_wr = 4;
        attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
        ASSERT_EQ(rdma_create_qp(sync_id, pd.get(), &attr), 0) << ErrnoName(errno);
        BlockingCall connect([sync_id] {
          rdma_conn_param param = {};
          param.retry_count = 7;
          return rdma_connect(sync_id, &param);
        });
        ASSERT_NO_FATAL_FAILURE(TakeRequest(&server, &conn));
        ASSERT_NO_FATAL_FAILURE(Accept(&conn));
        if (!ExpectReturnsWithin(connect, kReturnWindow)) return;
        ASSERT_EQ(connect.result(), 0);
        ASSERT_TRUE(GetCmEventWithin(server.channel.get(), RDMA_CM_EVENT_ESTABLISHED, kReturnWindow, &conn.event));
        conn.event.reset();
        BlockingCall disconnect([sync_id] { return rdma_disconnect(sync_id); });
        if (!ExpectBlocks(disconnect, kBlockWindow)) return;
        ASSERT_TRUE(GetCmEventWithin(server.channel.get(), RDMA_CM_EVENT_DISCONNECTED, kReturnWindow, &conn.event));
        if (!ExpectReturnsAfter(disconnect, [&] { rdma_disconnect(conn.id.get()); }, kReturnWindow)) return;
        EXPECT_EQ(disconnect.result(), 0);
        ASSERT_NE(sync_id->event, nullptr);
        EXPECT_EQ(sync_id->event->event, RDMA_CM_EVENT_DISCONNECTED) << rdma_event_str(sync_id->event->event);
      },
      kChildTimeout, "rdma_disconnect of a synchronous id");
  EXPECT_TRUE(Passed(result));
}

// Rule: rdma_migrate_id(3) moves an id to another event channel; librdmacm acknowledges a synchronous
//   id's last event first (cma.c: rdma_migrate_id), so nothing is left to wait for.
// Checks: a synchronous id whose rdma_resolve_addr returned (its ADDR_RESOLVED kept in id->event) is
//   moved to a channel: rdma_migrate_id returns 0 within the return window, and the id's
//   ROUTE_RESOLVED then arrives on that channel.
TEST_F(RdmaCmTest, SynchronousIdMigratesToAChannel) {
  const ChildResult result = RunChecksInChild(
      [&] {
        uint16_t port_number = 0;
        CmSide server;
        ASSERT_NO_FATAL_FAILURE(Listen(&server, RDMA_PS_TCP, &port_number));
        rdma_cm_id* sync_id = nullptr;
        ASSERT_EQ(rdma_create_id(nullptr, &sync_id, nullptr, RDMA_PS_TCP), 0) << ErrnoName(errno);
        CmIdPtr id(sync_id);
        sockaddr_in dst = Address(port_number);
        ASSERT_EQ(rdma_resolve_addr(sync_id, nullptr, reinterpret_cast<sockaddr*>(&dst), kResolveTimeoutMs), 0)
            << ErrnoName(errno);
        CmChannelPtr channel(rdma_create_event_channel());
        ASSERT_NE(channel, nullptr) << ErrnoName(errno);
        rdma_event_channel* target = channel.get();
        BlockingCall migrate([sync_id, target] { return rdma_migrate_id(sync_id, target); });
        if (!ExpectReturnsWithin(migrate, kReturnWindow)) return;
        ASSERT_EQ(migrate.result(), 0);
        EXPECT_EQ(sync_id->channel, target);
        ASSERT_EQ(rdma_resolve_route(sync_id, kResolveTimeoutMs), 0) << ErrnoName(errno);
        CmEventPtr event;
        ASSERT_TRUE(GetCmEventWithin(target, RDMA_CM_EVENT_ROUTE_RESOLVED, kReturnWindow, &event));
        EXPECT_EQ(event->id, sync_id);
        event.reset();
        id.reset();
      },
      kChildTimeout, "rdma_migrate_id of a synchronous id");
  EXPECT_TRUE(Passed(result));
}

// Rule: rdma_connect(3) is asynchronous: it returns once the request is on its way, whatever the
//   listener is doing; rdma_listen(3): backlog is the "backlog of incoming connection requests": the
//   kernel's ucma holds at most that many CONNECT_REQUESTs unread and drops the others
//   (ucma_event_handler), which the active side's CM sends again after its response timeout (rxe 6.1:
//   about 4.4 s later).
// Checks: with the listener (backlog 1) in a child process stopped with SIGSTOP, six clients' rdma_connect
//   each return 0 within the return window; once the child is continued, it gets all six
//   CONNECT_REQUESTs within 15 s and rejects each, and every client gets REJECTED with status 28.
TEST_F(RdmaCmTest, RequestsBeyondTheBacklogOfAStoppedListenerAllArrive) {
  constexpr std::chrono::milliseconds kRetransmitWindow = 15s;
  const ChildResult result = RunChecksInChild(
      [&] {
        constexpr int kClients = 6;
        Pipe port_pipe, count_pipe;
        ASSERT_GE(port_pipe.fds[0], 0) << ErrnoName(errno);
        ASSERT_GE(count_pipe.fds[0], 0) << ErrnoName(errno);
        const pid_t listener = fork();
        ASSERT_GE(listener, 0) << ErrnoName(errno);
        if (listener == 0) {
          prctl(PR_SET_PDEATHSIG, SIGKILL);  // stopped or not, it goes with the test
          CmSide server;
          NewSide(&server, RDMA_PS_TCP);
          sockaddr_in sin = Address(0);
          if (!server.id || rdma_bind_addr(server.id.get(), reinterpret_cast<sockaddr*>(&sin)) != 0 ||
              rdma_listen(server.id.get(), 1) != 0) {
            _exit(1);
          }
          const uint16_t port_number = ntohs(rdma_get_src_port(server.id.get()));
          if (write(port_pipe.fds[1], &port_number, sizeof port_number) != sizeof port_number) _exit(2);
          int requests = 0;
          for (; requests < kClients; ++requests) {
            CmEventPtr event;
            if (!GetCmEventWithin(server.channel.get(), RDMA_CM_EVENT_CONNECT_REQUEST, kRetransmitWindow, &event)) {
              break;
            }
            rdma_reject(event->id, nullptr, 0);
          }
          _exit(write(count_pipe.fds[1], &requests, sizeof requests) == sizeof requests ? 0 : 3);
        }
        struct Reaper {
          pid_t pid;
          ~Reaper() {
            kill(pid, SIGKILL);
            waitpid(pid, nullptr, 0);
          }
        } reaper{listener};
        uint16_t port_number = 0;
        ASSERT_TRUE(WaitReadable(port_pipe.fds[0], kReturnWindow) &&
                    read(port_pipe.fds[0], &port_number, sizeof port_number) == sizeof port_number)
            << "the listener in the child never said its port";
        std::array<CmSide, kClients> clients;
        for (CmSide& client : clients) {
          ASSERT_NO_FATAL_FAILURE(Resolve(&client, RDMA_PS_TCP, port_number));
          ASSERT_NO_FATAL_FAILURE(CreateQp(&client, IBV_QPT_RC));
        }
        ASSERT_EQ(kill(listener, SIGSTOP), 0) << ErrnoName(errno);
        for (CmSide& client : clients) {
          rdma_cm_id* id = client.id.get();
          BlockingCall connect([id] {
            rdma_conn_param param = {};
            return rdma_connect(id, &param);
          });
          if (!ExpectReturnsWithin(connect, kReturnWindow)) return;
          ASSERT_EQ(connect.result(), 0);
        }
        ASSERT_EQ(kill(listener, SIGCONT), 0) << ErrnoName(errno);
        for (CmSide& client : clients) {
          ASSERT_TRUE(GetCmEventWithin(client.channel.get(), RDMA_CM_EVENT_REJECTED, kRetransmitWindow, &client.event));
          EXPECT_EQ(client.event->status, kRejConsumerDefined);
        }
        int requests = -1;
        ASSERT_TRUE(WaitReadable(count_pipe.fds[0], kReturnWindow) &&
                    read(count_pipe.fds[0], &requests, sizeof requests) == sizeof requests)
            << "the listener in the child never said how many requests came";
        EXPECT_EQ(requests, kClients);
      },
      2 * kRetransmitWindow, "rdma_connect to a listener with backlog 1 in a stopped process");
  EXPECT_TRUE(Passed(result));
}

// Rule: the kernel maps an IPv4 group to an IPoIB MGID (ip_ib_mc_map), and rdma_cm puts its own
//   signature 0x01 in the MGID's fourth byte for RDMA_PS_UDP (cma.c: cma_set_mgid, mc_map[7] = 0x01,
//   the MGID starting at mc_map + 4): ff12:4001:ffff::<the group's low 28 bits>.
// Checks: on an InfiniBand port, RDMA_PS_UDP's MULTICAST_JOIN for 230.1.2.3 has an address handle
//   whose GRH dgid is ff12:4001:ffff:0000:0000:0000:0601:0203.
TEST_F(RdmaCmTest, UdpGroupOnInfinibandHasRdmaCmMgid) {
  SKIP_IF(port_attr().link_layer != IBV_LINK_LAYER_INFINIBAND) << "(the port is not InfiniBand)";
  const ChildResult result = RunChecksInChild(
      [&] {
        sockaddr_in group = {};
        group.sin_family = AF_INET;
        group.sin_addr.s_addr = htonl(0xe6010203);  // 230.1.2.3
        CmSide member;
        ASSERT_NO_FATAL_FAILURE(JoinGroup(&member, &group));
        const uint8_t want[16] = {0xff, 0x12, 0x40, 0x01, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0x06, 0x01, 0x02, 0x03};
        const ibv_gid& dgid = member.event->param.ud.ah_attr.grh.dgid;
        EXPECT_EQ(std::memcmp(dgid.raw, want, sizeof want), 0)
            << "MGID " << std::hex << int{dgid.raw[0]} << int{dgid.raw[1]} << ":" << int{dgid.raw[2]}
            << int{dgid.raw[3]};
        rdma_leave_multicast(member.id.get(), reinterpret_cast<sockaddr*>(&group));
      },
      kChildTimeout, "the MGID of an RDMA_PS_UDP group on InfiniBand");
  EXPECT_TRUE(Passed(result));
}

// ---- Faults of the simulated CM (simverbs_rdmacm.h): the simulator only.

// A reject reason no program sends by itself: IBTA "stale connection".
constexpr int kRejStaleConnection = 10;
// How long the CM may take to give up on a message lost every time (16 tries).
constexpr std::chrono::milliseconds kGiveUpWindow = 10s;

class RdmaCmFaultTest : public RdmaCmTest {
 protected:
  void SetUp() override {
    SKIP_IF(!Sim() || sim().CmRejectRequests(0, kRejConsumerDefined) == EOPNOTSUPP)
        << "(simverbs_cm_* do not resolve: the backend is not the simulator, so CM faults cannot be injected)";
    RdmaCmTest::SetUp();
  }
};

// Rule: simverbs_rdmacm.h, simverbs_cm_reject_requests: the CM rejects the next requests "before the
//   listener sees them", and the client gets REJECTED with that reason as its status
//   (rdma_get_cm_event(3): REJECTED's status is "the reject reason carried in the IB CM REJ").
// Checks: armed for one request with reason 10, the client gets REJECTED status 10 while the
//   listener gets no event; a second client on the same listener then connects.
TEST_F(RdmaCmFaultTest, RejectedRequestNeverReachesTheListener) {
  const ChildResult result = RunChecksInChild(
      [&] {
        uint16_t port_number = 0;
        CmSide server, client, second, conn;
        ASSERT_NO_FATAL_FAILURE(Listen(&server, RDMA_PS_TCP, &port_number));
        ASSERT_EQ(sim().CmRejectRequests(1, kRejStaleConnection), 0);
        ASSERT_NO_FATAL_FAILURE(Resolve(&client, RDMA_PS_TCP, port_number));
        ASSERT_NO_FATAL_FAILURE(CreateQp(&client, IBV_QPT_RC));
        ASSERT_NO_FATAL_FAILURE(StartConnect(&client));
        ASSERT_TRUE(GetCmEventWithin(client.channel.get(), RDMA_CM_EVENT_REJECTED, kReturnWindow, &client.event));
        EXPECT_EQ(client.event->status, kRejStaleConnection);
        EXPECT_TRUE(NoCmEventWithin(server.channel.get(), kQuietWindow)) << "the listener heard of the request";
        ASSERT_NO_FATAL_FAILURE(Resolve(&second, RDMA_PS_TCP, port_number));
        ASSERT_NO_FATAL_FAILURE(CreateQp(&second, IBV_QPT_RC));
        ASSERT_NO_FATAL_FAILURE(StartConnect(&second));
        ASSERT_NO_FATAL_FAILURE(TakeRequest(&server, &conn));
      },
      kChildTimeout, "simverbs_cm_reject_requests");
  EXPECT_TRUE(Passed(result));
}

// Rule: simverbs_rdmacm.h, simverbs_cm_drop_messages: a REQ lost on every one of its 16 tries makes
//   the CM give up with UNREACHABLE, status -ETIMEDOUT, as the kernel's rdma_cm reports
//   IB_CM_REQ_ERROR (cma_ib_handler).
// Checks: with 16 REQs lost, the client gets UNREACHABLE with -ETIMEDOUT and the listener no event.
TEST_F(RdmaCmFaultTest, RequestLostOnEveryTryGivesUnreachable) {
  const ChildResult result = RunChecksInChild(
      [&] {
        CmSide server, client;
        ASSERT_NO_FATAL_FAILURE(ListenAndResolve(&server, &client, RDMA_PS_TCP));
        ASSERT_EQ(sim().CmDropMessages(SIMVERBS_CM_REQ, 16), 0);
        ASSERT_NO_FATAL_FAILURE(StartConnect(&client));
        ASSERT_TRUE(GetCmEventWithin(client.channel.get(), RDMA_CM_EVENT_UNREACHABLE, kGiveUpWindow, &client.event));
        EXPECT_EQ(client.event->status, -ETIMEDOUT);
        EXPECT_TRUE(NoCmEventWithin(server.channel.get(), kQuietWindow)) << "a lost REQ reached the listener";
      },
      kChildTimeout + kGiveUpWindow, "16 lost REQs");
  EXPECT_TRUE(Passed(result));
}

// Rule: simverbs_rdmacm.h, simverbs_cm_drop_messages: "lose fewer than 16 and the connection is only
//   late": the CM resends a REQ that gets no answer (IBTA Vol 1 12.4, CM timeouts and retries).
// Checks: with 15 REQs lost, the 16th reaches the listener and the connection is established.
TEST_F(RdmaCmFaultTest, RequestLostFewerTimesThanTheRetriesStillConnects) {
  const ChildResult result = RunChecksInChild(
      [&] {
        CmSide server, client, conn;
        ASSERT_NO_FATAL_FAILURE(ListenAndResolve(&server, &client, RDMA_PS_TCP));
        ASSERT_EQ(sim().CmDropMessages(SIMVERBS_CM_REQ, 15), 0);
        ASSERT_NO_FATAL_FAILURE(StartConnect(&client));
        ASSERT_TRUE(GetCmEventWithin(server.channel.get(), RDMA_CM_EVENT_CONNECT_REQUEST, kGiveUpWindow,
                                     &server.event));
        conn.id.reset(server.event->id);
        server.event.reset();
        ASSERT_NO_FATAL_FAILURE(Accept(&conn));
        ASSERT_TRUE(GetCmEventWithin(client.channel.get(), RDMA_CM_EVENT_ESTABLISHED, kReturnWindow, &client.event));
        ASSERT_TRUE(GetCmEventWithin(server.channel.get(), RDMA_CM_EVENT_ESTABLISHED, kReturnWindow, &conn.event));
      },
      kChildTimeout + kGiveUpWindow, "15 lost REQs");
  EXPECT_TRUE(Passed(result));
}

// Rule: simverbs_rdmacm.h, simverbs_cm_drop_messages: a REP lost on every try gives both sides
//   UNREACHABLE with -ETIMEDOUT (the kernel's IB_CM_REP_ERROR on the passive side; the active
//   side's REQ is never answered).
// Checks: with 16 REPs lost, the accepted id and the client each get UNREACHABLE, -ETIMEDOUT.
TEST_F(RdmaCmFaultTest, ReplyLostOnEveryTryGivesUnreachableOnBothSides) {
  const ChildResult result = RunChecksInChild(
      [&] {
        CmSide server, client, conn;
        ASSERT_NO_FATAL_FAILURE(ListenAndResolve(&server, &client, RDMA_PS_TCP));
        ASSERT_NO_FATAL_FAILURE(StartConnect(&client));
        ASSERT_NO_FATAL_FAILURE(TakeRequest(&server, &conn));
        ASSERT_EQ(sim().CmDropMessages(SIMVERBS_CM_REP, 16), 0);
        ASSERT_NO_FATAL_FAILURE(Accept(&conn));
        ASSERT_TRUE(GetCmEventWithin(server.channel.get(), RDMA_CM_EVENT_UNREACHABLE, kGiveUpWindow, &conn.event));
        EXPECT_EQ(conn.event->id, conn.id.get());
        EXPECT_EQ(conn.event->status, -ETIMEDOUT);
        ASSERT_TRUE(GetCmEventWithin(client.channel.get(), RDMA_CM_EVENT_UNREACHABLE, kReturnWindow, &client.event));
        EXPECT_EQ(client.event->status, -ETIMEDOUT);
      },
      kChildTimeout + kGiveUpWindow, "16 lost REPs");
  EXPECT_TRUE(Passed(result));
}

// Rule: simverbs_rdmacm.h, simverbs_cm_drop_messages: when every DREQ is lost the side that
//   disconnects still gets DISCONNECTED (the kernel reports IB_CM_DREQ_ERROR as DISCONNECTED) and
//   then TIMEWAIT_EXIT; its peer hears nothing.
// Checks: with 16 DREQs lost, the client gets DISCONNECTED and the server's channel stays quiet;
//   the server's own rdma_disconnect then gets its DISCONNECTED (a CM in timewait answers a DREQ
//   with a DREP, IBTA Vol 1 12.9.6), and the client's next event is TIMEWAIT_EXIT.
TEST_F(RdmaCmFaultTest, DisconnectRequestLostOnEveryTryStillEndsTheActiveSide) {
  const ChildResult result = RunChecksInChild(
      [&] {
        CmSide server, conn, client;
        ASSERT_NO_FATAL_FAILURE(Connect(&server, &conn, &client));
        client.event.reset();
        conn.event.reset();
        ASSERT_EQ(sim().CmDropMessages(SIMVERBS_CM_DREQ, 16), 0);
        ASSERT_EQ(rdma_disconnect(client.id.get()), 0) << ErrnoName(errno);
        ASSERT_TRUE(GetCmEventWithin(client.channel.get(), RDMA_CM_EVENT_DISCONNECTED, kGiveUpWindow, &client.event));
        EXPECT_TRUE(NoCmEventWithin(server.channel.get(), kQuietWindow)) << "a lost DREQ reached the server";
        // The server's own DREQ is answered by the client in timewait: the server's DISCONNECTED.
        ASSERT_EQ(rdma_disconnect(conn.id.get()), 0) << ErrnoName(errno);
        ASSERT_TRUE(GetCmEventWithin(server.channel.get(), RDMA_CM_EVENT_DISCONNECTED, kReturnWindow, &conn.event));
        client.event.reset();
        ASSERT_TRUE(GetCmEventWithin(client.channel.get(), RDMA_CM_EVENT_TIMEWAIT_EXIT, kTimewaitWindow, &client.event));
      },
      kChildTimeout + kGiveUpWindow + kTimewaitWindow, "16 lost DREQs");
  EXPECT_TRUE(Passed(result));
}

// Rule: simverbs_rdmacm.h: IBV_EVENT_DEVICE_FATAL is followed by the device's removal, as on mlx5;
//   rdma_get_cm_event(3): DEVICE_REMOVAL "The RDMA device associated with the rdma_cm_id has been
//   removed. Upon receiving this event, the user must destroy the related rdma_cm_id."
// Checks: after simverbs_raise_device_fatal, the listener bound to the port's address, the accepted
//   id and the client each get DEVICE_REMOVAL with status 0, each id can be destroyed, and a new
//   id no longer resolves to the removed device (ADDR_ERROR, or another device for a loopback
//   address).
TEST_F(RdmaCmFaultTest, DeviceFatalGivesDeviceRemovalToTheIdsOnTheDevice) {
  const ChildResult result = RunChecksInChild(
      [&] {
        CmSide server, conn, client;
        ASSERT_NO_FATAL_FAILURE(Connect(&server, &conn, &client));
        client.event.reset();
        conn.event.reset();
        ASSERT_EQ(sim().RaiseDeviceFatal(context()), 0);
        ASSERT_TRUE(GetCmEventWithin(client.channel.get(), RDMA_CM_EVENT_DEVICE_REMOVAL, kReturnWindow,
                                     &client.event));
        EXPECT_EQ(client.event->id, client.id.get());
        EXPECT_EQ(client.event->status, 0);
        // The listener's and the accepted id's, in either order.
        CmEventPtr first, second;
        ASSERT_TRUE(GetCmEventWithin(server.channel.get(), RDMA_CM_EVENT_DEVICE_REMOVAL, kReturnWindow, &first));
        ASSERT_TRUE(GetCmEventWithin(server.channel.get(), RDMA_CM_EVENT_DEVICE_REMOVAL, kReturnWindow, &second));
        EXPECT_THAT((std::array<rdma_cm_id*, 2>{first->id, second->id}),
                    testing::UnorderedElementsAre(server.id.get(), conn.id.get()));
        first.reset();
        second.reset();
        client.event.reset();
        EXPECT_EQ(rdma_destroy_id(conn.id.release()), 0) << ErrnoName(errno);
        EXPECT_EQ(rdma_destroy_id(client.id.release()), 0) << ErrnoName(errno);
        EXPECT_EQ(rdma_destroy_id(server.id.release()), 0) << ErrnoName(errno);
        CmSide later;
        ASSERT_NO_FATAL_FAILURE(NewSide(&later, RDMA_PS_TCP));
        sockaddr_in dst = Address(1);
        ASSERT_EQ(rdma_resolve_addr(later.id.get(), nullptr, reinterpret_cast<sockaddr*>(&dst), kResolveTimeoutMs), 0)
            << ErrnoName(errno);
        // Gone: the port's own address gives ADDR_ERROR; a loopback address goes to another device.
        if (!GetCmEventWithin(later.channel.get(), RDMA_CM_EVENT_ADDR_ERROR, kReturnWindow, &later.event)) {
          ASSERT_NE(later.event, nullptr) << "no event for rdma_resolve_addr after the removal";
          ASSERT_EQ(later.event->event, RDMA_CM_EVENT_ADDR_RESOLVED) << rdma_event_str(later.event->event);
          ASSERT_NE(later.id->verbs, nullptr);
          EXPECT_NE(ibv_get_device_name(later.id->verbs->device), device_name())
              << "a new id resolved to the removed device";
        }
      },
      kChildTimeout, "DEVICE_REMOVAL after DEVICE_FATAL");
  EXPECT_TRUE(Passed(result));
}

// Rule: simverbs_rdmacm.h, simverbs_cm_raise_event: ADDR_CHANGE reaches the ids bound to the port;
//   rdma_get_cm_event(3): ADDR_CHANGE "The network device associated with this ID through address
//   resolution changed its HW address".
// Checks: with a listener bound to the port's address, a client resolved to it and an id never
//   bound, the call reports 2 ids; the listener and the client get ADDR_CHANGE, the unbound id
//   nothing; the connection can still be made afterwards.
TEST_F(RdmaCmFaultTest, AddrChangeReachesTheIdsBoundToThePort) {
  const ChildResult result = RunChecksInChild(
      [&] {
        CmSide server, client, idle, conn;
        ASSERT_NO_FATAL_FAILURE(ListenAndResolve(&server, &client, RDMA_PS_TCP));
        ASSERT_NO_FATAL_FAILURE(NewSide(&idle, RDMA_PS_TCP));
        EXPECT_EQ(sim().CmRaiseEvent(context(), port(), RDMA_CM_EVENT_ADDR_CHANGE), 2);
        ASSERT_TRUE(GetCmEventWithin(server.channel.get(), RDMA_CM_EVENT_ADDR_CHANGE, kReturnWindow, &server.event));
        EXPECT_EQ(server.event->id, server.id.get());
        ASSERT_TRUE(GetCmEventWithin(client.channel.get(), RDMA_CM_EVENT_ADDR_CHANGE, kReturnWindow, &client.event));
        EXPECT_EQ(client.event->id, client.id.get());
        EXPECT_TRUE(NoCmEventWithin(idle.channel.get(), kQuietWindow)) << "an id bound to nothing got an event";
        server.event.reset();
        client.event.reset();
        ASSERT_NO_FATAL_FAILURE(StartConnect(&client));
        ASSERT_NO_FATAL_FAILURE(TakeRequest(&server, &conn));
      },
      kChildTimeout, "simverbs_cm_raise_event ADDR_CHANGE");
  EXPECT_TRUE(Passed(result));
}

// Rule: rdma_get_request(3): "Retrieves the next pending connection request event" of a listener made with
//   rdma_create_ep (a synchronous id) and "returns 0 on success, or -1 on error"; librdmacm's
//   rdma_get_request returns -1 with errno EINVAL for any other event and leaves it in listen->event, so a
//   server waiting for clients learns of DEVICE_REMOVAL.
// Checks: with DEVICE_REMOVAL raised on the port of a synchronous listener (rdma_create_ep, RAI_PASSIVE,
//   rdma_listen), rdma_get_request returns -1 with errno EINVAL, and listen->event is that
//   DEVICE_REMOVAL; rdma_destroy_ep of the listener then returns.
TEST_F(RdmaCmFaultTest, GetRequestReturnsOtherEventsAsAnError) {
  const ChildResult result = RunChecksInChild(
      [&] {
        sockaddr_in src = Address(0);
        rdma_addrinfo hints = {};
        hints.ai_flags = RAI_PASSIVE;
        hints.ai_port_space = RDMA_PS_TCP;
        hints.ai_src_addr = reinterpret_cast<sockaddr*>(&src);
        hints.ai_src_len = sizeof src;
        rdma_addrinfo* res = nullptr;
        ASSERT_EQ(rdma_getaddrinfo(nullptr, nullptr, &hints, &res), 0) << ErrnoName(errno);
        rdma_cm_id* listen = nullptr;
        const int created = rdma_create_ep(&listen, res, nullptr, nullptr);
        rdma_freeaddrinfo(res);
        ASSERT_EQ(created, 0) << "rdma_create_ep: " << ErrnoName(errno);
        ASSERT_EQ(rdma_listen(listen, 4), 0) << ErrnoName(errno);
        EXPECT_GE(sim().CmRaiseEvent(context(), port(), RDMA_CM_EVENT_DEVICE_REMOVAL), 1);
        rdma_cm_id* id = nullptr;
        EXPECT_THAT(CaptureErrno([&] { return rdma_get_request(listen, &id); }), FailsWithErrno(EINVAL));
        ASSERT_NE(listen->event, nullptr) << "the event was not left in listen->event";
        EXPECT_EQ(listen->event->event, RDMA_CM_EVENT_DEVICE_REMOVAL) << rdma_event_str(listen->event->event);
        rdma_destroy_ep(listen);
      },
      kChildTimeout, "rdma_get_request after DEVICE_REMOVAL");
  EXPECT_TRUE(Passed(result));
}

// Rule: rdma_destroy_id(3) of a listener: the connection requests it queued and the program never read go
//   with it (the kernel's ucma_cleanup_ctx_events destroys their ids), and with each of those ids every
//   event queued for it: rdma_get_cm_event(3) never hands out an event for an id the program cannot know.
// Checks: with a client's request queued unread on the listener's channel, DEVICE_REMOVAL raised on the
//   port (it reaches the request's new id too), then the listener destroyed: the listener's channel gives
//   no event afterwards.
TEST_F(RdmaCmFaultTest, EventsOfAnUnreadRequestGoWithTheListener) {
  const ChildResult result = RunChecksInChild(
      [&] {
        CmSide server, client;
        ASSERT_NO_FATAL_FAILURE(QueueUnreadRequest(&server, &client));
        EXPECT_GE(sim().CmRaiseEvent(context(), port(), RDMA_CM_EVENT_DEVICE_REMOVAL), 3)
            << "DEVICE_REMOVAL should reach the listener, the client and the request's id";
        server.id.reset();
        EXPECT_TRUE(NoCmEventWithin(server.channel.get(), kQuietWindow))
            << "an event for the request's id, destroyed with the listener";
      },
      kChildTimeout, "DEVICE_REMOVAL for a request never read, then rdma_destroy_id of its listener");
  EXPECT_TRUE(Passed(result));
}

}  // namespace
}  // namespace conformance
