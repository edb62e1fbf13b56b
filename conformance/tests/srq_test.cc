// Shared receive queues: create, query, modify (the srq_limit watermark),
// destroy, and QPs that take their receives from one.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cerrno>
#include <chrono>
#include <vector>

#include "conformance/lib/backend_profile.h"
#include "conformance/lib/errno_capture.h"
#include "conformance/lib/qp_pair.h"
#include "conformance/lib/skip_if.h"
#include "conformance/lib/timeouts.h"
#include "conformance/lib/verbs_matchers.h"

namespace conformance {
namespace {

class SrqTest : public QpTest {
 protected:
  void SetUp() override {
    QpTest::SetUp();
    if (HasFatalFailure() || IsSkipped()) return;
    SKIP_IF(device_attr().max_srq == 0) << "(the device has no SRQs)";
    ASSERT_TRUE(local_.Register(pd(), 4096));
    ASSERT_TRUE(remote_.Register(pd(), 4096));
  }

  // srq_ with max_wr 16 and max_sge 1.
  void CreateSrq(uint32_t max_wr = 16) {
    ibv_srq_init_attr init = {};
    init.attr.max_wr = max_wr;
    init.attr.max_sge = 1;
    errno = 0;
    srq_.reset(ibv_create_srq(pd(), &init));
    ASSERT_NE(srq_, nullptr) << "ibv_create_srq: " << ErrnoName(errno);
  }

  // srq_ and an RC pair a_ -> b_ where b_ takes its receives from srq_.
  void MakeSrqPair() {
    ASSERT_NO_FATAL_FAILURE(CreateSrq());
    EndConfig b_config;
    b_config.srq = srq_.get();
    ASSERT_TRUE(MakePair(EndConfig{}, b_config, ConnectParams{}, ConnectParams{}));
  }

  // MakeSrqPair, and srq_ filled to its reported max_wr (PostSrqRecvs).
  void MakeSrqPairWithFullSrq() {
    ASSERT_NO_FATAL_FAILURE(MakeSrqPair());
    ibv_srq_attr attr = {};
    ASSERT_EQ(ibv_query_srq(srq_.get(), &attr), 0);
    ASSERT_LE(attr.max_wr, 64u) << "unexpectedly deep SRQ";
    ASSERT_NO_FATAL_FAILURE(PostSrqRecvs(static_cast<int>(attr.max_wr)));
  }

  // Posts `count` 64-byte receives to srq_ (wr_id base, base + 1, ...).
  void PostSrqRecvs(int count, uint64_t base = 0) {
    for (int i = 0; i < count; ++i) {
      ibv_sge sge = remote_.Sge(static_cast<size_t>(i % 32) * 64, 64);
      ASSERT_EQ(PostSrqRecv(srq_.get(), base + static_cast<uint64_t>(i), &sge, 1), 0) << "receive " << i;
    }
  }

  // Sends one message from `from` and waits until `to` has received it.
  void SendOne(QpEnd& from, QpEnd& to, uint64_t wr_id) {
    ibv_sge sge = local_.Sge(0, 16);
    ASSERT_EQ(PostOne(from.get(), SendWr(wr_id, &sge, 1)), 0);
    ibv_wc wc = {};
    ASSERT_TRUE(PollOneCompletion(to.recv_cq.get(), &wc));
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
  }

  Buffer local_;
  Buffer remote_;
};

// Rule: ibv_create_srq(3): "will update the srq_init_attr struct with the original values of the
//   SRQ that was created; the values of max_wr and max_sge will be greater than or equal to the
//   values requested."
// Checks: an SRQ asked for 16 WRs and 2 SGEs is created with srq_context, pd and context set, and
//   the returned max_wr >= 16, max_sge >= 2.
TEST_F(SrqTest, CreateSucceeds) {
  ibv_srq_init_attr init = {};
  int marker = 0;
  init.srq_context = &marker;
  init.attr.max_wr = 16;
  init.attr.max_sge = 2;
  auto call = CaptureErrno([&] { return ibv_create_srq(pd(), &init); });
  ASSERT_THAT(call, ReturnsObject());
  EXPECT_EQ(call.ptr->srq_context, &marker);
  EXPECT_EQ(call.ptr->pd, pd());
  EXPECT_EQ(call.ptr->context, context());
  EXPECT_GE(init.attr.max_wr, 16u);
  EXPECT_GE(init.attr.max_sge, 2u);
}

// Rule: ibv_query_srq(3) returns the SRQ's max_wr; ibv_create_srq(3): max_wr is "the requested
//   maximum number of outstanding WRs". Whether the SRQ holds the number asked for or more is the
//   backend's (SrqSizeRoundedToPow2Minus1: rxe's queues hold a power of two less one,
//   rxe_queue_init; rxe 6.1 still writes back the number asked for from ibv_create_srq).
// Checks: an SRQ asked for 5 WRs: ibv_create_srq writes back 5, ibv_query_srq reports 7 (rounded)
//   or 5; that many receives can be posted, and one more returns ENOMEM.
TEST_F(SrqTest, ActualSizeFollowsBackend) {
  const bool pow2 = Backend().Answer("SrqSizeRoundedToPow2Minus1", false);
  ibv_srq_init_attr init = {};
  init.attr.max_wr = 5;
  init.attr.max_sge = 1;
  srq_.reset(ibv_create_srq(pd(), &init));
  ASSERT_NE(srq_, nullptr) << ErrnoName(errno);
  EXPECT_EQ(init.attr.max_wr, 5u);
  ibv_srq_attr attr = {};
  ASSERT_EQ(ibv_query_srq(srq_.get(), &attr), 0);
  EXPECT_EQ(attr.max_wr, pow2 ? 7u : 5u);
  ASSERT_NO_FATAL_FAILURE(PostSrqRecvs(static_cast<int>(attr.max_wr)));
  ibv_sge sge = local_.Sge(0, 64);
  EXPECT_EQ(PostSrqRecv(srq_.get(), 99, &sge, 1), ENOMEM);
}

// Rule: ibv_post_srq_recv(3) fails when the SRQ is full (ENOMEM in Linux); when a consumed receive's
//   slot is free again the man pages leave open: mlx5 frees it when its completion is polled (the poll
//   puts the WQE back on the SRQ's free list: mlx5_free_srq_wqe), rxe as soon as a message takes it.
//   Backend question RecvSlotFreedAtPoll (as for receive queues).
// Checks: srq_ filled to its max_wr and one receive taken by a SEND that a_ saw acknowledged: where
//   slots are freed at poll, the next receive returns ENOMEM until b_'s completion is polled, then is
//   taken; elsewhere it is taken within the return window without a poll.
TEST_F(SrqTest, SlotsFreeFollowBackend) {
  ASSERT_NO_FATAL_FAILURE(MakeSrqPairWithFullSrq());
  ibv_sge rsge = remote_.Sge(0, 64);
  ASSERT_EQ(PostSrqRecv(srq_.get(), 1000, &rsge, 1), ENOMEM) << "the SRQ took more than its max_wr";
  ibv_sge sge = local_.Sge(0, 16);
  ASSERT_EQ(PostOne(a_.get(), SendWr(1, &sge, 1)), 0);
  ibv_wc wc = {};
  ASSERT_TRUE(PollOneCompletion(a_.send_cq.get(), &wc));
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
  if (Backend().Answer("RecvSlotFreedAtPoll", true)) {
    EXPECT_EQ(PostSrqRecv(srq_.get(), 1000, &rsge, 1), ENOMEM) << "a slot was free before its completion was polled";
    ASSERT_TRUE(PollOneCompletion(b_.recv_cq.get(), &wc));
    EXPECT_EQ(PostSrqRecv(srq_.get(), 1000, &rsge, 1), 0) << "the polled completion freed no slot";
    return;
  }
  EXPECT_EQ(PostWhileFull([&] { return PostSrqRecv(srq_.get(), 1000, &rsge, 1); }), 0)
      << "no slot freed by the consumed receive, within " << kReturnWindow.count() << " ms";
}

// Rule: as SlotsFreeFollowBackend; ibv_destroy_qp(3) of a QP whose receive completions from the SRQ
//   are not polled: the SRQ goes on, and those receives hold no slot of it any more (mlx5_destroy_qp
//   cleans the QP's completions from its CQ and gives their WQEs back to the SRQ: __mlx5_cq_clean).
// Checks: srq_ filled to its max_wr, one receive taken by b_ and not polled, b_ destroyed: the SRQ
//   takes a receive again within the return window.
TEST_F(SrqTest, DestroyedQpGivesItsUnpolledReceivesSlotsBack) {
  ASSERT_NO_FATAL_FAILURE(MakeSrqPairWithFullSrq());
  ibv_sge sge = local_.Sge(0, 16);
  ASSERT_EQ(PostOne(a_.get(), SendWr(1, &sge, 1)), 0);
  ibv_wc wc = {};
  ASSERT_TRUE(PollOneCompletion(a_.send_cq.get(), &wc));
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
  b_.qp.reset();
  ibv_sge rsge = remote_.Sge(0, 64);
  EXPECT_EQ(PostWhileFull([&] { return PostSrqRecv(srq_.get(), 1000, &rsge, 1); }), 0)
      << "the destroyed QP's receive still holds its SRQ slot";
}

// Rule: ibv_query_srq(3): returns the attributes of the SRQ: max_wr, max_sge and "srq_limit ... the
//   limit value of the SRQ" (0: not armed; ibv_create_srq(3): srq_limit is "irrelevant for
//   ibv_create_srq").
// Checks: a new SRQ (16 WRs, 1 SGE, srq_limit 5 passed to create) queries max_wr >= 16,
//   max_sge >= 1 and srq_limit 0.
TEST_F(SrqTest, QueryReportsSizesAndNoLimit) {
  ibv_srq_init_attr init = {};
  init.attr.max_wr = 16;
  init.attr.max_sge = 1;
  init.attr.srq_limit = 5;
  srq_.reset(ibv_create_srq(pd(), &init));
  ASSERT_NE(srq_, nullptr) << ErrnoName(errno);
  ibv_srq_attr attr = {};
  attr.srq_limit = 99;
  ASSERT_EQ(ibv_query_srq(srq_.get(), &attr), 0);
  EXPECT_GE(attr.max_wr, 16u);
  EXPECT_GE(attr.max_sge, 1u);
  EXPECT_EQ(attr.srq_limit, 0u);
}

// Rule: ibv_query_device(3): max_srq_wr is the "Maximum number of WR per SRQ"; IBTA Vol 1 ch. 11
//   (Create Shared Receive Queue): a size above the HCA's maximum fails (EINVAL in Linux).
// Checks: max_wr = max_srq_wr + 1 returns NULL with errno EINVAL.
TEST_F(SrqTest, CreateFails_MaxWrAboveMax) {
  ibv_srq_init_attr init = {};
  init.attr.max_wr = static_cast<uint32_t>(device_attr().max_srq_wr) + 1;
  init.attr.max_sge = 1;
  EXPECT_THAT(CaptureErrno([&] { return ibv_create_srq(pd(), &init); }), ReturnsNullWithErrno(EINVAL));
}

// Rule: ibv_create_srq(3): max_wr is "the requested maximum number of outstanding WRs in the SRQ"
//   and the man page leaves 0 open: mlx5 makes a queue of one entry, rxe refuses it (rxe_srq.c
//   rxe_srq_chk_init: "max_wr(%d) < 0" → EINVAL); the backend's choice is SrqZeroMaxWrFails.
// Checks: max_wr 0 returns NULL with errno EINVAL on a backend that refuses it; otherwise an SRQ
//   that ibv_query_srq reports with max_wr >= 1.
TEST_F(SrqTest, CreateWithZeroMaxWrFollowsBackend) {
  ibv_srq_init_attr init = {};
  init.attr.max_wr = 0;
  init.attr.max_sge = 1;
  if (Backend().Answer("SrqZeroMaxWrFails", false)) {
    EXPECT_THAT(CaptureErrno([&] { return ibv_create_srq(pd(), &init); }), ReturnsNullWithErrno(EINVAL));
    return;
  }
  srq_.reset(ibv_create_srq(pd(), &init));
  ASSERT_NE(srq_, nullptr) << ErrnoName(errno);
  ibv_srq_attr attr = {};
  ASSERT_EQ(ibv_query_srq(srq_.get(), &attr), 0);
  EXPECT_GE(attr.max_wr, 1u);
}

// Rule: ibv_create_srq_ex(3): comp_mask names the fields that are valid; what a bit libibverbs does not
//   know does is the provider's: ibv_cmd_create_srq_ex fails with EOPNOTSUPP when comp_mask >=
//   IBV_SRQ_INIT_ATTR_RESERVED, verbs.h's ibv_create_srq_ex gives EOPNOTSUPP when the provider has no
//   create_srq_ex (rxe), and mlx5_create_srq_ex makes a basic SRQ without reading comp_mask. Backend
//   question CreateSrqExRefusesUnknownCompMask.
// Checks: a basic SRQ asked for with the PD and an unknown comp_mask bit returns NULL with errno EOPNOTSUPP
//   where the backend refuses it, and is made elsewhere.
TEST_F(SrqTest, CreateExWithUnknownCompMaskBitFollowsBackend) {
  ibv_srq_init_attr_ex init = {};
  init.attr.max_wr = 4;
  init.attr.max_sge = 1;
  init.comp_mask = IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_RESERVED;
  init.pd = pd();
  if (Backend().Answer("CreateSrqExRefusesUnknownCompMask", false)) {
    EXPECT_THAT(CaptureErrno([&] { return ibv_create_srq_ex(context(), &init); }), ReturnsNullWithErrno(EOPNOTSUPP));
    return;
  }
  srq_.reset(ibv_create_srq_ex(context(), &init));
  EXPECT_NE(srq_, nullptr) << ErrnoName(errno);
}

// Rule: ibv_query_device(3): max_srq_sge is the "Maximum number of s/g per SRQ"; IBTA Vol 1 ch. 11:
//   a value above the HCA's maximum fails (EINVAL in Linux).
// Checks: max_sge = max_srq_sge + 1 returns NULL with errno EINVAL.
TEST_F(SrqTest, CreateFails_MaxSgeAboveMax) {
  ibv_srq_init_attr init = {};
  init.attr.max_wr = 4;
  init.attr.max_sge = static_cast<uint32_t>(device_attr().max_srq_sge) + 1;
  EXPECT_THAT(CaptureErrno([&] { return ibv_create_srq(pd(), &init); }), ReturnsNullWithErrno(EINVAL));
}

// Rule: ibv_create_qp(3): "The attributes max_recv_wr and max_recv_sge are ignored by
//   ibv_create_qp() if the QP is to be associated with an SRQ."
// Checks: an RC QP on an SRQ asking for max_recv_wr = max_qp_wr + 1 and max_recv_sge = max_sge + 1
//   is created, with qp->srq == the SRQ.
TEST_F(SrqTest, CreateQpIgnoresRecvCaps_OnSrq) {
  ASSERT_NO_FATAL_FAILURE(CreateSrq());
  CqPtr cq(ibv_create_cq(context(), 8, nullptr, nullptr, 0));
  ASSERT_NE(cq, nullptr) << ErrnoName(errno);
  ibv_qp_init_attr init = MakeInitAttr(IBV_QPT_RC, cq.get(), cq.get(), {}, 0, srq_.get());
  init.cap.max_recv_wr = static_cast<uint32_t>(device_attr().max_qp_wr) + 1;
  init.cap.max_recv_sge = static_cast<uint32_t>(device_attr().max_sge) + 1;
  auto call = CaptureErrno([&] { return ibv_create_qp(pd(), &init); });
  ASSERT_THAT(call, ReturnsObject());
  EXPECT_EQ(call.ptr->srq, srq_.get());
}

// Rule: ibv_post_recv(3): "If the QP qp is associated with a shared receive queue, you must use the
//   function ibv_post_srq_recv(), and not ibv_post_recv(), since the QP's own receive queue will
//   not be used"; IBTA Vol 1 ch. 11 (Post Receive Request): posting to such a QP is an error.
// Checks: ibv_post_recv on an RC QP attached to an SRQ fails (non-zero) and sets *bad_wr.
TEST_F(SrqTest, PostRecvFails_QpOnSrq) {
  ASSERT_NO_FATAL_FAILURE(MakeSrqPair());
  ibv_sge sge = remote_.Sge(0, 64);
  ibv_recv_wr wr = {1, nullptr, &sge, 1};
  ibv_recv_wr* bad = nullptr;
  EXPECT_NE(ibv_post_recv(b_.get(), &wr, &bad), 0);
  EXPECT_EQ(bad, &wr);
}

// Rule: ibv_post_srq_recv(3): "posts the linked list of work requests (WRs) ... to the shared
//   receive queue"; IBTA Vol 1 ch. 10 (SRQ): every QP associated with the SRQ takes its receive
//   WQEs from it.
// Checks: two RC QPs on one SRQ each receive a SEND from their own peer; each receive completion
//   reports its own QP number.
TEST_F(SrqTest, TwoQpsReceiveFromOneSrq) {
  ASSERT_NO_FATAL_FAILURE(MakeSrqPair());
  QpEnd c;
  QpEnd d;
  EndConfig d_config;
  d_config.srq = srq_.get();
  ASSERT_TRUE(CreateEnd(&c));
  ASSERT_TRUE(CreateEnd(&d, d_config));
  ASSERT_TRUE(Connect(c, d));
  ASSERT_NO_FATAL_FAILURE(PostSrqRecvs(2));
  ibv_sge sge = local_.Sge(0, 16);
  ASSERT_EQ(PostOne(a_.get(), SendWr(1, &sge, 1)), 0);
  ASSERT_EQ(PostOne(c.get(), SendWr(2, &sge, 1)), 0);
  ibv_wc b_wc = {};
  ibv_wc d_wc = {};
  ASSERT_TRUE(PollOneCompletion(b_.recv_cq.get(), &b_wc));
  ASSERT_TRUE(PollOneCompletion(d.recv_cq.get(), &d_wc));
  EXPECT_EQ(b_wc.status, IBV_WC_SUCCESS) << DescribeWc(b_wc);
  EXPECT_EQ(d_wc.status, IBV_WC_SUCCESS) << DescribeWc(d_wc);
  EXPECT_EQ(b_wc.qp_num, b_.qp_num());
  EXPECT_EQ(d_wc.qp_num, d.qp_num());
  EXPECT_NE(b_wc.wr_id, d_wc.wr_id) << "one SRQ receive was used twice";
}

// Rule: ibv_modify_srq(3): "Modifying the srq_limit arms the SRQ to produce an
//   IBV_EVENT_SRQ_LIMIT_REACHED "low watermark" asynchronous event once the number of WRs in the
//   SRQ drops below srq_limit."
// Checks: with 4 receives and srq_limit 3, taking one (3 left, not below the limit) raises no
//   IBV_EVENT_SRQ_LIMIT_REACHED within 200 ms.
TEST_F(SrqTest, NoLimitEvent_CountAtLimit) {
  ASSERT_NO_FATAL_FAILURE(MakeSrqPair());
  ASSERT_NO_FATAL_FAILURE(PostSrqRecvs(4));
  ibv_srq_attr attr = {};
  attr.srq_limit = 3;
  ASSERT_EQ(ibv_modify_srq(srq_.get(), &attr, IBV_SRQ_LIMIT), 0);
  ASSERT_NO_FATAL_FAILURE(SendOne(a_, b_, 1));
  EXPECT_TRUE(NoAsyncEventFor(context(), IBV_EVENT_SRQ_LIMIT_REACHED, srq_.get()));
}

// Rule: ibv_modify_srq(3): setting srq_limit "arms the SRQ to produce an
//   IBV_EVENT_SRQ_LIMIT_REACHED "low watermark" asynchronous event once the number of WRs in the
//   SRQ drops below srq_limit" - once: the event disarms it.
// Checks: with 4 receives and srq_limit 3, taking two gives exactly one IBV_EVENT_SRQ_LIMIT_REACHED
//   with element.srq == the SRQ; taking a third gives no second one within 200 ms.
TEST_F(SrqTest, LimitEventRaisedOnce_CountBelowLimit) {
  ASSERT_NO_FATAL_FAILURE(MakeSrqPair());
  ASSERT_NO_FATAL_FAILURE(PostSrqRecvs(4));
  ibv_srq_attr attr = {};
  attr.srq_limit = 3;
  ASSERT_EQ(ibv_modify_srq(srq_.get(), &attr, IBV_SRQ_LIMIT), 0);
  ASSERT_NO_FATAL_FAILURE(SendOne(a_, b_, 1));
  ASSERT_NO_FATAL_FAILURE(SendOne(a_, b_, 2));
  EXPECT_TRUE(WaitForAsyncEvent(context(), IBV_EVENT_SRQ_LIMIT_REACHED, srq_.get(), &acks_));
  ASSERT_NO_FATAL_FAILURE(SendOne(a_, b_, 3));
  EXPECT_TRUE(NoAsyncEventFor(context(), IBV_EVENT_SRQ_LIMIT_REACHED, srq_.get()))
      << "the limit fired again without being re-armed";
}

// Rule: ibv_modify_srq(3): srq_limit "arms" a one-shot event; IBTA Vol 1 ch. 11 (SRQ limit): once
//   the event is generated the limit is disarmed, and ibv_query_srq then reports srq_limit 0.
// Checks: after IBV_EVENT_SRQ_LIMIT_REACHED, ibv_query_srq returns srq_limit 0.
TEST_F(SrqTest, QueryShowsLimitDisarmed_AfterLimitEvent) {
  ASSERT_NO_FATAL_FAILURE(MakeSrqPair());
  ASSERT_NO_FATAL_FAILURE(PostSrqRecvs(4));
  ibv_srq_attr attr = {};
  attr.srq_limit = 4;
  ASSERT_EQ(ibv_modify_srq(srq_.get(), &attr, IBV_SRQ_LIMIT), 0);
  ASSERT_NO_FATAL_FAILURE(SendOne(a_, b_, 1));
  ASSERT_TRUE(WaitForAsyncEvent(context(), IBV_EVENT_SRQ_LIMIT_REACHED, srq_.get(), &acks_));
  ibv_srq_attr got = {};
  got.srq_limit = 99;
  ASSERT_EQ(ibv_query_srq(srq_.get(), &got), 0);
  EXPECT_EQ(got.srq_limit, 0u);
}

// Rule: ibv_modify_srq(3): "If any of the modify attributes is invalid, none of the attributes will
//   be modified"; IBTA Vol 1 ch. 11 (Modify Shared Receive Queue): a limit larger than the SRQ is
//   invalid (EINVAL in Linux).
// Checks: srq_limit = the SRQ's max_wr + 1 returns EINVAL and ibv_query_srq still shows srq_limit 0.
TEST_F(SrqTest, ModifyFails_LimitAboveMaxWr) {
  ASSERT_NO_FATAL_FAILURE(CreateSrq());
  ibv_srq_attr now = {};
  ASSERT_EQ(ibv_query_srq(srq_.get(), &now), 0);
  ibv_srq_attr attr = {};
  attr.srq_limit = now.max_wr + 1;
  EXPECT_THAT(ibv_modify_srq(srq_.get(), &attr, IBV_SRQ_LIMIT), ReturnsErrno(EINVAL));
  ibv_srq_attr got = {};
  ASSERT_EQ(ibv_query_srq(srq_.get(), &got), 0);
  EXPECT_EQ(got.srq_limit, 0u);
}

// Rule: ibv_modify_srq(3) names IBV_SRQ_MAX_WR and IBV_SRQ_LIMIT; nothing on the way checks the other
//   bits of srq_attr_mask: libibverbs passes the mask on (ibv_cmd_modify_srq), the kernel's
//   ib_uverbs_modify_srq hands it to the driver, and rxe (rxe_srq_chk_attr) and mlx5
//   (mlx5_ib_modify_srq) look only at those two.
// Checks: IBV_SRQ_LIMIT with an undefined bit (1 << 5) set beside it returns 0, and ibv_query_srq shows
//   the new srq_limit.
TEST_F(SrqTest, ModifyIgnoresUndefinedMaskBits) {
  ASSERT_NO_FATAL_FAILURE(CreateSrq());
  ibv_srq_attr attr = {};
  attr.srq_limit = 4;
  EXPECT_EQ(ibv_modify_srq(srq_.get(), &attr, IBV_SRQ_LIMIT | (1 << 5)), 0) << "refused for the undefined bit";
  ibv_srq_attr got = {};
  ASSERT_EQ(ibv_query_srq(srq_.get(), &got), 0);
  EXPECT_EQ(got.srq_limit, 4u);
}

// Rule: ibv_modify_srq(3): "If any of the modify attributes is invalid, none of the attributes will
//   be modified"; an armed limit must stay within the SRQ (rxe: rxe_srq_chk_attr refuses a max_wr
//   below the armed srq_limit with EINVAL). Needs IBV_DEVICE_SRQ_RESIZE.
// Checks: with srq_limit 10 armed on an SRQ of 16, resizing it to 5 returns EINVAL and
//   ibv_query_srq still shows max_wr >= 16 and srq_limit 10.
TEST_F(SrqTest, ResizeFails_BelowArmedLimit) {
  SKIP_IF(!(device_attr().device_cap_flags & IBV_DEVICE_SRQ_RESIZE)) << "(the device cannot resize an SRQ)";
  ASSERT_NO_FATAL_FAILURE(CreateSrq());
  ibv_srq_attr attr = {};
  attr.srq_limit = 10;
  ASSERT_EQ(ibv_modify_srq(srq_.get(), &attr, IBV_SRQ_LIMIT), 0);
  attr = {};
  attr.max_wr = 5;
  EXPECT_THAT(ibv_modify_srq(srq_.get(), &attr, IBV_SRQ_MAX_WR), ReturnsErrno(EINVAL));
  ibv_srq_attr got = {};
  ASSERT_EQ(ibv_query_srq(srq_.get(), &got), 0);
  EXPECT_GE(got.max_wr, 16u);
  EXPECT_EQ(got.srq_limit, 10u);
}

// Rule: ibv_create_srq(3): "ibv_destroy_srq() fails if any queue pair is still associated with this
//   SRQ" and returns "the value of errno on failure" (EBUSY in Linux).
// Checks: destroying an SRQ with an attached QP returns EBUSY; once the QP is destroyed, the SRQ
//   destroys (0).
TEST_F(SrqTest, DestroyFails_QpAttached) {
  ASSERT_NO_FATAL_FAILURE(CreateSrq());
  EndConfig config;
  config.srq = srq_.get();
  ASSERT_TRUE(CreateEnd(&b_, config));
  EXPECT_THAT(ibv_destroy_srq(srq_.get()), ReturnsErrno(EBUSY));
  b_.reset();
  EXPECT_EQ(ibv_destroy_srq(srq_.release()), 0);
}

// Rule: ibv_get_async_event(3): "IBV_EVENT_QP_LAST_WQE_REACHED Last WQE Reached on a QP associated
//   with an SRQ"; IBTA Vol 1 o11-5.2.5: a QP on an SRQ that enters the Error state raises it (backend
//   question LastWqeReachedOnSrqQpError; rxe before 6.5 does not).
// Checks: moving an SRQ-attached RC QP to ERR raises IBV_EVENT_QP_LAST_WQE_REACHED with element.qp
//   == that QP within 2 s.
TEST_F(SrqTest, LastWqeReached_SrqQpEntersErr) {
  SKIP_IF(!Backend().Answer("LastWqeReachedOnSrqQpError", true)) << "(the backend raises no such event)";
  ASSERT_NO_FATAL_FAILURE(MakeSrqPair());
  ASSERT_TRUE(ModifyToState(b_.get(), IBV_QPS_ERR));
  EXPECT_TRUE(WaitForAsyncEvent(context(), IBV_EVENT_QP_LAST_WQE_REACHED, b_.get(), &acks_));
}

// Rule: ibv_post_srq_recv(3): it "stops processing WRs from this list at the first failure ... and
//   returns this failing WR through bad_wr"; ibv_create_srq(3): max_sge is the "max number of
//   scatter elements per WR".
// Checks: a receive with num_sge = the SRQ's max_sge + 1 returns non-zero and sets *bad_wr.
TEST_F(SrqTest, PostSrqRecvFails_TooManySge) {
  ASSERT_NO_FATAL_FAILURE(CreateSrq());
  ibv_srq_attr now = {};
  ASSERT_EQ(ibv_query_srq(srq_.get(), &now), 0);
  std::vector<ibv_sge> sges(now.max_sge + 1, remote_.Sge(0, 8));
  ibv_recv_wr wr = {1, nullptr, sges.data(), static_cast<int>(sges.size())};
  ibv_recv_wr* bad = nullptr;
  EXPECT_NE(ibv_post_srq_recv(srq_.get(), &wr, &bad), 0);
  EXPECT_EQ(bad, &wr);
}

// Rule: ibv_post_srq_recv(3) does not say which posted receive a message takes; that the oldest
//   goes first is the backend's choice (SrqConsumesInPostingOrder).
// Checks: on a backend that keeps posting order, 8 receives posted to the SRQ (wr_id 0..7) are
//   taken by 8 messages in that order.
TEST_F(SrqTest, ReceivesTakenInPostingOrder) {
  SKIP_IF(!Backend().Answer("SrqConsumesInPostingOrder", true)) << "(the backend takes SRQ receives in any order)";
  ASSERT_NO_FATAL_FAILURE(MakeSrqPair());
  ASSERT_NO_FATAL_FAILURE(PostSrqRecvs(8));
  for (uint64_t i = 0; i < 8; ++i) {
    ibv_sge sge = local_.Sge(0, 16);
    ASSERT_EQ(PostOne(a_.get(), SendWr(100 + i, &sge, 1)), 0);
  }
  std::vector<ibv_wc> wcs;
  ASSERT_TRUE(PollCompletions(b_.recv_cq.get(), 8, &wcs));
  for (uint64_t i = 0; i < 8; ++i) {
    EXPECT_EQ(wcs[i].wr_id, i) << DescribeWcs(wcs);
    EXPECT_EQ(wcs[i].status, IBV_WC_SUCCESS) << DescribeWc(wcs[i]);
  }
}

// Rule: IBTA Vol 1 ch. 10 (shared receive queues): an SRQ is made in a protection domain of its own, which
//   may differ from its QPs' (google/rdma-unit-test pd_test, PdSrqTest.CreateSrq), and the memory of a WQE
//   posted to it is checked against the SRQ's PD (PdSrqTest.SrqRecvMrSrqMatch / SrqRecvMrSrqMismatch): a
//   receive whose MR is not in that PD fails with IBV_WC_LOC_PROT_ERR, and the requester's SEND with
//   IBV_WC_REM_OP_ERR. Backend question SrqRecvCheckedAgainstSrqPd (a backend that checks the QP's PD swaps
//   the two MRs' roles).
// Checks: srq_ in the fixture's PD, b_ in another: a SEND into a receive whose MR is in the checked PD
//   succeeds on both sides; a SEND into a receive whose MR is in the other PD completes the receive with
//   IBV_WC_LOC_PROT_ERR and the SEND with IBV_WC_REM_OP_ERR.
TEST_F(SrqTest, ReceiveBuffersAreCheckedAgainstTheSrqsPd) {
  PdPtr qp_pd(ibv_alloc_pd(context()));
  ASSERT_NE(qp_pd, nullptr) << ErrnoName(errno);
  // b_ is made in qp_pd: it goes before the PD does (a PD that has a QP cannot be freed).
  struct EndBeforePd {
    QpEnd& end;
    ~EndBeforePd() { end.reset(); }
  } b_goes_first{b_};
  Buffer in_qp_pd;
  ASSERT_TRUE(in_qp_pd.Register(qp_pd.get(), 4096));
  ASSERT_NO_FATAL_FAILURE(CreateSrq());
  EndConfig b_config;
  b_config.srq = srq_.get();
  b_config.pd = qp_pd.get();
  ASSERT_TRUE(MakePair(EndConfig{}, b_config, ConnectParams{}, ConnectParams{}));
  const bool srq_pd = Backend().Answer("SrqRecvCheckedAgainstSrqPd", true);
  Buffer& checked = srq_pd ? remote_ : in_qp_pd;
  Buffer& other = srq_pd ? in_qp_pd : remote_;
  ibv_sge good = checked.Sge(0, 64);
  ASSERT_EQ(PostSrqRecv(srq_.get(), 1, &good, 1), 0);
  ibv_sge sge = local_.Sge(0, 16);
  ASSERT_EQ(PostOne(a_.get(), SendWr(11, &sge, 1)), 0);
  ibv_wc rwc = {};
  ASSERT_TRUE(PollOneCompletion(b_.recv_cq.get(), &rwc));
  EXPECT_EQ(rwc.wr_id, 1u);
  EXPECT_EQ(rwc.status, IBV_WC_SUCCESS) << "a receive whose MR is in the " << (srq_pd ? "SRQ's" : "QP's")
                                        << " PD: " << DescribeWc(rwc);
  ibv_wc swc = {};
  ASSERT_TRUE(PollOneCompletion(a_.send_cq.get(), &swc));
  EXPECT_EQ(swc.status, IBV_WC_SUCCESS) << DescribeWc(swc);
  ibv_sge bad = other.Sge(0, 64);
  ASSERT_EQ(PostSrqRecv(srq_.get(), 2, &bad, 1), 0);
  ASSERT_EQ(PostOne(a_.get(), SendWr(12, &sge, 1)), 0);
  ASSERT_TRUE(PollOneCompletion(b_.recv_cq.get(), &rwc));
  EXPECT_EQ(rwc.wr_id, 2u);
  EXPECT_EQ(rwc.status, IBV_WC_LOC_PROT_ERR) << "a receive whose MR is in the " << (srq_pd ? "QP's" : "SRQ's")
                                             << " PD only: " << DescribeWc(rwc);
  ASSERT_TRUE(PollOneCompletion(a_.send_cq.get(), &swc));
  EXPECT_EQ(swc.wr_id, 12u);
  EXPECT_EQ(swc.status, IBV_WC_REM_OP_ERR) << DescribeWc(swc);
}

}  // namespace
}  // namespace conformance
