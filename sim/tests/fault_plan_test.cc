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

TEST(QpNumberTest, DecimalOrHexOnly) {
  uint32_t qpn = 0;
  ASSERT_TRUE(ParseQpNumber("17", &qpn));
  EXPECT_EQ(qpn, 17u);
  ASSERT_TRUE(ParseQpNumber("017", &qpn));  // decimal, not octal
  EXPECT_EQ(qpn, 17u);
  ASSERT_TRUE(ParseQpNumber("0x1f", &qpn));
  EXPECT_EQ(qpn, 31u);
  ASSERT_TRUE(ParseQpNumber("16777215", &qpn));
  EXPECT_EQ(qpn, 0xffffffu);
  for (const char* bad : {"", "0", "0x", "+1", " 1", "1 ", "-1", "1e3", "0x1000000", "16777216", "99999999999"}) {
    EXPECT_FALSE(ParseQpNumber(bad, &qpn)) << '"' << bad << '"';
  }
}

TEST(FaultPlanTest, QpNumbersAreDecimalOrHex) {
  const auto plan_naming = [](const std::string& qp) {
    return R"({"faults": [{"trigger": {"after_ms": 1}, "action": {"event": "QP_FATAL", "qp": ")" + qp + R"("}}]})";
  };
  EXPECT_EQ(fault_plan::Check("p", plan_naming("010")), "");
  for (const char* bad : {"# 1", "#0x2", "#0X2", " 17"}) {
    EXPECT_THAT(fault_plan::Check("p", plan_naming(bad)), HasSubstr("faults[0].action.qp")) << '"' << bad << '"';
  }
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

TEST(FaultPlanTest, AcceptsConnectionManagerActions) {
  EXPECT_EQ(fault_plan::Check("p.json", R"({"faults": [
      {"trigger": {"after_ms": 0}, "action": {"cm_reject": 28}},
      {"trigger": {"after_ms": 0}, "action": {"cm_reject": 10, "count": 2}},
      {"trigger": {"completions": 4}, "action": {"cm_drop": "dreq"}},
      {"trigger": {"after_ms": 1}, "action": {"cm_drop": "REQ", "count": 15}},
      {"trigger": {"after_ms": 2}, "action": {"cm_event": "ADDR_CHANGE", "port": 1}}]})"),
            "");
}

TEST(FaultPlanTest, RejectsBrokenConnectionManagerActions) {
  EXPECT_THAT(fault_plan::Check("p", R"({"faults": [{"trigger": {"after_ms": 0}, "action": {"cm_reject": 0}}]})"),
              HasSubstr("faults[0].action.cm_reject: expected an IBTA CM reject reason"));
  EXPECT_THAT(fault_plan::Check("p", R"({"faults": [{"trigger": {"after_ms": 0}, "action": {"cm_drop": "RTU"}}]})"),
              HasSubstr("faults[0].action.cm_drop: expected a CM message the CM resends: REQ, REP, DREQ, SIDR_REQ"));
  EXPECT_THAT(fault_plan::Check("p", R"({"faults": [{"trigger": {"after_ms": 0},
                                                      "action": {"cm_drop": "REQ", "count": 0}}]})"),
              HasSubstr("faults[0].action.count"));
  EXPECT_THAT(fault_plan::Check("p", R"({"faults": [{"trigger": {"after_ms": 0},
                                                      "action": {"cm_event": "DEVICE_REMOVAL"}}]})"),
              HasSubstr("DEVICE_FATAL"));
  EXPECT_THAT(fault_plan::Check("p", R"({"faults": [{"trigger": {"after_ms": 0},
                                                      "action": {"cm_reject": 28, "qp": "#1"}}]})"),
              HasSubstr("faults[0].action.qp: unknown field"));
}

}  // namespace
}  // namespace simverbs
