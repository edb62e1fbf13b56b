// Completion event channels.

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cerrno>

#include "conformance/lib/errno_capture.h"
#include "conformance/lib/event_wait.h"
#include "conformance/lib/fd_poll.h"
#include "conformance/lib/timeouts.h"
#include "conformance/lib/verbs_handles.h"
#include "conformance/lib/verbs_matchers.h"
#include "conformance/lib/verbs_test.h"

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
