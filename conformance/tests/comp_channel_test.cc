// Completion event channels.

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <algorithm>
#include <cerrno>
#include <thread>
#include <vector>

#include "conformance/lib/blocking_call.h"
#include "conformance/lib/cancellable_call.h"
#include "conformance/lib/errno_capture.h"
#include "conformance/lib/event_wait.h"
#include "conformance/lib/fd_poll.h"
#include "conformance/lib/qp_pair.h"
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

// Rule: ibv_get_cq_event(3) "returns 0 on success, and -1 on error"; libibverbs reads the event
//   from channel->fd (libibverbs/verbs.c: ibv_get_cq_event), so once the program has closed that fd
//   the read fails (EBADF) at once, and the library never writes into a file that later takes the
//   fd's number: the kernel writes only to its own event file.
// Checks: in a child, a channel whose fd the program closed and whose number a memfd then took: an
//   RC QP whose receive CQ (armed, on the channel) takes the flush completion of a receive posted in
//   INIT when the QP enters ERR leaves the memfd empty; once the memfd is closed too, ibv_get_cq_event returns
//   -1 with errno EBADF (the completion event queued meanwhile is not handed out).
TEST_F(CompChannelTest, ChannelFdClosedByTheProgramIsNeitherWrittenNorWaitedOn) {
  const ChildResult result = RunChecksInChild(
      [&] {
        ContextPtr context = OpenAnotherContext();
        ASSERT_NE(context, nullptr);
        ibv_comp_channel* channel = ibv_create_comp_channel(context.get());  // (its fd is the memfd's at the end)
        ASSERT_NE(channel, nullptr);
        PdPtr pd(ibv_alloc_pd(context.get()));
        ASSERT_NE(pd, nullptr);
        EndConfig config;
        config.recv_channel = channel;
        QpEnd end;
        ASSERT_TRUE(CreateEndOn(context.get(), pd.get(), &end, config));
        ASSERT_EQ(close(channel->fd), 0);
        const int memfd = memfd_create("took-the-channel-number", MFD_CLOEXEC);
        if (memfd != channel->fd) GTEST_SKIP() << "the memfd did not take the channel's number";
        ASSERT_TRUE(ModifyToInit(end.get(), port(), ConnectParams{}));
        char byte = 0;
        ibv_sge sge = {reinterpret_cast<uintptr_t>(&byte), 1, 0};
        ASSERT_EQ(PostRecv(end.get(), 1, &sge, 1), 0);
        ASSERT_EQ(ibv_req_notify_cq(end.recv_cq.get(), 0), 0);
        ASSERT_TRUE(ModifyToState(end.get(), IBV_QPS_ERR));
        ibv_wc wc = {};
        ASSERT_TRUE(PollOneCompletion(end.recv_cq.get(), &wc));
        EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR) << DescribeWc(wc);
        struct stat st = {};
        ASSERT_EQ(fstat(memfd, &st), 0);
        EXPECT_EQ(st.st_size, 0) << "the library wrote into the file that took the channel's fd number";
        ASSERT_EQ(close(memfd), 0);
        ibv_cq* cq = nullptr;
        void* cq_context = nullptr;
        const IntCall got = CaptureErrno([&] { return ibv_get_cq_event(channel, &cq, &cq_context); });
        EXPECT_THAT(got, FailsWithErrno(EBADF));
        if (got.rc == 0) ibv_ack_cq_events(cq, 1);  // (so the CQ can go)
      },
      kChildTimeout, "ibv_get_cq_event on a channel whose fd the program closed");
  EXPECT_TRUE(Passed(result));
}

// Rule: ibv_create_comp_channel(3) "returns a pointer to the created completion event channel, or NULL if
//   the request fails", and ibv_open_device(3) "returns a pointer to the allocated device context, or NULL
//   if the request fails"; each needs a file descriptor (the channel's fd; async_fd and the command fd),
//   so when the process has none left (RLIMIT_NOFILE) they fail with EMFILE, as open(2) and the kernel's
//   get_unused_fd do, and the program goes on.
// Checks: in a child whose descriptors are used up (RLIMIT_NOFILE at most 1024, then dup until EMFILE),
//   ibv_create_comp_channel and ibv_open_device return NULL with errno EMFILE; once descriptors are free
//   again ibv_create_comp_channel succeeds.
TEST_F(CompChannelTest, CreateFails_NoFileDescriptorLeft) {
  const ChildResult result = RunChecksInChild(
      [&] {
        ContextPtr context = OpenAnotherContext();
        ASSERT_NE(context, nullptr);
        rlimit saved = {};
        ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
        rlimit tight = saved;
        tight.rlim_cur = std::min<rlim_t>(saved.rlim_cur, 1024);
        ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &tight), 0);
        std::vector<int> held;
        for (int fd = dup(context->async_fd); fd >= 0 && held.size() < 4096; fd = dup(context->async_fd)) {
          held.push_back(fd);
        }
        errno = 0;
        ibv_comp_channel* channel = ibv_create_comp_channel(context.get());
        const int channel_errno = errno;
        errno = 0;
        ibv_context* other = ibv_open_device(context->device);
        const int open_errno = errno;
        // Reporting a check needs descriptors: they go first.
        for (const int fd : held) close(fd);
        setrlimit(RLIMIT_NOFILE, &saved);
        EXPECT_EQ(channel, nullptr) << "a channel was made with no descriptor left";
        if (channel) ibv_destroy_comp_channel(channel);
        EXPECT_EQ(channel_errno, EMFILE) << ErrnoName(channel_errno);
        EXPECT_EQ(other, nullptr) << "a context was opened with no descriptor left";
        if (other) ibv_close_device(other);
        EXPECT_EQ(open_errno, EMFILE) << ErrnoName(open_errno);
        ChannelPtr again(ibv_create_comp_channel(context.get()));
        EXPECT_NE(again, nullptr) << "with descriptors free again: " << ErrnoName(errno);
      },
      kChildTimeout, "ibv_create_comp_channel and ibv_open_device with no descriptor left");
  EXPECT_TRUE(Passed(result));
}

// Rule: ibv_get_cq_event(3) "returns 0 on success, and -1 on error"; ibv_close_device(3) leaves the
//   program's other objects, and the kernel closes the event queue of the context's channels
//   (ib_uverbs_event_read: EIO "if device was disassociated and no event exists"). rxe 6.1 answers EIO
//   for a non-blocking read too (measured; the man pages do not say).
// Checks: (in a child, which leaves the channel of the closed context alone) after ibv_close_device of a
//   second context, a non-blocking ibv_get_cq_event on its empty channel returns -1 with errno EIO.
TEST_F(CompChannelTest, NonBlockingGetOnTheChannelOfAClosedContextFailsWithEio) {
  const ChildResult result = RunChecksInChild(
      [&] {
        ibv_context* context = OpenAnotherContext().release();
        ASSERT_NE(context, nullptr);
        ibv_comp_channel* channel = ibv_create_comp_channel(context);  // never destroyed: its context is gone
        ASSERT_NE(channel, nullptr) << ErrnoName(errno);
        ASSERT_EQ(SetNonBlocking(channel->fd), 0) << ErrnoName(errno);
        ASSERT_EQ(ibv_close_device(context), 0);
        ibv_cq* cq = nullptr;
        void* cq_context = nullptr;
        EXPECT_THAT(CaptureErrno([&] { return ibv_get_cq_event(channel, &cq, &cq_context); }),
                    FailsWithErrno(EIO));
      },
      kChildTimeout, "a non-blocking read of the channel of a closed context");
  EXPECT_TRUE(Passed(result));
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
