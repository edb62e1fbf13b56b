// CQ overrun driven by real traffic: a requester CQ of N entries that gets
// N + 4 completions it does not poll, and a receive CQ overrun. What every
// CA must do is checked as such; what HCAs legally differ in (does the CQ
// stay usable, do the QPs on it fail) is asked of the backend.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <arpa/inet.h>

#include <cerrno>
#include <vector>

#include "conformance/lib/backend_profile.h"
#include "conformance/lib/errno_capture.h"
#include "conformance/lib/qp_pair.h"
#include "conformance/lib/skip_if.h"
#include "conformance/lib/timeouts.h"

namespace conformance {
namespace {

// Completions beyond the CQ's size.
constexpr int kExtra = 4;
// The send queue must hold every WRITE at once.
constexpr uint32_t kSendDepth = 256;

class CqOverrunTest : public QpTest {
 protected:
  void SetUp() override {
    QpTest::SetUp();
    if (HasFatalFailure() || IsSkipped()) return;
    ASSERT_TRUE(local_.Register(pd(), 4096));
    ASSERT_TRUE(remote_.Register(pd(), 4096));
  }

  // a_ -> b_ with a_'s send CQ of (at least) 4 entries, made with
  // `send_cq_flags` (0: ibv_create_cq). Sets cqe_ to the CQ's real size.
  void MakeSmallSendCqPair(uint32_t send_cq_flags = 0) {
    EndConfig a_config;
    a_config.send_cqe = 4;
    a_config.send_cq_flags = send_cq_flags;
    a_config.caps.max_send_wr = kSendDepth;
    ASSERT_TRUE(MakePair(a_config, EndConfig{}, ConnectParams{}, ConnectParams{}));
    cqe_ = a_.send_cq->cqe;
    SKIP_IF(cqe_ + kExtra > static_cast<int>(kSendDepth)) << "(the CQ was made with " << cqe_ << " entries)";
  }

  // Posts cqe_ + kExtra signaled 8-byte WRITEs (wr_id 0, 1, ...) as one list;
  // the last one carries immediate data, so b_ gets one receive completion
  // once all of them have been executed at the responder.
  void OverrunSendCq() {
    ibv_sge rsge = remote_.Sge(2048, 8);
    ASSERT_EQ(PostRecv(b_.get(), 1000, &rsge, 1), 0);
    const int count = cqe_ + kExtra;
    sges_.assign(static_cast<size_t>(count), local_.Sge(0, 8));
    wrs_.resize(static_cast<size_t>(count));
    for (int i = 0; i < count; ++i) {
      const ibv_wr_opcode op = i + 1 == count ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
      wrs_[i] = RdmaWr(static_cast<uint64_t>(i), op, &sges_[i], 1, remote_.addr(static_cast<size_t>(i % 64) * 8),
                       remote_.rkey());
      wrs_[i].imm_data = htonl(7);
      wrs_[i].next = i + 1 < count ? &wrs_[i + 1] : nullptr;
    }
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_send(a_.get(), wrs_.data(), &bad), 0);
  }

  Buffer local_;
  Buffer remote_;
  int cqe_ = 0;
  std::vector<ibv_sge> sges_;
  std::vector<ibv_send_wr> wrs_;
};

// Rule: ibv_poll_cq(3): "The user should consume work completions at a rate that prevents CQ
//   overrun from occurrence. In case of a CQ overrun, the async event IBV_EVENT_CQ_ERR will be
//   triggered"; ibv_get_async_event(3): "IBV_EVENT_CQ_ERR CQ is in error (CQ overrun)".
// Checks: cqe + 4 signaled WRITEs into a requester CQ of cqe entries that is not polled raise
//   IBV_EVENT_CQ_ERR with element.cq == that CQ.
TEST_F(CqOverrunTest, OverrunRaisesCqErr_RequesterCq) {
  ASSERT_NO_FATAL_FAILURE(MakeSmallSendCqPair());
  if (IsSkipped()) return;
  ASSERT_NO_FATAL_FAILURE(OverrunSendCq());
  EXPECT_TRUE(WaitForAsyncEvent(context(), IBV_EVENT_CQ_ERR, a_.send_cq.get(), &acks_));
}

// Rule: ibv_create_cq(3): the CQ holds "at least cqe entries" (cq->cqe is the actual size);
//   ibv_poll_cq(3): in case of an overrun "the CQ cannot be used" - whatever it keeps, it cannot
//   hold more than its size.
// Checks: after the overrun (IBV_EVENT_CQ_ERR seen), polling the CQ until it returns <= 0 yields at
//   most cqe completions.
TEST_F(CqOverrunTest, OverrunLeavesAtMostCqeCompletions) {
  ASSERT_NO_FATAL_FAILURE(MakeSmallSendCqPair());
  if (IsSkipped()) return;
  ASSERT_NO_FATAL_FAILURE(OverrunSendCq());
  ASSERT_TRUE(WaitForAsyncEvent(context(), IBV_EVENT_CQ_ERR, a_.send_cq.get(), &acks_));
  std::vector<ibv_wc> taken;
  int last_rc = 0;
  DrainCq(a_.send_cq.get(), &taken, &last_rc);
  EXPECT_LE(static_cast<int>(taken.size()), cqe_) << DescribeWcs(taken);
}

// Rule: ibv_poll_cq(3): "In case of a CQ overrun ... the CQ cannot be used" and "On failure, a
//   negative value is returned" - HCAs differ in whether the overrun CQ keeps working (backend
//   question CqOverrunErrorsCq; rxe 6.1 drops the completion and the CQ keeps working).
// Checks: after IBV_EVENT_CQ_ERR, ibv_poll_cq returns a negative value when the backend answers
//   CqOverrunErrorsCq true (the man page), and a value >= 0 when it answers false.
TEST_F(CqOverrunTest, PollFollowsBackend_AfterOverrun) {
  ASSERT_NO_FATAL_FAILURE(MakeSmallSendCqPair());
  if (IsSkipped()) return;
  ASSERT_NO_FATAL_FAILURE(OverrunSendCq());
  ASSERT_TRUE(WaitForAsyncEvent(context(), IBV_EVENT_CQ_ERR, a_.send_cq.get(), &acks_));
  ibv_wc wc[8];
  const int rc = ibv_poll_cq(a_.send_cq.get(), 8, wc);
  if (Backend().Answer("CqOverrunErrorsCq", true)) {
    EXPECT_LT(rc, 0) << "the overrun CQ still polls";
  } else {
    EXPECT_GE(rc, 0) << "the overrun CQ fails to poll";
  }
}

// Rule: ibv_get_async_event(3): "IBV_EVENT_QP_FATAL Error occurred on a QP and it transitioned to
//   error state"; IBTA Vol 1 ch. 11 (CQ errors): a QP that cannot complete into its CQ is in error
//   (backend question CqOverrunMovesQpsToErr; rxe 6.1 just loses a send completion).
// Checks: after the requester CQ overruns, IBV_EVENT_QP_FATAL arrives for the requester QP and the
//   QP reads ERR.
TEST_F(CqOverrunTest, QpEntersErr_RequesterCqOverrun) {
  SKIP_IF(!Backend().Answer("CqOverrunMovesQpsToErr", true)) << "(the backend keeps the QPs going)";
  ASSERT_NO_FATAL_FAILURE(MakeSmallSendCqPair());
  if (IsSkipped()) return;
  ASSERT_NO_FATAL_FAILURE(OverrunSendCq());
  EXPECT_TRUE(WaitForAsyncEvent(context(), IBV_EVENT_QP_FATAL, a_.get(), &acks_));
  EXPECT_TRUE(QpStateBecomes(a_.get(), IBV_QPS_ERR));
}

// Rule: (simulator) simverbs_raise_cq_event(cq, IBV_EVENT_CQ_ERR): "the CQ also enters the error state" -
//   the state an overrun leaves it in, with the same consequences for the QPs that use it (IBTA: a QP that
//   completes into a CQ in error is in error too; the backend's CqOverrunMovesQpsToErr); their completions
//   must not vanish while they go on working.
// Checks: on a backend that answers true, after a CQ error is raised on a_'s send CQ and one signaled
//   WRITE is posted on a_, a_ gets IBV_EVENT_QP_FATAL and reads ERR.
TEST_F(CqOverrunTest, RaisedCqErrFailsTheQpThatCompletesIntoIt) {
  SKIP_IF(!Sim()) << "(raising the CQ error is the simulator's)";
  SKIP_IF(!Backend().Answer("CqOverrunMovesQpsToErr", true)) << "(the backend keeps the QPs going)";
  ASSERT_NO_FATAL_FAILURE(MakeSmallSendCqPair());
  if (IsSkipped()) return;
  ASSERT_EQ(sim().RaiseCqEvent(a_.send_cq.get(), IBV_EVENT_CQ_ERR), 0);
  ibv_sge sge = local_.Sge(0, 8);
  ibv_send_wr wr = RdmaWr(1, IBV_WR_RDMA_WRITE, &sge, 1, remote_.addr(0), remote_.rkey());
  ASSERT_EQ(PostOne(a_.get(), wr), 0);
  EXPECT_TRUE(WaitForAsyncEvent(context(), IBV_EVENT_QP_FATAL, a_.get(), &acks_));
  EXPECT_TRUE(QpStateBecomes(a_.get(), IBV_QPS_ERR));
}

// Rule: ibv_poll_cq(3): "In case of a CQ overrun ... the CQ cannot be used"; whether the HCA takes
//   every QP that uses the CQ to ERR at once, or only a QP that later tries to complete into it
//   (IBTA), is the backend's choice (CqOverrunMovesIdleQpsToErr).
// Checks: on a backend that answers true, an idle RC QP in RTS whose send CQ is a_'s gets
//   IBV_EVENT_QP_FATAL and reads ERR after a_ overruns that CQ, though it never posted anything.
TEST_F(CqOverrunTest, IdleQpOnCqEntersErr_CqOverrun) {
  SKIP_IF(!Backend().Answer("CqOverrunMovesIdleQpsToErr", false)) << "(only a QP that completes into the CQ is hit)";
  ASSERT_NO_FATAL_FAILURE(MakeSmallSendCqPair());
  if (IsSkipped()) return;
  CqPtr idle_recv_cq(ibv_create_cq(context(), 4, nullptr, nullptr, 0));
  ASSERT_NE(idle_recv_cq, nullptr) << ErrnoName(errno);
  ibv_qp_init_attr init = MakeInitAttr(IBV_QPT_RC, a_.send_cq.get(), idle_recv_cq.get());
  QpPtr idle(ibv_create_qp(pd(), &init));
  ASSERT_NE(idle, nullptr) << ErrnoName(errno);
  ConnectParams params;
  params.path_mtu = DefaultMtu();
  ASSERT_TRUE(BringUp(idle.get(), port(), b_.qp_num(), LocalAddress(roce()), params));
  ASSERT_NO_FATAL_FAILURE(OverrunSendCq());
  EXPECT_TRUE(WaitForAsyncEvent(context(), IBV_EVENT_QP_FATAL, idle.get(), &acks_));
  EXPECT_TRUE(QpStateBecomes(idle.get(), IBV_QPS_ERR));
  acks_.AckAll();  // before the QP is destroyed
}

// Rule: IBTA Vol 1 ch. 10 (QP states): a QP leaves Reset only through a Modify QP to Init, and the Error
//   state is entered from the other states; ibv_poll_cq(3): an overrun puts the CQ in error.
// Checks: a QP in RESET whose send CQ is a_'s still reads RESET after a_ overruns that CQ, and no
//   IBV_EVENT_QP_FATAL arrives for it within 200 ms.
TEST_F(CqOverrunTest, ResetQpOnCqStaysReset_CqOverrun) {
  ASSERT_NO_FATAL_FAILURE(MakeSmallSendCqPair());
  if (IsSkipped()) return;
  CqPtr idle_recv_cq(ibv_create_cq(context(), 4, nullptr, nullptr, 0));
  ASSERT_NE(idle_recv_cq, nullptr) << ErrnoName(errno);
  ibv_qp_init_attr init = MakeInitAttr(IBV_QPT_RC, a_.send_cq.get(), idle_recv_cq.get());
  QpPtr idle(ibv_create_qp(pd(), &init));
  ASSERT_NE(idle, nullptr) << ErrnoName(errno);
  ASSERT_NO_FATAL_FAILURE(OverrunSendCq());
  EXPECT_TRUE(NoAsyncEventFor(context(), IBV_EVENT_QP_FATAL, idle.get()));
  ibv_qp_state state = IBV_QPS_ERR;
  ASSERT_TRUE(QueryQpState(idle.get(), &state));
  EXPECT_EQ(state, IBV_QPS_RESET) << QpStateName(state);
}

// Rule: ibv_poll_cq(3): "In case of a CQ overrun, the async event IBV_EVENT_CQ_ERR will be triggered";
//   IBTA Vol 1 ch. 10 (QP states): a send error moves a UC QP to SQE (or ERR), where the WRs posted after it
//   complete with a flush error.
// Checks: after a SEND with a bad lkey failed on a UC QP, cqe + 4 more SENDs posted as one list are accepted
//   (ibv_post_send returns 0), and their flush completions overrun the send CQ: IBV_EVENT_CQ_ERR arrives.
TEST_F(CqOverrunTest, FlushesOverrunCq_PostAfterUcSendError) {
  EndConfig a_config;
  a_config.type = IBV_QPT_UC;
  a_config.send_cqe = 4;
  a_config.caps.max_send_wr = kSendDepth;
  EndConfig b_config;
  b_config.type = IBV_QPT_UC;
  ASSERT_TRUE(MakePair(a_config, b_config, ConnectParams{}, ConnectParams{}));
  cqe_ = a_.send_cq->cqe;
  SKIP_IF(cqe_ + kExtra > static_cast<int>(kSendDepth)) << "(the CQ was made with " << cqe_ << " entries)";
  ibv_sge bad = local_.Sge(0, 8);
  bad.lkey ^= 0x80;  // names no MR
  ASSERT_EQ(PostOne(a_.get(), SendWr(1000, &bad, 1)), 0);
  ibv_wc wc = {};
  ASSERT_TRUE(PollOneCompletion(a_.send_cq.get(), &wc));
  ASSERT_NE(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
  const int count = cqe_ + kExtra;
  sges_.assign(static_cast<size_t>(count), local_.Sge(0, 8));
  wrs_.resize(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) {
    wrs_[i] = SendWr(static_cast<uint64_t>(i), &sges_[i], 1);
    wrs_[i].next = i + 1 < count ? &wrs_[i + 1] : nullptr;
  }
  ibv_send_wr* bad_wr = nullptr;
  EXPECT_EQ(ibv_post_send(a_.get(), wrs_.data(), &bad_wr), 0);
  EXPECT_TRUE(WaitForAsyncEvent(context(), IBV_EVENT_CQ_ERR, a_.send_cq.get(), &acks_));
}

// Rule: ibv_create_cq_ex(3): IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN "This CQ will not pass to error
//   state if overrun, CQE always will be written to next entry" (backend question
//   IgnoreOverrunSupported).
// Checks: a requester CQ made with IGNORE_OVERRUN that gets cqe + 4 completions raises no
//   IBV_EVENT_CQ_ERR within 200 ms after the last WRITE reached b_, and ibv_poll_cq on it returns
//   >= 0 and at most cqe completions.
TEST_F(CqOverrunTest, IgnoreOverrunCqNeverErrors) {
  SKIP_IF(!Backend().Answer("IgnoreOverrunSupported", true)) << "(no IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN)";
  ASSERT_NO_FATAL_FAILURE(MakeSmallSendCqPair(IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN));
  if (IsSkipped()) return;
  ASSERT_NO_FATAL_FAILURE(OverrunSendCq());
  ibv_wc rwc = {};
  ASSERT_TRUE(PollOneCompletion(b_.recv_cq.get(), &rwc)) << "the last WRITE never reached b_";
  EXPECT_TRUE(NoAsyncEventFor(context(), IBV_EVENT_CQ_ERR, a_.send_cq.get()));
  std::vector<ibv_wc> taken;
  int last_rc = 0;
  DrainCq(a_.send_cq.get(), &taken, &last_rc);
  EXPECT_GE(last_rc, 0) << "an IGNORE_OVERRUN CQ failed to poll";
  EXPECT_LE(static_cast<int>(taken.size()), cqe_) << DescribeWcs(taken);
}

// Rule: ibv_create_cq_ex(3): with IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN the "CQE always will be written
//   to next entry" (and "CQEs might be lost") - the entries written last are the ones kept
//   (backend question IgnoreOverrunSupported).
// Checks: after cqe + 4 completions into an IGNORE_OVERRUN CQ, what it returns is a run of
//   consecutive wr_ids ending with the last WR posted.
TEST_F(CqOverrunTest, IgnoreOverrunCqKeepsNewestCompletions) {
  SKIP_IF(!Backend().Answer("IgnoreOverrunSupported", true)) << "(no IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN)";
  ASSERT_NO_FATAL_FAILURE(MakeSmallSendCqPair(IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN));
  if (IsSkipped()) return;
  ASSERT_NO_FATAL_FAILURE(OverrunSendCq());
  ibv_wc rwc = {};
  ASSERT_TRUE(PollOneCompletion(b_.recv_cq.get(), &rwc)) << "the last WRITE never reached b_";
  // The requester's last completion follows the responder's by an ACK: wait for the ring to show it.
  ASSERT_TRUE(NoAsyncEventFor(context(), IBV_EVENT_CQ_ERR, a_.send_cq.get()));
  std::vector<ibv_wc> taken;
  int last_rc = 0;
  DrainCq(a_.send_cq.get(), &taken, &last_rc);
  ASSERT_FALSE(taken.empty()) << "the CQ kept nothing (last poll returned " << last_rc << ")";
  EXPECT_EQ(taken.back().wr_id, static_cast<uint64_t>(cqe_ + kExtra - 1)) << DescribeWcs(taken);
  for (size_t i = 1; i < taken.size(); ++i) {
    EXPECT_EQ(taken[i].wr_id, taken[i - 1].wr_id + 1) << DescribeWcs(taken);
  }
}

// Rule: ibv_create_cq_ex(3): with IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN the "CQE always will be written
//   to next entry"; the completion that ibv_start_poll handed the program (the oldest) is the one
//   a completion arriving at a full CQ overwrites, and ibv_next_poll goes on from the next oldest
//   (backend question IgnoreOverrunSupported).
// Checks: cqe signaled WRITEs (wr_id 0 on) complete into an IGNORE_OVERRUN CQ of cqe entries; inside
//   an ibv_start_poll section that read wr_id 0, one WRITE more completes (its responder's receive
//   of the immediate data is seen); the section, and polls after it, return wr_ids 0, 1, ... cqe:
//   none is skipped.
TEST_F(CqOverrunTest, IgnoreOverrunDuringAPollSectionSkipsNothing) {
  SKIP_IF(!Backend().Answer("IgnoreOverrunSupported", true)) << "(no IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN)";
  ASSERT_NO_FATAL_FAILURE(MakeSmallSendCqPair(IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN));
  if (IsSkipped()) return;
  for (uint64_t id : {uint64_t{1000}, uint64_t{1001}}) {
    ibv_sge rsge = remote_.Sge(2048, 8);
    ASSERT_EQ(PostRecv(b_.get(), id, &rsge, 1), 0);
  }
  // wr_id k is a WRITE of 8 bytes; the last of each batch carries immediate data, so that b_'s receive
  // says every WRITE before it has been executed.
  auto post = [&](int first, int count) {
    for (int i = first; i < first + count; ++i) {
      ibv_sge sge = local_.Sge(0, 8);
      const ibv_wr_opcode op = i + 1 == first + count ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
      ibv_send_wr wr = RdmaWr(static_cast<uint64_t>(i), op, &sge, 1, remote_.addr(0), remote_.rkey());
      wr.imm_data = htonl(7);
      ASSERT_EQ(PostOne(a_.get(), wr), 0) << "WRITE " << i;
    }
    ibv_wc rwc = {};
    ASSERT_TRUE(PollOneCompletion(b_.recv_cq.get(), &rwc)) << "WRITE " << first + count - 1 << " never reached b_";
  };
  ASSERT_NO_FATAL_FAILURE(post(0, cqe_));
  auto* cq = reinterpret_cast<ibv_cq_ex*>(a_.send_cq.get());  // made by ibv_create_cq_ex (ibv_cq_ex_to_cq)
  ibv_poll_cq_attr attr = {};
  std::vector<uint64_t> ids;
  const auto deadline = std::chrono::steady_clock::now() + kReturnWindow;
  int rc = ENOENT;
  while ((rc = ibv_start_poll(cq, &attr)) == ENOENT && std::chrono::steady_clock::now() < deadline) {
  }
  ASSERT_EQ(rc, 0) << "ibv_start_poll: " << ErrnoName(rc);
  ids.push_back(cq->wr_id);
  ASSERT_NO_FATAL_FAILURE(post(cqe_, 1));
  while (ibv_next_poll(cq) == 0) ids.push_back(cq->wr_id);
  ibv_end_poll(cq);
  // The requester's completions follow b_'s receive by an ACK: the rest may come after the section.
  std::vector<ibv_wc> rest;
  while (ids.size() < static_cast<size_t>(cqe_) + 1 && ids.back() < static_cast<uint64_t>(cqe_) &&
         std::chrono::steady_clock::now() < deadline) {
    ibv_wc wc = {};
    if (ibv_poll_cq(a_.send_cq.get(), 1, &wc) == 1) ids.push_back(wc.wr_id);
  }
  std::vector<uint64_t> expected(static_cast<size_t>(cqe_) + 1);
  for (size_t k = 0; k < expected.size(); ++k) expected[k] = k;
  EXPECT_EQ(ids, expected);
}

// Rule: ibv_poll_cq(3): "In case of a CQ overrun, the async event IBV_EVENT_CQ_ERR will be
//   triggered"; IBTA Vol 1 ch. 11 (CQ errors): a receive completion that cannot be written is lost
//   and the receiving QP is put in the Error state (every backend, rxe 6.1 included).
// Checks: cqe + 4 SENDs into a receiver whose receive CQ has cqe entries and is not polled leave
//   the receiving QP in ERR.
TEST_F(CqOverrunTest, ReceiverEntersErr_RecvCqOverrun) {
  EndConfig b_config;
  b_config.recv_cqe = 4;
  b_config.caps.max_recv_wr = kSendDepth;
  EndConfig a_config;
  a_config.caps.max_send_wr = kSendDepth;
  a_config.send_cqe = static_cast<int>(kSendDepth);
  ConnectParams a_params;
  a_params.timeout = 14;
  a_params.retry_cnt = 1;
  ASSERT_TRUE(MakePair(a_config, b_config, a_params, ConnectParams{}));
  const int cqe = b_.recv_cq->cqe;
  SKIP_IF(cqe + kExtra > static_cast<int>(kSendDepth)) << "(the CQ was made with " << cqe << " entries)";
  const int count = cqe + kExtra;
  ibv_sge rsge = remote_.Sge(0, 8);
  for (int i = 0; i < count; ++i) ASSERT_EQ(PostRecv(b_.get(), static_cast<uint64_t>(i), &rsge, 1), 0);
  ibv_sge sge = local_.Sge(0, 8);
  for (int i = 0; i < count; ++i) {
    ASSERT_EQ(PostOne(a_.get(), SendWr(static_cast<uint64_t>(i), &sge, 1, 0)), 0) << "SEND " << i;
  }
  EXPECT_TRUE(QpStateBecomes(b_.get(), IBV_QPS_ERR));
}

}  // namespace
}  // namespace conformance
