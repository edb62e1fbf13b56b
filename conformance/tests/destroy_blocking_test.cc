// The destroy/ack rules of libibverbs: a CQ's destroy waits until every event
// that was read for it is acknowledged, and only those. Every test runs in a
// watchdog child with the blocking call on its own thread, so a destroy stuck
// forever fails the test instead of hanging the run.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cerrno>

#include "conformance/lib/blocking_call.h"
#include "conformance/lib/errno_capture.h"
#include "conformance/lib/event_wait.h"
#include "conformance/lib/fd_poll.h"
#include "conformance/lib/sim_test.h"
#include "conformance/lib/timeouts.h"
#include "conformance/lib/verbs_handles.h"
#include "conformance/lib/watchdog.h"

namespace conformance {
namespace {

ibv_wc MakeWc(uint64_t wr_id) {
  ibv_wc wc = {};
  wc.wr_id = wr_id;
  wc.status = IBV_WC_SUCCESS;
  wc.opcode = IBV_WC_RECV;
  return wc;
}

class DestroyBlockingTest : public SimTest {
 protected:
  // Arms cq, pushes one completion and reads the event it raises (not acked).
  void GetOneCompEvent(ibv_comp_channel* channel, ibv_cq* cq) {
    ASSERT_EQ(ibv_req_notify_cq(cq, 0), 0);
    ASSERT_EQ(sim().PushCompletion(cq, MakeWc(1), false), 0);
    ibv_cq* event_cq = nullptr;
    void* event_context = nullptr;
    ASSERT_TRUE(GetCqEventWithin(channel, &event_cq, &event_context, kReturnWindow));
    ASSERT_EQ(event_cq, cq);
  }
};

// Rule: ibv_get_cq_event(3): "All completion events that ibv_get_cq_event() returns must be
//   acknowledged using ibv_ack_cq_events(). To avoid races, destroying a CQ will wait for all
//   completion events to be acknowledged".
// Checks: with one completion event read and not acknowledged, ibv_destroy_cq is still blocked
//   after 200 ms; after ibv_ack_cq_events(cq, 1) it returns 0 within 2 s.
TEST_F(DestroyBlockingTest, CqWaitsForUnackedCompEvent) {
  const ChildResult result = RunChecksInChild(
      [&] {
        ContextPtr context = OpenAnotherContext();
        ASSERT_NE(context, nullptr);
        ChannelPtr channel(ibv_create_comp_channel(context.get()));
        ASSERT_NE(channel, nullptr) << ErrnoName(errno);
        ibv_cq* cq = ibv_create_cq(context.get(), 4, nullptr, channel.get(), 0);
        ASSERT_NE(cq, nullptr) << ErrnoName(errno);
        ASSERT_NO_FATAL_FAILURE(GetOneCompEvent(channel.get(), cq));
        BlockingCall destroy([cq] { return ibv_destroy_cq(cq); });
        if (!ExpectBlocks(destroy, kBlockWindow)) return;
        const auto ack_one = [cq] { ibv_ack_cq_events(cq, 1); };
        if (!ExpectReturnsAfter(destroy, ack_one, kReturnWindow)) return;
        EXPECT_EQ(destroy.result(), 0);
      },
      kChildTimeout, "ibv_destroy_cq with an unacknowledged completion event");
  EXPECT_TRUE(Passed(result));
}

// Rule: ibv_get_cq_event(3): "destroying a CQ will wait for all completion events to be
//   acknowledged; this guarantees a one-to-one correspondence between acks and successful gets."
// Checks: with two events read, acknowledging one leaves ibv_destroy_cq blocked; acknowledging the
//   second lets it return 0.
TEST_F(DestroyBlockingTest, CqWaitsForEveryUnackedCompEvent) {
  const ChildResult result = RunChecksInChild(
      [&] {
        ContextPtr context = OpenAnotherContext();
        ASSERT_NE(context, nullptr);
        ChannelPtr channel(ibv_create_comp_channel(context.get()));
        ASSERT_NE(channel, nullptr) << ErrnoName(errno);
        ibv_cq* cq = ibv_create_cq(context.get(), 4, nullptr, channel.get(), 0);
        ASSERT_NE(cq, nullptr) << ErrnoName(errno);
        ASSERT_NO_FATAL_FAILURE(GetOneCompEvent(channel.get(), cq));
        ASSERT_NO_FATAL_FAILURE(GetOneCompEvent(channel.get(), cq));
        BlockingCall destroy([cq] { return ibv_destroy_cq(cq); });
        if (!ExpectBlocks(destroy, kBlockWindow)) return;
        ibv_ack_cq_events(cq, 1);
        if (!ExpectBlocks(destroy, kBlockWindow)) return;
        const auto ack_one = [cq] { ibv_ack_cq_events(cq, 1); };
        if (!ExpectReturnsAfter(destroy, ack_one, kReturnWindow)) return;
        EXPECT_EQ(destroy.result(), 0);
      },
      kChildTimeout, "ibv_destroy_cq with two unacknowledged completion events");
  EXPECT_TRUE(Passed(result));
}

// Rule: ibv_get_async_event(3): "All async events that ibv_get_async_event() returns must be
//   acknowledged using ibv_ack_async_event(). To avoid races, destroying an object (CQ, SRQ or QP)
//   will wait for all affiliated events for the object to be acknowledged".
// Checks: with IBV_EVENT_CQ_ERR read and not acknowledged, ibv_destroy_cq is still blocked after
//   200 ms; after ibv_ack_async_event it returns 0 within 2 s.
TEST_F(DestroyBlockingTest, CqWaitsForUnackedAsyncEvent) {
  const ChildResult result = RunChecksInChild(
      [&] {
        ContextPtr context = OpenAnotherContext();
        ASSERT_NE(context, nullptr);
        ibv_cq* cq = ibv_create_cq(context.get(), 4, nullptr, nullptr, 0);
        ASSERT_NE(cq, nullptr) << ErrnoName(errno);
        ASSERT_EQ(sim().RaiseCqEvent(cq, IBV_EVENT_CQ_ERR), 0);
        ibv_async_event event = {};
        ASSERT_TRUE(GetAsyncEventWithin(context.get(), &event, kReturnWindow));
        ASSERT_EQ(event.event_type, IBV_EVENT_CQ_ERR) << ibv_event_type_str(event.event_type);
        ASSERT_EQ(event.element.cq, cq);
        BlockingCall destroy([cq] { return ibv_destroy_cq(cq); });
        if (!ExpectBlocks(destroy, kBlockWindow)) return;
        const auto ack = [&event] { ibv_ack_async_event(&event); };
        if (!ExpectReturnsAfter(destroy, ack, kReturnWindow)) return;
        EXPECT_EQ(destroy.result(), 0);
      },
      kChildTimeout, "ibv_destroy_cq with an unacknowledged IBV_EVENT_CQ_ERR");
  EXPECT_TRUE(Passed(result));
}

// Rule: ibv_get_cq_event(3): the destroy waits for the events ibv_get_cq_event "returns", "a
//   one-to-one correspondence between acks and successful gets" - an event never read needs no
//   ack, and it must not be returned after its CQ is gone.
// Checks: with a completion event queued but not read, ibv_destroy_cq returns 0 within 2 s, and
//   the channel then has no event (non-blocking ibv_get_cq_event: -1/EAGAIN).
TEST_F(DestroyBlockingTest, CqDoesNotWaitForUnreadEvent) {
  const ChildResult result = RunChecksInChild(
      [&] {
        ContextPtr context = OpenAnotherContext();
        ASSERT_NE(context, nullptr);
        ChannelPtr channel(ibv_create_comp_channel(context.get()));
        ASSERT_NE(channel, nullptr) << ErrnoName(errno);
        ibv_cq* cq = ibv_create_cq(context.get(), 4, nullptr, channel.get(), 0);
        ASSERT_NE(cq, nullptr) << ErrnoName(errno);
        ASSERT_EQ(ibv_req_notify_cq(cq, 0), 0);
        ASSERT_EQ(sim().PushCompletion(cq, MakeWc(1), false), 0);
        ASSERT_TRUE(WaitReadable(channel->fd, kReturnWindow)) << "the completion raised no event";
        BlockingCall destroy([cq] { return ibv_destroy_cq(cq); });
        if (!ExpectReturnsWithin(destroy, kReturnWindow)) return;
        EXPECT_EQ(destroy.result(), 0);
        EXPECT_TRUE(NoCqEventWithin(channel.get(), kQuietWindow)) << "the destroyed CQ's event is still queued";
      },
      kChildTimeout, "ibv_destroy_cq with an unread completion event");
  EXPECT_TRUE(Passed(result));
}

// Rule: ibv_get_async_event(3): destroying an object "will wait for all affiliated events for the
//   object to be acknowledged; this avoids an application retrieving an affiliated event after
//   the corresponding object has already been destroyed."
// Checks: with IBV_EVENT_CQ_ERR queued but not read, ibv_destroy_cq returns 0 within 2 s, and the
//   event is gone (non-blocking ibv_get_async_event: -1/EAGAIN).
TEST_F(DestroyBlockingTest, CqDoesNotWaitForUnreadAsyncEvent) {
  const ChildResult result = RunChecksInChild(
      [&] {
        ContextPtr context = OpenAnotherContext();
        ASSERT_NE(context, nullptr);
        ibv_cq* cq = ibv_create_cq(context.get(), 4, nullptr, nullptr, 0);
        ASSERT_NE(cq, nullptr) << ErrnoName(errno);
        ASSERT_EQ(sim().RaiseCqEvent(cq, IBV_EVENT_CQ_ERR), 0);
        ASSERT_TRUE(WaitReadable(context->async_fd, kReturnWindow)) << "CQ_ERR raised no async event";
        BlockingCall destroy([cq] { return ibv_destroy_cq(cq); });
        if (!ExpectReturnsWithin(destroy, kReturnWindow)) return;
        EXPECT_EQ(destroy.result(), 0);
        EXPECT_TRUE(NoAsyncEventWithin(context.get(), kQuietWindow))
            << "an affiliated event of the destroyed CQ can still be retrieved";
      },
      kChildTimeout, "ibv_destroy_cq with an unread IBV_EVENT_CQ_ERR");
  EXPECT_TRUE(Passed(result));
}

// Rule: ibv_open_device(3): "ibv_close_device() returns 0 on success, -1 on failure"; the
//   ack-before-destroy rule of ibv_get_async_event(3) covers destroying "an object (CQ, SRQ or
//   QP)", not closing the context.
// Checks: with a port event read and not acknowledged, ibv_close_device returns 0 within 2 s.
TEST_F(DestroyBlockingTest, CloseDeviceDoesNotWait) {
  const ChildResult result = RunChecksInChild(
      [&] {
        ContextPtr owned = OpenAnotherContext();
        ASSERT_NE(owned, nullptr);
        ASSERT_EQ(sim().RaisePortEvent(owned.get(), port(), IBV_EVENT_SM_CHANGE), 0);
        ibv_async_event event = {};
        ASSERT_TRUE(GetAsyncEventWithin(owned.get(), &event, kReturnWindow));
        ibv_context* context = owned.release();
        BlockingCall close([context] { return ibv_close_device(context); });
        if (!ExpectReturnsWithin(close, kReturnWindow)) return;
        EXPECT_EQ(close.result(), 0);
      },
      kChildTimeout, "ibv_close_device with an unacknowledged async event");
  EXPECT_TRUE(Passed(result));
}

}  // namespace
}  // namespace conformance
