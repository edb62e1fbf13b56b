// Completion event channels.

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cerrno>
#include <thread>

#include "conformance/lib/blocking_call.h"
#include "conformance/lib/cancellable_call.h"
#include "conformance/lib/errno_capture.h"
#include "conformance/lib/event_wait.h"
#include "conformance/lib/fd_poll.h"
#include "conformance/lib/timeouts.h"
#include "conformance/lib/verbs_handles.h"
#include "conformance/lib/verbs_matchers.h"
#include "conformance/lib/verbs_test.h"
#include "conformance/lib/watchdog.h"

namespace conformance {
namespace {

class CompChannelTest : public VerbsTest {
 protected:
  void SetUp() override {
    VerbsTest::SetUp();
    if (HasFatalFailure()) return;
    channel_.reset(ibv_create_comp_channel(context()));
    ASSERT_NE(channel_, nullptr) << "ibv_create_comp_channel: " << ErrnoName(errno);
  }

  ibv_comp_channel* channel() const { return channel_.get(); }

 private:
  ChannelPtr channel_;
};

// Rule: ibv_create_comp_channel(3): "A completion channel is essentially file descriptor that is
//   used to deliver completion notifications to a userspace process."
// Checks: channel->fd is an open descriptor (fcntl F_GETFL works), distinct from async_fd, and
//   the channel belongs to its context.
TEST_F(CompChannelTest, FdIsOpenDescriptor) {
  EXPECT_NE(fcntl(channel()->fd, F_GETFL), -1) << ErrnoName(errno);
  EXPECT_NE(channel()->fd, context()->async_fd);
  EXPECT_EQ(channel()->context, context());
}

// Rule: ibv_get_cq_event(3): the non-blocking example polls "channel->fd" for POLLIN until "it
//   has a completion event", so the fd is readable exactly when an event is queued.
// Checks: a new channel with no CQ is not readable (poll with timeout 0).
TEST_F(CompChannelTest, IdleFdNotReadable) { EXPECT_FALSE(WaitReadable(channel()->fd, 0ms)); }

// Rule: ibv_get_cq_event(3): "returns 0 on success, and -1 on error"; the non-blocking example
//   sets O_NONBLOCK on channel->fd, after which an empty channel cannot block.
// Checks: with O_NONBLOCK and no event, ibv_get_cq_event returns -1 with errno EAGAIN.
TEST_F(CompChannelTest, GetCqEventFails_NonBlockingEmpty) {
  ASSERT_EQ(SetNonBlocking(channel()->fd), 0) << ErrnoName(errno);
  ibv_cq* cq = nullptr;
  void* cq_context = nullptr;
  EXPECT_THAT(CaptureErrno([&] { return ibv_get_cq_event(channel(), &cq, &cq_context); }), FailsWithErrno(EAGAIN));
}

// Rule: ibv_create_comp_channel(3): "ibv_destroy_comp_channel() fails if any CQs are still
//   associated with the completion event channel being destroyed" and "returns 0 on success, or
//   the value of errno on failure".
// Checks: destroy with a CQ attached returns EBUSY; once the CQ is destroyed it returns 0.
TEST_F(CompChannelTest, DestroyFails_CqAttached) {
  ibv_comp_channel* channel = ibv_create_comp_channel(context());
  ASSERT_NE(channel, nullptr) << ErrnoName(errno);
  ibv_cq* cq = ibv_create_cq(context(), 4, nullptr, channel, 0);
  ASSERT_NE(cq, nullptr) << ErrnoName(errno);
  EXPECT_EQ(cq->channel, channel);
  EXPECT_THAT(ibv_destroy_comp_channel(channel), ReturnsErrno(EBUSY));
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
  EXPECT_EQ(ibv_destroy_comp_channel(channel), 0);
}

// Rule: ibv_get_cq_event(3): "ibv_get_cq_event() waits for the next completion event"; libibverbs
//   blocks in read(2) on channel->fd (verbs.c: ibv_get_cq_event), a cancellation point (pthreads(7)),
//   so pthread_cancel ends a thread blocked there; ibv_create_comp_channel(3): the channel is then
//   destroyed with ibv_destroy_comp_channel once no CQ uses it.
// Checks: a thread blocked in ibv_get_cq_event on an armed CQ's channel (still blocked after the
//   block window) is joined as PTHREAD_CANCELED within the return window of pthread_cancel; then
//   ibv_destroy_cq and ibv_destroy_comp_channel each return 0 within the return window.
TEST_F(CompChannelTest, CancelledReaderEndsAndTheChannelIsDestroyed) {
  const ChildResult result = RunChecksInChild(
      [&] {
        ibv_comp_channel* channel = ibv_create_comp_channel(context());
        ASSERT_NE(channel, nullptr) << ErrnoName(errno);
        ibv_cq* cq = ibv_create_cq(context(), 4, nullptr, channel, 0);
        ASSERT_NE(cq, nullptr) << ErrnoName(errno);
        ASSERT_EQ(ibv_req_notify_cq(cq, 0), 0);
        CancellableCall reader([channel] {
          ibv_cq* event_cq = nullptr;
          void* event_context = nullptr;
          if (ibv_get_cq_event(channel, &event_cq, &event_context) == 0) ibv_ack_cq_events(event_cq, 1);
        });
        ASSERT_TRUE(reader.started());
        std::this_thread::sleep_for(kBlockWindow);  // a bounded wait for a negative: it stays blocked
        ASSERT_FALSE(reader.returned()) << "ibv_get_cq_event returned with no completion";
        ASSERT_TRUE(reader.CancelAndJoin(kReturnWindow))
            << "the thread blocked in ibv_get_cq_event did not end on pthread_cancel";
        BlockingCall destroy([cq, channel] {
          const int rc = ibv_destroy_cq(cq);
          return rc != 0 ? rc : ibv_destroy_comp_channel(channel);
        });
        if (!ExpectReturnsWithin(destroy, kReturnWindow)) return;
        EXPECT_EQ(destroy.result(), 0);
      },
      kChildTimeout, "pthread_cancel of a thread in ibv_get_cq_event");
  EXPECT_TRUE(Passed(result));
}

// Rule: ibv_req_notify_cq(3): "Upon the addition of a new CQ entry (CQE) to cq, a completion event
//   will be added to the completion channel associated with the CQ" - arming alone adds none.
// Checks: an armed CQ that gets no completion produces no event within the quiet window
//   (poll stays idle, non-blocking ibv_get_cq_event returns -1/EAGAIN).
TEST_F(CompChannelTest, ArmedCqWithoutCompletionsGivesNoEvent) {
  CqPtr cq(ibv_create_cq(context(), 4, nullptr, channel(), 0));
  ASSERT_NE(cq, nullptr) << ErrnoName(errno);
  ASSERT_EQ(ibv_req_notify_cq(cq.get(), 0), 0);
  EXPECT_TRUE(NoCqEventWithin(channel(), kQuietWindow));
}

}  // namespace
}  // namespace conformance
