// ibv_post_send / ibv_post_recv: what is refused at post time (state, SGE
// count, queue depth, inline size), and how a partly bad list is handled.

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

class QpPostTest : public QpTest {
 protected:
  void SetUp() override {
    QpTest::SetUp();
    if (HasFatalFailure() || IsSkipped()) return;
    ASSERT_TRUE(local_.Register(pd(), 4096));
    ASSERT_TRUE(remote_.Register(pd(), 4096));
  }

  // The capabilities ibv_query_qp reports for qp.
  ibv_qp_cap Caps(ibv_qp* qp) {
    ibv_qp_attr attr = {};
    ibv_qp_init_attr init = {};
    EXPECT_EQ(ibv_query_qp(qp, &attr, IBV_QP_CAP, &init), 0);
    return init.cap;
  }

  // An RC QP a_ in RTS whose destination QP does not exist and whose
  // transport timer is off (timeout 0 = infinite): what it sends is never
  // answered, so its WRs stay outstanding.
  testing::AssertionResult MakeStuckRequester(const QpCaps& caps) {
    EndConfig config;
    config.caps = caps;
    config.send_cqe = static_cast<int>(caps.max_send_wr) + 16;
    if (auto ok = CreateEnd(&a_, config); !ok) return ok;
    ConnectParams params;
    params.timeout = 0;
    params.path_mtu = DefaultMtu();
    ibv_ah_attr self = LocalAddress();
    const uint32_t nobody = (a_.qp_num() ^ 0x5a5a00) & 0xffffff;
    return BringUp(a_.get(), port(), nobody, self, params);
  }

  // Posts a_'s whole send queue (`depth` WRITEs of 8 bytes, wr_id 0..depth-1) as one list, the last a
  // WRITE with immediate, signaled or not, that consumes the receive b_ has; returns once b_ has received
  // it (the responder executed them all).
  void FillSendQueueAndWaitForTheResponder(uint32_t depth, bool signal_last) {
    ibv_sge rsge = remote_.Sge(2048, 8);
    ASSERT_EQ(PostRecv(b_.get(), 100, &rsge, 1), 0);
    std::vector<ibv_sge> sges(depth, local_.Sge(0, 8));
    std::vector<ibv_send_wr> wrs(depth);
    for (uint32_t i = 0; i < depth; ++i) {
      const bool last = i + 1 == depth;
      wrs[i] = RdmaWr(i, last ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE, &sges[i], 1, remote_.addr(),
                      remote_.rkey(), last && signal_last ? IBV_SEND_SIGNALED : 0);
      wrs[i].next = last ? nullptr : &wrs[i + 1];
    }
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_send(a_.get(), wrs.data(), &bad), 0);
    ibv_wc wc = {};
    ASSERT_TRUE(PollOneCompletion(b_.recv_cq.get(), &wc));
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
  }

  // A pair whose b_ has a receive queue of 8 (or what the backend makes of it), every slot posted
  // (wr_id 0..depth-1, each 64 bytes at *rsge); *depth is the queue's reported depth.
  void MakePairWithFullReceiveQueue(const ibv_sge& rsge, uint32_t* depth) {
    EndConfig config;
    config.caps.max_recv_wr = 8;
    ASSERT_TRUE(MakePair(config));
    *depth = Caps(b_.get()).max_recv_wr;
    ASSERT_LE(*depth, 32u) << "unexpectedly deep receive queue";
    ibv_sge sge = rsge;
    for (uint32_t i = 0; i < *depth; ++i) ASSERT_EQ(PostRecv(b_.get(), i, &sge, 1), 0) << "receive " << i;
  }

  int PostOneWrite(uint64_t wr_id) {
    ibv_sge sge = local_.Sge(0, 8);
    return PostOne(a_.get(), RdmaWr(wr_id, IBV_WR_RDMA_WRITE, &sge, 1, remote_.addr(), remote_.rkey()));
  }

  Buffer local_;
  Buffer remote_;
};

// Rule: IBTA Vol 1 C10-97.2.1: a Post Receive Request to a QP in the Reset state
//   returns an immediate error; ibv_post_recv(3): "returns this failing WR through bad_wr" and
//   "the value of errno on failure".
// Checks: ibv_post_recv on a new (RESET) RC QP returns EINVAL and sets *bad_wr to the WR.
TEST_F(QpPostTest, PostRecvFails_Reset) {
  ASSERT_TRUE(CreateEnd(&a_));
  ibv_sge sge = local_.Sge(0, 64);
  ibv_recv_wr wr = {};
  wr.wr_id = 1;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  EXPECT_THAT(ibv_post_recv(a_.get(), &wr, &bad), ReturnsErrno(EINVAL));
  EXPECT_EQ(bad, &wr);
}

// Rule: IBTA Vol 1 ch. 10 (QP states, Init): "WRs can be posted to the RQ" of a QP in the Init
//   state (they are not processed until RTR); ibv_post_recv(3): "returns 0 on success".
// Checks: ibv_post_recv on an RC QP in INIT returns 0.
TEST_F(QpPostTest, PostRecvSucceeds_Init) {
  ASSERT_TRUE(CreateEnd(&a_));
  ASSERT_TRUE(ModifyToInit(a_.get(), port(), ConnectParams{}));
  ibv_sge sge = local_.Sge(0, 64);
  EXPECT_EQ(PostRecv(a_.get(), 1, &sge, 1), 0);
}

// Rule: IBTA Vol 1 ch. 10 (QP states) and ch. 11 (Post Send Request): posting to the send queue of a QP in
//   the Reset state returns an immediate error; ibv_post_send(3): "returns this failing WR through
//   bad_wr".
// Checks: ibv_post_send on a new (RESET) RC QP returns non-zero and sets *bad_wr to the WR.
TEST_F(QpPostTest, PostSendFails_Reset) {
  ASSERT_TRUE(CreateEnd(&a_));
  ibv_sge sge = local_.Sge(0, 64);
  ibv_send_wr wr = SendWr(1, &sge, 1);
  ibv_send_wr* bad = nullptr;
  EXPECT_NE(ibv_post_send(a_.get(), &wr, &bad), 0);
  EXPECT_EQ(bad, &wr);
}

// Rule: IBTA Vol 1 ch. 10 (Init state): "Any attempt to post a WR to the SQ results in the return
//   of an immediate error" - many HCAs accept the WR and run it once the QP reaches RTS
//   (backend question PostSendInInitFails).
// Checks: ibv_post_send on an RC QP in INIT fails with *bad_wr set when the backend answers
//   PostSendInInitFails true (the spec), and returns 0 when it answers false.
TEST_F(QpPostTest, PostSendFollowsBackend_Init) {
  ASSERT_TRUE(CreateEnd(&a_));
  ASSERT_TRUE(ModifyToInit(a_.get(), port(), ConnectParams{}));
  ibv_sge sge = local_.Sge(0, 64);
  ibv_send_wr wr = SendWr(1, &sge, 1);
  ibv_send_wr* bad = nullptr;
  const int rc = ibv_post_send(a_.get(), &wr, &bad);
  if (Backend().Answer("PostSendInInitFails", true)) {
    EXPECT_NE(rc, 0);
    EXPECT_EQ(bad, &wr);
  } else {
    EXPECT_EQ(rc, 0) << ErrnoName(rc);
  }
}

// Rule: IBTA Vol 1 ch. 10 (RTR state): SQ posting is not enabled before RTS - many HCAs accept
//   the WR and run it once the QP reaches RTS (backend question PostSendInRtrFails).
// Checks: ibv_post_send on an RC QP in RTR fails with *bad_wr set when the backend answers
//   PostSendInRtrFails true (the spec), and returns 0 when it answers false.
TEST_F(QpPostTest, PostSendFollowsBackend_Rtr) {
  ASSERT_TRUE(CreateEnd(&a_));
  ConnectParams params;
  params.path_mtu = DefaultMtu();
  ASSERT_TRUE(ModifyToInit(a_.get(), port(), params));
  ASSERT_TRUE(ModifyToRtr(a_.get(), a_.qp_num(), LocalAddress(), params));
  ibv_sge sge = local_.Sge(0, 64);
  ibv_send_wr wr = SendWr(1, &sge, 1);
  ibv_send_wr* bad = nullptr;
  const int rc = ibv_post_send(a_.get(), &wr, &bad);
  if (Backend().Answer("PostSendInRtrFails", true)) {
    EXPECT_NE(rc, 0);
    EXPECT_EQ(bad, &wr);
  } else {
    EXPECT_EQ(rc, 0) << ErrnoName(rc);
  }
}

// Rule: ibv_create_qp(3): max_send_sge is the "max number of scatter/gather (s/g) elements in a WR
//   in the SQ"; ibv_post_send(3): it "stops processing WRs from this list at the first failure
//   (that can be detected immediately ...) and returns this failing WR through bad_wr" (EINVAL:
//   "Invalid value provided in wr").
// Checks: a WRITE with num_sge = the QP's max_send_sge + 1 returns EINVAL, *bad_wr is the WR, and
//   no completion appears.
TEST_F(QpPostTest, PostSendFails_TooManySge) {
  ASSERT_TRUE(MakePair());
  const uint32_t max_sge = Caps(a_.get()).max_send_sge;
  std::vector<ibv_sge> sges(max_sge + 1, local_.Sge(0, 8));
  ibv_send_wr wr = RdmaWr(1, IBV_WR_RDMA_WRITE, sges.data(), static_cast<int>(sges.size()), remote_.addr(),
                          remote_.rkey());
  ibv_send_wr* bad = nullptr;
  EXPECT_THAT(ibv_post_send(a_.get(), &wr, &bad), ReturnsErrno(EINVAL));
  EXPECT_EQ(bad, &wr);
  EXPECT_TRUE(NoCompletionWithin(a_.send_cq.get(), kQuietWindow));
}

// Rule: ibv_post_send(3): "It stops processing WRs from this list at the first failure (that can
//   be detected immediately while requests are being posted), and returns this failing WR through
//   bad_wr."
// Checks: a list of three WRITEs whose third has too many SGEs returns EINVAL with *bad_wr ==
//   &wrs[2]; the first two are posted and complete successfully, in order; the third never does.
TEST_F(QpPostTest, PostSendStopsAtBadWr) {
  ASSERT_TRUE(MakePair());
  const uint32_t max_sge = Caps(a_.get()).max_send_sge;
  ibv_sge good[2] = {local_.Sge(0, 8), local_.Sge(8, 8)};
  std::vector<ibv_sge> too_many(max_sge + 1, local_.Sge(16, 8));
  ibv_send_wr wrs[3] = {
      RdmaWr(1, IBV_WR_RDMA_WRITE, &good[0], 1, remote_.addr(0), remote_.rkey()),
      RdmaWr(2, IBV_WR_RDMA_WRITE, &good[1], 1, remote_.addr(8), remote_.rkey()),
      RdmaWr(3, IBV_WR_RDMA_WRITE, too_many.data(), static_cast<int>(too_many.size()), remote_.addr(16),
             remote_.rkey()),
  };
  wrs[0].next = &wrs[1];
  wrs[1].next = &wrs[2];
  ibv_send_wr* bad = nullptr;
  EXPECT_THAT(ibv_post_send(a_.get(), wrs, &bad), ReturnsErrno(EINVAL));
  EXPECT_EQ(bad, &wrs[2]);
  std::vector<ibv_wc> wcs;
  ASSERT_TRUE(PollCompletions(a_.send_cq.get(), 2, &wcs));
  EXPECT_EQ(wcs[0].wr_id, 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS) << DescribeWc(wcs[0]);
  EXPECT_EQ(wcs[1].wr_id, 2u);
  EXPECT_EQ(wcs[1].status, IBV_WC_SUCCESS) << DescribeWc(wcs[1]);
  EXPECT_TRUE(NoCompletionWithin(a_.send_cq.get(), kQuietWindow)) << "the refused WR completed";
}

// Rule: ibv_create_qp(3): max_send_wr is the "max number of outstanding WRs in the SQ" and the
//   returned cap holds "the actual QP values"; ibv_post_send(3): ENOMEM "Send Queue is full" (some
//   HCAs take more than they report: backend question SendQueueFullAtReportedCap).
// Checks: on an RC QP whose WRITEs are never answered (no such destination QP, timeout 0), the
//   reported max_send_wr WRITEs post, and the next returns ENOMEM with *bad_wr set.
TEST_F(QpPostTest, PostSendFails_SendQueueFull) {
  SKIP_IF(!Backend().Answer("SendQueueFullAtReportedCap", true)) << "(the SQ holds more than it reports)";
  QpCaps caps;
  caps.max_send_wr = 8;
  ASSERT_TRUE(MakeStuckRequester(caps));
  const uint32_t depth = Caps(a_.get()).max_send_wr;
  ASSERT_LE(depth, 4096u) << "unexpectedly deep send queue";
  ibv_sge sge = local_.Sge(0, 8);
  for (uint32_t i = 0; i < depth; ++i) {
    ASSERT_EQ(PostOne(a_.get(), RdmaWr(i, IBV_WR_RDMA_WRITE, &sge, 1, remote_.addr(), remote_.rkey(), 0)), 0)
        << "WR " << i << " of " << depth;
  }
  ibv_send_wr wr = RdmaWr(depth, IBV_WR_RDMA_WRITE, &sge, 1, remote_.addr(), remote_.rkey(), 0);
  ibv_send_wr* bad = nullptr;
  EXPECT_THAT(ibv_post_send(a_.get(), &wr, &bad), ReturnsErrno(ENOMEM));
  EXPECT_EQ(bad, &wr);
}

// Rule: ibv_post_send(3): ENOMEM "Send Queue is full"; when a completed WR's slot is free again the man
//   pages leave open: mlx5 frees it when the completion is polled (mlx5_poll_one moves the send queue's
//   tail; an unsignaled WR's with the next polled completion of the queue), rxe as soon as it completes
//   (its completer moves the queue's consumer index). Backend question SendSlotFreedAtPoll.
// Checks: a_'s whole send queue posted, the last WR signaled, and executed by the responder: where slots
//   are freed at poll, the next post returns ENOMEM until a_'s one completion is polled, then succeeds;
//   elsewhere it succeeds within the return window without any poll of a_'s CQ.
TEST_F(QpPostTest, SendSlotsFreeFollowBackend) {
  SKIP_IF(!Backend().Answer("SendQueueFullAtReportedCap", true)) << "(the SQ holds more than it reports)";
  EndConfig config;
  config.caps.max_send_wr = 8;
  config.send_cqe = 64;
  ASSERT_TRUE(MakePair(config));
  const uint32_t depth = Caps(a_.get()).max_send_wr;
  ASSERT_LE(depth, 32u) << "unexpectedly deep send queue";
  ASSERT_NO_FATAL_FAILURE(FillSendQueueAndWaitForTheResponder(depth, true));
  if (Backend().Answer("SendSlotFreedAtPoll", true)) {
    EXPECT_THAT(PostOneWrite(depth), ReturnsErrno(ENOMEM)) << "a slot was free before its completion was polled";
    ibv_wc wc = {};
    ASSERT_TRUE(PollOneCompletion(a_.send_cq.get(), &wc));
    EXPECT_EQ(wc.wr_id, depth - 1);
    EXPECT_EQ(PostOneWrite(depth), 0) << "the polled completion freed no slot";
    return;
  }
  EXPECT_EQ(PostWhileFull([&] { return PostOneWrite(depth); }), 0)
      << "no slot freed by the completions, within " << kReturnWindow.count() << " ms";
}

// Rule: as SendSlotsFreeFollowBackend, for a CQ read with ibv_start_poll(3): a completion is polled when
//   ibv_start_poll or ibv_next_poll returns it (mlx5 frees the slot as it parses the entry there,
//   mlx5_start_poll -> mlx5_parse_lazy_cqe), so a program may post again before ibv_end_poll
//   (ibv_rc_pingpong -t reposts its receives so).
// Checks: a_'s whole send queue posted, the last WR signaled, and executed by the responder; its one
//   completion read with ibv_start_poll on a CQ made with ibv_create_cq_ex: a post before ibv_end_poll
//   succeeds (within the return window where slots are freed as WRs complete).
TEST_F(QpPostTest, SendSlotFreeOnceStartPollReturnsItsCompletion) {
  SKIP_IF(!Backend().Answer("SendQueueFullAtReportedCap", true)) << "(the SQ holds more than it reports)";
  SKIP_IF(!Backend().Answer("CreateCqExSupported", true)) << "(no ibv_create_cq_ex)";
  EndConfig config;
  config.caps.max_send_wr = 8;
  config.send_cqe = 64;
  config.send_cq_ex = true;
  ASSERT_TRUE(MakePair(config));
  const uint32_t depth = Caps(a_.get()).max_send_wr;
  ASSERT_LE(depth, 32u) << "unexpectedly deep send queue";
  ASSERT_NO_FATAL_FAILURE(FillSendQueueAndWaitForTheResponder(depth, true));
  auto* cq = reinterpret_cast<ibv_cq_ex*>(a_.send_cq.get());  // made by ibv_create_cq_ex (ibv_cq_ex_to_cq)
  ibv_poll_cq_attr attr = {};
  int started = ENOENT;
  const auto deadline = std::chrono::steady_clock::now() + kReturnWindow;
  while ((started = ibv_start_poll(cq, &attr)) == ENOENT && std::chrono::steady_clock::now() < deadline) {
  }
  ASSERT_EQ(started, 0) << "no completion within " << kReturnWindow.count() << " ms";
  EXPECT_EQ(cq->wr_id, depth - 1);
  const int posted = Backend().Answer("SendSlotFreedAtPoll", true) ? PostOneWrite(depth)
                                                                    : PostWhileFull([&] { return PostOneWrite(depth); });
  ibv_end_poll(cq);
  EXPECT_EQ(posted, 0) << "the completion ibv_start_poll returned freed no slot before ibv_end_poll";
}

// Rule: as SendSlotsFreeFollowBackend: where slots are freed when completions are polled, a send queue
//   whose WRs are all unsignaled never frees a slot (the classic need to signal one WR in every
//   max_send_wr: mlx5 programs that do not hang on ENOMEM).
// Checks: a_'s whole send queue posted unsignaled and executed by the responder: the next post returns
//   ENOMEM, and still does after the quiet window.
TEST_F(QpPostTest, UnsignaledOnlySendQueueStaysFull) {
  SKIP_IF(!Backend().Answer("SendQueueFullAtReportedCap", true)) << "(the SQ holds more than it reports)";
  SKIP_IF(!Backend().Answer("SendSlotFreedAtPoll", true)) << "(slots are freed as WRs complete)";
  EndConfig config;
  config.caps.max_send_wr = 8;
  ASSERT_TRUE(MakePair(config));
  const uint32_t depth = Caps(a_.get()).max_send_wr;
  ASSERT_LE(depth, 32u) << "unexpectedly deep send queue";
  ASSERT_NO_FATAL_FAILURE(FillSendQueueAndWaitForTheResponder(depth, false));
  EXPECT_THAT(PostOneWrite(depth), ReturnsErrno(ENOMEM));
  EXPECT_TRUE(NoCompletionWithin(a_.send_cq.get(), kQuietWindow)) << "an unsignaled WRITE completed";
  EXPECT_THAT(PostOneWrite(depth), ReturnsErrno(ENOMEM)) << "a slot came free with nothing polled";
}

// Rule: ibv_post_recv(3): ENOMEM "Receive Queue is full"; when a consumed receive's slot is free again
//   the man pages leave open: mlx5 frees it when its completion is polled (mlx5_poll_one moves the
//   receive queue's tail), rxe as soon as a message takes it (its responder moves the queue's consumer
//   index before it acknowledges). Backend question RecvSlotFreedAtPoll.
// Checks: b_'s whole receive queue posted, and one receive taken by a SEND that a_ saw acknowledged:
//   where slots are freed at poll, the next receive returns ENOMEM until b_'s one completion is polled,
//   then succeeds; elsewhere it succeeds within the return window without any poll of b_'s CQ.
TEST_F(QpPostTest, RecvSlotsFreeFollowBackend) {
  SKIP_IF(!Backend().Answer("RecvQueueFullAtReportedCap", true)) << "(the RQ holds more than it reports)";
  ibv_sge rsge = remote_.Sge(0, 64);
  uint32_t depth = 0;
  ASSERT_NO_FATAL_FAILURE(MakePairWithFullReceiveQueue(rsge, &depth));
  ibv_recv_wr extra = {depth, nullptr, &rsge, 1};
  ibv_recv_wr* bad = nullptr;
  ASSERT_THAT(ibv_post_recv(b_.get(), &extra, &bad), ReturnsErrno(ENOMEM)) << "the queue took more than its cap";
  ibv_sge sge = local_.Sge(0, 8);
  ASSERT_EQ(PostOne(a_.get(), SendWr(100, &sge, 1)), 0);
  ibv_wc wc = {};
  ASSERT_TRUE(PollOneCompletion(a_.send_cq.get(), &wc));
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
  if (Backend().Answer("RecvSlotFreedAtPoll", true)) {
    EXPECT_THAT(ibv_post_recv(b_.get(), &extra, &bad), ReturnsErrno(ENOMEM))
        << "a slot was free before its completion was polled";
    ASSERT_TRUE(PollOneCompletion(b_.recv_cq.get(), &wc));
    EXPECT_EQ(wc.wr_id, 0u);
    EXPECT_EQ(ibv_post_recv(b_.get(), &extra, &bad), 0) << "the polled completion freed no slot";
    return;
  }
  EXPECT_EQ(PostWhileFull([&] { return ibv_post_recv(b_.get(), &extra, &bad); }), 0)
      << "no slot freed by the consumed receive, within " << kReturnWindow.count() << " ms";
}

// Rule: as RecvSlotsFreeFollowBackend: a receive flushed by its QP's ERR state (or posted in ERR)
//   completes with IBV_WC_WR_FLUSH_ERR, and where slots are freed at poll it holds its slot until that
//   completion is polled (mlx5 takes receives in ERR: the flush completes each).
// Checks: b_'s whole receive queue posted, b_ moved to ERR and all but one flush completion polled:
//   depth - 1 receives are taken, and the next returns ENOMEM; once every flush completion is polled,
//   a receive is taken again.
TEST_F(QpPostTest, FlushedReceivesHoldTheirSlotsUntilPolled) {
  SKIP_IF(!Backend().Answer("RecvQueueFullAtReportedCap", true)) << "(the RQ holds more than it reports)";
  SKIP_IF(!Backend().Answer("RecvSlotFreedAtPoll", true)) << "(slots are freed as receives are consumed)";
  ibv_sge rsge = remote_.Sge(0, 64);
  uint32_t depth = 0;
  ASSERT_NO_FATAL_FAILURE(MakePairWithFullReceiveQueue(rsge, &depth));
  ASSERT_TRUE(ModifyToState(b_.get(), IBV_QPS_ERR));
  std::vector<ibv_wc> wcs;
  ASSERT_TRUE(PollCompletions(b_.recv_cq.get(), static_cast<int>(depth) - 1, &wcs));
  for (const ibv_wc& flushed : wcs) EXPECT_EQ(flushed.status, IBV_WC_WR_FLUSH_ERR) << DescribeWc(flushed);
  for (uint32_t i = 1; i < depth; ++i) ASSERT_EQ(PostRecv(b_.get(), depth + i, &rsge, 1), 0) << "receive " << i;
  ibv_recv_wr extra = {2 * depth, nullptr, &rsge, 1};
  ibv_recv_wr* bad = nullptr;
  EXPECT_THAT(ibv_post_recv(b_.get(), &extra, &bad), ReturnsErrno(ENOMEM))
      << "a flushed receive freed its slot before its completion was polled";
  ASSERT_TRUE(PollCompletions(b_.recv_cq.get(), static_cast<int>(depth), &wcs));
  for (const ibv_wc& flushed : wcs) EXPECT_EQ(flushed.status, IBV_WC_WR_FLUSH_ERR) << DescribeWc(flushed);
  EXPECT_EQ(ibv_post_recv(b_.get(), &extra, &bad), 0) << "the polled flush completions freed no slot";
}

// Rule: ibv_create_qp(3): max_inline_data is the "max number of data (bytes) that can be posted
//   inline to the SQ"; ibv_post_send(3): EINVAL "Invalid value provided in wr", and the failing WR
//   is returned "through bad_wr".
// Checks: an inline SEND of the QP's max_inline_data + 1 bytes returns EINVAL and sets *bad_wr.
TEST_F(QpPostTest, PostSendFails_InlineAboveMax) {
  EndConfig config;
  config.caps.max_inline_data = 64;
  config.caps.max_send_sge = 2;
  ASSERT_TRUE(MakePair(config));
  const uint32_t max_inline = Caps(a_.get()).max_inline_data;
  ASSERT_GE(max_inline, 64u);
  ASSERT_LT(max_inline, 4096u);
  ibv_sge sge = local_.Sge(0, max_inline + 1);
  ibv_send_wr wr = SendWr(1, &sge, 1, IBV_SEND_SIGNALED | IBV_SEND_INLINE);
  ibv_send_wr* bad = nullptr;
  EXPECT_THAT(ibv_post_send(a_.get(), &wr, &bad), ReturnsErrno(EINVAL));
  EXPECT_EQ(bad, &wr);
}

// Rule: ibv_post_send(3): IBV_SEND_INLINE "Send data in given gather list as inline data in a send WQE.
//   Valid only for Send and RDMA Write"; EINVAL "Invalid value provided in wr", the failing WR returned
//   "through bad_wr".
// Checks: an 8-byte RDMA READ and an 8-byte FETCH_AND_ADD, each with IBV_SEND_INLINE, return EINVAL and
//   set *bad_wr to the WR (the atomic only where the device has atomics).
TEST_F(QpPostTest, PostSendFails_InlineReadOrAtomic) {
  EndConfig config;
  config.caps.max_inline_data = 64;
  ASSERT_TRUE(MakePair(config));
  ibv_sge sge = local_.Sge(0, 8);
  ibv_send_wr read = RdmaWr(1, IBV_WR_RDMA_READ, &sge, 1, remote_.addr(0), remote_.rkey());
  read.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
  ibv_send_wr* bad = nullptr;
  EXPECT_THAT(ibv_post_send(a_.get(), &read, &bad), ReturnsErrno(EINVAL)) << "RDMA READ";
  EXPECT_EQ(bad, &read);
  if (device_attr().atomic_cap == IBV_ATOMIC_NONE) return;
  ibv_send_wr atomic = RdmaWr(2, IBV_WR_ATOMIC_FETCH_AND_ADD, &sge, 1, 0, 0);
  atomic.wr.atomic.remote_addr = remote_.addr(0);
  atomic.wr.atomic.rkey = remote_.rkey();
  atomic.wr.atomic.compare_add = 1;
  atomic.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
  bad = nullptr;
  EXPECT_THAT(ibv_post_send(a_.get(), &atomic, &bad), ReturnsErrno(EINVAL)) << "FETCH_AND_ADD";
  EXPECT_EQ(bad, &atomic);
}

// Rule: ibv_create_qp(3): "The function ibv_create_qp() will update the qp_init_attr->cap struct
//   with the actual QP values of the QP that was created; the values will be greater than or equal
//   to the values requested." A send WQE has room for its SGEs, which inline data may use: rxe
//   (rxe_qp_init_req: max_inline = max(max_send_sge * 16, max_inline_data)) and mlx5 round
//   max_inline_data up, and programs rely on it (rdma_xclient sends 16 bytes inline on a QP that
//   asked for 0).
// Checks: a QP created with max_send_sge 1 and max_inline_data 0 reports max_inline_data >= 16,
//   and a 16-byte inline SEND with lkey 0 is accepted (ibv_post_send returns 0).
TEST_F(QpPostTest, PostSendSucceeds_InlineWithinTheSgesRoom) {
  EndConfig config;
  config.caps.max_inline_data = 0;
  config.caps.max_send_sge = 1;
  ASSERT_TRUE(MakePair(config));
  EXPECT_GE(Caps(a_.get()).max_inline_data, 16u);
  ibv_sge sge = local_.Sge(0, 16);
  sge.lkey = 0;  // inline data is copied at post: no key is needed
  ibv_send_wr wr = SendWr(1, &sge, 1, IBV_SEND_SIGNALED | IBV_SEND_INLINE);
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_send(a_.get(), &wr, &bad), 0);
}

// Rule: ibv_create_qp(3): max_recv_sge is the "max number of s/g elements in a WR in the RQ";
//   ibv_post_recv(3): it stops at the first failure "and returns this failing WR through bad_wr".
// Checks: a receive with num_sge = the QP's max_recv_sge + 1 returns EINVAL and sets *bad_wr.
TEST_F(QpPostTest, PostRecvFails_TooManySge) {
  ASSERT_TRUE(CreateEnd(&a_));
  ASSERT_TRUE(ModifyToInit(a_.get(), port(), ConnectParams{}));
  const uint32_t max_sge = Caps(a_.get()).max_recv_sge;
  std::vector<ibv_sge> sges(max_sge + 1, local_.Sge(0, 8));
  ibv_recv_wr wr = {};
  wr.wr_id = 1;
  wr.sg_list = sges.data();
  wr.num_sge = static_cast<int>(sges.size());
  ibv_recv_wr* bad = nullptr;
  EXPECT_THAT(ibv_post_recv(a_.get(), &wr, &bad), ReturnsErrno(EINVAL));
  EXPECT_EQ(bad, &wr);
}

// Rule: ibv_post_recv(3): "It stops processing WRs from this list at the first failure ... and
//   returns this failing WR through bad_wr"; IBTA Vol 1 ch. 10 (Error state): posted receives are
//   completed with flush errors.
// Checks: a list of three receives whose third has too many SGEs returns EINVAL with *bad_wr ==
//   &wrs[2]; moving the QP to ERR then flushes exactly the first two, in order.
TEST_F(QpPostTest, PostRecvStopsAtBadWr) {
  ASSERT_TRUE(CreateEnd(&a_));
  ASSERT_TRUE(ModifyToInit(a_.get(), port(), ConnectParams{}));
  const uint32_t max_sge = Caps(a_.get()).max_recv_sge;
  ibv_sge good[2] = {local_.Sge(0, 8), local_.Sge(8, 8)};
  std::vector<ibv_sge> too_many(max_sge + 1, local_.Sge(16, 8));
  ibv_recv_wr wrs[3] = {};
  wrs[0] = {1, &wrs[1], &good[0], 1};
  wrs[1] = {2, &wrs[2], &good[1], 1};
  wrs[2] = {3, nullptr, too_many.data(), static_cast<int>(too_many.size())};
  ibv_recv_wr* bad = nullptr;
  EXPECT_THAT(ibv_post_recv(a_.get(), wrs, &bad), ReturnsErrno(EINVAL));
  EXPECT_EQ(bad, &wrs[2]);
  ASSERT_TRUE(ModifyToState(a_.get(), IBV_QPS_ERR));
  std::vector<ibv_wc> wcs;
  ASSERT_TRUE(PollCompletions(a_.recv_cq.get(), 2, &wcs));
  EXPECT_EQ(wcs[0].wr_id, 1u);
  EXPECT_EQ(wcs[1].wr_id, 2u);
  EXPECT_TRUE(NoCompletionWithin(a_.recv_cq.get(), kQuietWindow)) << "the refused receive was posted";
}

// Rule: ibv_create_qp(3): max_recv_wr is the "max number of outstanding WRs in the RQ" and the
//   returned cap holds "the actual QP values" (some HCAs take more than they report: backend
//   question RecvQueueFullAtReportedCap); a full queue fails the post (ENOMEM in Linux).
// Checks: an RC QP in INIT takes its reported max_recv_wr receives; the next returns ENOMEM with
//   *bad_wr set.
TEST_F(QpPostTest, PostRecvFails_RecvQueueFull) {
  SKIP_IF(!Backend().Answer("RecvQueueFullAtReportedCap", true)) << "(the RQ holds more than it reports)";
  EndConfig config;
  config.caps.max_recv_wr = 8;
  ASSERT_TRUE(CreateEnd(&a_, config));
  ASSERT_TRUE(ModifyToInit(a_.get(), port(), ConnectParams{}));
  const uint32_t depth = Caps(a_.get()).max_recv_wr;
  ASSERT_LE(depth, 4096u) << "unexpectedly deep receive queue";
  ibv_sge sge = local_.Sge(0, 8);
  for (uint32_t i = 0; i < depth; ++i) ASSERT_EQ(PostRecv(a_.get(), i, &sge, 1), 0) << "receive " << i;
  ibv_recv_wr wr = {depth, nullptr, &sge, 1};
  ibv_recv_wr* bad = nullptr;
  EXPECT_THAT(ibv_post_recv(a_.get(), &wr, &bad), ReturnsErrno(ENOMEM));
  EXPECT_EQ(bad, &wr);
}

}  // namespace
}  // namespace conformance
