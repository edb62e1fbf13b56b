// The async event queue of a context, and the enum-to-string helpers.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cerrno>
#include <memory>
#include <thread>

#include "conformance/lib/blocking_call.h"
#include "conformance/lib/cancellable_call.h"
#include "conformance/lib/errno_capture.h"
#include "conformance/lib/fd_poll.h"
#include "conformance/lib/timeouts.h"
#include "conformance/lib/verbs_matchers.h"
#include "conformance/lib/verbs_test.h"
#include "conformance/lib/watchdog.h"

namespace conformance {
namespace {

class AsyncEventTest : public VerbsTest {
 protected:
  // A thread in ibv_get_async_event on context (it acks what it gets), still blocked after the
  // block window: no event is raised.
  static void StartBlockedReader(ibv_context* context, std::unique_ptr<CancellableCall>* reader) {
    *reader = std::make_unique<CancellableCall>([context] {
      ibv_async_event event = {};
      if (ibv_get_async_event(context, &event) == 0) ibv_ack_async_event(&event);
    });
    ASSERT_TRUE((*reader)->started());
    std::this_thread::sleep_for(kBlockWindow);  // a bounded wait for a negative: it stays blocked
    ASSERT_FALSE((*reader)->returned()) << "ibv_get_async_event returned with no event raised";
  }
};

// Rule: ibv_get_async_event(3): "returns 0 on success, and -1 on error"; its non-blocking example
//   sets O_NONBLOCK on ctx->async_fd to "Set the async events queue work mode to be non-blocked".
// Checks: on an idle context with O_NONBLOCK, ibv_get_async_event returns -1 with errno EAGAIN
//   instead of waiting.
TEST_F(AsyncEventTest, GetAsyncEventFails_NonBlockingIdle) {
  ASSERT_EQ(SetNonBlocking(context()->async_fd), 0) << ErrnoName(errno);
  ibv_async_event event = {};
  EXPECT_THAT(CaptureErrno([&] { return ibv_get_async_event(context(), &event); }), FailsWithErrno(EAGAIN));
}

// Rule: ibv_get_async_event(3): "ibv_get_async_event() is a blocking function"; libibverbs blocks in
//   read(2) on the context's async_fd (device.c: ibv_get_async_event), which pthreads(7) lists as a
//   cancellation point, so pthread_cancel ends a thread blocked there - a common way to stop an event
//   thread before ibv_close_device.
// Checks: a thread blocked in ibv_get_async_event on a second context (still blocked after the block
//   window) is joined as PTHREAD_CANCELED within the return window of pthread_cancel, and
//   ibv_close_device of that context then returns 0 within the return window.
TEST_F(AsyncEventTest, CancelledReaderEndsAndTheDeviceCloses) {
  const ChildResult result = RunChecksInChild(
      [&] {
        ibv_context* context = OpenAnotherContext().release();
        ASSERT_NE(context, nullptr);
        std::unique_ptr<CancellableCall> reader;
        ASSERT_NO_FATAL_FAILURE(StartBlockedReader(context, &reader));
        ASSERT_TRUE(reader->CancelAndJoin(kReturnWindow))
            << "the thread blocked in ibv_get_async_event did not end on pthread_cancel";
        BlockingCall close_device([context] { return ibv_close_device(context); });
        if (!ExpectReturnsWithin(close_device, kReturnWindow)) return;
        EXPECT_EQ(close_device.result(), 0);
      },
      kChildTimeout, "pthread_cancel of a thread in ibv_get_async_event");
  EXPECT_TRUE(Passed(result));
}

// Rule: fork(2): "The child process is created with a single thread"; a reader blocked in
//   ibv_get_async_event in the parent is not in the child, and the kernel's event file knows nothing of
//   threads, so nothing in the child waits for it: ibv_close_device(3) "returns 0 on success".
// Checks: while a thread of this process is blocked in ibv_get_async_event on a second context, a child
//   made with fork() calls ibv_close_device on that context, which returns 0 and the child exits within
//   the child timeout; the reader is then cancelled and the context closed here.
TEST_F(AsyncEventTest, ForkedChildClosesTheDeviceOfABlockedParentReader) {
  const ChildResult result = RunChecksInChild(
      [&] {
        ibv_context* context = OpenAnotherContext().release();
        ASSERT_NE(context, nullptr);
        std::unique_ptr<CancellableCall> reader;
        ASSERT_NO_FATAL_FAILURE(StartBlockedReader(context, &reader));
        const ChildResult child = RunInChild([context] { return ibv_close_device(context) == 0 ? 0 : 1; },
                                             kReturnWindow, "ibv_close_device in a forked child");
        EXPECT_TRUE(Passed(child));
        ASSERT_TRUE(reader->CancelAndJoin(kReturnWindow));
        EXPECT_EQ(ibv_close_device(context), 0);
      },
      kChildTimeout, "fork() while a thread is in ibv_get_async_event");
  EXPECT_TRUE(Passed(result));
}

// Rule: ibv_get_async_event(3): the non-blocking example polls ctx->async_fd for POLLIN "until it
//   has an async event", so the fd is readable exactly when an event is queued.
// Checks: a fresh context's async_fd is not readable (poll with timeout 0).
TEST_F(AsyncEventTest, IdleAsyncFdNotReadable) { EXPECT_FALSE(WaitReadable(context()->async_fd, 0ms)); }

// Rule: ibv_event_type_str(3): "These functions return a constant string that describes the enum
//   value passed as their argument" (rdma-core's strings; out-of-range values give "unknown").
// Checks: the strings for CQ_ERR, PORT_ACTIVE, PORT_ERR, LID_CHANGE, DEVICE_FATAL, GID_CHANGE and
//   an undefined value.
TEST(EnumStringTest, EventTypeStrDescribesValues) {
  EXPECT_STREQ(ibv_event_type_str(IBV_EVENT_CQ_ERR), "CQ error");
  EXPECT_STREQ(ibv_event_type_str(IBV_EVENT_PORT_ACTIVE), "port active");
  EXPECT_STREQ(ibv_event_type_str(IBV_EVENT_PORT_ERR), "port error");
  EXPECT_STREQ(ibv_event_type_str(IBV_EVENT_LID_CHANGE), "LID change");
  EXPECT_STREQ(ibv_event_type_str(IBV_EVENT_DEVICE_FATAL), "local catastrophic error");
  EXPECT_STREQ(ibv_event_type_str(IBV_EVENT_GID_CHANGE), "GID table change");
  EXPECT_STREQ(ibv_event_type_str(static_cast<ibv_event_type>(1000)), "unknown");
}

// Rule: ibv_event_type_str(3) family: ibv_wc_status_str returns a constant string describing an
//   enum ibv_wc_status value (rdma-core's strings).
// Checks: the strings for SUCCESS, LOC_LEN_ERR, WR_FLUSH_ERR, REM_ACCESS_ERR and GENERAL_ERR.
TEST(EnumStringTest, WcStatusStrDescribesValues) {
  EXPECT_STREQ(ibv_wc_status_str(IBV_WC_SUCCESS), "success");
  EXPECT_STREQ(ibv_wc_status_str(IBV_WC_LOC_LEN_ERR), "local length error");
  EXPECT_STREQ(ibv_wc_status_str(IBV_WC_WR_FLUSH_ERR), "Work Request Flushed Error");
  EXPECT_STREQ(ibv_wc_status_str(IBV_WC_REM_ACCESS_ERR), "remote access error");
  EXPECT_STREQ(ibv_wc_status_str(IBV_WC_GENERAL_ERR), "general error");
}

// Rule: ibv_port_state_str(3): "returns a string describing the port state enum value
//   port_state" (rdma-core's strings; out-of-range values give "unknown").
// Checks: the strings for NOP, DOWN, INIT, ARMED, ACTIVE, ACTIVE_DEFER and an undefined value.
TEST(EnumStringTest, PortStateStrDescribesValues) {
  EXPECT_STREQ(ibv_port_state_str(IBV_PORT_NOP), "no state change (NOP)");
  EXPECT_STREQ(ibv_port_state_str(IBV_PORT_DOWN), "down");
  EXPECT_STREQ(ibv_port_state_str(IBV_PORT_INIT), "init");
  EXPECT_STREQ(ibv_port_state_str(IBV_PORT_ARMED), "armed");
  EXPECT_STREQ(ibv_port_state_str(IBV_PORT_ACTIVE), "active");
  EXPECT_STREQ(ibv_port_state_str(IBV_PORT_ACTIVE_DEFER), "active defer");
  EXPECT_STREQ(ibv_port_state_str(static_cast<ibv_port_state>(42)), "unknown");
}

// Rule: ibv_node_type_str(3): "returns a string describing the node type enum value node_type"
//   (rdma-core's strings; out-of-range values give "unknown").
// Checks: the strings for CA, SWITCH, ROUTER, RNIC and an undefined value.
TEST(EnumStringTest, NodeTypeStrDescribesValues) {
  EXPECT_STREQ(ibv_node_type_str(IBV_NODE_CA), "InfiniBand channel adapter");
  EXPECT_STREQ(ibv_node_type_str(IBV_NODE_SWITCH), "InfiniBand switch");
  EXPECT_STREQ(ibv_node_type_str(IBV_NODE_ROUTER), "InfiniBand router");
  EXPECT_STREQ(ibv_node_type_str(IBV_NODE_RNIC), "iWARP NIC");
  EXPECT_STREQ(ibv_node_type_str(static_cast<ibv_node_type>(99)), "unknown");
}

}  // namespace
}  // namespace conformance
