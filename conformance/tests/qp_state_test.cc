// The QP state machine of ibv_modify_qp: which transitions exist, which
// attributes each one requires and allows per transport (IBTA Vol 1 table
// "QP State Transition Properties", the tables in ibv_modify_qp(3)), and the
// range checks on attribute values.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cerrno>
#include <string>
#include <vector>

#include "conformance/lib/backend_profile.h"
#include "conformance/lib/errno_capture.h"
#include "conformance/lib/qp_pair.h"
#include "conformance/lib/skip_if.h"
#include "conformance/lib/verbs_matchers.h"

namespace conformance {
namespace {

// Required attributes of the forward transitions (ibv_modify_qp(3) tables,
// IBV_QP_STATE left out).
constexpr int kInitRcUc = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
constexpr int kInitUd = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY;
constexpr int kRtrUc = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
constexpr int kRtrRc = kRtrUc | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
constexpr int kRtsRc =
    IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_TIMEOUT;
constexpr int kRtsUcUd = IBV_QP_SQ_PSN;

// What the forward transition into `to` requires (0 for the others).
int Required(ibv_qp_type type, ibv_qp_state to) {
  switch (to) {
    case IBV_QPS_INIT: return type == IBV_QPT_UD ? kInitUd : kInitRcUc;
    case IBV_QPS_RTR: return type == IBV_QPT_RC ? kRtrRc : type == IBV_QPT_UC ? kRtrUc : 0;
    case IBV_QPS_RTS: return type == IBV_QPT_RC ? kRtsRc : kRtsUcUd;
    default: return 0;
  }
}

// What the transition from -> to requires: the forward steps have their
// tables, every other legal transition requires nothing.
int RequiredFor(ibv_qp_type type, ibv_qp_state from, ibv_qp_state to) {
  const bool forward = (from == IBV_QPS_RESET && to == IBV_QPS_INIT) || (from == IBV_QPS_INIT && to == IBV_QPS_RTR) ||
                       (from == IBV_QPS_RTR && to == IBV_QPS_RTS);
  return forward ? Required(type, to) : 0;
}

const char* TypeName(ibv_qp_type type) {
  switch (type) {
    case IBV_QPT_RC: return "RC";
    case IBV_QPT_UC: return "UC";
    case IBV_QPT_UD: return "UD";
    default: return "X";
  }
}

const char* AttrName(int bit) {
  switch (bit) {
    case IBV_QP_CUR_STATE: return "CUR_STATE";
    case IBV_QP_EN_SQD_ASYNC_NOTIFY: return "EN_SQD_ASYNC_NOTIFY";
    case IBV_QP_ACCESS_FLAGS: return "ACCESS_FLAGS";
    case IBV_QP_PKEY_INDEX: return "PKEY_INDEX";
    case IBV_QP_PORT: return "PORT";
    case IBV_QP_QKEY: return "QKEY";
    case IBV_QP_AV: return "AV";
    case IBV_QP_PATH_MTU: return "PATH_MTU";
    case IBV_QP_TIMEOUT: return "TIMEOUT";
    case IBV_QP_RETRY_CNT: return "RETRY_CNT";
    case IBV_QP_RNR_RETRY: return "RNR_RETRY";
    case IBV_QP_RQ_PSN: return "RQ_PSN";
    case IBV_QP_MAX_QP_RD_ATOMIC: return "MAX_QP_RD_ATOMIC";
    case IBV_QP_MIN_RNR_TIMER: return "MIN_RNR_TIMER";
    case IBV_QP_SQ_PSN: return "SQ_PSN";
    case IBV_QP_MAX_DEST_RD_ATOMIC: return "MAX_DEST_RD_ATOMIC";
    case IBV_QP_DEST_QPN: return "DEST_QPN";
    default: return "ATTR";
  }
}

// One ibv_modify_qp call: a QP of `type` in `from`, asked to go to `to`
// with `mask` (IBV_QP_STATE is always added).
struct StateRow {
  ibv_qp_type type;
  ibv_qp_state from;
  ibv_qp_state to;
  int mask;
  std::string what;  // the name suffix: which attribute is missing or extra
};

void PrintTo(const StateRow& row, std::ostream* os) {
  *os << TypeName(row.type) << " " << QpStateName(row.from) << "->" << QpStateName(row.to) << " mask 0x" << std::hex
      << row.mask << std::dec << " " << row.what;
}

std::string RowName(const testing::TestParamInfo<StateRow>& info) {
  const StateRow& row = info.param;
  std::string name = std::string(TypeName(row.type)) + "_" + QpStateName(row.from) + "_to_" + QpStateName(row.to);
  if (!row.what.empty()) name += "_" + row.what;
  return name;
}

constexpr ibv_qp_type kTypes[] = {IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD};
constexpr ibv_qp_state kStates[] = {IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS, IBV_QPS_SQD, IBV_QPS_ERR};

// Every legal transition, with exactly its required attributes.
std::vector<StateRow> LegalRows() {
  std::vector<StateRow> rows;
  for (ibv_qp_type t : kTypes) {
    rows.push_back({t, IBV_QPS_RESET, IBV_QPS_INIT, Required(t, IBV_QPS_INIT), ""});
    rows.push_back({t, IBV_QPS_INIT, IBV_QPS_INIT, 0, ""});
    rows.push_back({t, IBV_QPS_INIT, IBV_QPS_RTR, Required(t, IBV_QPS_RTR), ""});
    rows.push_back({t, IBV_QPS_RTR, IBV_QPS_RTS, Required(t, IBV_QPS_RTS), ""});
    rows.push_back({t, IBV_QPS_RTS, IBV_QPS_RTS, 0, ""});
    rows.push_back({t, IBV_QPS_RTS, IBV_QPS_SQD, 0, ""});
    rows.push_back({t, IBV_QPS_SQD, IBV_QPS_RTS, 0, ""});
    rows.push_back({t, IBV_QPS_SQD, IBV_QPS_SQD, 0, ""});
    for (ibv_qp_state s : kStates) {
      rows.push_back({t, s, IBV_QPS_RESET, 0, ""});
      // Every state but RESET may go to ERR (the kernel's qp_state_table has
      // no RESET -> ERR, so no device accepts it).
      if (s != IBV_QPS_RESET) rows.push_back({t, s, IBV_QPS_ERR, 0, ""});
    }
  }
  return rows;
}

// Legal transitions with their required attributes plus one optional one
// (IBTA table "QP State Transition Properties", the kernel's qp_state_table).
std::vector<StateRow> OptionalAttributeRows() {
  auto row = [](ibv_qp_type t, ibv_qp_state from, ibv_qp_state to, int optional) {
    return StateRow{t, from, to, RequiredFor(t, from, to) | optional, std::string("with_") + AttrName(optional)};
  };
  return {
      row(IBV_QPT_RC, IBV_QPS_INIT, IBV_QPS_INIT, IBV_QP_ACCESS_FLAGS),
      row(IBV_QPT_UD, IBV_QPS_INIT, IBV_QPS_INIT, IBV_QP_QKEY),
      row(IBV_QPT_RC, IBV_QPS_INIT, IBV_QPS_RTR, IBV_QP_PKEY_INDEX),
      row(IBV_QPT_UC, IBV_QPS_INIT, IBV_QPS_RTR, IBV_QP_ACCESS_FLAGS),
      row(IBV_QPT_UD, IBV_QPS_INIT, IBV_QPS_RTR, IBV_QP_QKEY),
      row(IBV_QPT_RC, IBV_QPS_RTR, IBV_QPS_RTS, IBV_QP_MIN_RNR_TIMER),
      row(IBV_QPT_UC, IBV_QPS_RTR, IBV_QPS_RTS, IBV_QP_ACCESS_FLAGS),
      row(IBV_QPT_UD, IBV_QPS_RTR, IBV_QPS_RTS, IBV_QP_QKEY),
      row(IBV_QPT_RC, IBV_QPS_RTS, IBV_QPS_RTS, IBV_QP_ACCESS_FLAGS),
      row(IBV_QPT_UD, IBV_QPS_RTS, IBV_QPS_RTS, IBV_QP_QKEY),
      row(IBV_QPT_RC, IBV_QPS_RTS, IBV_QPS_SQD, IBV_QP_EN_SQD_ASYNC_NOTIFY),
      row(IBV_QPT_RC, IBV_QPS_SQD, IBV_QPS_SQD, IBV_QP_TIMEOUT),
      row(IBV_QPT_RC, IBV_QPS_SQD, IBV_QPS_RTS, IBV_QP_MIN_RNR_TIMER),
  };
}

// The forward transitions, each missing one required attribute.
std::vector<StateRow> MissingAttributeRows() {
  std::vector<StateRow> rows;
  const std::pair<ibv_qp_state, ibv_qp_state> steps[] = {
      {IBV_QPS_RESET, IBV_QPS_INIT}, {IBV_QPS_INIT, IBV_QPS_RTR}, {IBV_QPS_RTR, IBV_QPS_RTS}};
  for (ibv_qp_type t : kTypes) {
    for (const auto& [from, to] : steps) {
      const int req = Required(t, to);
      for (int bit = 1; bit != 0 && bit <= req; bit <<= 1) {
        if (req & bit) rows.push_back({t, from, to, req & ~bit, std::string("without_") + AttrName(bit)});
      }
    }
  }
  return rows;
}

// The required attributes plus one that the transition neither requires nor
// allows (IBTA Vol 1 table "QP State Transition Properties"; the kernel's qp_state_table).
std::vector<StateRow> ExtraAttributeRows() {
  auto row = [](ibv_qp_type t, ibv_qp_state from, ibv_qp_state to, int extra) {
    return StateRow{t, from, to, RequiredFor(t, from, to) | extra, std::string("with_") + AttrName(extra)};
  };
  return {
      row(IBV_QPT_RC, IBV_QPS_RESET, IBV_QPS_INIT, IBV_QP_QKEY),
      row(IBV_QPT_RC, IBV_QPS_RESET, IBV_QPS_INIT, IBV_QP_AV),
      row(IBV_QPT_RC, IBV_QPS_RESET, IBV_QPS_INIT, IBV_QP_CUR_STATE),
      row(IBV_QPT_UD, IBV_QPS_RESET, IBV_QPS_INIT, IBV_QP_ACCESS_FLAGS),
      row(IBV_QPT_RC, IBV_QPS_INIT, IBV_QPS_INIT, IBV_QP_AV),
      row(IBV_QPT_RC, IBV_QPS_INIT, IBV_QPS_RTR, IBV_QP_SQ_PSN),
      row(IBV_QPT_UC, IBV_QPS_INIT, IBV_QPS_RTR, IBV_QP_MAX_DEST_RD_ATOMIC),
      row(IBV_QPT_UD, IBV_QPS_INIT, IBV_QPS_RTR, IBV_QP_AV),
      row(IBV_QPT_RC, IBV_QPS_RTR, IBV_QPS_RTS, IBV_QP_PATH_MTU),
      row(IBV_QPT_UC, IBV_QPS_RTR, IBV_QPS_RTS, IBV_QP_MIN_RNR_TIMER),
      row(IBV_QPT_UD, IBV_QPS_RTR, IBV_QPS_RTS, IBV_QP_ACCESS_FLAGS),
      row(IBV_QPT_RC, IBV_QPS_RTS, IBV_QPS_RTS, IBV_QP_DEST_QPN),
      row(IBV_QPT_RC, IBV_QPS_RTS, IBV_QPS_SQD, IBV_QP_SQ_PSN),
  };
}

// Transitions the state diagram does not have, with the attributes the
// target state would need.
std::vector<StateRow> IllegalTransitionRows() {
  std::vector<StateRow> rows;
  const std::pair<ibv_qp_state, ibv_qp_state> rc[] = {
      {IBV_QPS_RESET, IBV_QPS_RTR}, {IBV_QPS_RESET, IBV_QPS_RTS}, {IBV_QPS_RESET, IBV_QPS_SQD},
      {IBV_QPS_INIT, IBV_QPS_RTS},  {IBV_QPS_INIT, IBV_QPS_SQD},  {IBV_QPS_RTR, IBV_QPS_INIT},
      {IBV_QPS_RTR, IBV_QPS_RTR},   {IBV_QPS_RTR, IBV_QPS_SQD},   {IBV_QPS_RTS, IBV_QPS_INIT},
      {IBV_QPS_RTS, IBV_QPS_RTR},   {IBV_QPS_SQD, IBV_QPS_INIT},  {IBV_QPS_SQD, IBV_QPS_RTR},
      {IBV_QPS_ERR, IBV_QPS_INIT},  {IBV_QPS_ERR, IBV_QPS_RTR},   {IBV_QPS_ERR, IBV_QPS_RTS},
      {IBV_QPS_ERR, IBV_QPS_SQD},
  };
  for (const auto& [from, to] : rc) rows.push_back({IBV_QPT_RC, from, to, Required(IBV_QPT_RC, to), ""});
  for (ibv_qp_type t : kTypes) rows.push_back({t, IBV_QPS_RESET, IBV_QPS_ERR, 0, ""});
  rows.push_back({IBV_QPT_UC, IBV_QPS_RESET, IBV_QPS_RTS, Required(IBV_QPT_UC, IBV_QPS_RTS), ""});
  rows.push_back({IBV_QPT_UC, IBV_QPS_RTR, IBV_QPS_INIT, Required(IBV_QPT_UC, IBV_QPS_INIT), ""});
  rows.push_back({IBV_QPT_UD, IBV_QPS_RESET, IBV_QPS_RTR, Required(IBV_QPT_UD, IBV_QPS_RTR), ""});
  rows.push_back({IBV_QPT_UD, IBV_QPS_INIT, IBV_QPS_RTS, Required(IBV_QPT_UD, IBV_QPS_RTS), ""});
  rows.push_back({IBV_QPT_UD, IBV_QPS_RTS, IBV_QPS_INIT, Required(IBV_QPT_UD, IBV_QPS_INIT), ""});
  return rows;
}

// A QP of one type and helpers to drive it into any state.
class QpStateFixture : public QpTest {
 protected:
  testing::AssertionResult CreateQp(ibv_qp_type type) {
    EndConfig config;
    config.type = type;
    return CreateEnd(&a_, config);
  }
  ibv_qp* qp() const { return a_.get(); }

  // Valid values for every attribute the tables mention, aimed at the QP
  // itself (a loopback to its own QP number).
  ibv_qp_attr FullAttr(ibv_qp_state to) const {
    ibv_qp_attr attr = {};
    attr.qp_state = to;
    attr.cur_qp_state = IBV_QPS_RESET;
    attr.pkey_index = 0;
    attr.port_num = port();
    attr.qkey = kTestQkey;
    attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    attr.ah_attr = LocalAddress();
    attr.path_mtu = DefaultMtu();
    attr.dest_qp_num = qp()->qp_num;
    attr.rq_psn = 0;
    attr.sq_psn = 0;
    attr.max_dest_rd_atomic = 1;
    attr.max_rd_atomic = 1;
    attr.min_rnr_timer = 12;
    attr.timeout = 14;
    attr.retry_cnt = 7;
    attr.rnr_retry = 7;
    return attr;
  }

  int ModifyWith(ibv_qp_state to, int mask) {
    ibv_qp_attr attr = FullAttr(to);
    return ibv_modify_qp(qp(), &attr, mask | IBV_QP_STATE);
  }

  // Drives the new QP from RESET into `state` along the canonical path.
  testing::AssertionResult DriveTo(ibv_qp_state state) {
    const ibv_qp_type type = qp()->qp_type;
    if (state == IBV_QPS_RESET) return testing::AssertionSuccess();
    if (auto ok = Step(IBV_QPS_INIT, Required(type, IBV_QPS_INIT)); !ok || state == IBV_QPS_INIT) return ok;
    if (state == IBV_QPS_ERR) return Step(IBV_QPS_ERR, 0);  // RESET -> ERR does not exist
    if (auto ok = Step(IBV_QPS_RTR, Required(type, IBV_QPS_RTR)); !ok || state == IBV_QPS_RTR) return ok;
    if (auto ok = Step(IBV_QPS_RTS, Required(type, IBV_QPS_RTS)); !ok || state == IBV_QPS_RTS) return ok;
    if (auto ok = Step(IBV_QPS_SQD, 0); !ok) return ok;
    return SqDrainEnds(qp());
  }

  // The state as ibv_query_qp and qp->state report it.
  testing::AssertionResult StateIs(ibv_qp_state want) {
    ibv_qp_state queried = IBV_QPS_UNKNOWN;
    if (auto ok = QueryQpState(qp(), &queried); !ok) return ok;
    if (queried != want || qp()->state != want) {
      return testing::AssertionFailure() << "ibv_query_qp says " << QpStateName(queried) << ", qp->state says "
                                         << QpStateName(qp()->state) << ", expected " << QpStateName(want);
    }
    return testing::AssertionSuccess();
  }

 private:
  testing::AssertionResult Step(ibv_qp_state to, int mask) {
    const int rc = ModifyWith(to, mask);
    if (rc != 0) {
      return testing::AssertionFailure() << "setting up: ibv_modify_qp to " << QpStateName(to) << " returned "
                                         << ErrnoName(rc);
    }
    return testing::AssertionSuccess();
  }
};

class QpStateTest : public QpStateFixture, public testing::WithParamInterface<StateRow> {};

// Rule: ibv_modify_qp(3): the tables give "for each QP Transport Service Type, the minimum list of
//   attributes that must be changed upon transitioning QP state from: Reset --> Init --> RTR -->
//   RTS"; IBTA Vol 1 ch. 10 and table "QP State Transition Properties": the other legal
//   transitions (Init->Init, RTS->RTS, RTS->SQD, SQD->RTS, SQD->SQD, any state -> Reset and -> Error)
//   require no attribute, and each transition also allows a list of optional attributes; it
//   "returns 0 on success".
// Checks: from the row's state, ibv_modify_qp to the row's state with exactly the required
//   attributes (Legal rows) or those plus one optional attribute (OptionalAttribute rows) returns 0,
//   and ibv_query_qp and qp->state then report the new state.
TEST_P(QpStateTest, TransitionSucceeds) {
  const StateRow& row = GetParam();
  ASSERT_TRUE(CreateQp(row.type));
  ASSERT_TRUE(DriveTo(row.from));
  EXPECT_EQ(ModifyWith(row.to, row.mask), 0);
  EXPECT_TRUE(StateIs(row.to));
}

INSTANTIATE_TEST_SUITE_P(Legal, QpStateTest, testing::ValuesIn(LegalRows()), RowName);
INSTANTIATE_TEST_SUITE_P(OptionalAttribute, QpStateTest, testing::ValuesIn(OptionalAttributeRows()), RowName);

class QpStateInvalidTest : public QpStateFixture, public testing::WithParamInterface<StateRow> {};

// Rule: ibv_modify_qp(3): "If any of the modify attributes or the modify mask are invalid, none of
//   the attributes will be modified (including the QP state)" and it returns "the value of errno
//   on failure"; IBTA Vol 1 ch. 11 (Modify Queue Pair): a transition the state diagram lacks, a
//   missing required attribute or an attribute the transition does not allow is an invalid
//   modifier (EINVAL in Linux, ib_modify_qp_is_ok).
// Checks: the row's modify returns EINVAL, and ibv_query_qp and qp->state still report the row's
//   starting state.
TEST_P(QpStateInvalidTest, TransitionFails) {
  const StateRow& row = GetParam();
  ASSERT_TRUE(CreateQp(row.type));
  ASSERT_TRUE(DriveTo(row.from));
  EXPECT_THAT(ModifyWith(row.to, row.mask), ReturnsErrno(EINVAL));
  EXPECT_TRUE(StateIs(row.from)) << "a failed modify changed the state";
}

INSTANTIATE_TEST_SUITE_P(MissingAttribute, QpStateInvalidTest, testing::ValuesIn(MissingAttributeRows()), RowName);
INSTANTIATE_TEST_SUITE_P(ExtraAttribute, QpStateInvalidTest, testing::ValuesIn(ExtraAttributeRows()), RowName);
INSTANTIATE_TEST_SUITE_P(IllegalTransition, QpStateInvalidTest, testing::ValuesIn(IllegalTransitionRows()),
                         RowName);

// Range checks on attribute values: each modify below has a valid transition
// and mask, and one value out of range.
class QpAttrTest : public QpStateFixture {};

// Rule: ibv_modify_qp(3): port_num is the "Primary port number"; ibv_query_device(3): ports are numbered 1 to
//   phys_port_cnt; IBTA Vol 1 ch. 11 (Modify Queue Pair): an invalid port is an invalid modifier.
//   ibv_modify_qp(3) returns "the value of errno on failure": libibverbs returns the errno the failed kernel
//   command left, so errno holds it too (a program's perror names the failure).
// Checks: RESET->INIT with port_num 0 returns EINVAL, errno is EINVAL, and the QP stays in RESET.
TEST_F(QpAttrTest, ModifyFails_PortNumZero) {
  ASSERT_TRUE(CreateQp(IBV_QPT_RC));
  ibv_qp_attr attr = FullAttr(IBV_QPS_INIT);
  attr.port_num = 0;
  errno = 0;
  EXPECT_THAT(ibv_modify_qp(qp(), &attr, IBV_QP_STATE | kInitRcUc), ReturnsErrno(EINVAL));
  EXPECT_EQ(errno, EINVAL) << ErrnoName(errno);
  EXPECT_TRUE(StateIs(IBV_QPS_RESET));
}

// Rule: ibv_modify_qp(3): port_num is the "Primary port number"; ibv_query_device(3): phys_port_cnt is the
//   "Number of physical ports"; IBTA Vol 1 ch. 11 (Modify Queue Pair): invalid port number.
// Checks: RESET->INIT with port_num phys_port_cnt + 1 returns EINVAL and the QP stays in RESET.
TEST_F(QpAttrTest, ModifyFails_PortNumAbovePhysPortCnt) {
  SKIP_IF(device_attr().phys_port_cnt == 255);
  ASSERT_TRUE(CreateQp(IBV_QPT_RC));
  ibv_qp_attr attr = FullAttr(IBV_QPS_INIT);
  attr.port_num = static_cast<uint8_t>(device_attr().phys_port_cnt + 1);
  EXPECT_THAT(ibv_modify_qp(qp(), &attr, IBV_QP_STATE | kInitRcUc), ReturnsErrno(EINVAL));
  EXPECT_TRUE(StateIs(IBV_QPS_RESET));
}

// Rule: ibv_modify_qp(3): pkey_index is the "Primary P_Key index"; ibv_query_port(3): pkey_tbl_len is the
//   "Length of partition table"; IBTA Vol 1 ch. 11 (Modify Queue Pair): an index outside the P_Key table is
//   an invalid modifier.
// Checks: RESET->INIT with pkey_index = pkey_tbl_len returns EINVAL and the QP stays in RESET.
TEST_F(QpAttrTest, ModifyFails_PkeyIndexAtTableLen) {
  ASSERT_TRUE(CreateQp(IBV_QPT_RC));
  ibv_qp_attr attr = FullAttr(IBV_QPS_INIT);
  attr.pkey_index = port_attr().pkey_tbl_len;
  EXPECT_THAT(ibv_modify_qp(qp(), &attr, IBV_QP_STATE | kInitRcUc), ReturnsErrno(EINVAL));
  EXPECT_TRUE(StateIs(IBV_QPS_RESET));
}

// Rule: ibv_query_port(3): max_mtu is the "Max MTU supported by port"; IBTA Vol 1 ch. 11 (Modify Queue Pair):
//   a path MTU the port does not support is an invalid modifier.
// Checks: INIT->RTR with path_mtu one step above the port's max_mtu (past IBV_MTU_4096 when that
//   is the maximum) returns EINVAL and the QP stays in INIT.
TEST_F(QpAttrTest, ModifyFails_PathMtuAboveMaxMtu) {
  ASSERT_TRUE(CreateQp(IBV_QPT_RC));
  ASSERT_TRUE(DriveTo(IBV_QPS_INIT));
  ibv_qp_attr attr = FullAttr(IBV_QPS_RTR);
  attr.path_mtu = static_cast<ibv_mtu>(port_attr().max_mtu + 1);
  EXPECT_THAT(ibv_modify_qp(qp(), &attr, IBV_QP_STATE | kRtrRc), ReturnsErrno(EINVAL));
  EXPECT_TRUE(StateIs(IBV_QPS_INIT));
}

// Rule: ibv_modify_qp(3): retry_cnt is the "Retry count"; IBTA Vol 1 ch. 9 (transport timer and retries) and
//   ch. 11 (Modify Queue Pair): the retry count is a 3-bit value (0..7); a larger one is an invalid modifier.
// Checks: RTR->RTS with retry_cnt 8 returns EINVAL and the QP stays in RTR.
TEST_F(QpAttrTest, ModifyFails_RetryCntEight) {
  ASSERT_TRUE(CreateQp(IBV_QPT_RC));
  ASSERT_TRUE(DriveTo(IBV_QPS_RTR));
  ibv_qp_attr attr = FullAttr(IBV_QPS_RTS);
  attr.retry_cnt = 8;
  EXPECT_THAT(ibv_modify_qp(qp(), &attr, IBV_QP_STATE | kRtsRc), ReturnsErrno(EINVAL));
  EXPECT_TRUE(StateIs(IBV_QPS_RTR));
}

// Rule: ibv_modify_qp(3): rnr_retry is the "RNR retry"; IBTA Vol 1 9.7.5.2.8 and ch. 11 (Modify Queue Pair):
//   the RNR retry count is a 3-bit value (7 means infinite); a larger one is an invalid modifier.
// Checks: RTR->RTS with rnr_retry 8 returns EINVAL and the QP stays in RTR.
TEST_F(QpAttrTest, ModifyFails_RnrRetryEight) {
  ASSERT_TRUE(CreateQp(IBV_QPT_RC));
  ASSERT_TRUE(DriveTo(IBV_QPS_RTR));
  ibv_qp_attr attr = FullAttr(IBV_QPS_RTS);
  attr.rnr_retry = 8;
  EXPECT_THAT(ibv_modify_qp(qp(), &attr, IBV_QP_STATE | kRtsRc), ReturnsErrno(EINVAL));
  EXPECT_TRUE(StateIs(IBV_QPS_RTR));
}

// Rule: ibv_modify_qp(3): alt_port_num is the "Alternate port number" and alt_timeout the "Local ack timeout
//   for alternate path"; drivers/infiniband/core/uverbs_cmd.c modify_qp: an alternate port that is not valid,
//   or not the alternate address's port, is EINVAL; rxe_qp_chk_attr: alt_timeout above 31 is EINVAL.
// Checks: INIT->RTR with IBV_QP_ALT_PATH returns EINVAL, and the QP stays in INIT, for each of: alt_port_num
//   phys_port_cnt + 1 (the address's port too), alt_port_num 0, and alt_timeout 32.
TEST_F(QpAttrTest, ModifyFails_AlternatePathOutOfRange) {
  SKIP_IF(device_attr().phys_port_cnt == 255);
  ASSERT_TRUE(CreateQp(IBV_QPT_RC));
  ASSERT_TRUE(DriveTo(IBV_QPS_INIT));
  const auto with_alt_path = [&](uint8_t alt_port, uint8_t alt_timeout) {
    ibv_qp_attr attr = FullAttr(IBV_QPS_RTR);
    attr.alt_ah_attr = LocalAddress();
    attr.alt_ah_attr.port_num = alt_port;
    attr.alt_port_num = alt_port;
    attr.alt_timeout = alt_timeout;
    attr.alt_pkey_index = 0;
    return ibv_modify_qp(qp(), &attr, IBV_QP_STATE | kRtrRc | IBV_QP_ALT_PATH);
  };
  const auto beyond = static_cast<uint8_t>(device_attr().phys_port_cnt + 1);
  EXPECT_THAT(with_alt_path(beyond, 14), ReturnsErrno(EINVAL)) << "alt_port_num " << int{beyond};
  EXPECT_THAT(with_alt_path(0, 14), ReturnsErrno(EINVAL)) << "alt_port_num 0";
  EXPECT_THAT(with_alt_path(port(), 32), ReturnsErrno(EINVAL)) << "alt_timeout 32";
  EXPECT_TRUE(StateIs(IBV_QPS_INIT));
}

// Rule: ibv_modify_qp(3): ah_attr is the "Primary path address vector"; drivers/infiniband/core/
//   uverbs_cmd.c modify_qp: with IB_QP_AV the address's port must be valid
//   (rdma_is_port_valid(dest.port_num)), and at INIT->RTR it must be the QP's own port ("Check the
//   port number included in the primary AV against the port number in the qp struct"): EINVAL.
// Checks: INIT->RTR with ah_attr.port_num 0, and with phys_port_cnt + 1, returns EINVAL and the QP
//   stays in INIT.
TEST_F(QpAttrTest, ModifyFails_AddressOnAnotherPort) {
  SKIP_IF(device_attr().phys_port_cnt == 255);
  ASSERT_TRUE(CreateQp(IBV_QPT_RC));
  ASSERT_TRUE(DriveTo(IBV_QPS_INIT));
  for (const auto address_port : {uint8_t{0}, static_cast<uint8_t>(device_attr().phys_port_cnt + 1)}) {
    ibv_qp_attr attr = FullAttr(IBV_QPS_RTR);
    attr.ah_attr.port_num = address_port;
    EXPECT_THAT(ibv_modify_qp(qp(), &attr, IBV_QP_STATE | kRtrRc), ReturnsErrno(EINVAL))
        << "ah_attr.port_num " << int{address_port};
  }
  EXPECT_TRUE(StateIs(IBV_QPS_INIT));
}

// Rule: ibv_modify_qp(3): ah_attr is the "Primary path address vector"; on RoCE the kernel resolves a
//   unicast destination GID through the IP stack (drivers/infiniband/core/verbs.c: _ib_modify_qp ->
//   ib_resolve_eth_dmac -> rdma_addr_find_l2_eth_by_grh), which refuses the zero GID with EINVAL: a
//   program that never filled in its peer's GID fails here, not with a retry error later.
// Checks: (a RoCE port) INIT->RTR with an all-zero dgid returns EINVAL and the QP stays in INIT.
TEST_F(QpAttrTest, ModifyFails_ZeroDestinationGidOnRoce) {
  SKIP_IF(port_attr().link_layer != IBV_LINK_LAYER_ETHERNET) << "(an InfiniBand address is its LID)";
  ASSERT_TRUE(CreateQp(IBV_QPT_RC));
  ASSERT_TRUE(DriveTo(IBV_QPS_INIT));
  ibv_qp_attr attr = FullAttr(IBV_QPS_RTR);
  attr.ah_attr.grh.dgid = {};
  EXPECT_THAT(ibv_modify_qp(qp(), &attr, IBV_QP_STATE | kRtrRc), ReturnsErrno(EINVAL));
  EXPECT_TRUE(StateIs(IBV_QPS_INIT));
}

// Rule: ibv_modify_qp(3): IBV_QP_ALT_PATH sets the alternate path; drivers/infiniband/core/verbs.c
//   _ib_modify_qp: "Today the core code can only handle alternate paths and APM for IB. Ban them in
//   roce mode" (EINVAL unless both ports are InfiniBand).
// Checks: (a RoCE port) INIT->RTR with an otherwise valid alternate path on the same port returns
//   EINVAL and the QP stays in INIT.
TEST_F(QpAttrTest, ModifyFails_AlternatePathOnRoce) {
  SKIP_IF(port_attr().link_layer != IBV_LINK_LAYER_ETHERNET) << "(an InfiniBand port takes alternate paths)";
  ASSERT_TRUE(CreateQp(IBV_QPT_RC));
  ASSERT_TRUE(DriveTo(IBV_QPS_INIT));
  ibv_qp_attr attr = FullAttr(IBV_QPS_RTR);
  attr.alt_ah_attr = LocalAddress();
  attr.alt_port_num = port();
  attr.alt_timeout = 14;
  EXPECT_THAT(ibv_modify_qp(qp(), &attr, IBV_QP_STATE | kRtrRc | IBV_QP_ALT_PATH), ReturnsErrno(EINVAL));
  EXPECT_TRUE(StateIs(IBV_QPS_INIT));
}

// Rule: ibv_modify_qp(3): qp_access_flags are "Mask of enabled remote access operations"; the kernel
//   passes them on unchecked (uverbs_cmd.c modify_qp copies them; rxe_qp_from_attr stores them, mlx5
//   reads only the remote bits), so a flag that means nothing for a QP is no error.
// Checks: RESET->INIT with IBV_ACCESS_MW_BIND added to REMOTE_WRITE returns 0 and the QP is in INIT.
TEST_F(QpAttrTest, ModifySucceeds_AccessFlagTheQpDoesNotUse) {
  ASSERT_TRUE(CreateQp(IBV_QPT_RC));
  ibv_qp_attr attr = FullAttr(IBV_QPS_INIT);
  attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_MW_BIND;
  EXPECT_EQ(ibv_modify_qp(qp(), &attr, IBV_QP_STATE | kInitRcUc), 0);
  EXPECT_TRUE(StateIs(IBV_QPS_INIT));
}

// Rule: ibv_modify_qp(3): attr_mask is a mask of enum ibv_qp_attr_mask; a bit beyond the ones the
//   kernel knows is refused before anything else (uverbs_cmd.c ib_uverbs_modify_qp: EOPNOTSUPP).
// Checks: RESET->INIT with the required mask and bit 21 added returns EOPNOTSUPP and the QP stays
//   in RESET.
TEST_F(QpAttrTest, ModifyFails_UnknownMaskBit) {
  ASSERT_TRUE(CreateQp(IBV_QPT_RC));
  ibv_qp_attr attr = FullAttr(IBV_QPS_INIT);
  EXPECT_THAT(ibv_modify_qp(qp(), &attr, IBV_QP_STATE | kInitRcUc | (1 << 21)), ReturnsErrno(EOPNOTSUPP));
  EXPECT_TRUE(StateIs(IBV_QPS_RESET));
}

// Rule: ibv_modify_qp(3): IBV_QP_RATE_LIMIT sets "rate_limit"; which QPs take it is the provider's: mlx5
//   limits raw packet QPs only (EINVAL for others), and a provider that passes no mask bit above
//   IBV_QP_DEST_QPN refuses it before anything else (libibverbs' ibv_cmd_modify_qp: EOPNOTSUPP, rxe;
//   backend question ModifyQpRateLimitUnsupported).
// Checks: INIT->INIT of an RC QP with IBV_QP_RATE_LIMIT (1000 kbps) returns EOPNOTSUPP where the backend
//   says so, else EINVAL; the QP stays in INIT.
TEST_F(QpAttrTest, ModifyWithRateLimitFollowsBackend) {
  const bool unsupported = Backend().Answer("ModifyQpRateLimitUnsupported", false);
  ASSERT_TRUE(CreateQp(IBV_QPT_RC));
  ASSERT_TRUE(DriveTo(IBV_QPS_INIT));
  ibv_qp_attr attr = {};
  attr.qp_state = IBV_QPS_INIT;
  attr.rate_limit = 1000;
  EXPECT_THAT(ibv_modify_qp(qp(), &attr, IBV_QP_STATE | IBV_QP_RATE_LIMIT),
              ReturnsErrno(unsupported ? EOPNOTSUPP : EINVAL));
  EXPECT_TRUE(StateIs(IBV_QPS_INIT));
}

// Rule: ibv_modify_qp(3) and ibv_create_ah(3) take the source GID by its index; the kernel resolves it
//   in the GID table and an empty entry has none (rdma_fill_sgid_attr -> rdma_get_gid_attr: ENODATA, in
//   _ib_modify_qp and rdma_create_user_ah); ibv_query_gid_ex(3) reports an empty entry with ENODATA.
// Checks: with sgid_index naming an entry of the port's table that ibv_query_gid_ex reports empty,
//   INIT->RTR returns ENODATA (the QP stays in INIT) and ibv_create_ah returns NULL with errno ENODATA.
TEST_F(QpAttrTest, ModifyAndCreateAhFail_EmptySourceGidEntry) {
  int empty = -1;
  for (int i = 0; i < port_attr().gid_tbl_len && empty < 0; ++i) {
    ibv_gid_entry entry = {};
    if (ibv_query_gid_ex(context(), port(), static_cast<uint32_t>(i), &entry, 0) == ENODATA) empty = i;
  }
  SKIP_IF(empty < 0) << "(every GID entry of the port is in use)";
  ASSERT_TRUE(CreateQp(IBV_QPT_RC));
  ASSERT_TRUE(DriveTo(IBV_QPS_INIT));
  ibv_qp_attr attr = FullAttr(IBV_QPS_RTR);
  attr.ah_attr.is_global = 1;
  attr.ah_attr.grh.sgid_index = static_cast<uint8_t>(empty);
  attr.ah_attr.grh.hop_limit = 64;
  EXPECT_THAT(ibv_modify_qp(qp(), &attr, IBV_QP_STATE | kRtrRc), ReturnsErrno(ENODATA));
  EXPECT_TRUE(StateIs(IBV_QPS_INIT));
  EXPECT_THAT(CaptureErrno([&] { return ibv_create_ah(pd(), &attr.ah_attr); }), ReturnsNullWithErrno(ENODATA));
}

// Rule: ibv_query_device(3): max_qp_init_rd_atom is the "Maximum depth per QP for initiation of RDMA Read &
//   atomic operations"; IBTA Vol 1 ch. 11 (Modify Queue Pair): a value above the HCA's maximum is an invalid
//   modifier.
// Checks: RTR->RTS with max_rd_atomic = max_qp_init_rd_atom + 1 returns EINVAL, QP stays in RTR.
TEST_F(QpAttrTest, ModifyFails_MaxRdAtomicAboveDeviceMax) {
  SKIP_IF(device_attr().max_qp_init_rd_atom >= 255);
  ASSERT_TRUE(CreateQp(IBV_QPT_RC));
  ASSERT_TRUE(DriveTo(IBV_QPS_RTR));
  ibv_qp_attr attr = FullAttr(IBV_QPS_RTS);
  attr.max_rd_atomic = static_cast<uint8_t>(device_attr().max_qp_init_rd_atom + 1);
  EXPECT_THAT(ibv_modify_qp(qp(), &attr, IBV_QP_STATE | kRtsRc), ReturnsErrno(EINVAL));
  EXPECT_TRUE(StateIs(IBV_QPS_RTR));
}

// Rule: ibv_query_device(3): max_qp_rd_atom is the "Maximum number of RDMA Read & atomic operations that can
//   be outstanding per QP" (as responder); IBTA Vol 1 ch. 11 (Modify Queue Pair): a value above the HCA's
//   maximum is an invalid modifier.
// Checks: INIT->RTR with max_dest_rd_atomic = max_qp_rd_atom + 1 returns EINVAL, QP stays in INIT.
TEST_F(QpAttrTest, ModifyFails_MaxDestRdAtomicAboveDeviceMax) {
  SKIP_IF(device_attr().max_qp_rd_atom >= 255);
  ASSERT_TRUE(CreateQp(IBV_QPT_RC));
  ASSERT_TRUE(DriveTo(IBV_QPS_INIT));
  ibv_qp_attr attr = FullAttr(IBV_QPS_RTR);
  attr.max_dest_rd_atomic = static_cast<uint8_t>(device_attr().max_qp_rd_atom + 1);
  EXPECT_THAT(ibv_modify_qp(qp(), &attr, IBV_QP_STATE | kRtrRc), ReturnsErrno(EINVAL));
  EXPECT_TRUE(StateIs(IBV_QPS_INIT));
}

// Rule: ibv_modify_qp(3): "If any of the modify attributes or the modify mask are invalid, none of
//   the attributes will be modified (including the QP state)."
// Checks: an INIT->RTR that also changes qp_access_flags (an optional attribute) but has an invalid
//   path_mtu fails, and ibv_query_qp still reports INIT and the old access flags.
TEST_F(QpAttrTest, FailedModifyChangesNoAttribute) {
  ASSERT_TRUE(CreateQp(IBV_QPT_RC));
  ASSERT_TRUE(DriveTo(IBV_QPS_INIT));  // qp_access_flags = IBV_ACCESS_REMOTE_WRITE
  ibv_qp_attr attr = FullAttr(IBV_QPS_RTR);
  attr.qp_access_flags = IBV_ACCESS_REMOTE_READ;
  attr.path_mtu = static_cast<ibv_mtu>(port_attr().max_mtu + 1);
  EXPECT_NE(ibv_modify_qp(qp(), &attr, IBV_QP_STATE | kRtrRc | IBV_QP_ACCESS_FLAGS), 0);
  ibv_qp_attr got = {};
  ibv_qp_init_attr init = {};
  ASSERT_EQ(ibv_query_qp(qp(), &got, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS, &init), 0);
  EXPECT_EQ(got.qp_state, IBV_QPS_INIT) << QpStateName(got.qp_state);
  EXPECT_EQ(got.qp_access_flags, static_cast<unsigned>(IBV_ACCESS_REMOTE_WRITE));
}

// Rule: ibv_query_qp(3): "Attribute values are valid if they have been set using
//   ibv_modify_qp()" - ibv_query_qp returns what the transitions set.
// Checks: an RC QP in RTS reads back its port, P_Key index, access flags, path MTU, destination QP
//   number, PSNs, timeout, retry counts, RNR timer and read/atomic depths.
TEST_F(QpAttrTest, QueryReturnsModifiedAttributes) {
  ASSERT_TRUE(CreateQp(IBV_QPT_RC));
  ASSERT_TRUE(DriveTo(IBV_QPS_RTS));
  const ibv_qp_attr want = FullAttr(IBV_QPS_RTS);
  ibv_qp_attr got = {};
  ibv_qp_init_attr init = {};
  ASSERT_EQ(ibv_query_qp(qp(), &got, IBV_QP_STATE | IBV_QP_PORT | IBV_QP_PKEY_INDEX | IBV_QP_ACCESS_FLAGS |
                                         IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_SQ_PSN |
                                         IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                         IBV_QP_MIN_RNR_TIMER | IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC,
                         &init),
            0);
  EXPECT_EQ(got.qp_state, IBV_QPS_RTS);
  EXPECT_EQ(got.port_num, want.port_num);
  EXPECT_EQ(got.pkey_index, want.pkey_index);
  EXPECT_EQ(got.qp_access_flags, want.qp_access_flags);
  EXPECT_EQ(got.path_mtu, want.path_mtu);
  EXPECT_EQ(got.dest_qp_num, want.dest_qp_num);
  EXPECT_EQ(got.rq_psn, want.rq_psn);
  EXPECT_EQ(got.sq_psn, want.sq_psn);
  EXPECT_EQ(got.timeout, want.timeout);
  EXPECT_EQ(got.retry_cnt, want.retry_cnt);
  EXPECT_EQ(got.rnr_retry, want.rnr_retry);
  EXPECT_EQ(got.min_rnr_timer, want.min_rnr_timer);
  EXPECT_GE(got.max_rd_atomic, want.max_rd_atomic);
  EXPECT_GE(got.max_dest_rd_atomic, want.max_dest_rd_atomic);
}

}  // namespace
}  // namespace conformance
