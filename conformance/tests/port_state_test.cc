// The port as its link goes down and comes back up, on any backend that can toggle the link:
// the simulator through its control API (simverbs_raise_port_event), any other backend through
// two shell commands given in the environment:
//   VERBS_CONFORMANCE_PORT_DOWN_CMD   takes the link of the tested port down
//   VERBS_CONFORMANCE_PORT_UP_CMD     brings it back up
// (scripts/conformance --backend rxe sets them to "ip link set dummy0 down" / "... up").
// Skipped, with the reason, when neither is there.
//
// Other unaffiliated events may come with a link change (rxe raises GID_CHANGE when the
// interface loses or regains its IPv6 address); the tests wait for PORT_ERR / PORT_ACTIVE and let
// those pass, but never the opposite port event. A commanded link change is kernel-wide, so after
// each test the link is brought back up and the port waited for until it is ACTIVE again.

#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "conformance/lib/event_acks.h"
#include "conformance/lib/event_wait.h"
#include "conformance/lib/qp_pair.h"
#include "conformance/lib/skip_if.h"
#include "conformance/lib/timeouts.h"
#include "conformance/lib/verbs_handles.h"
#include "conformance/lib/verbs_test.h"
#include "conformance/lib/watchdog.h"

namespace conformance {
namespace {

constexpr const char* kDownEnv = "VERBS_CONFORMANCE_PORT_DOWN_CMD";
constexpr const char* kUpEnv = "VERBS_CONFORMANCE_PORT_UP_CMD";

// A real link takes longer to change than a simulated one.
constexpr std::chrono::milliseconds kLinkChangeWindow = 5000ms;
constexpr std::chrono::milliseconds kToggleChildTimeout = 30000ms;
// A lost SEND with retry_cnt 1 and a 67 ms ACK timeout has failed well within this.
constexpr std::chrono::milliseconds kRetryWindow = 5000ms;

std::string EnvOrEmpty(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

// Takes the link of a port down and up: the control API on the simulator, else the commands.
class PortToggle {
 public:
  enum class Kind { kNone, kControlApi, kCommands };

  static PortToggle Find(bool sim_api) {
    PortToggle toggle;
    toggle.down_cmd_ = EnvOrEmpty(kDownEnv);
    toggle.up_cmd_ = EnvOrEmpty(kUpEnv);
    if (sim_api) {
      toggle.kind_ = Kind::kControlApi;
    } else if (!toggle.down_cmd_.empty() && !toggle.up_cmd_.empty()) {
      toggle.kind_ = Kind::kCommands;
    }
    return toggle;
  }

  Kind kind() const { return kind_; }
  // Exactly one of the two variables set: a mistake worth a failure, not a skip.
  bool HalfConfigured() const { return down_cmd_.empty() != up_cmd_.empty(); }

  // Returns an empty string on success, else what went wrong.
  std::string Down(ibv_context* context, uint8_t port) const { return Change(context, port, false); }
  std::string Up(ibv_context* context, uint8_t port) const { return Change(context, port, true); }

 private:
  std::string Change(ibv_context* context, uint8_t port, bool up) const {
    if (kind_ == Kind::kControlApi) {
      const int rc = SimControl::Get().RaisePortEvent(context, port, up ? IBV_EVENT_PORT_ACTIVE : IBV_EVENT_PORT_ERR);
      return rc == 0 ? "" : "simverbs_raise_port_event returned " + std::to_string(rc);
    }
    const std::string& command = up ? up_cmd_ : down_cmd_;
    const int status = std::system(command.c_str());
    if (status == 0) return "";
    return std::string(up ? kUpEnv : kDownEnv) + "='" + command + "' failed (system() status " +
           std::to_string(status) + ")";
  }

  Kind kind_ = Kind::kNone;
  std::string down_cmd_;
  std::string up_cmd_;
};

// Reads async events until one of type `wanted` for `port` arrives (acknowledging everything it
// reads). Other unaffiliated events are let through; the opposite link event is a failure.
testing::AssertionResult WaitForPortEvent(ibv_context* context, ibv_event_type wanted, uint8_t port,
                                          std::chrono::milliseconds window) {
  const ibv_event_type opposite = wanted == IBV_EVENT_PORT_ERR ? IBV_EVENT_PORT_ACTIVE : IBV_EVENT_PORT_ERR;
  const auto deadline = std::chrono::steady_clock::now() + window;
  std::string passed_over;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    ibv_async_event event = {};
    if (left.count() <= 0 || !GetAsyncEventWithin(context, &event, left)) {
      return testing::AssertionFailure() << "no " << ibv_event_type_str(wanted) << " within " << window.count()
                                         << " ms" << (passed_over.empty() ? "" : "; got only:" + passed_over);
    }
    EventAcks acks;
    acks.AddAsyncEvent(event);
    if (event.event_type == wanted) {
      if (event.element.port_num != port) {
        return testing::AssertionFailure() << ibv_event_type_str(wanted) << " with element.port_num "
                                           << int{event.element.port_num} << ", expected " << int{port};
      }
      return testing::AssertionSuccess();
    }
    if (event.event_type == opposite) {
      return testing::AssertionFailure() << "got " << ibv_event_type_str(opposite) << " while waiting for "
                                         << ibv_event_type_str(wanted);
    }
    passed_over += std::string(" ") + ibv_event_type_str(event.event_type);
  }
}

// No further `type` event arrives within window (other events are let through).
testing::AssertionResult NoMorePortEvents(ibv_context* context, ibv_event_type type, std::chrono::milliseconds window) {
  const auto deadline = std::chrono::steady_clock::now() + window;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return testing::AssertionSuccess();
    ibv_async_event event = {};
    if (!GetAsyncEventWithin(context, &event, left)) return testing::AssertionSuccess();
    const ibv_event_type got = event.event_type;
    ibv_ack_async_event(&event);
    if (got == type) return testing::AssertionFailure() << ibv_event_type_str(type) << " delivered twice";
  }
}

ibv_port_state QueryState(ibv_context* context, uint8_t port) {
  ibv_port_attr attr = {};
  if (ibv_query_port(context, port, &attr) != 0) return IBV_PORT_NOP;
  return attr.state;
}

class PortStateTest : public VerbsTest {
 protected:
  void SetUp() override {
    toggle_ = PortToggle::Find(Sim());
    ASSERT_FALSE(toggle_.HalfConfigured()) << "set both " << kDownEnv << " and " << kUpEnv << ", or neither";
    SKIP_IF(toggle_.kind() == PortToggle::Kind::kNone)
        << "(no way to take the link down: not the simulator, and " << kDownEnv << " / " << kUpEnv << " are not set)";
    VerbsTest::SetUp();
    if (HasFatalFailure()) return;
    ASSERT_EQ(port_attr().state, IBV_PORT_ACTIVE)
        << "the port must be ACTIVE before its link is taken down, it is " << ibv_port_state_str(port_attr().state);
  }

  // A commanded link change outlives the watchdog child: bring the link back and wait for ACTIVE,
  // so the tests after this one find the port as it was.
  void TearDown() override {
    if (toggle_.kind() != PortToggle::Kind::kCommands || context() == nullptr) return;
    if (QueryState(context(), port()) != IBV_PORT_ACTIVE) {
      const std::string error = toggle_.Up(context(), port());
      EXPECT_EQ(error, "") << "restoring the link";
    }
    const auto deadline = std::chrono::steady_clock::now() + kLinkChangeWindow;
    while (QueryState(context(), port()) != IBV_PORT_ACTIVE && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(10ms);
    }
    EXPECT_EQ(QueryState(context(), port()), IBV_PORT_ACTIVE) << "the port did not come back after the test";
  }

  PortToggle toggle_;
};

// Rule: ibv_get_async_event(3): "IBV_EVENT_PORT_ERR Link became unavailable on a port"; "One
//   member of the element union will be valid, depending on the event_type" - port_num for a
//   port event; ibv_query_port(3): state is the "Logical port state".
// Checks: taking the link down delivers PORT_ERR with element.port_num == the port, after which
//   ibv_query_port reports the port DOWN.
TEST_F(PortStateTest, LinkDownRaisesPortErrAndPortIsDown) {
  const ChildResult result = RunChecksInChild(
      [&] {
        ContextPtr context = OpenAnotherContext();
        ASSERT_NE(context, nullptr);
        ASSERT_EQ(toggle_.Down(context.get(), port()), "");
        ASSERT_TRUE(WaitForPortEvent(context.get(), IBV_EVENT_PORT_ERR, port(), kLinkChangeWindow));
        const ibv_port_state state = QueryState(context.get(), port());
        EXPECT_EQ(state, IBV_PORT_DOWN) << ibv_port_state_str(state);
      },
      kToggleChildTimeout, "link down: PORT_ERR and ibv_query_port");
  EXPECT_TRUE(Passed(result));
}

// Rule: ibv_get_async_event(3): "IBV_EVENT_PORT_ACTIVE Link became active on a port" with
//   element.port_num; ibv_query_port(3): state is the "Logical port state".
// Checks: after the link went down (PORT_ERR), bringing it up delivers PORT_ACTIVE with
//   element.port_num == the port, after which ibv_query_port reports the port ACTIVE.
TEST_F(PortStateTest, LinkUpRaisesPortActiveAndPortIsActive) {
  const ChildResult result = RunChecksInChild(
      [&] {
        ContextPtr context = OpenAnotherContext();
        ASSERT_NE(context, nullptr);
        ASSERT_EQ(toggle_.Down(context.get(), port()), "");
        ASSERT_TRUE(WaitForPortEvent(context.get(), IBV_EVENT_PORT_ERR, port(), kLinkChangeWindow));
        ASSERT_EQ(toggle_.Up(context.get(), port()), "");
        ASSERT_TRUE(WaitForPortEvent(context.get(), IBV_EVENT_PORT_ACTIVE, port(), kLinkChangeWindow));
        const ibv_port_state state = QueryState(context.get(), port());
        EXPECT_EQ(state, IBV_PORT_ACTIVE) << ibv_port_state_str(state);
      },
      kToggleChildTimeout, "link down and up: PORT_ERR, PORT_ACTIVE and ibv_query_port");
  EXPECT_TRUE(Passed(result));
}

// Rule: ibv_get_async_event(3): "waits for the next async event of the RDMA device context
//   context"; a port event concerns the device, so every context opened on it gets one (the
//   kernel delivers it to every uverbs file of the device).
// Checks: taking the link down delivers PORT_ERR, once, to each of two open contexts.
TEST_F(PortStateTest, LinkDownReachesEveryOpenContext) {
  const ChildResult result = RunChecksInChild(
      [&] {
        ContextPtr first = OpenAnotherContext();
        ContextPtr second = OpenAnotherContext();
        ASSERT_NE(first, nullptr);
        ASSERT_NE(second, nullptr);
        ASSERT_EQ(toggle_.Down(first.get(), port()), "");
        for (ibv_context* context : {first.get(), second.get()}) {
          ASSERT_TRUE(WaitForPortEvent(context, IBV_EVENT_PORT_ERR, port(), kLinkChangeWindow));
          EXPECT_TRUE(NoMorePortEvents(context, IBV_EVENT_PORT_ERR, kQuietWindow));
        }
      },
      kToggleChildTimeout, "link down: PORT_ERR on two contexts");
  EXPECT_TRUE(Passed(result));
}

// Two RC QPs on `port` of context, connected to each other (loopback), with a registered buffer:
// `retry_cnt` 1 and the ACK timeout 14 (67 ms), so a lost message fails within a second.
struct LoopbackPair {
  PdPtr pd;
  QpEnd a;
  QpEnd b;
  Buffer buffer;
};

testing::AssertionResult MakeLoopbackPair(ibv_context* context, uint8_t port, int gid_index, LoopbackPair* pair) {
  pair->pd.reset(ibv_alloc_pd(context));
  if (!pair->pd) return testing::AssertionFailure() << "ibv_alloc_pd failed";
  if (auto ok = CreateEndOn(context, pair->pd.get(), &pair->a, {}); !ok) return ok;
  if (auto ok = CreateEndOn(context, pair->pd.get(), &pair->b, {}); !ok) return ok;
  if (auto ok = pair->buffer.Register(pair->pd.get(), 128); !ok) return ok;
  ibv_port_attr attr = {};
  if (ibv_query_port(context, port, &attr) != 0) return testing::AssertionFailure() << "ibv_query_port failed";
  ConnectParams params;
  params.timeout = 14;
  params.retry_cnt = 1;
  return ConnectOn(context, port, gid_index, attr.active_mtu, pair->a, pair->b, params, params);
}

// Posts a receive on b and a signaled 16-byte SEND on a, and returns a's completion.
testing::AssertionResult SendOnce(LoopbackPair& pair, ibv_wc* send_wc) {
  ibv_sge recv_sge = pair.buffer.Sge(64, 64);
  if (PostRecv(pair.b.get(), 2, &recv_sge, 1) != 0) return testing::AssertionFailure() << "ibv_post_recv failed";
  ibv_sge send_sge = pair.buffer.Sge(0, 16);
  if (PostOne(pair.a.get(), SendWr(1, &send_sge, 1)) != 0) return testing::AssertionFailure() << "ibv_post_send failed";
  return PollOneCompletion(pair.a.send_cq.get(), send_wc, kRetryWindow);
}

// Rule: IBTA Vol 1 ch. 9 (transport timer and retries): a requester that gets no response after
//   retry_cnt retries completes the WR with IBV_WC_RETRY_EXC_ERR; ibv_query_port(3): state is the
//   "Logical port state", and a port that is not ACTIVE passes no packets.
// Checks: with the link down, a SEND between two RC QPs of the port (retry_cnt 1, timeout 14)
//   completes with IBV_WC_RETRY_EXC_ERR and the receiver gets nothing; once the link is up again, a
//   SEND on a new pair of QPs completes with success and arrives.
TEST_F(PortStateTest, LinkDownLosesTrafficUntilLinkUp) {
  const ChildResult result = RunChecksInChild(
      [&] {
        ContextPtr context = OpenAnotherContext();
        ASSERT_NE(context, nullptr);
        LoopbackPair before;
        ASSERT_TRUE(MakeLoopbackPair(context.get(), port(), gid_index(), &before));
        ASSERT_EQ(toggle_.Down(context.get(), port()), "");
        ASSERT_TRUE(WaitForPortEvent(context.get(), IBV_EVENT_PORT_ERR, port(), kLinkChangeWindow));
        ibv_wc wc = {};
        ASSERT_TRUE(SendOnce(before, &wc));
        EXPECT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR) << "a SEND while the link is down: " << DescribeWc(wc);
        ibv_wc recv_wc = {};
        if (ibv_poll_cq(before.b.recv_cq.get(), 1, &recv_wc) == 1) {
          EXPECT_NE(recv_wc.status, IBV_WC_SUCCESS) << "received while the link was down: " << DescribeWc(recv_wc);
        }

        ASSERT_EQ(toggle_.Up(context.get(), port()), "");
        ASSERT_TRUE(WaitForPortEvent(context.get(), IBV_EVENT_PORT_ACTIVE, port(), kLinkChangeWindow));
        LoopbackPair after;
        ASSERT_TRUE(MakeLoopbackPair(context.get(), port(), gid_index(), &after));
        ASSERT_TRUE(SendOnce(after, &wc));
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << "a SEND once the link is up again: " << DescribeWc(wc);
        ASSERT_TRUE(PollOneCompletion(after.b.recv_cq.get(), &recv_wc));
        EXPECT_EQ(recv_wc.status, IBV_WC_SUCCESS) << DescribeWc(recv_wc);
        EXPECT_EQ(recv_wc.byte_len, 16u) << DescribeWc(recv_wc);
      },
      kToggleChildTimeout, "link down and up: a SEND is lost, then delivered");
  EXPECT_TRUE(Passed(result));
}

// Another device of the machine than the one under test, opened (null when there is none).
ContextPtr OpenOtherDevice(const std::string& tested) {
  int count = 0;
  ibv_device** list = ibv_get_device_list(&count);
  if (!list) return nullptr;
  ContextPtr other;
  for (int i = 0; i < count && !other; ++i) {
    if (tested != ibv_get_device_name(list[i])) other.reset(ibv_open_device(list[i]));
  }
  ibv_free_device_list(list);
  return other;
}

// Rule: ibv_query_port(3): state is the "Logical port state"; IBTA Vol 1 ch. 7 (link layer): a port
//   whose link is down sends no packet, so a requester's transport times out (IBV_WC_RETRY_EXC_ERR
//   after retry_cnt retries, IBTA Vol 1 ch. 9).
// Checks: (two devices) an RC pair from the tested port to port 1 of another device: with the tested
//   port's link down, a SEND from it completes with IBV_WC_RETRY_EXC_ERR and the other device's QP
//   receives nothing (its receive is only flushed later, when the test ends).
TEST_F(PortStateTest, LinkDownSendsNothingToAnotherDevice) {
  const ChildResult result = RunChecksInChild(
      [&] {
        ContextPtr context = OpenAnotherContext();
        ASSERT_NE(context, nullptr);
        ContextPtr other = OpenOtherDevice(ibv_get_device_name(context->device));
        SKIP_IF(!other) << "(one RDMA device: nothing to send to but the port itself)";
        PdPtr pd(ibv_alloc_pd(context.get()));
        PdPtr other_pd(ibv_alloc_pd(other.get()));
        ASSERT_TRUE(pd && other_pd);
        QpEnd a, b;
        ASSERT_TRUE(CreateEndOn(context.get(), pd.get(), &a, {}));
        ASSERT_TRUE(CreateEndOn(other.get(), other_pd.get(), &b, {}));
        Buffer send_buffer, recv_buffer;
        ASSERT_TRUE(send_buffer.Register(pd.get(), 64));
        ASSERT_TRUE(recv_buffer.Register(other_pd.get(), 64));
        ibv_ah_attr to_a = {}, to_b = {};
        ASSERT_TRUE(PortAddress(context.get(), port(), gid_index(), false, &to_a));
        ASSERT_TRUE(PortAddress(other.get(), 1, gid_index(), false, &to_b));
        ConnectParams params;
        params.timeout = 14;
        params.retry_cnt = 1;
        ibv_port_attr attr = {};
        ASSERT_EQ(ibv_query_port(context.get(), port(), &attr), 0);
        params.path_mtu = attr.active_mtu;
        ASSERT_TRUE(BringUp(a.get(), port(), b.get()->qp_num, to_b, params));
        ASSERT_TRUE(BringUp(b.get(), 1, a.get()->qp_num, to_a, params));
        ASSERT_EQ(toggle_.Down(context.get(), port()), "");
        ASSERT_TRUE(WaitForPortEvent(context.get(), IBV_EVENT_PORT_ERR, port(), kLinkChangeWindow));
        ibv_sge recv_sge = recv_buffer.Sge(0, 64);
        ASSERT_EQ(PostRecv(b.get(), 2, &recv_sge, 1), 0);
        ibv_sge send_sge = send_buffer.Sge(0, 16);
        ASSERT_EQ(PostOne(a.get(), SendWr(1, &send_sge, 1)), 0);
        ibv_wc wc = {};
        ASSERT_TRUE(PollOneCompletion(a.send_cq.get(), &wc, kRetryWindow)) << "the SEND never completed";
        EXPECT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR) << "a SEND from a port that is down: " << DescribeWc(wc);
        ibv_wc recv_wc = {};
        EXPECT_EQ(ibv_poll_cq(b.recv_cq.get(), 1, &recv_wc), 0)
            << "the other device received from a port that is down: " << DescribeWc(recv_wc);
        ASSERT_EQ(toggle_.Up(context.get(), port()), "");
        ASSERT_TRUE(WaitForPortEvent(context.get(), IBV_EVENT_PORT_ACTIVE, port(), kLinkChangeWindow));
      },
      kToggleChildTimeout, "link down: a SEND to another device is lost");
  EXPECT_TRUE(Passed(result));
}

}  // namespace
}  // namespace conformance
