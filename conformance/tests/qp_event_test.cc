// Affiliated async events of QPs and SRQs: every event type raised through
// the simulator's control API (skipped elsewhere), the destroy/ack rules for
// QPs and SRQs (in watchdog children), and the SQ Drained event of the SQD
// state, which every backend must produce (portable).

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cerrno>
#include <string>

#include "conformance/lib/backend_profile.h"
#include "conformance/lib/blocking_call.h"
#include "conformance/lib/errno_capture.h"
#include "conformance/lib/event_wait.h"
#include "conformance/lib/fd_poll.h"
#include "conformance/lib/qp_pair.h"
#include "conformance/lib/sim_test.h"
#include "conformance/lib/skip_if.h"
#include "conformance/lib/timeouts.h"
#include "conformance/lib/watchdog.h"

namespace conformance {
namespace {

std::string EventName(const testing::TestParamInfo<ibv_event_type>& info) {
  switch (info.param) {
    case IBV_EVENT_QP_FATAL: return "QP_FATAL";
    case IBV_EVENT_QP_REQ_ERR: return "QP_REQ_ERR";
    case IBV_EVENT_QP_ACCESS_ERR: return "QP_ACCESS_ERR";
    case IBV_EVENT_COMM_EST: return "COMM_EST";
    case IBV_EVENT_SQ_DRAINED: return "SQ_DRAINED";
    case IBV_EVENT_PATH_MIG: return "PATH_MIG";
    case IBV_EVENT_PATH_MIG_ERR: return "PATH_MIG_ERR";
    case IBV_EVENT_QP_LAST_WQE_REACHED: return "QP_LAST_WQE_REACHED";
    case IBV_EVENT_SRQ_ERR: return "SRQ_ERR";
    case IBV_EVENT_SRQ_LIMIT_REACHED: return "SRQ_LIMIT_REACHED";
    default: return "event" + std::to_string(info.param);
  }
}

// QP fixture for events raised through the control API.
class QpSimEventTest : public QpTest, public testing::WithParamInterface<ibv_event_type> {
 protected:
  void SetUp() override {
    SKIP_IF(!Sim()) << "(simverbs_version does not resolve: the backend is '" << Backend().name()
                    << "', not the simulator, so its control API is not there)";
    QpTest::SetUp();
  }
};

// Rule: ibv_get_async_event(3): QP events (QP_FATAL, QP_REQ_ERR, QP_ACCESS_ERR, COMM_EST,
//   SQ_DRAINED, PATH_MIG, PATH_MIG_ERR, QP_LAST_WQE_REACHED) are returned with "One member of the
//   element union ... valid, depending on the event_type" - element.qp, the "QP that got the event".
// Checks: the event raised on an RC QP is the next async event of its context, with that
//   event_type and element.qp == the QP.
TEST_P(QpSimEventTest, RaisedQpEventReachesAsyncQueue) {
  ASSERT_TRUE(CreateEnd(&a_));
  ASSERT_EQ(sim().RaiseQpEvent(a_.get(), GetParam()), 0) << "simverbs_raise_qp_event";
  ibv_async_event event = {};
  ASSERT_TRUE(GetAsyncEventWithin(context(), &event, kReturnWindow));
  acks_.AddAsyncEvent(event);
  EXPECT_EQ(event.event_type, GetParam()) << ibv_event_type_str(event.event_type);
  EXPECT_EQ(event.element.qp, a_.get());
}

INSTANTIATE_TEST_SUITE_P(QpEvents, QpSimEventTest,
                         testing::Values(IBV_EVENT_QP_FATAL, IBV_EVENT_QP_REQ_ERR, IBV_EVENT_QP_ACCESS_ERR,
                                         IBV_EVENT_COMM_EST, IBV_EVENT_SQ_DRAINED, IBV_EVENT_PATH_MIG,
                                         IBV_EVENT_PATH_MIG_ERR, IBV_EVENT_QP_LAST_WQE_REACHED),
                         EventName);

class SrqSimEventTest : public QpSimEventTest {};

// Rule: ibv_get_async_event(3): SRQ events "IBV_EVENT_SRQ_ERR Error occurred on an SRQ" and
//   "IBV_EVENT_SRQ_LIMIT_REACHED SRQ limit was reached" carry element.srq, the "SRQ that got the
//   event".
// Checks: the event raised on an SRQ is the next async event of its context, with that event_type
//   and element.srq == the SRQ.
TEST_P(SrqSimEventTest, RaisedSrqEventReachesAsyncQueue) {
  ibv_srq_init_attr init = {};
  init.attr.max_wr = 4;
  init.attr.max_sge = 1;
  srq_.reset(ibv_create_srq(pd(), &init));
  ASSERT_NE(srq_, nullptr) << ErrnoName(errno);
  ASSERT_EQ(sim().RaiseSrqEvent(srq_.get(), GetParam()), 0) << "simverbs_raise_srq_event";
  ibv_async_event event = {};
  ASSERT_TRUE(GetAsyncEventWithin(context(), &event, kReturnWindow));
  acks_.AddAsyncEvent(event);
  EXPECT_EQ(event.event_type, GetParam()) << ibv_event_type_str(event.event_type);
  EXPECT_EQ(event.element.srq, srq_.get());
}

INSTANTIATE_TEST_SUITE_P(SrqEvents, SrqSimEventTest,
                         testing::Values(IBV_EVENT_SRQ_ERR, IBV_EVENT_SRQ_LIMIT_REACHED), EventName);

// The destroy/ack rules for QPs and SRQs. Each test runs in a watchdog child
// with the destroy on its own thread, so a destroy stuck forever fails the
// test instead of hanging the run. (DestroyBlockingTest, the CQ tests, has its
// own fixture class in destroy_blocking_test.cc; GoogleTest needs one class
// per test suite name.)
class QpDestroyBlockingTest : public SimTest {
 protected:
  // A QP (with its CQs) in a PD of context; the QP is released to the caller.
  static ibv_qp* CreateQpOn(ibv_context* context, ibv_pd* pd, QpEnd* end) {
    EXPECT_TRUE(CreateEndOn(context, pd, end, EndConfig{}));
    return end->qp.release();
  }

  static ibv_srq* CreateSrqOn(ibv_pd* pd) {
    ibv_srq_init_attr init = {};
    init.attr.max_wr = 4;
    init.attr.max_sge = 1;
    ibv_srq* srq = ibv_create_srq(pd, &init);
    EXPECT_NE(srq, nullptr) << ErrnoName(errno);
    return srq;
  }
};

// Rule: ibv_get_async_event(3): "All async events that ibv_get_async_event() returns must be
//   acknowledged using ibv_ack_async_event(). To avoid races, destroying an object (CQ, SRQ or QP)
//   will wait for all affiliated events for the object to be acknowledged".
//   libibverbs waits after the kernel has destroyed the QP (ibv_cmd_destroy_qp), so what the QP held
//   is free during the wait: its PD can be deallocated.
// Checks: with IBV_EVENT_QP_FATAL read for a QP and not acknowledged, ibv_destroy_qp is still
//   blocked after 200 ms, and ibv_dealloc_pd of the QP's PD meanwhile returns 0; after
//   ibv_ack_async_event the destroy returns 0 within 2 s.
TEST_F(QpDestroyBlockingTest, QpWaitsForUnackedAsyncEvent) {
  const ChildResult result = RunChecksInChild(
      [&] {
        ContextPtr context = OpenAnotherContext();
        ASSERT_NE(context, nullptr);
        PdPtr pd(ibv_alloc_pd(context.get()));
        ASSERT_NE(pd, nullptr) << ErrnoName(errno);
        QpEnd end;
        ibv_qp* qp = CreateQpOn(context.get(), pd.get(), &end);
        ASSERT_NE(qp, nullptr);
        ASSERT_EQ(sim().RaiseQpEvent(qp, IBV_EVENT_QP_FATAL), 0);
        ibv_async_event event = {};
        ASSERT_TRUE(GetAsyncEventWithin(context.get(), &event, kReturnWindow));
        ASSERT_EQ(event.event_type, IBV_EVENT_QP_FATAL) << ibv_event_type_str(event.event_type);
        ASSERT_EQ(event.element.qp, qp);
        BlockingCall destroy([qp] { return ibv_destroy_qp(qp); });
        if (!ExpectBlocks(destroy, kBlockWindow)) return;
        EXPECT_EQ(ibv_dealloc_pd(pd.release()), 0) << "the PD of a QP whose destroy waits for an ack";
        const auto ack = [&event] { ibv_ack_async_event(&event); };
        if (!ExpectReturnsAfter(destroy, ack, kReturnWindow)) return;
        EXPECT_EQ(destroy.result(), 0);
      },
      kChildTimeout, "ibv_destroy_qp with an unacknowledged IBV_EVENT_QP_FATAL");
  EXPECT_TRUE(Passed(result));
}

// Rule: ibv_get_async_event(3): "destroying an object (CQ, SRQ or QP) will wait for all affiliated
//   events for the object to be acknowledged".
//   libibverbs waits after the kernel has destroyed the SRQ (ibv_cmd_destroy_srq): its PD can go meanwhile.
// Checks: with IBV_EVENT_SRQ_LIMIT_REACHED read for an SRQ and not acknowledged, ibv_destroy_srq is
//   still blocked after 200 ms, and ibv_dealloc_pd of its PD meanwhile returns 0; after
//   ibv_ack_async_event the destroy returns 0 within 2 s.
TEST_F(QpDestroyBlockingTest, SrqWaitsForUnackedAsyncEvent) {
  const ChildResult result = RunChecksInChild(
      [&] {
        ContextPtr context = OpenAnotherContext();
        ASSERT_NE(context, nullptr);
        PdPtr pd(ibv_alloc_pd(context.get()));
        ASSERT_NE(pd, nullptr) << ErrnoName(errno);
        ibv_srq* srq = CreateSrqOn(pd.get());
        ASSERT_NE(srq, nullptr);
        ASSERT_EQ(sim().RaiseSrqEvent(srq, IBV_EVENT_SRQ_LIMIT_REACHED), 0);
        ibv_async_event event = {};
        ASSERT_TRUE(GetAsyncEventWithin(context.get(), &event, kReturnWindow));
        ASSERT_EQ(event.event_type, IBV_EVENT_SRQ_LIMIT_REACHED) << ibv_event_type_str(event.event_type);
        ASSERT_EQ(event.element.srq, srq);
        BlockingCall destroy([srq] { return ibv_destroy_srq(srq); });
        if (!ExpectBlocks(destroy, kBlockWindow)) return;
        EXPECT_EQ(ibv_dealloc_pd(pd.release()), 0) << "the PD of an SRQ whose destroy waits for an ack";
        const auto ack = [&event] { ibv_ack_async_event(&event); };
        if (!ExpectReturnsAfter(destroy, ack, kReturnWindow)) return;
        EXPECT_EQ(destroy.result(), 0);
      },
      kChildTimeout, "ibv_destroy_srq with an unacknowledged IBV_EVENT_SRQ_LIMIT_REACHED");
  EXPECT_TRUE(Passed(result));
}

// Rule: ibv_get_async_event(3): the destroy waits for the events that were returned, so "an
//   application retrieving an affiliated event after the corresponding object has already been
//   destroyed" cannot happen - an event never read needs no ack and is dropped with the object.
// Checks: with IBV_EVENT_QP_FATAL queued for a QP but not read, ibv_destroy_qp returns 0 within 2 s
//   and the event can no longer be read (non-blocking ibv_get_async_event: -1/EAGAIN).
TEST_F(QpDestroyBlockingTest, QpDoesNotWaitForUnreadAsyncEvent) {
  const ChildResult result = RunChecksInChild(
      [&] {
        ContextPtr context = OpenAnotherContext();
        ASSERT_NE(context, nullptr);
        PdPtr pd(ibv_alloc_pd(context.get()));
        ASSERT_NE(pd, nullptr) << ErrnoName(errno);
        QpEnd end;
        ibv_qp* qp = CreateQpOn(context.get(), pd.get(), &end);
        ASSERT_NE(qp, nullptr);
        ASSERT_EQ(sim().RaiseQpEvent(qp, IBV_EVENT_QP_FATAL), 0);
        ASSERT_TRUE(WaitReadable(context->async_fd, kReturnWindow)) << "QP_FATAL raised no async event";
        BlockingCall destroy([qp] { return ibv_destroy_qp(qp); });
        if (!ExpectReturnsWithin(destroy, kReturnWindow)) return;
        EXPECT_EQ(destroy.result(), 0);
        EXPECT_TRUE(NoAsyncEventWithin(context.get(), kQuietWindow))
            << "an affiliated event of the destroyed QP can still be retrieved";
      },
      kChildTimeout, "ibv_destroy_qp with an unread IBV_EVENT_QP_FATAL");
  EXPECT_TRUE(Passed(result));
}

// Rule: ibv_get_async_event(3): destroying an object waits only for the affiliated events that were
//   returned; an unread one must not be retrievable after the object is gone.
// Checks: with IBV_EVENT_SRQ_ERR queued for an SRQ but not read, ibv_destroy_srq returns 0 within
//   2 s and the event can no longer be read.
TEST_F(QpDestroyBlockingTest, SrqDoesNotWaitForUnreadAsyncEvent) {
  const ChildResult result = RunChecksInChild(
      [&] {
        ContextPtr context = OpenAnotherContext();
        ASSERT_NE(context, nullptr);
        PdPtr pd(ibv_alloc_pd(context.get()));
        ASSERT_NE(pd, nullptr) << ErrnoName(errno);
        ibv_srq* srq = CreateSrqOn(pd.get());
        ASSERT_NE(srq, nullptr);
        ASSERT_EQ(sim().RaiseSrqEvent(srq, IBV_EVENT_SRQ_ERR), 0);
        ASSERT_TRUE(WaitReadable(context->async_fd, kReturnWindow)) << "SRQ_ERR raised no async event";
        BlockingCall destroy([srq] { return ibv_destroy_srq(srq); });
        if (!ExpectReturnsWithin(destroy, kReturnWindow)) return;
        EXPECT_EQ(destroy.result(), 0);
        EXPECT_TRUE(NoAsyncEventWithin(context.get(), kQuietWindow))
            << "an affiliated event of the destroyed SRQ can still be retrieved";
      },
      kChildTimeout, "ibv_destroy_srq with an unread IBV_EVENT_SRQ_ERR");
  EXPECT_TRUE(Passed(result));
}

// The SQ Drain state on every backend.
class QpSqdTest : public QpTest {
 protected:
  void TearDown() override {
    QpTest::TearDown();
    remote_ = Buffer();
    local_ = Buffer();
  }

  // a_ in RTS, connected to a QP number that does not exist with the
  // transport timer off (timeout 0), and one WRITE posted that is therefore
  // never answered.
  void MakeStuckRequesterWithWrite() {
    ASSERT_TRUE(local_.Register(pd(), 64));
    ASSERT_TRUE(remote_.Register(pd(), 64));
    ASSERT_TRUE(CreateEnd(&a_));
    ConnectParams params;
    params.timeout = 0;
    params.path_mtu = DefaultMtu();
    const uint32_t nobody = (a_.qp_num() ^ 0x5a5a00) & 0xffffff;
    ASSERT_TRUE(BringUp(a_.get(), port(), nobody, LocalAddress(), params));
    ibv_sge sge = local_.Sge(0, 8);
    ASSERT_EQ(PostOne(a_.get(), RdmaWr(1, IBV_WR_RDMA_WRITE, &sge, 1, remote_.addr(), remote_.rkey())), 0);
  }

  int ModifyToSqd(ibv_qp* qp, bool notify) {
    ibv_qp_attr attr = {};
    attr.qp_state = IBV_QPS_SQD;
    attr.en_sqd_async_notify = notify ? 1 : 0;
    return ibv_modify_qp(qp, &attr, IBV_QP_STATE | (notify ? IBV_QP_EN_SQD_ASYNC_NOTIFY : 0));
  }

  Buffer local_;
  Buffer remote_;
};

// Rule: ibv_modify_qp(3): en_sqd_async_notify "Enable SQD.drained async notification";
//   ibv_get_async_event(3): "IBV_EVENT_SQ_DRAINED Send Queue was drained of outstanding messages in
//   progress"; IBTA Vol 1 ch. 10 (SQ Drain state): the event is raised once the SQ has drained.
// Checks: moving a connected RC QP in RTS to SQD with en_sqd_async_notify = 1 raises
//   IBV_EVENT_SQ_DRAINED with element.qp == the QP within 2 s.
TEST_F(QpSqdTest, SqDrainedRaised_EnSqdAsyncNotify) {
  ASSERT_TRUE(MakePair());
  ASSERT_EQ(ModifyToSqd(a_.get(), true), 0);
  EXPECT_TRUE(WaitForAsyncEvent(context(), IBV_EVENT_SQ_DRAINED, a_.get(), &acks_));
}

// Rule: ibv_modify_qp(3): the SQ Drained notification is enabled by en_sqd_async_notify; IBTA Vol 1
//   ch. 11 (Modify Queue Pair): without it the transition raises no event (backend question
//   SqDrainedOnlyWhenRequested; rxe raises it on every drain).
// Checks: moving a connected RC QP to SQD without IBV_QP_EN_SQD_ASYNC_NOTIFY raises no
//   IBV_EVENT_SQ_DRAINED for it within 200 ms.
TEST_F(QpSqdTest, NoSqDrained_WithoutNotify) {
  SKIP_IF(!Backend().Answer("SqDrainedOnlyWhenRequested", true)) << "(the backend reports every drain)";
  ASSERT_TRUE(MakePair());
  ASSERT_EQ(ModifyToSqd(a_.get(), false), 0);
  EXPECT_TRUE(NoAsyncEventFor(context(), IBV_EVENT_SQ_DRAINED, a_.get()));
}

// Rule: IBTA Vol 1 ch. 10 (SQ Drain state): WRs may be posted to the SQ of a QP in SQD, but new WQEs
//   are not processed until the QP returns to RTS.
// Checks: a WRITE posted to an RC QP in SQD does not complete within 200 ms; after SQD -> RTS it
//   completes successfully.
TEST_F(QpSqdTest, SendPostedInSqdRunsAfterRts) {
  ASSERT_TRUE(MakePair());
  Buffer local;
  Buffer remote;
  ASSERT_TRUE(local.Register(pd(), 64));
  ASSERT_TRUE(remote.Register(pd(), 64));
  ASSERT_EQ(ModifyToSqd(a_.get(), false), 0);
  ASSERT_TRUE(SqDrainEnds(a_.get()));
  ibv_sge sge = local.Sge(0, 8);
  ASSERT_EQ(PostOne(a_.get(), RdmaWr(1, IBV_WR_RDMA_WRITE, &sge, 1, remote.addr(), remote.rkey())), 0);
  EXPECT_TRUE(NoCompletionWithin(a_.send_cq.get())) << "a WR posted in SQD ran";
  ASSERT_TRUE(ModifyToState(a_.get(), IBV_QPS_RTS));
  ibv_wc wc = {};
  ASSERT_TRUE(PollOneCompletion(a_.send_cq.get(), &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
}

// Rule: ibv_get_async_event(3): "IBV_EVENT_SQ_DRAINED Send Queue was drained of outstanding messages in
//   progress"; IBTA Vol 1 ch. 10 (QP states) / ch. 11 (affiliated asynchronous events): for RC the SQ has
//   drained only when every message sent has been answered.
// Checks: an RC QP with a WRITE that is never answered (no such destination QP, timeout 0) moved
//   to SQD with en_sqd_async_notify = 1 raises no IBV_EVENT_SQ_DRAINED within 200 ms.
TEST_F(QpSqdTest, NoSqDrained_WhileWrOutstanding) {
  ASSERT_NO_FATAL_FAILURE(MakeStuckRequesterWithWrite());
  ASSERT_EQ(ModifyToSqd(a_.get(), true), 0);
  EXPECT_TRUE(NoAsyncEventFor(context(), IBV_EVENT_SQ_DRAINED, a_.get()))
      << "the SQ was reported drained with a message unanswered";
}

// Rule: ibv_get_async_event(3): "IBV_EVENT_SQ_DRAINED Send Queue was drained of outstanding messages in
//   progress"; IBTA Vol 1 ch. 10 (SQ Drain state): a message sent before the drain began is in
//   progress until it is answered, also while it waits to be sent again after an RNR NAK, and it is
//   still sent in SQD.
// Checks: a SEND from a_ finds no receive at b_ (RNR NAK, rnr_retry 7: it is retried without end);
//   a_ moved to SQD with en_sqd_async_notify = 1 raises no IBV_EVENT_SQ_DRAINED within 200 ms; once
//   b_ posts a receive, the SEND completes with success and IBV_EVENT_SQ_DRAINED arrives.
TEST_F(QpSqdTest, SendWaitingAfterRnrNakKeepsTheQueueDraining) {
  ASSERT_TRUE(MakePair());
  ASSERT_TRUE(local_.Register(pd(), 64));
  ASSERT_TRUE(remote_.Register(pd(), 64));
  ibv_sge sge = local_.Sge(0, 16);
  ASSERT_EQ(PostOne(a_.get(), SendWr(1, &sge, 1)), 0);
  EXPECT_TRUE(NoCompletionWithin(a_.send_cq.get())) << "the SEND completed with no receive posted";
  ASSERT_EQ(ModifyToSqd(a_.get(), true), 0);
  EXPECT_TRUE(NoAsyncEventFor(context(), IBV_EVENT_SQ_DRAINED, a_.get()))
      << "the SQ was reported drained while its SEND waited to be sent again";
  ibv_sge rsge = remote_.Sge(0, 64);
  ASSERT_EQ(PostRecv(b_.get(), 2, &rsge, 1), 0);
  ibv_wc wc = {};
  ASSERT_TRUE(PollOneCompletion(a_.send_cq.get(), &wc)) << "the SEND was not sent again in SQD";
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
  EXPECT_TRUE(WaitForAsyncEvent(context(), IBV_EVENT_SQ_DRAINED, a_.get(), &acks_));
}

// Rule: ibv_query_qp(3): sq_draining "Is the QP draining? (Valid only if qp_state is SQD)"; IBTA
//   Vol 1 ch. 10 (QP states): a QP in SQD is draining until every outstanding message has been answered.
// Checks: an RC QP with a WRITE that is never answered, moved to SQD, reads qp_state SQD and
//   sq_draining != 0.
TEST_F(QpSqdTest, QueryReportsDraining_WhileWrOutstanding) {
  ASSERT_NO_FATAL_FAILURE(MakeStuckRequesterWithWrite());
  ASSERT_EQ(ModifyToSqd(a_.get(), false), 0);
  ibv_qp_attr attr = {};
  ibv_qp_init_attr init = {};
  ASSERT_EQ(ibv_query_qp(a_.get(), &attr, IBV_QP_STATE, &init), 0);
  EXPECT_EQ(attr.qp_state, IBV_QPS_SQD) << QpStateName(attr.qp_state);
  EXPECT_NE(attr.sq_draining, 0) << "the QP says it has drained with a message unanswered";
}

class QpCommEstTest : public QpTest {};

// Rule: ibv_get_async_event(3): "IBV_EVENT_COMM_EST Communication was established on a QP";
//   IBTA Vol 1 11.6.3: raised when the first packet arrives at an RC or UC QP in RTR. Whether a
//   backend raises it is a backend answer (CommEstOnFirstPacketInRtr; rxe never does).
// Checks: b in RTR (never moved to RTS) with a receive posted gets a SEND from a in RTS; the
//   receive completes and IBV_EVENT_COMM_EST is raised for b.
TEST_F(QpCommEstTest, RaisedByFirstPacketInRtr) {
  SKIP_IF(!Backend().Answer("CommEstOnFirstPacketInRtr", true)) << "(the backend raises no COMM_EST)";
  Buffer local;
  Buffer remote;
  ASSERT_TRUE(local.Register(pd(), 64));
  ASSERT_TRUE(remote.Register(pd(), 64));
  ASSERT_TRUE(CreateEnd(&a_));
  ASSERT_TRUE(CreateEnd(&b_));
  ConnectParams params;
  params.path_mtu = DefaultMtu();
  ibv_ah_attr route = LocalAddress(roce());
  ASSERT_TRUE(BringUp(a_.get(), port(), b_.qp_num(), route, params));
  ASSERT_TRUE(ModifyToInit(b_.get(), port(), params));
  ASSERT_TRUE(ModifyToRtr(b_.get(), a_.qp_num(), route, params));
  ibv_sge recv_sge = remote.Sge();
  ASSERT_EQ(PostRecv(b_.get(), 9, &recv_sge, 1), 0);
  ibv_sge send_sge = local.Sge(0, 16);
  ASSERT_EQ(PostOne(a_.get(), SendWr(1, &send_sge, 1)), 0);
  ibv_wc wc{};
  ASSERT_TRUE(PollOneCompletion(b_.recv_cq.get(), &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
  EXPECT_TRUE(WaitForAsyncEvent(context(), IBV_EVENT_COMM_EST, b_.get(), &acks_));
}

}  // namespace
}  // namespace conformance
