// Queue pairs: create, query, destroy, and what a QP holds on to (its CQs
// and PD), for RC, UC and UD.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cerrno>
#include <set>
#include <string>

#include "conformance/lib/backend_profile.h"
#include "conformance/lib/errno_capture.h"
#include "conformance/lib/qp_pair.h"
#include "conformance/lib/skip_if.h"
#include "conformance/lib/timeouts.h"
#include "conformance/lib/verbs_handles.h"
#include "conformance/lib/verbs_matchers.h"
#include "conformance/lib/watchdog.h"

namespace conformance {
namespace {

std::string TypeName(const testing::TestParamInfo<ibv_qp_type>& info) {
  switch (info.param) {
    case IBV_QPT_RC: return "RC";
    case IBV_QPT_UC: return "UC";
    case IBV_QPT_UD: return "UD";
    default: return "type" + std::to_string(info.param);
  }
}

class QpCreateTest : public QpTest {
 protected:
  void SetUp() override {
    QpTest::SetUp();
    if (HasFatalFailure() || IsSkipped()) return;
    errno = 0;
    send_cq_.reset(ibv_create_cq(context(), 16, nullptr, nullptr, 0));
    ASSERT_NE(send_cq_, nullptr) << ErrnoName(errno);
    recv_cq_.reset(ibv_create_cq(context(), 16, nullptr, nullptr, 0));
    ASSERT_NE(recv_cq_, nullptr) << ErrnoName(errno);
  }

  void TearDown() override {
    QpTest::TearDown();
    qp_.reset();
  }

  ibv_qp_init_attr Init(ibv_qp_type type, const QpCaps& caps = {}) const {
    return MakeInitAttr(type, send_cq_.get(), recv_cq_.get(), caps);
  }

  // ibv_create_qp_ex attributes in the fixture's PD and CQs, 4 WRs and 1 SGE each way.
  ibv_qp_init_attr_ex InitEx(ibv_qp_type type, uint32_t comp_mask) {
    ibv_qp_init_attr_ex attr = {};
    attr.qp_type = type;
    attr.send_cq = send_cq_.get();
    attr.recv_cq = recv_cq_.get();
    attr.cap.max_send_wr = 4;
    attr.cap.max_recv_wr = 4;
    attr.cap.max_send_sge = 1;
    attr.cap.max_recv_sge = 1;
    attr.comp_mask = comp_mask;
    attr.pd = pd();
    return attr;
  }

  CqPtr send_cq_;
  CqPtr recv_cq_;
  QpPtr qp_;  // destroyed before the CQs above
};

class QpCreateTypeTest : public QpCreateTest, public testing::WithParamInterface<ibv_qp_type> {};

// Rule: ibv_create_qp(3): "creates a queue pair (QP) associated with the protection domain pd";
//   "will update the qp_init_attr->cap struct with the actual QP values of the QP that was
//   created; the values will be greater than or equal to the values requested."
// Checks: the QP is created with the requested type, PD, CQs, qp_context and context, and the
//   returned caps are >= the requested 8 WRs / 2 SGEs each way.
TEST_P(QpCreateTypeTest, CreateSucceeds) {
  QpCaps caps;
  caps.max_send_wr = 8;
  caps.max_recv_wr = 8;
  caps.max_send_sge = 2;
  caps.max_recv_sge = 2;
  ibv_qp_init_attr init = Init(GetParam(), caps);
  int marker = 0;
  init.qp_context = &marker;
  auto call = CaptureErrno([&] { return ibv_create_qp(pd(), &init); });
  ASSERT_THAT(call, ReturnsObject());
  EXPECT_EQ(call.ptr->qp_type, GetParam());
  EXPECT_EQ(call.ptr->pd, pd());
  EXPECT_EQ(call.ptr->context, context());
  EXPECT_EQ(call.ptr->send_cq, send_cq_.get());
  EXPECT_EQ(call.ptr->recv_cq, recv_cq_.get());
  EXPECT_EQ(call.ptr->srq, nullptr);
  EXPECT_EQ(call.ptr->qp_context, &marker);
  EXPECT_GE(init.cap.max_send_wr, 8u);
  EXPECT_GE(init.cap.max_recv_wr, 8u);
  EXPECT_GE(init.cap.max_send_sge, 2u);
  EXPECT_GE(init.cap.max_recv_sge, 2u);
}

// Rule: IBTA Vol 1 ch. 11 (Create Queue Pair): a newly created QP is in the Reset state;
//   ibv_query_qp(3): qp_state is the "Current QP state".
// Checks: a new QP reads RESET through qp->state and through ibv_query_qp.
TEST_P(QpCreateTypeTest, NewQpIsInReset) {
  ibv_qp_init_attr init = Init(GetParam());
  qp_.reset(ibv_create_qp(pd(), &init));
  ASSERT_NE(qp_, nullptr) << ErrnoName(errno);
  EXPECT_EQ(qp_->state, IBV_QPS_RESET);
  ibv_qp_state state = IBV_QPS_UNKNOWN;
  ASSERT_TRUE(QueryQpState(qp_.get(), &state));
  EXPECT_EQ(state, IBV_QPS_RESET) << QpStateName(state);
}

INSTANTIATE_TEST_SUITE_P(Types, QpCreateTypeTest, testing::Values(IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD), TypeName);

// Rule: ibv_create_qp(3): "Check the QP number (qp_num) in the returned QP"; IBTA Vol 1 ch. 10 (QP numbers):
//   QP numbers 0 and 1 are the special QPs (SMI, GSI), every other QP has a QP number unique on
//   its channel adapter.
// Checks: an RC, a UC and a UD QP get QP numbers above 1, all three different.
TEST_F(QpCreateTest, QpNumsAreDistinctAndNotSpecial) {
  ibv_qp_init_attr rc = Init(IBV_QPT_RC);
  ibv_qp_init_attr uc = Init(IBV_QPT_UC);
  ibv_qp_init_attr ud = Init(IBV_QPT_UD);
  QpPtr a(ibv_create_qp(pd(), &rc));
  ASSERT_NE(a, nullptr) << ErrnoName(errno);
  QpPtr b(ibv_create_qp(pd(), &uc));
  ASSERT_NE(b, nullptr) << ErrnoName(errno);
  QpPtr c(ibv_create_qp(pd(), &ud));
  ASSERT_NE(c, nullptr) << ErrnoName(errno);
  EXPECT_GT(a->qp_num, 1u);
  EXPECT_GT(b->qp_num, 1u);
  EXPECT_GT(c->qp_num, 1u);
  const std::set<uint32_t> nums = {a->qp_num, b->qp_num, c->qp_num};
  EXPECT_EQ(nums.size(), 3u) << a->qp_num << " " << b->qp_num << " " << c->qp_num;
}

// Rule: ibv_query_device(3): max_qp_wr is the "Maximum number of outstanding WR on any work
//   queue"; IBTA Vol 1 ch. 11 (Create Queue Pair): a request exceeding the HCA's limits fails
//   (Insufficient resources / invalid attribute; EINVAL in Linux).
// Checks: max_send_wr = max_qp_wr + 1 returns NULL with errno EINVAL.
TEST_F(QpCreateTest, CreateFails_MaxSendWrAboveMax) {
  QpCaps caps;
  caps.max_send_wr = static_cast<uint32_t>(device_attr().max_qp_wr) + 1;
  ibv_qp_init_attr init = Init(IBV_QPT_RC, caps);
  EXPECT_THAT(CaptureErrno([&] { return ibv_create_qp(pd(), &init); }), ReturnsNullWithErrno(EINVAL));
}

// Rule: ibv_query_device(3): max_qp_wr is the "Maximum number of outstanding WR on any work queue"; IBTA Vol
//   1 ch. 11 (Create Queue Pair): a request exceeding the HCA's limits fails (EINVAL in Linux).
// Checks: max_recv_wr = max_qp_wr + 1 returns NULL with errno EINVAL.
TEST_F(QpCreateTest, CreateFails_MaxRecvWrAboveMax) {
  QpCaps caps;
  caps.max_recv_wr = static_cast<uint32_t>(device_attr().max_qp_wr) + 1;
  ibv_qp_init_attr init = Init(IBV_QPT_RC, caps);
  EXPECT_THAT(CaptureErrno([&] { return ibv_create_qp(pd(), &init); }), ReturnsNullWithErrno(EINVAL));
}

// Rule: ibv_query_device(3): max_sge is the "Maximum number of s/g per WR for SQ & RQ of QP for non RDMA Read
//   operations"; IBTA Vol 1 ch. 11 (Create Queue Pair): a request exceeding the HCA's limits fails.
// Checks: max_send_sge = max_sge + 1 returns NULL with errno EINVAL.
TEST_F(QpCreateTest, CreateFails_MaxSendSgeAboveMax) {
  QpCaps caps;
  caps.max_send_sge = static_cast<uint32_t>(device_attr().max_sge) + 1;
  ibv_qp_init_attr init = Init(IBV_QPT_RC, caps);
  EXPECT_THAT(CaptureErrno([&] { return ibv_create_qp(pd(), &init); }), ReturnsNullWithErrno(EINVAL));
}

// Rule: ibv_create_qp(3): max_inline_data is the "maximum size of data that can be posted inline"; how
//   much a device takes is its own (rxe: RXE_MAX_INLINE_DATA, 512 bytes; rxe_qp_chk_cap refuses more
//   with EINVAL). The backend's limit is MaxInlineData.
// Checks: an RC QP asking for MaxInlineData bytes of inline data is created and reports at least
//   that many; one asking for a byte more returns NULL with errno EINVAL.
TEST_F(QpCreateTest, InlineLimitFollowsBackend) {
  const uint32_t limit = static_cast<uint32_t>(std::stoul(Backend().Answer("MaxInlineData", "256")));
  QpCaps caps;
  caps.max_inline_data = limit;
  ibv_qp_init_attr init = Init(IBV_QPT_RC, caps);
  QpPtr qp(ibv_create_qp(pd(), &init));
  ASSERT_NE(qp, nullptr) << "max_inline_data " << limit << ": " << ErrnoName(errno);
  EXPECT_GE(init.cap.max_inline_data, limit);
  caps.max_inline_data = limit + 1;
  ibv_qp_init_attr over = Init(IBV_QPT_RC, caps);
  EXPECT_THAT(CaptureErrno([&] { return ibv_create_qp(pd(), &over); }), ReturnsNullWithErrno(EINVAL));
}

// Rule: ibv_create_qp(3) and ibv_create_qp_ex(3) update cap "with the actual QP values of the QP that was
//   created; the values will be greater than or equal to the values requested"; ibv_query_qp(3) reports the
//   QP's capabilities. How much more is the device's: rxe's queues are rings of 2^k slots that hold 2^k - 1
//   WRs (rxe_queue_init), which ibv_query_qp reports while create leaves the WR counts as asked
//   (QpSizeRoundedToPow2Minus1), and its max_send_sge grows to fill the send WQE, max(max_send_sge * 16,
//   max_inline_data) bytes (rxe_qp_init_req; SendSgeFillsInlineRoom). Both measured on rxe 6.1.
// Checks: RC QPs asking for 5 send and 5 receive WRs, 1 SGE each way and 64 bytes inline, made by
//   ibv_create_qp and by ibv_create_qp_ex: create writes back at least what was asked, exactly 5 WRs
//   each way where the backend rounds, and 4 send SGEs where it fills the room, else 1; ibv_query_qp
//   reports the same capabilities, with 7 WRs each way where the backend rounds.
TEST_F(QpCreateTest, ActualCapsFollowBackend) {
  const bool pow2 = Backend().Answer("QpSizeRoundedToPow2Minus1", false);
  const bool fills = Backend().Answer("SendSgeFillsInlineRoom", false);
  QpCaps caps;
  caps.max_send_wr = 5;
  caps.max_recv_wr = 5;
  caps.max_inline_data = 64;
  ibv_qp_init_attr init = Init(IBV_QPT_RC, caps);
  QpPtr qp(ibv_create_qp(pd(), &init));
  ASSERT_NE(qp, nullptr) << ErrnoName(errno);
  ibv_qp_init_attr_ex init_ex = InitEx(IBV_QPT_RC, IBV_QP_INIT_ATTR_PD);
  init_ex.cap = Init(IBV_QPT_RC, caps).cap;
  QpPtr qp_ex(ibv_create_qp_ex(context(), &init_ex));
  ASSERT_NE(qp_ex, nullptr) << ErrnoName(errno);
  const auto check = [&](const char* verb, const ibv_qp_cap& created, ibv_qp* q) {
    SCOPED_TRACE(verb);
    if (pow2) {
      EXPECT_EQ(created.max_send_wr, 5u);
      EXPECT_EQ(created.max_recv_wr, 5u);
    } else {
      EXPECT_GE(created.max_send_wr, 5u);
      EXPECT_GE(created.max_recv_wr, 5u);
    }
    EXPECT_EQ(created.max_send_sge, fills ? 4u : 1u);
    EXPECT_GE(created.max_recv_sge, 1u);
    EXPECT_GE(created.max_inline_data, 64u);
    ibv_qp_attr attr = {};
    ibv_qp_init_attr got = {};
    ASSERT_EQ(ibv_query_qp(q, &attr, IBV_QP_CAP, &got), 0);
    EXPECT_EQ(got.cap.max_send_wr, pow2 ? 7u : created.max_send_wr);
    EXPECT_EQ(got.cap.max_recv_wr, pow2 ? 7u : created.max_recv_wr);
    EXPECT_EQ(got.cap.max_send_sge, created.max_send_sge);
    EXPECT_EQ(got.cap.max_recv_sge, created.max_recv_sge);
    EXPECT_EQ(got.cap.max_inline_data, created.max_inline_data);
    EXPECT_EQ(attr.cap.max_send_wr, got.cap.max_send_wr);
  };
  check("ibv_create_qp", init.cap, qp.get());
  check("ibv_create_qp_ex", init_ex.cap, qp_ex.get());
}

// Rule: ibv_query_device(3): max_sge is the "Maximum number of s/g per WR for SQ & RQ of QP"; IBTA Vol 1 ch.
//   11 (Create Queue Pair): a request exceeding the HCA's limits fails.
// Checks: max_recv_sge = max_sge + 1 returns NULL with errno EINVAL.
TEST_F(QpCreateTest, CreateFails_MaxRecvSgeAboveMax) {
  QpCaps caps;
  caps.max_recv_sge = static_cast<uint32_t>(device_attr().max_sge) + 1;
  ibv_qp_init_attr init = Init(IBV_QPT_RC, caps);
  EXPECT_THAT(CaptureErrno([&] { return ibv_create_qp(pd(), &init); }), ReturnsNullWithErrno(EINVAL));
}

// Rule: ibv_create_qp(3): send_cq is the "CQ to be associated with the Send Queue (SQ)" and the call "returns
//   ... NULL if the request fails"; IBTA Vol 1 ch. 11 (Create Queue Pair): the send CQ handle is an input
//   modifier, an invalid CQ handle fails the verb.
// Checks: send_cq NULL returns NULL (run in a watchdog child: a provider that dereferences it
//   crashes the child, which fails the test instead of the run).
TEST_F(QpCreateTest, CreateFails_NullSendCq) {
  const ChildResult result = RunChecksInChild(
      [&] {
        // The child uses objects of its own context, not the parent's.
        ContextPtr context = OpenAnotherContext();
        ASSERT_NE(context, nullptr);
        PdPtr pd(ibv_alloc_pd(context.get()));
        ASSERT_NE(pd, nullptr) << ErrnoName(errno);
        CqPtr cq(ibv_create_cq(context.get(), 4, nullptr, nullptr, 0));
        ASSERT_NE(cq, nullptr) << ErrnoName(errno);
        ibv_qp_init_attr init = MakeInitAttr(IBV_QPT_RC, cq.get(), cq.get());
        init.send_cq = nullptr;
        QpPtr qp(ibv_create_qp(pd.get(), &init));
        EXPECT_EQ(qp, nullptr) << "a QP without a send CQ was created";
      },
      kChildTimeout, "ibv_create_qp with send_cq NULL");
  EXPECT_TRUE(Passed(result));
}

// Rule: ibv_create_qp(3): recv_cq is the "CQ to be associated with the Receive Queue (RQ)";
//   IBTA Vol 1 ch. 11 (Create Queue Pair): an invalid CQ handle fails the verb.
// Checks: recv_cq NULL returns NULL (in a watchdog child, as above).
TEST_F(QpCreateTest, CreateFails_NullRecvCq) {
  const ChildResult result = RunChecksInChild(
      [&] {
        // The child uses objects of its own context, not the parent's.
        ContextPtr context = OpenAnotherContext();
        ASSERT_NE(context, nullptr);
        PdPtr pd(ibv_alloc_pd(context.get()));
        ASSERT_NE(pd, nullptr) << ErrnoName(errno);
        CqPtr cq(ibv_create_cq(context.get(), 4, nullptr, nullptr, 0));
        ASSERT_NE(cq, nullptr) << ErrnoName(errno);
        ibv_qp_init_attr init = MakeInitAttr(IBV_QPT_RC, cq.get(), cq.get());
        init.recv_cq = nullptr;
        QpPtr qp(ibv_create_qp(pd.get(), &init));
        EXPECT_EQ(qp, nullptr) << "a QP without a receive CQ was created";
      },
      kChildTimeout, "ibv_create_qp with recv_cq NULL");
  EXPECT_TRUE(Passed(result));
}

// Rule: ibv_create_qp(3): qp_type is the "QP Transport Service Type: IBV_QPT_RC, IBV_QPT_UD,
//   IBV_QPT_UC, IBV_QPT_RAW_PACKET or IBV_QPT_DRIVER" and the call "returns ... NULL if the request
//   fails".
// Checks: qp_type 0x7e (no such type) returns NULL with errno set.
TEST_F(QpCreateTest, CreateFails_UnknownQpType) {
  ibv_qp_init_attr init = Init(static_cast<ibv_qp_type>(0x7e));
  auto call = CaptureErrno([&] { return ibv_create_qp(pd(), &init); });
  EXPECT_EQ(call.ptr, nullptr) << "a QP of an unknown type was created";
  EXPECT_NE(call.err, 0) << "NULL without errno";
}

// Rule: ibv_query_qp(3): "The argument init_attr will be filled with the initial attributes of
//   the QP" - ibv_qp_init_attr's qp_type, sq_sig_all, send_cq, recv_cq, srq and qp_context.
// Checks: a UD QP created with sq_sig_all = 1, distinct send and receive CQs and a qp_context
//   reads all of them back, and caps >= the requested ones.
TEST_F(QpCreateTest, QueryReturnsInitAttrs) {
  ibv_qp_init_attr init = Init(IBV_QPT_UD);
  init.sq_sig_all = 1;
  int marker = 0;
  init.qp_context = &marker;
  qp_.reset(ibv_create_qp(pd(), &init));
  ASSERT_NE(qp_, nullptr) << ErrnoName(errno);
  ibv_qp_attr attr = {};
  ibv_qp_init_attr got = {};
  ASSERT_EQ(ibv_query_qp(qp_.get(), &attr, IBV_QP_STATE | IBV_QP_CAP, &got), 0);
  EXPECT_EQ(got.qp_type, IBV_QPT_UD);
  EXPECT_NE(got.sq_sig_all, 0);
  EXPECT_EQ(got.send_cq, send_cq_.get());
  EXPECT_EQ(got.recv_cq, recv_cq_.get());
  EXPECT_EQ(got.srq, nullptr);
  EXPECT_EQ(got.qp_context, &marker);
  EXPECT_GE(got.cap.max_send_wr, 16u);
  EXPECT_GE(got.cap.max_recv_wr, 16u);
}

// Rule: ibv_query_qp(3): init_attr holds "the initial attributes of the QP"; ibv_create_qp(3):
//   sq_sig_all "If set, each Work Request (WR) submitted to the SQ generates a completion entry".
// Checks: an RC QP created with sq_sig_all = 0 reads sq_sig_all 0 back.
TEST_F(QpCreateTest, QueryReturnsSqSigAllZero) {
  ibv_qp_init_attr init = Init(IBV_QPT_RC);
  init.sq_sig_all = 0;
  qp_.reset(ibv_create_qp(pd(), &init));
  ASSERT_NE(qp_, nullptr) << ErrnoName(errno);
  ibv_qp_attr attr = {};
  ibv_qp_init_attr got = {};
  got.sq_sig_all = 1;
  ASSERT_EQ(ibv_query_qp(qp_.get(), &attr, IBV_QP_STATE, &got), 0);
  EXPECT_EQ(got.sq_sig_all, 0);
  EXPECT_EQ(got.qp_type, IBV_QPT_RC);
}

// Rule: ibv_create_qp(3): sq_sig_all "If set, each Work Request (WR) submitted to the SQ generates a
//   completion entry"; the kernel keeps only whether it is set (drivers/infiniband/core/uverbs_cmd.c:
//   create_qp takes IB_SIGNAL_ALL_WR for any non-zero value, query_qp answers
//   sq_sig_type == IB_SIGNAL_ALL_WR).
// Checks: a QP created with sq_sig_all = 2 reads sq_sig_all 1 back.
TEST_F(QpCreateTest, QueryReturnsSqSigAllAsOne) {
  ibv_qp_init_attr init = Init(IBV_QPT_RC);
  init.sq_sig_all = 2;
  qp_.reset(ibv_create_qp(pd(), &init));
  ASSERT_NE(qp_, nullptr) << ErrnoName(errno);
  ibv_qp_attr attr = {};
  ibv_qp_init_attr got = {};
  ASSERT_EQ(ibv_query_qp(qp_.get(), &attr, IBV_QP_STATE, &got), 0);
  EXPECT_EQ(got.sq_sig_all, 1);
}

// Rule: ibv_destroy_cq(3): "fails if any queue pair is still associated with this CQ" and "returns
//   0 on success, or the value of errno on failure" (EBUSY in Linux).
// Checks: destroying a QP's send CQ returns EBUSY; after the QP is destroyed the CQ destroys.
TEST_F(QpCreateTest, DestroyCqFails_UsedAsSendCq) {
  ibv_qp_init_attr init = Init(IBV_QPT_RC);
  qp_.reset(ibv_create_qp(pd(), &init));
  ASSERT_NE(qp_, nullptr) << ErrnoName(errno);
  EXPECT_THAT(ibv_destroy_cq(send_cq_.get()), ReturnsErrno(EBUSY));
  qp_.reset();
  EXPECT_EQ(ibv_destroy_cq(send_cq_.release()), 0) << "the CQ did not survive the failed destroy";
}

// Rule: ibv_destroy_cq(3): "fails if any queue pair is still associated with this CQ" (EBUSY).
// Checks: destroying a QP's receive CQ returns EBUSY; after the QP is destroyed it destroys.
TEST_F(QpCreateTest, DestroyCqFails_UsedAsRecvCq) {
  ibv_qp_init_attr init = Init(IBV_QPT_UD);
  qp_.reset(ibv_create_qp(pd(), &init));
  ASSERT_NE(qp_, nullptr) << ErrnoName(errno);
  EXPECT_THAT(ibv_destroy_cq(recv_cq_.get()), ReturnsErrno(EBUSY));
  qp_.reset();
  EXPECT_EQ(ibv_destroy_cq(recv_cq_.release()), 0) << "the CQ did not survive the failed destroy";
}

// Rule: ibv_alloc_pd(3): "ibv_dealloc_pd() may fail if any other resource is still associated
//   with the PD being freed" and returns "the value of errno on failure" (EBUSY in Linux).
// Checks: deallocating the PD of a live QP returns EBUSY; the QP still works (query returns 0);
//   after the QP is destroyed the PD deallocates.
TEST_F(QpCreateTest, DeallocPdFails_QpUsesIt) {
  SKIP_IF(!Backend().Answer("DeallocPdWithQpFails", true)) << "(the backend frees such a PD)";
  PdPtr pd(ibv_alloc_pd(context()));
  ASSERT_NE(pd, nullptr) << ErrnoName(errno);
  ibv_qp_init_attr init = Init(IBV_QPT_RC);
  qp_.reset(ibv_create_qp(pd.get(), &init));
  ASSERT_NE(qp_, nullptr) << ErrnoName(errno);
  EXPECT_THAT(ibv_dealloc_pd(pd.get()), ReturnsErrno(EBUSY));
  ibv_qp_state state = IBV_QPS_UNKNOWN;
  EXPECT_TRUE(QueryQpState(qp_.get(), &state)) << "the QP did not survive the failed dealloc";
  qp_.reset();
  EXPECT_EQ(ibv_dealloc_pd(pd.release()), 0);
}

// Rule: ibv_create_qp(3): "ibv_destroy_qp() destroys the QP qp" and "returns 0 on success".
// Checks: destroying a QP returns 0, and its CQs can be destroyed afterwards.
TEST_F(QpCreateTest, DestroySucceeds) {
  ibv_qp_init_attr init = Init(IBV_QPT_RC);
  ibv_qp* qp = ibv_create_qp(pd(), &init);
  ASSERT_NE(qp, nullptr) << ErrnoName(errno);
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
  EXPECT_EQ(ibv_destroy_cq(send_cq_.release()), 0);
  EXPECT_EQ(ibv_destroy_cq(recv_cq_.release()), 0);
}

// Rule: ibv_create_qp_ex(3): "Use ibv_qp_to_qp_ex() to get the ibv_qp_ex for accessing the send
//   ops iterator interface, when QP create attr IBV_QP_INIT_ATTR_SEND_OPS_FLAGS is used."
// Checks: an RC QP created with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS (SEND | RDMA_WRITE) gives a
//   non-NULL ibv_qp_ex whose qp_base is the QP.
TEST_F(QpCreateTest, CreateQpExGivesQpEx) {
  ibv_qp_init_attr_ex attr = InitEx(IBV_QPT_RC, IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS);
  attr.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE;
  auto call = CaptureErrno([&] { return ibv_create_qp_ex(context(), &attr); });
  ASSERT_THAT(call, ReturnsObject());
  ibv_qp_ex* qpx = ibv_qp_to_qp_ex(call.ptr.get());
  ASSERT_NE(qpx, nullptr);
  EXPECT_EQ(&qpx->qp_base, call.ptr.get());
  EXPECT_GE(attr.cap.max_send_wr, 4u);
}

// Rule: ibv_create_qp_ex(3): comp_mask says which fields of ibv_qp_init_attr_ex are valid, and
//   create_flags 0 asks for no creation flag: a provider that supports none still creates the QP (rxe:
//   rxe_create_qp refuses only non-zero create_flags; rdma-core's tests/test_qp.py sets
//   IBV_QP_INIT_ATTR_CREATE_FLAGS with create_flags 0 on non-Mellanox devices).
// Checks: RC and UD QPs created by ibv_create_qp_ex with comp_mask PD | CREATE_FLAGS and create_flags 0
//   are created.
TEST_F(QpCreateTest, CreateQpExSucceeds_CreateFlagsMaskWithNoFlag) {
  for (ibv_qp_type type : {IBV_QPT_RC, IBV_QPT_UD}) {
    ibv_qp_init_attr_ex attr = InitEx(type, IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS);
    attr.create_flags = 0;
    auto call = CaptureErrno([&] { return ibv_create_qp_ex(context(), &attr); });
    EXPECT_THAT(call, ReturnsObject()) << "QP type " << type;
  }
}

// Rule: ibv_create_qp(3) leaves QP number allocation to the device; reusing the number of a QP
//   destroyed just before is legal, and lets a stale packet or event reach the new QP - the
//   backend's choice is QpNumberReusedAtOnce.
// Checks: on a backend that does not reuse at once, none of 4 RC QPs created right after a QP is
//   destroyed gets its number.
TEST_F(QpCreateTest, DestroyedQpNumberNotReusedAtOnce) {
  SKIP_IF(Backend().Answer("QpNumberReusedAtOnce", false)) << "(the backend reuses QP numbers at once)";
  ibv_qp_init_attr init = Init(IBV_QPT_RC);
  QpPtr first(ibv_create_qp(pd(), &init));
  ASSERT_NE(first, nullptr) << ErrnoName(errno);
  const uint32_t old_number = first->qp_num;
  first.reset();
  std::vector<QpPtr> next;
  for (int i = 0; i < 4; ++i) {
    init = Init(IBV_QPT_RC);
    next.emplace_back(ibv_create_qp(pd(), &init));
    ASSERT_NE(next.back(), nullptr) << ErrnoName(errno);
    EXPECT_NE(next.back()->qp_num, old_number) << "QP " << i << " after the destroy";
  }
}

}  // namespace
}  // namespace conformance
