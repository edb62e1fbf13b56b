// The fault plan's reader (SIMVERBS_FAULTS, fixtures/FORMAT.md) and event
// names: strict, and every error names the file and the field.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "fault/fault_plan.h"
#include "fault/inject.h"

namespace simverbs {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(FaultEventNameTest, AcceptsNamesWithAndWithoutPrefixInAnyCase) {
  ibv_event_type type{};
  ASSERT_TRUE(ParseEventName("PORT_ERR", &type));
  EXPECT_EQ(type, IBV_EVENT_PORT_ERR);
  ASSERT_TRUE(ParseEventName("ibv_event_client_reregister", &type));
  EXPECT_EQ(type, IBV_EVENT_CLIENT_REREGISTER);
  EXPECT_STREQ(EventName(IBV_EVENT_GID_CHANGE), "GID_CHANGE");
}

TEST(FaultEventNameTest, RejectsWhatIsNotAnEvent) {
  ibv_event_type type{};
  EXPECT_FALSE(ParseEventName("PORT", &type));
  EXPECT_FALSE(ParseEventName("", &type));
  EXPECT_FALSE(ParseEventName("IBV_EVENT_", &type));
}

TEST(FaultPlanTest, AcceptsEachTriggerKind) {
  EXPECT_EQ(fault_plan::Check("p.json", R"({"description": "d", "faults": [
      {"trigger": {"post_send": 3, "qp": "#1"}, "action": {"event": "QP_FATAL"}},
      {"trigger": {"post_send": 1, "qp": "0x11"}, "action": {"event": "CQ_ERR", "cq": "recv"}},
      {"trigger": {"completions": 10}, "action": {"event": "SRQ_ERR"}},
      {"trigger": {"after_ms": 5}, "action": {"event": "QP_REQ_ERR", "qp": 17}}]})"),
            "");
}

TEST(FaultPlanTest, ErrorsNameTheFileAndTheField) {
  const std::string error = fault_plan::Check(
      "/tmp/plan.json", R"({"faults": [{"trigger": {"completions": 1, "when": 2}, "action": {"event": "CQ_ERR"}}]})");
  EXPECT_THAT(error, StartsWith("SIMVERBS_FAULTS=/tmp/plan.json: "));
  EXPECT_THAT(error, HasSubstr("faults[0].trigger.when: unknown field"));
}

TEST(FaultPlanTest, RejectsAmbiguousOrIncompleteFaults) {
  EXPECT_THAT(fault_plan::Check("p", R"({"faults": [{"trigger": {}, "action": {"event": "CQ_ERR"}}]})"),
              HasSubstr("exactly one of"));
  EXPECT_THAT(fault_plan::Check("p", R"({"faults": [{"trigger": {"post_send": 1}, "action": {"event": "QP_FATAL"}}]})"),
              HasSubstr("faults[0].trigger.qp: missing field"));
  EXPECT_THAT(fault_plan::Check("p", R"({"faults": [{"trigger": {"after_ms": 1}, "action": {"event": "QP_FATAL"}}]})"),
              HasSubstr("faults[0].action.qp"));
  EXPECT_THAT(fault_plan::Check("p", R"({"faults": [{"trigger": {"completions": 1}, "action": {}}]})"),
              HasSubstr("faults[0].action: no action"));
  EXPECT_THAT(fault_plan::Check("p", R"({"faults": [{"trigger": {"completions": 1},
                                                      "action": {"event": "QP_FATAL", "cq": "send"}}]})"),
              HasSubstr("faults[0].action.cq: only CQ_ERR names a CQ"));
  EXPECT_THAT(fault_plan::Check("p", R"({"faults": [{"trigger": {"completions": 1},
                                                      "action": {"event": "QP_FATAL", "qp": "#0"}}]})"),
              HasSubstr("faults[0].action.qp"));
  EXPECT_THAT(fault_plan::Check("p", "[1, 2"), HasSubstr("not valid JSON"));
}

}  // namespace
}  // namespace simverbs
