// Completion events, completions and CQ errors, driven through the simulator's
// control API (skipped on other backends).

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

#include "conformance/lib/backend_profile.h"
#include "conformance/lib/errno_capture.h"
#include "conformance/lib/event_acks.h"
#include "conformance/lib/event_wait.h"
#include "conformance/lib/sim_test.h"
#include "conformance/lib/timeouts.h"
#include "conformance/lib/verbs_handles.h"

namespace conformance {
namespace {

ibv_wc MakeWc(uint64_t wr_id, ibv_wc_opcode opcode = IBV_WC_RECV, ibv_wc_status status = IBV_WC_SUCCESS) {
  ibv_wc wc = {};
  wc.wr_id = wr_id;
  wc.status = status;
  wc.opcode = opcode;
  wc.byte_len = 64;
  wc.qp_num = 0x11;
  return wc;
}

class CqEventTest : public SimTest {
 protected:
  void SetUp() override {
    SimTest::SetUp();
    if (HasFatalFailure() || IsSkipped()) return;
    channel_.reset(ibv_create_comp_channel(context()));
    ASSERT_NE(channel_, nullptr) << ErrnoName(errno);
    cq_.reset(ibv_create_cq(context(), 4, &cq_context_marker_, channel_.get(), 0));
    ASSERT_NE(cq_, nullptr) << ErrnoName(errno);
  }

  void TearDown() override {
    // Acks first: destroying the CQ waits for them.
    acks_.AckAll();
    cq_.reset();
    channel_.reset();
  }

  ibv_comp_channel* channel() const { return channel_.get(); }
  ibv_cq* cq() const { return cq_.get(); }

  // Pushes a completion and requires the simulator to accept it.
  void Push(const ibv_wc& wc, bool solicited = false) {
    ASSERT_EQ(sim().PushCompletion(cq(), wc, solicited), 0) << "simverbs_push_completion";
  }

  // Reads the next completion event, which must be this fixture's CQ, and
  // remembers it for the ack.
  void ExpectOneCqEvent() {
    ibv_cq* event_cq = nullptr;
    void* event_context = nullptr;
    ASSERT_TRUE(GetCqEventWithin(channel(), &event_cq, &event_context, kReturnWindow));
    acks_.AddCqEvent(event_cq);
    EXPECT_EQ(event_cq, cq());
    EXPECT_EQ(event_context, &cq_context_marker_);
  }

  int cq_context_marker_ = 0;
  EventAcks acks_;

 private:
  ChannelPtr channel_;
  CqPtr cq_;
};

// Rule: ibv_req_notify_cq(3): "Upon the addition of a new CQ entry (CQE) to cq, a completion event
//   will be added to the completion channel associated with the CQ"; ibv_get_cq_event(3): "Fills
//   the arguments cq with the CQ that got the event and cq_context with the CQ's context."
// Checks: one completion on an armed CQ gives exactly one event, naming the CQ and its cq_context.
TEST_F(CqEventTest, ArmedCompletionRaisesOneChannelEvent) {
  ASSERT_EQ(ibv_req_notify_cq(cq(), 0), 0);
  Push(MakeWc(1));
  ExpectOneCqEvent();
  EXPECT_TRUE(NoCqEventWithin(channel(), kQuietWindow)) << "a second event for one completion";
}

// Rule: ibv_get_cq_event(3): the channel's fd is polled for its events (the non-blocking example);
//   the kernel wakes the event file's readers for every event it queues (uverbs_main.c
//   ib_uverbs_comp_handler: wake_up_interruptible), so epoll(7) in edge-triggered mode reports each
//   arrival, also one that joins events not read yet.
// Checks: with channel->fd in an epoll set with EPOLLIN | EPOLLET, an armed completion makes
//   epoll_wait return 1; with that event still unread, a second armed completion makes it return 1
//   again; both events are then read.
TEST_F(CqEventTest, EveryEventWakesAnEdgeTriggeredEpoll) {
  const int epoll = epoll_create1(EPOLL_CLOEXEC);
  ASSERT_GE(epoll, 0) << ErrnoName(errno);
  epoll_event interest = {};
  interest.events = EPOLLIN | EPOLLET;
  ASSERT_EQ(epoll_ctl(epoll, EPOLL_CTL_ADD, channel()->fd, &interest), 0) << ErrnoName(errno);
  const int window = static_cast<int>(kReturnWindow.count());
  epoll_event ready = {};
  ASSERT_EQ(ibv_req_notify_cq(cq(), 0), 0);
  Push(MakeWc(1));
  EXPECT_EQ(epoll_wait(epoll, &ready, 1, window), 1) << "the first event";
  ASSERT_EQ(ibv_req_notify_cq(cq(), 0), 0);
  Push(MakeWc(2));
  EXPECT_EQ(epoll_wait(epoll, &ready, 1, window), 1) << "an event arriving while one is unread";
  close(epoll);
  ExpectOneCqEvent();
  ExpectOneCqEvent();
}

// Rule: ibv_req_notify_cq(3): "The request for notification is "one shot." Only one completion
//   event will be generated for each call to ibv_req_notify_cq()."
// Checks: after the first event, a second completion gives none; re-arming brings the next one.
TEST_F(CqEventTest, ArmIsOneShot) {
  ASSERT_EQ(ibv_req_notify_cq(cq(), 0), 0);
  Push(MakeWc(1));
  ExpectOneCqEvent();
  Push(MakeWc(2));
  EXPECT_TRUE(NoCqEventWithin(channel(), kQuietWindow)) << "the arm fired twice";
  ASSERT_EQ(ibv_req_notify_cq(cq(), 0), 0);
  Push(MakeWc(3));
  ExpectOneCqEvent();
}

// Rule: ibv_req_notify_cq(3): a completion event is generated for a new CQE only after
//   "ibv_req_notify_cq() requests a completion notification" - one event per call.
// Checks: a completion on a CQ that was never armed gives no event.
TEST_F(CqEventTest, UnarmedCompletionRaisesNoEvent) {
  Push(MakeWc(1));
  EXPECT_TRUE(NoCqEventWithin(channel(), kQuietWindow));
}

// Rule: ibv_req_notify_cq(3): "If solicited_only is non-zero, an event is only generated for a new
//   CQE with that is considered solicited. A CQE is solicited if it is a receive completion for a
//   message with the Solicited Event header bit set".
// Checks: armed for solicited only, an unsolicited receive completion gives no event, and a later
//   solicited one does.
TEST_F(CqEventTest, SolicitedOnlyIgnoresUnsolicitedCompletion) {
  ASSERT_EQ(ibv_req_notify_cq(cq(), 1), 0);
  Push(MakeWc(1), /*solicited=*/false);
  EXPECT_TRUE(NoCqEventWithin(channel(), kQuietWindow)) << "an unsolicited completion fired a solicited-only arm";
  Push(MakeWc(2), /*solicited=*/true);
  ExpectOneCqEvent();
}

// Rule: ibv_req_notify_cq(3): "A CQE is solicited if it is a receive completion for a message with
//   the Solicited Event header bit set, or if the status is not successful." (rxe: only the SE bit
//   or a flush makes a receive completion solicited, rxe_resp.c: do_complete; backend question
//   ErrorCompletionSolicited.)
// Checks: armed for solicited only, an unsuccessful receive completion without the SE bit gives an
//   event, or none within the quiet window where the backend answers that errors are not solicited.
TEST_F(CqEventTest, SolicitedOnlyArmAndErrorCompletionFollowBackend) {
  ASSERT_EQ(ibv_req_notify_cq(cq(), 1), 0);
  Push(MakeWc(1, IBV_WC_RECV, IBV_WC_LOC_LEN_ERR), /*solicited=*/false);
  if (Backend().Answer("ErrorCompletionSolicited", true)) {
    ExpectOneCqEvent();
  } else {
    EXPECT_TRUE(NoCqEventWithin(channel(), kQuietWindow)) << "a receive completion in error woke the arm";
  }
}

// Rule: ibv_req_notify_cq(3): "All other successful receive completions, or any successful send
//   completion is unsolicited."
// Checks: armed for solicited only, a successful send completion gives no event even when it
//   carries the SE bit.
TEST_F(CqEventTest, SolicitedOnlyIgnoresSendCompletion) {
  ASSERT_EQ(ibv_req_notify_cq(cq(), 1), 0);
  Push(MakeWc(1, IBV_WC_SEND), /*solicited=*/true);
  EXPECT_TRUE(NoCqEventWithin(channel(), kQuietWindow)) << "a successful send completion counted as solicited";
}

// Rule: ibv_poll_cq(3): "polls the CQ cq for work completions and returns the first num_entries
//   ... in the array wc"; "Each polled completion is removed from the CQ".
// Checks: the pushed completion comes back with its wr_id, status, opcode, byte_len and qp_num,
//   and a second poll finds nothing.
TEST_F(CqEventTest, PollReturnsPushedCompletion) {
  const ibv_wc pushed = MakeWc(0xfeedbeef);
  Push(pushed);
  ibv_wc wc[2] = {};
  ASSERT_EQ(ibv_poll_cq(cq(), 2, wc), 1);
  EXPECT_EQ(wc[0].wr_id, pushed.wr_id);
  EXPECT_EQ(wc[0].status, pushed.status);
  EXPECT_EQ(wc[0].opcode, pushed.opcode);
  EXPECT_EQ(wc[0].byte_len, pushed.byte_len);
  EXPECT_EQ(wc[0].qp_num, pushed.qp_num);
  EXPECT_EQ(ibv_poll_cq(cq(), 2, wc), 0) << "a polled completion was not removed";
}

// Rule: ibv_poll_cq(3): "If the completion status is other than IBV_WC_SUCCESS, only the following
//   attributes are valid: wr_id, status, qp_num, and vendor_err."
// Checks: an error completion comes back with its wr_id, status and qp_num.
TEST_F(CqEventTest, PollReturnsErrorCompletion) {
  const ibv_wc pushed = MakeWc(77, IBV_WC_RECV, IBV_WC_WR_FLUSH_ERR);
  Push(pushed);
  ibv_wc wc = {};
  ASSERT_EQ(ibv_poll_cq(cq(), 1, &wc), 1);
  EXPECT_EQ(wc.wr_id, 77u);
  EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(wc.qp_num, pushed.qp_num);
}

// Rule: ibv_poll_cq(3): returns "the first num_entries (or all available completions if the CQ
//   contains fewer than this number)"; IBTA Vol 1 ch. 11 (Poll for Completion): completions are
//   returned in the order they were placed on the CQ.
// Checks: three completions come back from one poll of 8, in the order they were pushed.
TEST_F(CqEventTest, PollReturnsCompletionsInOrder) {
  Push(MakeWc(1));
  Push(MakeWc(2));
  Push(MakeWc(3));
  ibv_wc wc[8] = {};
  ASSERT_EQ(ibv_poll_cq(cq(), 8, wc), 3);
  EXPECT_EQ(wc[0].wr_id, 1u);
  EXPECT_EQ(wc[1].wr_id, 2u);
  EXPECT_EQ(wc[2].wr_id, 3u);
}

// Rule: ibv_resize_cq(3): "cqe must be at least the number of unpolled entries in the CQ cq" and
//   it "returns 0 on success, or the value of errno on failure".
// Checks: with 3 unpolled completions, resizing to 1 fails and the 3 completions are still there.
TEST_F(CqEventTest, ResizeFails_BelowUnpolledCount) {
  Push(MakeWc(1));
  Push(MakeWc(2));
  Push(MakeWc(3));
  EXPECT_GT(ibv_resize_cq(cq(), 1), 0);
  ibv_wc wc[8] = {};
  EXPECT_EQ(ibv_poll_cq(cq(), 8, wc), 3) << "a failed resize lost completions";
}

// Rule: ibv_get_async_event(3): "IBV_EVENT_CQ_ERR CQ is in error (CQ overrun)"; "One member of the
//   element union will be valid, depending on the event_type" - element.cq for a CQ event.
// Checks: a CQ error raised on the CQ reaches ibv_get_async_event as IBV_EVENT_CQ_ERR with
//   element.cq == the CQ.
TEST_F(CqEventTest, CqErrReachesAsyncQueueWithCq) {
  ASSERT_EQ(sim().RaiseCqEvent(cq(), IBV_EVENT_CQ_ERR), 0);
  ibv_async_event event = {};
  ASSERT_TRUE(GetAsyncEventWithin(context(), &event, kReturnWindow));
  acks_.AddAsyncEvent(event);
  EXPECT_EQ(event.event_type, IBV_EVENT_CQ_ERR) << ibv_event_type_str(event.event_type);
  EXPECT_EQ(event.element.cq, cq());
}

// Rule: ibv_poll_cq(3): "In case of a CQ overrun, the async event IBV_EVENT_CQ_ERR will be
//   triggered, and the CQ cannot be used"; "On failure, a negative value is returned."
//   Where an overrun leaves the CQ working (backend CqOverrunErrorsCq false: rxe), a raised CQ error does too.
// Checks: after IBV_EVENT_CQ_ERR (read and acknowledged), ibv_poll_cq returns a negative value (0, an empty
//   CQ, where the CQ keeps working).
TEST_F(CqEventTest, PollFails_AfterCqErr) {
  ASSERT_EQ(sim().RaiseCqEvent(cq(), IBV_EVENT_CQ_ERR), 0);
  ibv_async_event event = {};
  ASSERT_TRUE(GetAsyncEventWithin(context(), &event, kReturnWindow));
  acks_.AddAsyncEvent(event);
  ibv_wc wc = {};
  if (!Backend().Answer("CqOverrunErrorsCq", true)) {
    EXPECT_EQ(ibv_poll_cq(cq(), 1, &wc), 0);
    return;
  }
  EXPECT_LT(ibv_poll_cq(cq(), 1, &wc), 0);
}

// Rule: ibv_create_cq(3): the CQ has "at least cqe entries ... Check the cqe attribute in the
//   returned CQ for the actual size."
// Checks: exactly cq->cqe completions fit: no IBV_EVENT_CQ_ERR, and all of them can be polled.
TEST_F(CqEventTest, FullCqRaisesNoCqErr) {
  const int capacity = cq()->cqe;
  ASSERT_LE(capacity, 1 << 16) << "unexpectedly large CQ";
  for (int i = 0; i < capacity; ++i) Push(MakeWc(static_cast<uint64_t>(i)));
  EXPECT_TRUE(NoAsyncEventWithin(context(), kQuietWindow)) << "a CQ holding cqe completions overran";
  int polled = 0;
  ibv_wc wc[16];
  for (int n; (n = ibv_poll_cq(cq(), 16, wc)) > 0;) polled += n;
  EXPECT_EQ(polled, capacity);
}

// Rule: ibv_poll_cq(3): "The user should consume work completions at a rate that prevents CQ
//   overrun from occurrence. In case of a CQ overrun, the async event IBV_EVENT_CQ_ERR will be
//   triggered".
// Checks: one completion more than cq->cqe raises IBV_EVENT_CQ_ERR with element.cq == the CQ.
TEST_F(CqEventTest, OverrunRaisesCqErr) {
  const int capacity = cq()->cqe;
  ASSERT_LE(capacity, 1 << 16) << "unexpectedly large CQ";
  for (int i = 0; i < capacity; ++i) Push(MakeWc(static_cast<uint64_t>(i)));
  (void)sim().PushCompletion(cq(), MakeWc(0xdead), false);  // the overrun itself may be refused
  ibv_async_event event = {};
  ASSERT_TRUE(GetAsyncEventWithin(context(), &event, kReturnWindow));
  acks_.AddAsyncEvent(event);
  EXPECT_EQ(event.event_type, IBV_EVENT_CQ_ERR) << ibv_event_type_str(event.event_type);
  EXPECT_EQ(event.element.cq, cq());
}

}  // namespace
}  // namespace conformance
