// What a context is after IBV_EVENT_DEVICE_FATAL (sim/src/fault/device_fatal.h):
// the simulator follows an mlx5 HCA in its internal-error state. Raised
// through the control API, so sim-only; each test runs in a watchdog child,
// because the event makes every open context of the device fatal.

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <atomic>
#include <cerrno>
#include <string>
#include <thread>
#include <vector>

#include "conformance/lib/backend_profile.h"
#include "conformance/lib/device_opener.h"
#include "conformance/lib/errno_capture.h"
#include "conformance/lib/event_wait.h"
#include "conformance/lib/qp_pair.h"
#include "conformance/lib/skip_if.h"
#include "conformance/lib/timeouts.h"
#include "conformance/lib/verbs_matchers.h"
#include "conformance/lib/watchdog.h"

namespace conformance {
namespace {

class DeviceFatalTest : public QpTest {
 protected:
  void SetUp() override {
    SKIP_IF(!Sim()) << "(simverbs_version does not resolve: the backend is '" << Backend().name()
                    << "', not the simulator, so DEVICE_FATAL cannot be raised)";
    QpTest::SetUp();
  }

  // Raises DEVICE_FATAL and reads it from `ctx` (acknowledged at once).
  void RaiseFatalAndRead(ibv_context* ctx) {
    ASSERT_EQ(sim().RaiseDeviceFatal(ctx), 0) << "simverbs_raise_device_fatal";
    ibv_async_event event = {};
    ASSERT_TRUE(GetAsyncEventWithin(ctx, &event, kReturnWindow));
    EXPECT_EQ(event.event_type, IBV_EVENT_DEVICE_FATAL) << ibv_event_type_str(event.event_type);
    ibv_ack_async_event(&event);
  }
};

// Rule: ibv_get_async_event(3): "IBV_EVENT_DEVICE_FATAL CA is in FATAL state"; mlx5 answers
//   firmware commands itself in that state and fails every command that is not a destroy with
//   EIO (mlx5_internal_err_ret_value, drivers/net/ethernet/mellanox/mlx5/core/cmd.c), as the
//   kernel does after removal ("Userspace will see a EIO errno for all future access",
//   drivers/infiniband/core/uverbs_main.c).
// Checks: after DEVICE_FATAL, ibv_alloc_pd, ibv_reg_mr, ibv_create_cq, ibv_create_qp, ibv_open_xrcd
//   (where the device has XRC) and ibv_create_srq_ex fail with NULL + EIO; ibv_query_port and
//   ibv_modify_qp return EIO; ibv_rereg_mr of an MR registered before returns IBV_REREG_MR_ERR_CMD
//   with errno EIO (EOPNOTSUPP where the provider has no rereg_mr).
TEST_F(DeviceFatalTest, CommandsFailWithEio) {
  const ChildResult result = RunChecksInChild(
      [&] {
        ASSERT_TRUE(MakePair());
        static char registered[64];
        MrPtr mr(ibv_reg_mr(pd(), registered, sizeof registered, IBV_ACCESS_LOCAL_WRITE));
        ASSERT_NE(mr, nullptr) << ErrnoName(errno);
        RaiseFatalAndRead(context());
        if (device_attr().device_cap_flags & IBV_DEVICE_XRC) {
          ibv_xrcd_init_attr xrcd_attr = {};
          xrcd_attr.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
          xrcd_attr.fd = -1;
          xrcd_attr.oflags = O_CREAT;
          EXPECT_THAT(CaptureErrno([&] { return ibv_open_xrcd(context(), &xrcd_attr); }), ReturnsNullWithErrno(EIO));
        }
        ibv_srq_init_attr_ex srq_attr = {};
        srq_attr.attr.max_wr = 4;
        srq_attr.attr.max_sge = 1;
        srq_attr.comp_mask = IBV_SRQ_INIT_ATTR_PD;
        srq_attr.pd = pd();
        EXPECT_THAT(CaptureErrno([&] { return ibv_create_srq_ex(context(), &srq_attr); }), ReturnsNullWithErrno(EIO));
        errno = 0;
        EXPECT_EQ(ibv_rereg_mr(mr.get(), IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0,
                               IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ),
                  IBV_REREG_MR_ERR_CMD);
        // (A provider without rereg_mr fails it before any command: EOPNOTSUPP.)
        EXPECT_EQ(errno, Backend().Answer("ReregMrSupported", true) ? EIO : EOPNOTSUPP) << ErrnoName(errno);
        EXPECT_THAT(CaptureErrno([&] { return ibv_alloc_pd(context()); }), ReturnsNullWithErrno(EIO));
        static char buffer[64];
        EXPECT_THAT(CaptureErrno([&] { return ibv_reg_mr(pd(), buffer, sizeof buffer, IBV_ACCESS_LOCAL_WRITE); }),
                    ReturnsNullWithErrno(EIO));
        EXPECT_THAT(CaptureErrno([&] { return ibv_create_cq(context(), 4, nullptr, nullptr, 0); }),
                    ReturnsNullWithErrno(EIO));
        ibv_qp_init_attr init = MakeInitAttr(IBV_QPT_RC, a_.send_cq.get(), a_.recv_cq.get());
        EXPECT_THAT(CaptureErrno([&] { return ibv_create_qp(pd(), &init); }), ReturnsNullWithErrno(EIO));
        ibv_port_attr port_attr = {};
        EXPECT_THAT(ibv_query_port(context(), port(), &port_attr), ReturnsErrno(EIO));
        ibv_qp_attr attr = {};
        attr.qp_state = IBV_QPS_SQD;
        EXPECT_THAT(ibv_modify_qp(a_.get(), &attr, IBV_QP_STATE), ReturnsErrno(EIO));
      },
      kChildTimeout, "commands after DEVICE_FATAL");
  EXPECT_TRUE(Passed(result));
}

// Rule: mlx5 in its internal-error state answers DESTROY_QP, DESTROY_CQ, DESTROY_MKEY and
//   DEALLOC_PD with MLX5_CMD_STAT_OK (mlx5_internal_err_ret_value, mlx5/core/cmd.c), so a program
//   can release what it holds after ibv_get_async_event(3) reported IBV_EVENT_DEVICE_FATAL.
// Checks: after DEVICE_FATAL, ibv_destroy_qp, ibv_destroy_cq, ibv_dereg_mr, ibv_dealloc_pd and
//   ibv_close_device return 0.
TEST_F(DeviceFatalTest, DestroysSucceed) {
  const ChildResult result = RunChecksInChild(
      [&] {
        ContextPtr ctx = OpenAnotherContext();
        ASSERT_NE(ctx, nullptr);
        ibv_pd* pd = ibv_alloc_pd(ctx.get());
        ASSERT_NE(pd, nullptr);
        static char buffer[64];
        ibv_mr* mr = ibv_reg_mr(pd, buffer, sizeof buffer, IBV_ACCESS_LOCAL_WRITE);
        ASSERT_NE(mr, nullptr);
        ibv_cq* cq = ibv_create_cq(ctx.get(), 4, nullptr, nullptr, 0);
        ASSERT_NE(cq, nullptr);
        ibv_qp_init_attr init = MakeInitAttr(IBV_QPT_RC, cq, cq);
        ibv_qp* qp = ibv_create_qp(pd, &init);
        ASSERT_NE(qp, nullptr);
        RaiseFatalAndRead(ctx.get());
        EXPECT_EQ(ibv_destroy_qp(qp), 0);
        EXPECT_EQ(ibv_destroy_cq(cq), 0);
        EXPECT_EQ(ibv_dereg_mr(mr), 0);
        EXPECT_EQ(ibv_dealloc_pd(pd), 0);
        EXPECT_EQ(ibv_close_device(ctx.release()), 0);
      },
      kChildTimeout, "destroys after DEVICE_FATAL");
  EXPECT_TRUE(Passed(result));
}

// Rule: after IBV_EVENT_DEVICE_FATAL (ibv_get_async_event(3)) the HCA no longer executes work:
//   rdma-core's mlx5 provider only records the state (mlx5_async_event sets
//   MLX5_CTX_FLAGS_FATAL_STATE) and its posts still ring a doorbell nobody reads.
// Checks: ibv_post_recv and ibv_post_send return 0, and neither the sender's nor the
//   receiver's CQ ever gets a completion for them.
TEST_F(DeviceFatalTest, PostsAreNeverExecuted) {
  const ChildResult result = RunChecksInChild(
      [&] {
        ASSERT_TRUE(MakePair());
        Buffer send_buf, recv_buf;
        ASSERT_TRUE(send_buf.Register(pd(), 64));
        ASSERT_TRUE(recv_buf.Register(pd(), 64));
        RaiseFatalAndRead(context());
        ibv_sge recv_sge = recv_buf.Sge();
        EXPECT_EQ(PostRecv(b_.get(), 1, &recv_sge, 1), 0);
        ibv_sge send_sge = send_buf.Sge();
        EXPECT_EQ(PostOne(a_.get(), SendWr(2, &send_sge, 1)), 0);
        EXPECT_TRUE(NoCompletionWithin(a_.send_cq.get()));
        EXPECT_TRUE(NoCompletionWithin(b_.recv_cq.get()));
      },
      kChildTimeout, "posts after DEVICE_FATAL");
  EXPECT_TRUE(Passed(result));
}

// Rule: a CQ's entries are in the program's memory (mlx5 CQ buffers are user memory), so
//   ibv_poll_cq(3) still "polls the CQ for work completions" the HCA wrote before
//   IBV_EVENT_DEVICE_FATAL.
// Checks: a SEND completed before DEVICE_FATAL but not yet polled is returned afterwards, with
//   IBV_WC_SUCCESS on both sides.
TEST_F(DeviceFatalTest, CompletionsWrittenBeforeRemainPollable) {
  const ChildResult result = RunChecksInChild(
      [&] {
        ASSERT_TRUE(MakePair());
        Buffer send_buf, recv_buf;
        ASSERT_TRUE(send_buf.Register(pd(), 64));
        ASSERT_TRUE(recv_buf.Register(pd(), 64));
        ibv_sge recv_sge = recv_buf.Sge();
        ASSERT_EQ(PostRecv(b_.get(), 1, &recv_sge, 1), 0);
        ibv_sge send_sge = send_buf.Sge();
        ASSERT_EQ(PostOne(a_.get(), SendWr(2, &send_sge, 1)), 0);
        // The receive completes only once the SEND has arrived and been acked.
        ibv_wc recv_wc = {};
        ASSERT_TRUE(PollOneCompletion(b_.recv_cq.get(), &recv_wc));
        EXPECT_EQ(recv_wc.status, IBV_WC_SUCCESS) << DescribeWc(recv_wc);
        RaiseFatalAndRead(context());
        ibv_wc send_wc = {};
        ASSERT_TRUE(PollOneCompletion(a_.send_cq.get(), &send_wc));
        EXPECT_EQ(send_wc.status, IBV_WC_SUCCESS) << DescribeWc(send_wc);
        EXPECT_EQ(send_wc.wr_id, 2u);
      },
      kChildTimeout, "completions written before DEVICE_FATAL");
  EXPECT_TRUE(Passed(result));
}

// Rule: ibv_get_async_event(3): DEVICE_FATAL is a "CA event": it concerns the device, so every
//   context open on it receives it (the kernel delivers it to every uverbs file of the device).
// Checks: two contexts open on the device both read DEVICE_FATAL and both refuse ibv_alloc_pd
//   with EIO afterwards.
TEST_F(DeviceFatalTest, EveryOpenContextBecomesFatal) {
  const ChildResult result = RunChecksInChild(
      [&] {
        ContextPtr first = OpenAnotherContext();
        ContextPtr second = OpenAnotherContext();
        ASSERT_NE(first, nullptr);
        ASSERT_NE(second, nullptr);
        RaiseFatalAndRead(first.get());
        ibv_async_event event = {};
        ASSERT_TRUE(GetAsyncEventWithin(second.get(), &event, kReturnWindow));
        EXPECT_EQ(event.event_type, IBV_EVENT_DEVICE_FATAL) << ibv_event_type_str(event.event_type);
        ibv_ack_async_event(&event);
        for (ibv_context* ctx : {first.get(), second.get()}) {
          EXPECT_THAT(CaptureErrno([&] { return ibv_alloc_pd(ctx); }), ReturnsNullWithErrno(EIO));
        }
      },
      kChildTimeout, "DEVICE_FATAL on two contexts");
  EXPECT_TRUE(Passed(result));
}

// Rule: the fatal state belongs to the contexts open when the HCA failed; a context opened after
//   the device came back (mlx5 health recovery reloads it) works - ibv_open_device(3) "returns a
//   pointer to the allocated device context".
// Checks: after DEVICE_FATAL on one context, a context opened afterwards allocates a PD.
TEST_F(DeviceFatalTest, ContextOpenedAfterwardsWorks) {
  const ChildResult result = RunChecksInChild(
      [&] {
        ContextPtr dead = OpenAnotherContext();
        ASSERT_NE(dead, nullptr);
        RaiseFatalAndRead(dead.get());
        ContextPtr fresh = OpenAnotherContext();
        ASSERT_NE(fresh, nullptr);
        PdPtr pd(ibv_alloc_pd(fresh.get()));
        EXPECT_NE(pd, nullptr) << "ibv_alloc_pd on a context opened after DEVICE_FATAL: " << ErrnoName(errno);
      },
      kChildTimeout, "a context opened after DEVICE_FATAL");
  EXPECT_TRUE(Passed(result));
}

// Rule: the kernel's async event file: "The user knows it has reached the end of the event
//   stream when it sees IB_EVENT_DEVICE_FATAL" (drivers/infiniband/core/uverbs_std_types_async_fd.c).
// Checks: a port event raised after DEVICE_FATAL does not reach the fatal context, while a
//   context opened afterwards gets it; the control API's QP, CQ and port events on the fatal
//   context are refused with EIO.
TEST_F(DeviceFatalTest, FatalIsTheLastEvent) {
  const ChildResult result = RunChecksInChild(
      [&] {
        ContextPtr dead = OpenAnotherContext();
        ASSERT_NE(dead, nullptr);
        CqPtr dead_cq(ibv_create_cq(dead.get(), 4, nullptr, nullptr, 0));
        ASSERT_NE(dead_cq, nullptr) << ErrnoName(errno);
        RaiseFatalAndRead(dead.get());
        EXPECT_EQ(sim().RaiseCqEvent(dead_cq.get(), IBV_EVENT_CQ_ERR), EIO);
        EXPECT_EQ(sim().RaisePortEvent(dead.get(), port(), IBV_EVENT_SM_CHANGE), EIO);
        ContextPtr fresh = OpenAnotherContext();
        ASSERT_NE(fresh, nullptr);
        ASSERT_EQ(sim().RaisePortEvent(fresh.get(), port(), IBV_EVENT_LID_CHANGE), 0);
        ibv_async_event event = {};
        ASSERT_TRUE(GetAsyncEventWithin(fresh.get(), &event, kReturnWindow));
        EXPECT_EQ(event.event_type, IBV_EVENT_LID_CHANGE) << ibv_event_type_str(event.event_type);
        ibv_ack_async_event(&event);
        EXPECT_TRUE(NoAsyncEventWithin(dead.get(), kQuietWindow));
      },
      kChildTimeout, "events after DEVICE_FATAL");
  EXPECT_TRUE(Passed(result));
}

// Rule: ibv_get_async_event(3): DEVICE_FATAL is an event of the device whose HCA failed; another
//   device's traffic goes on and no verb on either may hang.
// Checks: while a loopback pair on the second device posts RDMA WRITEs without pause, DEVICE_FATAL
//   is raised 200 times on fresh contexts of the first device (four open each time); every raise
//   and every post returns.
TEST_F(DeviceFatalTest, RaiseDuringAnotherDevicesTrafficReturns) {
  const std::vector<std::string> names = DeviceNames();
  SKIP_IF(names.size() < 2) << "(the device list has fewer than 2 devices)";
  const ChildResult result = RunChecksInChild(
      [&] {
        std::string error;
        ContextPtr busy = OpenDeviceByName(names[1], &error);
        ASSERT_NE(busy, nullptr) << error;
        PdPtr busy_pd(ibv_alloc_pd(busy.get()));
        ASSERT_NE(busy_pd, nullptr) << ErrnoName(errno);
        Buffer buf;
        ASSERT_TRUE(buf.Register(busy_pd.get(), 4096));
        QpEnd from;
        QpEnd to;
        ASSERT_TRUE(CreateEndOn(busy.get(), busy_pd.get(), &from, EndConfig{}));
        ASSERT_TRUE(CreateEndOn(busy.get(), busy_pd.get(), &to, EndConfig{}));
        ibv_ah_attr self = {};
        ASSERT_TRUE(PortAddress(busy.get(), 1, gid_index(), false, &self));
        ASSERT_TRUE(BringUp(from.get(), 1, to.qp_num(), self, ConnectParams{}));
        ASSERT_TRUE(BringUp(to.get(), 1, from.qp_num(), self, ConnectParams{}));

        std::atomic<bool> stop{false};
        std::thread traffic([&] {
          ibv_sge sge = buf.Sge(0, 64);
          // Unsignaled: each WRITE retires once acknowledged, so the queue never fills.
          while (!stop.load()) {
            if (PostOne(from.get(), RdmaWr(1, IBV_WR_RDMA_WRITE, &sge, 1, buf.addr(2048), buf.rkey(), 0)) != 0) break;
          }
        });
        bool opened = true;
        for (int round = 0; round < 200 && opened; ++round) {
          std::vector<ContextPtr> doomed;
          for (int i = 0; i < 4 && opened; ++i) {
            doomed.push_back(OpenDeviceByName(names[0], &error));
            opened = doomed.back() != nullptr;
          }
          EXPECT_TRUE(opened) << error;  // no ASSERT: the traffic thread must be joined
          if (opened) {
            EXPECT_EQ(sim().RaiseDeviceFatal(doomed.front().get()), 0) << "simverbs_raise_device_fatal";
          }
        }
        stop = true;
        traffic.join();
      },
      kChildTimeout, "DEVICE_FATAL on one device while another sends");
  EXPECT_TRUE(Passed(result));
}

}  // namespace
}  // namespace conformance
