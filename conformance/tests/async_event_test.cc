// The async event queue of a context, and the enum-to-string helpers.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cerrno>

#include "conformance/lib/errno_capture.h"
#include "conformance/lib/fd_poll.h"
#include "conformance/lib/timeouts.h"
#include "conformance/lib/verbs_matchers.h"
#include "conformance/lib/verbs_test.h"

namespace conformance {
namespace {

class AsyncEventTest : public VerbsTest {};

// Rule: ibv_get_async_event(3): "returns 0 on success, and -1 on error"; its non-blocking example
//   sets O_NONBLOCK on ctx->async_fd to "Set the async events queue work mode to be non-blocked".
// Checks: on an idle context with O_NONBLOCK, ibv_get_async_event returns -1 with errno EAGAIN
//   instead of waiting.
TEST_F(AsyncEventTest, GetAsyncEventFails_NonBlockingIdle) {
  ASSERT_EQ(SetNonBlocking(context()->async_fd), 0) << ErrnoName(errno);
  ibv_async_event event = {};
  EXPECT_THAT(CaptureErrno([&] { return ibv_get_async_event(context(), &event); }), FailsWithErrno(EAGAIN));
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
