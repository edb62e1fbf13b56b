// Arming a CQ (ibv_req_notify_cq) while completions are already in it.

#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include "conformance/lib/backend_profile.h"
#include "conformance/lib/errno_capture.h"
#include "conformance/lib/event_wait.h"
#include "conformance/lib/qp_pair.h"
#include "conformance/lib/skip_if.h"
#include "conformance/lib/timeouts.h"

namespace conformance {
namespace {

class CqArmTest : public QpTest {};

// Rule: ibv_req_notify_cq(3): "Upon the addition of a new CQ entry (CQE) to cq, a completion event
//   will be added to the completion channel associated with the CQ." Some hardware also fires when
//   armed while CQEs are unpolled - the extra event ibv_get_cq_event(3) tells programs to expect;
//   the backend's choice is ArmWithUnpolledCqeRaisesEvent.
// Checks: with one receive completion left unpolled in b's CQ, arming it 8 times gives no
//   completion event within the quiet window each time (a backend that fires would give one).
TEST_F(CqArmTest, ArmWithUnpolledCompletionGivesNoEvent) {
  SKIP_IF(Backend().Answer("ArmWithUnpolledCqeRaisesEvent", false)) << "(the backend fires when armed)";
  channel_.reset(ibv_create_comp_channel(context()));
  ASSERT_NE(channel_, nullptr) << ErrnoName(errno);
  EndConfig b_config;
  b_config.recv_channel = channel_.get();
  ASSERT_TRUE(MakePair(EndConfig{}, b_config, ConnectParams{}, ConnectParams{}));
  Buffer local;
  Buffer remote;
  ASSERT_TRUE(local.Register(pd(), 64));
  ASSERT_TRUE(remote.Register(pd(), 64));
  ibv_sge recv_sge = remote.Sge();
  ASSERT_EQ(PostRecv(b_.get(), 3, &recv_sge, 1), 0);
  ibv_sge send_sge = local.Sge(0, 16);
  ASSERT_EQ(PostOne(a_.get(), SendWr(1, &send_sge, 1)), 0);
  ibv_wc sent{};
  ASSERT_TRUE(PollOneCompletion(a_.send_cq.get(), &sent));  // acknowledged: the receive is complete
  ASSERT_EQ(sent.status, IBV_WC_SUCCESS) << DescribeWc(sent);
  for (int round = 0; round < 8; ++round) {
    ASSERT_EQ(ibv_req_notify_cq(b_.recv_cq.get(), 0), 0);
    EXPECT_TRUE(NoCqEventWithin(channel_.get(), kQuietWindow)) << "arm " << round;
  }
  ibv_wc wc{};
  ASSERT_TRUE(PollOneCompletion(b_.recv_cq.get(), &wc));
  EXPECT_EQ(wc.wr_id, 3u);
}

// Rule: ibv_req_notify_cq(3): "A CQE is solicited if it is a receive completion for a message with
//   the Solicited Event header bit set, or if the status is not successful." rxe posts every send
//   completion unsolicited, errors too (drivers/infiniband/sw/rxe/rxe_comp.c: do_complete); the
//   backend's answer is ErrorCompletionSolicited.
// Checks: a's send CQ armed for solicited completions only, an RDMA WRITE with an R_Key b never gave
//   completes with IBV_WC_REM_ACCESS_ERR, and a completion event comes (within the return window)
//   exactly when the backend answers that a send completion in error is solicited (else none within
//   the quiet window).
TEST_F(CqArmTest, SolicitedOnlyArmAndSendErrorFollowBackend) {
  const bool solicited = Backend().Answer("ErrorCompletionSolicited", true);
  channel_.reset(ibv_create_comp_channel(context()));
  ASSERT_NE(channel_, nullptr) << ErrnoName(errno);
  EndConfig a_config;
  a_config.send_channel = channel_.get();
  ASSERT_TRUE(MakePair(a_config, EndConfig{}, ConnectParams{}, ConnectParams{}));
  Buffer local;
  Buffer remote;
  ASSERT_TRUE(local.Register(pd(), 64));
  ASSERT_TRUE(remote.Register(pd(), 64));
  ASSERT_EQ(ibv_req_notify_cq(a_.send_cq.get(), 1), 0);
  ibv_sge sge = local.Sge(0, 16);
  ASSERT_EQ(PostOne(a_.get(), RdmaWr(1, IBV_WR_RDMA_WRITE, &sge, 1, remote.addr(), remote.rkey() ^ 0x80)), 0);
  ibv_wc wc{};
  ASSERT_TRUE(PollOneCompletion(a_.send_cq.get(), &wc));
  ASSERT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR) << DescribeWc(wc);
  if (solicited) {
    ibv_cq* cq = nullptr;
    void* cq_context = nullptr;
    ASSERT_TRUE(GetCqEventWithin(channel_.get(), &cq, &cq_context, kReturnWindow))
        << "the send completion in error did not wake the solicited-only arm";
    ibv_ack_cq_events(cq, 1);
    EXPECT_EQ(cq, a_.send_cq.get());
  } else {
    EXPECT_TRUE(NoCqEventWithin(channel_.get(), kQuietWindow)) << "the send completion in error woke the arm";
  }
}

}  // namespace
}  // namespace conformance
