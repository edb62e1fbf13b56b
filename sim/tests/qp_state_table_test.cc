// The QP transition table: the transitions of IBTA ch. 10 with their
// required and optional attributes, per QP type.

#include "qp_state_table.h"

#include "gtest/gtest.h"

namespace simverbs {
namespace {

constexpr int kRcInit = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
constexpr int kUdInit = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY;
constexpr int kRcRtr = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
constexpr int kRcRts = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                       IBV_QP_MAX_QP_RD_ATOMIC;

TEST(QpStateTableTest, RcPathToRtsWithRequiredMasks) {
  EXPECT_TRUE(QpTransitionIsValid(IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPT_RC, kRcInit));
  EXPECT_TRUE(QpTransitionIsValid(IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPT_RC, kRcRtr));
  EXPECT_TRUE(QpTransitionIsValid(IBV_QPS_RTR, IBV_QPS_RTS, IBV_QPT_RC, kRcRts));
}

TEST(QpStateTableTest, MissingRequiredAttributeIsInvalid) {
  EXPECT_FALSE(QpTransitionIsValid(IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPT_RC, kRcInit & ~IBV_QP_ACCESS_FLAGS));
  EXPECT_FALSE(QpTransitionIsValid(IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPT_RC, kRcRtr & ~IBV_QP_MIN_RNR_TIMER));
  EXPECT_FALSE(QpTransitionIsValid(IBV_QPS_RTR, IBV_QPS_RTS, IBV_QPT_RC, kRcRts & ~IBV_QP_TIMEOUT));
}

TEST(QpStateTableTest, AttributeNeitherRequiredNorOptionalIsInvalid) {
  EXPECT_FALSE(QpTransitionIsValid(IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPT_RC, kRcInit | IBV_QP_QKEY));
  EXPECT_FALSE(QpTransitionIsValid(IBV_QPS_INIT, IBV_QPS_ERR, IBV_QPT_RC, IBV_QP_STATE | IBV_QP_PORT));
}

TEST(QpStateTableTest, UdNeedsQkeyNotAccessFlags) {
  EXPECT_TRUE(QpTransitionIsValid(IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPT_UD, kUdInit));
  EXPECT_FALSE(QpTransitionIsValid(IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPT_UD,
                                   kUdInit - IBV_QP_QKEY + IBV_QP_ACCESS_FLAGS));
  EXPECT_TRUE(QpTransitionIsValid(IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPT_UD, IBV_QP_STATE));
  EXPECT_TRUE(QpTransitionIsValid(IBV_QPS_RTR, IBV_QPS_RTS, IBV_QPT_UD, IBV_QP_STATE | IBV_QP_SQ_PSN));
}

TEST(QpStateTableTest, SkippingAStateIsInvalid) {
  EXPECT_FALSE(QpTransitionIsValid(IBV_QPS_RESET, IBV_QPS_RTR, IBV_QPT_RC, kRcRtr));
  EXPECT_FALSE(QpTransitionIsValid(IBV_QPS_INIT, IBV_QPS_RTS, IBV_QPT_RC, kRcRts));
  EXPECT_FALSE(QpTransitionIsValid(IBV_QPS_ERR, IBV_QPS_RTS, IBV_QPT_RC, IBV_QP_STATE));
}

TEST(QpStateTableTest, AnyStateToResetAndErr) {
  for (int s = IBV_QPS_RESET; s <= IBV_QPS_ERR; ++s) {
    EXPECT_TRUE(QpTransitionIsValid(static_cast<ibv_qp_state>(s), IBV_QPS_RESET, IBV_QPT_UD, IBV_QP_STATE)) << s;
    if (s == IBV_QPS_RESET) continue;
    EXPECT_TRUE(QpTransitionIsValid(static_cast<ibv_qp_state>(s), IBV_QPS_ERR, IBV_QPT_UD, IBV_QP_STATE)) << s;
  }
}

TEST(QpStateTableTest, ResetToErrIsInvalid) {
  EXPECT_FALSE(QpTransitionIsValid(IBV_QPS_RESET, IBV_QPS_ERR, IBV_QPT_RC, IBV_QP_STATE));
}

TEST(QpStateTableTest, SqeRecoveryOnlyForUnreliableTypes) {
  EXPECT_TRUE(QpTransitionIsValid(IBV_QPS_SQE, IBV_QPS_RTS, IBV_QPT_UD, IBV_QP_STATE));
  EXPECT_TRUE(QpTransitionIsValid(IBV_QPS_SQE, IBV_QPS_RTS, IBV_QPT_UC, IBV_QP_STATE));
  EXPECT_FALSE(QpTransitionIsValid(IBV_QPS_SQE, IBV_QPS_RTS, IBV_QPT_RC, IBV_QP_STATE));
}

TEST(QpStateTableTest, CurStateOnlyFromRtrRtsSqdSqe) {
  EXPECT_TRUE(QpTransitionIsValid(IBV_QPS_RTS, IBV_QPS_RTS, IBV_QPT_RC, IBV_QP_CUR_STATE));
  EXPECT_FALSE(QpTransitionIsValid(IBV_QPS_INIT, IBV_QPS_INIT, IBV_QPT_RC, IBV_QP_CUR_STATE));
}

TEST(QpStateTableTest, RtsToSqdTakesOnlyTheNotifyFlag) {
  EXPECT_TRUE(QpTransitionIsValid(IBV_QPS_RTS, IBV_QPS_SQD, IBV_QPT_RC, IBV_QP_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY));
  EXPECT_FALSE(QpTransitionIsValid(IBV_QPS_RTS, IBV_QPS_SQD, IBV_QPT_RC, IBV_QP_STATE | IBV_QP_TIMEOUT));
}

// The kernel's qp_state_table: XRC_INI (XRC_SEND) takes the requester's
// attributes of RC, XRC_TGT (XRC_RECV) the responder's.
TEST(QpStateTableTest, XrcInitiatorRtrIsUcLikeAndRtsRcLike) {
  constexpr int kUcRtr = kRcRtr & ~(IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  EXPECT_TRUE(QpTransitionIsValid(IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPT_XRC_SEND, kRcInit));
  EXPECT_TRUE(QpTransitionIsValid(IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPT_XRC_SEND, kUcRtr));
  EXPECT_FALSE(QpTransitionIsValid(IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPT_XRC_SEND, kRcRtr));
  EXPECT_TRUE(QpTransitionIsValid(IBV_QPS_RTR, IBV_QPS_RTS, IBV_QPT_XRC_SEND, kRcRts));
  EXPECT_FALSE(QpTransitionIsValid(IBV_QPS_RTR, IBV_QPS_RTS, IBV_QPT_XRC_SEND, kRcRts & ~IBV_QP_RETRY_CNT));
  EXPECT_FALSE(QpTransitionIsValid(IBV_QPS_RTS, IBV_QPS_RTS, IBV_QPT_XRC_SEND, IBV_QP_STATE | IBV_QP_MIN_RNR_TIMER));
}

TEST(QpStateTableTest, XrcTargetRtrIsRcLikeAndRtsNeedsTimeoutAndSqPsn) {
  constexpr int kTgtRts = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_SQ_PSN;
  EXPECT_TRUE(QpTransitionIsValid(IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPT_XRC_RECV, kRcInit));
  EXPECT_TRUE(QpTransitionIsValid(IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPT_XRC_RECV, kRcRtr));
  EXPECT_FALSE(QpTransitionIsValid(IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPT_XRC_RECV, kRcRtr & ~IBV_QP_MIN_RNR_TIMER));
  EXPECT_TRUE(QpTransitionIsValid(IBV_QPS_RTR, IBV_QPS_RTS, IBV_QPT_XRC_RECV, kTgtRts));
  EXPECT_FALSE(QpTransitionIsValid(IBV_QPS_RTR, IBV_QPS_RTS, IBV_QPT_XRC_RECV, kRcRts));
  EXPECT_TRUE(QpTransitionIsValid(IBV_QPS_RTS, IBV_QPS_RTS, IBV_QPT_XRC_RECV, IBV_QP_STATE | IBV_QP_MIN_RNR_TIMER));
}

TEST(QpStateTableTest, XrcHasNoSqeRecovery) {
  EXPECT_FALSE(QpTransitionIsValid(IBV_QPS_SQE, IBV_QPS_RTS, IBV_QPT_XRC_SEND, IBV_QP_STATE));
  EXPECT_FALSE(QpTransitionIsValid(IBV_QPS_SQE, IBV_QPS_RTS, IBV_QPT_XRC_RECV, IBV_QP_STATE));
}

TEST(QpStateTableTest, UnsupportedQpTypeIsInvalid) {
  EXPECT_FALSE(QpTransitionIsValid(IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPT_RAW_PACKET, IBV_QP_STATE | IBV_QP_PORT));
}

}  // namespace
}  // namespace simverbs
