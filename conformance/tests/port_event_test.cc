// Unaffiliated async events (port and device events) and what they do to the
// port state, driven through the simulator's control API. Each test runs in a
// watchdog child, so a port left DOWN or a device left fatal by a failing test
// does not leak into the next one.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <string>

#include "conformance/lib/event_acks.h"
#include "conformance/lib/event_wait.h"
#include "conformance/lib/sim_test.h"
#include "conformance/lib/timeouts.h"
#include "conformance/lib/verbs_handles.h"
#include "conformance/lib/watchdog.h"

namespace conformance {
namespace {

struct EventCase {
  ibv_event_type type;
  bool port_event;  // false: a CA event (element carries nothing)
  const char* name;
};

class PortEventDeliveryTest : public SimTest, public ::testing::WithParamInterface<EventCase> {};

// Rule: ibv_get_async_event(3): "Port events: IBV_EVENT_PORT_ACTIVE, IBV_EVENT_PORT_ERR,
//   IBV_EVENT_LID_CHANGE, IBV_EVENT_PKEY_CHANGE, IBV_EVENT_SM_CHANGE, IBV_EVENT_CLIENT_REREGISTER,
//   IBV_EVENT_GID_CHANGE; CA events: IBV_EVENT_DEVICE_FATAL"; "One member of the element union
//   will be valid, depending on the event_type" - port_num for a port event.
// Checks: the raised event reaches ibv_get_async_event with its type and, for port events,
//   element.port_num == the port it was raised on.
TEST_P(PortEventDeliveryTest, ReachesAsyncQueue) {
  const EventCase event_case = GetParam();
  const ChildResult result = RunChecksInChild(
      [&] {
        ContextPtr context = OpenAnotherContext();
        ASSERT_NE(context, nullptr);
        const int rc = event_case.port_event ? sim().RaisePortEvent(context.get(), port(), event_case.type)
                                             : sim().RaiseDeviceFatal(context.get());
        ASSERT_EQ(rc, 0) << "raising " << event_case.name;
        ibv_async_event event = {};
        ASSERT_TRUE(GetAsyncEventWithin(context.get(), &event, kReturnWindow));
        EventAcks acks;
        acks.AddAsyncEvent(event);
        EXPECT_EQ(event.event_type, event_case.type) << ibv_event_type_str(event.event_type);
        if (event_case.port_event) {
          EXPECT_EQ(event.element.port_num, port());
        }
      },
      kChildTimeout, std::string("the async event ") + event_case.name);
  EXPECT_TRUE(Passed(result));
}

INSTANTIATE_TEST_SUITE_P(AllUnaffiliatedEvents, PortEventDeliveryTest,
                         ::testing::Values(EventCase{IBV_EVENT_PORT_ACTIVE, true, "PORT_ACTIVE"},
                                           EventCase{IBV_EVENT_PORT_ERR, true, "PORT_ERR"},
                                           EventCase{IBV_EVENT_LID_CHANGE, true, "LID_CHANGE"},
                                           EventCase{IBV_EVENT_PKEY_CHANGE, true, "PKEY_CHANGE"},
                                           EventCase{IBV_EVENT_SM_CHANGE, true, "SM_CHANGE"},
                                           EventCase{IBV_EVENT_CLIENT_REREGISTER, true, "CLIENT_REREGISTER"},
                                           EventCase{IBV_EVENT_GID_CHANGE, true, "GID_CHANGE"},
                                           EventCase{IBV_EVENT_DEVICE_FATAL, false, "DEVICE_FATAL"}),
                         [](const ::testing::TestParamInfo<EventCase>& info) { return std::string(info.param.name); });

class PortEventStateTest : public SimTest {};

// Rule: ibv_get_async_event(3): "IBV_EVENT_PORT_ERR Link became unavailable on a port";
//   ibv_query_port(3): state is the "Logical port state".
// Checks: after PORT_ERR is delivered, ibv_query_port reports the port DOWN.
TEST_F(PortEventStateTest, PortErrTakesPortDown) {
  const ChildResult result = RunChecksInChild(
      [&] {
        ContextPtr context = OpenAnotherContext();
        ASSERT_NE(context, nullptr);
        ASSERT_EQ(sim().RaisePortEvent(context.get(), port(), IBV_EVENT_PORT_ERR), 0);
        ibv_async_event event = {};
        ASSERT_TRUE(GetAsyncEventWithin(context.get(), &event, kReturnWindow));
        EventAcks acks;
        acks.AddAsyncEvent(event);
        ibv_port_attr attr = {};
        ASSERT_EQ(ibv_query_port(context.get(), port(), &attr), 0);
        EXPECT_EQ(attr.state, IBV_PORT_DOWN) << ibv_port_state_str(attr.state);
      },
      kChildTimeout, "PORT_ERR and ibv_query_port");
  EXPECT_TRUE(Passed(result));
}

// Rule: ibv_get_async_event(3): "IBV_EVENT_PORT_ACTIVE Link became active on a port";
//   ibv_query_port(3): state is the "Logical port state".
// Checks: a port taken down by PORT_ERR is ACTIVE again once PORT_ACTIVE is delivered.
TEST_F(PortEventStateTest, PortActiveRestoresActive) {
  const ChildResult result = RunChecksInChild(
      [&] {
        ContextPtr context = OpenAnotherContext();
        ASSERT_NE(context, nullptr);
        EventAcks acks;
        ibv_async_event event = {};
        ASSERT_EQ(sim().RaisePortEvent(context.get(), port(), IBV_EVENT_PORT_ERR), 0);
        ASSERT_TRUE(GetAsyncEventWithin(context.get(), &event, kReturnWindow));
        acks.AddAsyncEvent(event);
        ASSERT_EQ(sim().RaisePortEvent(context.get(), port(), IBV_EVENT_PORT_ACTIVE), 0);
        ASSERT_TRUE(GetAsyncEventWithin(context.get(), &event, kReturnWindow));
        acks.AddAsyncEvent(event);
        EXPECT_EQ(event.event_type, IBV_EVENT_PORT_ACTIVE) << ibv_event_type_str(event.event_type);
        ibv_port_attr attr = {};
        ASSERT_EQ(ibv_query_port(context.get(), port(), &attr), 0);
        EXPECT_EQ(attr.state, IBV_PORT_ACTIVE) << ibv_port_state_str(attr.state);
      },
      kChildTimeout, "PORT_ERR, PORT_ACTIVE and ibv_query_port");
  EXPECT_TRUE(Passed(result));
}

// Rule: ibv_get_async_event(3): "waits for the next async event of the RDMA device context
//   context"; a port event concerns the device, so every context opened on it gets one (as the
//   kernel delivers it to every uverbs file of the device).
// Checks: a port event raised through one context is delivered, once, to two open contexts.
TEST_F(PortEventStateTest, EveryOpenContextReceivesPortEvent) {
  const ChildResult result = RunChecksInChild(
      [&] {
        ContextPtr first = OpenAnotherContext();
        ContextPtr second = OpenAnotherContext();
        ASSERT_NE(first, nullptr);
        ASSERT_NE(second, nullptr);
        ASSERT_EQ(sim().RaisePortEvent(first.get(), port(), IBV_EVENT_LID_CHANGE), 0);
        EventAcks acks;
        for (ibv_context* context : {first.get(), second.get()}) {
          ibv_async_event event = {};
          ASSERT_TRUE(GetAsyncEventWithin(context, &event, kReturnWindow));
          acks.AddAsyncEvent(event);
          EXPECT_EQ(event.event_type, IBV_EVENT_LID_CHANGE) << ibv_event_type_str(event.event_type);
          EXPECT_EQ(event.element.port_num, port());
          EXPECT_TRUE(NoAsyncEventWithin(context, kQuietWindow)) << "delivered twice";
        }
      },
      kChildTimeout, "a port event on two contexts");
  EXPECT_TRUE(Passed(result));
}

}  // namespace
}  // namespace conformance
