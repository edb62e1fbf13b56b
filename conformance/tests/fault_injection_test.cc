// Faults on demand through the simulator's control API: an error completion on
// the nth work request, a QP moved to ERR or SQE by the HCA, and allocation
// failures at every declared fault point.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "conformance/lib/errno_capture.h"
#include "conformance/lib/qp_pair.h"
#include "conformance/lib/skip_if.h"
#include "conformance/lib/verbs_matchers.h"

namespace conformance {
namespace {

class FaultInjectionTest : public QpTest {
 protected:
  void SetUp() override {
    SKIP_IF(!Sim()) << "(the control API is the simulator's)";
    QpTest::SetUp();
    if (HasFatalFailure() || IsSkipped()) return;
    ASSERT_TRUE(local_.Register(pd(), 4096));
    ASSERT_TRUE(remote_.Register(pd(), 4096));
  }
  void TearDown() override {
    sim().ClearFaults();
    QpTest::TearDown();
  }

  // Posts `count` signaled 8-byte RDMA WRITEs a_ -> b_ with wr_id 0, 1, ...
  void PostWrites(int count) {
    for (int i = 0; i < count; ++i) {
      ibv_sge sge = local_.Sge(static_cast<size_t>(i) * 8, 8);
      ASSERT_EQ(PostOne(a_.get(), RdmaWr(static_cast<uint64_t>(i), IBV_WR_RDMA_WRITE, &sge, 1,
                                         remote_.addr(static_cast<size_t>(i) * 8), remote_.rkey())),
                0)
          << "write " << i << ": " << ErrnoName(errno);
    }
  }

  Buffer local_;
  Buffer remote_;
};

// Rule: IBA 10.7.3.1 (via ibv_poll_cq(3)): a work request that completes in error generates its
//   completion, and an RC QP then enters ERR, where later work requests complete with
//   IBV_WC_WR_FLUSH_ERR.
// Checks: with the 2nd send WR set to fail with IBV_WC_REM_OP_ERR, three writes complete as
//   SUCCESS, REM_OP_ERR, WR_FLUSH_ERR in order and the RC QP is in ERR.
TEST_F(FaultInjectionTest, NthSendWrCompletesWithStatus_Rc) {
  ASSERT_TRUE(MakePair());
  ASSERT_EQ(sim().FailSendWr(a_.get(), 2, IBV_WC_REM_OP_ERR), 0);
  ASSERT_NO_FATAL_FAILURE(PostWrites(3));
  std::vector<ibv_wc> wcs;
  ASSERT_TRUE(PollCompletions(a_.send_cq.get(), 3, &wcs));
  EXPECT_EQ(wcs[0].wr_id, 0u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS) << DescribeWc(wcs[0]);
  EXPECT_EQ(wcs[1].wr_id, 1u);
  EXPECT_EQ(wcs[1].status, IBV_WC_REM_OP_ERR) << DescribeWc(wcs[1]);
  EXPECT_EQ(wcs[2].wr_id, 2u);
  EXPECT_EQ(wcs[2].status, IBV_WC_WR_FLUSH_ERR) << DescribeWc(wcs[2]);
  EXPECT_TRUE(QpStateBecomes(a_.get(), IBV_QPS_ERR));
}

// Rule: IBA 10.3.1 (QP states): a send error on a UC or UD QP moves it to SQE, not ERR; the send
//   queue's remaining work requests are flushed (a backend may take it to ERR: backend question
//   UnreliableSendErrorState).
// Checks: with the 1st send WR of a UC QP set to fail with IBV_WC_LOC_PROT_ERR, two writes complete
//   as LOC_PROT_ERR then WR_FLUSH_ERR and the QP is in SQE (or the backend's answer).
TEST_F(FaultInjectionTest, NthSendWrMovesUcToSqe) {
  EndConfig uc;
  uc.type = IBV_QPT_UC;
  ASSERT_TRUE(MakePair(uc));
  ASSERT_EQ(sim().FailSendWr(a_.get(), 1, IBV_WC_LOC_PROT_ERR), 0);
  ASSERT_NO_FATAL_FAILURE(PostWrites(2));
  std::vector<ibv_wc> wcs;
  ASSERT_TRUE(PollCompletions(a_.send_cq.get(), 2, &wcs));
  EXPECT_EQ(wcs[0].status, IBV_WC_LOC_PROT_ERR) << DescribeWc(wcs[0]);
  EXPECT_EQ(wcs[1].status, IBV_WC_WR_FLUSH_ERR) << DescribeWc(wcs[1]);
  EXPECT_TRUE(QpStateBecomes(a_.get(), UnreliableSendErrorState()));
}

// Rule: simverbs.h: simverbs_fail_send_wr returns EINVAL for nth 0 or IBV_WC_SUCCESS.
// Checks: both calls return EINVAL and a write posted afterwards succeeds.
TEST_F(FaultInjectionTest, FailSendWrRejectsBadArguments) {
  ASSERT_TRUE(MakePair());
  EXPECT_EQ(sim().FailSendWr(a_.get(), 0, IBV_WC_REM_OP_ERR), EINVAL);
  EXPECT_EQ(sim().FailSendWr(a_.get(), 1, IBV_WC_SUCCESS), EINVAL);
  ASSERT_NO_FATAL_FAILURE(PostWrites(1));
  ibv_wc wc{};
  ASSERT_TRUE(PollOneCompletion(a_.send_cq.get(), &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
}

// Rule: ibv_get_async_event(3): IBV_EVENT_QP_FATAL - "Error occurred on a QP and it transitioned
//   to error state"; ibv_modify_qp(3)/IBA 10.3.1: in ERR posted receives are flushed.
// Checks: a QP moved to ERR by the HCA raises IBV_EVENT_QP_FATAL for it and its posted receive
//   completes with IBV_WC_WR_FLUSH_ERR.
TEST_F(FaultInjectionTest, QpMovedToErrRaisesQpFatalAndFlushes) {
  ASSERT_TRUE(MakePair());
  ibv_sge sge = remote_.Sge(0, 64);
  ASSERT_EQ(PostRecv(b_.get(), 42, &sge, 1), 0);
  ASSERT_EQ(sim().SetQpState(b_.get(), IBV_QPS_ERR), 0);
  EXPECT_TRUE(WaitForAsyncEvent(context(), IBV_EVENT_QP_FATAL, b_.get(), &acks_));
  ibv_wc wc{};
  ASSERT_TRUE(PollOneCompletion(b_.recv_cq.get(), &wc));
  EXPECT_EQ(wc.wr_id, 42u);
  EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR) << DescribeWc(wc);
  EXPECT_TRUE(QpStateBecomes(b_.get(), IBV_QPS_ERR));
}

// Rule: IBA 10.3.1: only UC and UD send queues have the SQE state; a QP in RESET has nothing on
//   the HCA to fail.
// Checks: SQE on an RC QP and ERR on a RESET QP return EINVAL and leave the states as they were;
//   SQE on a UC QP in RTS succeeds.
TEST_F(FaultInjectionTest, QpStateInjectionFollowsTheStateTable) {
  ASSERT_TRUE(MakePair());
  EXPECT_EQ(sim().SetQpState(a_.get(), IBV_QPS_SQE), EINVAL);
  EXPECT_TRUE(QpStateBecomes(a_.get(), IBV_QPS_RTS));
  QpEnd fresh;
  ASSERT_TRUE(CreateEnd(&fresh));
  EXPECT_EQ(sim().SetQpState(fresh.get(), IBV_QPS_ERR), EINVAL);
  EXPECT_TRUE(QpStateBecomes(fresh.get(), IBV_QPS_RESET));
  QpEnd uc_a;
  QpEnd uc_b;
  EndConfig uc;
  uc.type = IBV_QPT_UC;
  ASSERT_TRUE(CreateEnd(&uc_a, uc));
  ASSERT_TRUE(CreateEnd(&uc_b, uc));
  ASSERT_TRUE(Connect(uc_a, uc_b));
  EXPECT_EQ(sim().SetQpState(uc_a.get(), IBV_QPS_SQE), 0);
  EXPECT_TRUE(QpStateBecomes(uc_a.get(), IBV_QPS_SQE));
}

// Rule: IBTA 9.7.5.1 (RC is reliable, via ibv_post_send(3)): a packet the responder's side loses
//   is sent again after the requester's transport timeout, and the message completes once.
// Checks: with the next delivery made to run out of memory (fault point "deliver_packet"), a SEND
//   is posted (0), received whole and completes with success on both sides; a second SEND after it
//   arrives as well (nothing was left half-delivered that holds later packets back).
TEST_F(FaultInjectionTest, PacketLostForMemoryIsSentAgain) {
  ASSERT_TRUE(MakePair());
  ASSERT_EQ(sim().FailAfter("deliver_packet", 0, ENOMEM), 0);
  for (uint64_t id = 1; id <= 2; ++id) {
    SCOPED_TRACE("send " + std::to_string(id));
    local_.FillPattern(static_cast<uint8_t>(id));
    ibv_sge rsge = remote_.Sge(0, 256);
    ASSERT_EQ(PostRecv(b_.get(), id, &rsge, 1), 0);
    ibv_sge sge = local_.Sge(0, 256);
    ASSERT_EQ(PostOne(a_.get(), SendWr(id, &sge, 1)), 0) << ErrnoName(errno);
    ibv_wc wc{};
    ASSERT_TRUE(PollOneCompletion(b_.recv_cq.get(), &wc)) << "the receive never completed";
    EXPECT_EQ(wc.wr_id, id);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
    EXPECT_EQ(remote_.Bytes(0, 256), Pattern(static_cast<uint8_t>(id), 256));
    ASSERT_TRUE(PollOneCompletion(a_.send_cq.get(), &wc)) << "the send never completed";
    EXPECT_EQ(wc.wr_id, id);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
  }
}

// Rule: IBTA 9.7.5.1.3 (implicit acknowledgement): a NAK names the first PSN its responder did not
//   take, so it acknowledges every message before that PSN; the WR of the NAKed PSN completes with
//   the NAK's error (a remote access error: IBV_WC_REM_ACCESS_ERR), the rest are flushed.
// Checks: with the second delivery made to run out of memory (fault point "deliver_packet": the
//   ACK of the first SEND is lost), a SEND and then a WRITE through an R_Key that names no MR are
//   posted in one list. The SEND is received and completes with IBV_WC_SUCCESS; the WRITE completes
//   with IBV_WC_REM_ACCESS_ERR (not the SEND, whose ACK never came).
TEST_F(FaultInjectionTest, NakAcknowledgesTheMessagesBeforeItsPsn) {
  ASSERT_TRUE(MakePair());
  ibv_sge rsge = remote_.Sge(0, 64);
  ASSERT_EQ(PostRecv(b_.get(), 900, &rsge, 1), 0);
  ibv_sge sges[2] = {local_.Sge(0, 16), local_.Sge(64, 16)};
  std::vector<ibv_send_wr> wrs = {SendWr(1, &sges[0], 1),
                                  RdmaWr(2, IBV_WR_RDMA_WRITE, &sges[1], 1, remote_.addr(1024),
                                         remote_.rkey() ^ 0x5a5a00)};
  wrs[0].next = &wrs[1];
  ASSERT_EQ(sim().FailAfter("deliver_packet", 1, ENOMEM), 0);
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(a_.get(), wrs.data(), &bad), 0);
  std::vector<ibv_wc> wcs;
  ASSERT_TRUE(PollCompletions(a_.send_cq.get(), 2, &wcs));
  EXPECT_EQ(wcs[0].wr_id, 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS) << "the SEND, which its responder received: " << DescribeWc(wcs[0]);
  EXPECT_EQ(wcs[1].wr_id, 2u);
  EXPECT_EQ(wcs[1].status, IBV_WC_REM_ACCESS_ERR) << "the WRITE the NAK is for: " << DescribeWc(wcs[1]);
  ibv_wc received = {};
  ASSERT_TRUE(PollOneCompletion(b_.recv_cq.get(), &received));
  EXPECT_EQ(received.status, IBV_WC_SUCCESS) << DescribeWc(received);
}

// Rule: IBTA 9.7.5.1.4 (atomic responses): a responder answers a duplicate atomic request (the
//   requester resends one whose response was lost) with the result it sent the first time, and does
//   not execute it again; the requester's WR then completes with that original value.
// Checks: the remote 8 bytes hold 5; with the second delivery made to run out of memory (fault point
//   "deliver_packet": the atomic's response is lost), a FETCH_AND_ADD of 3 completes with
//   IBV_WC_SUCCESS after the requester's retry, returns 5, and the remote value is 8 (added once).
TEST_F(FaultInjectionTest, AtomicWhoseResponseWasLostIsAnsweredWithItsResult) {
  ASSERT_TRUE(MakePair());
  uint64_t start = 5;
  std::memcpy(remote_.data(), &start, sizeof start);
  ibv_sge sge = local_.Sge(0, 8);
  ASSERT_EQ(sim().FailAfter("deliver_packet", 1, ENOMEM), 0);
  ASSERT_EQ(PostOne(a_.get(), AtomicWr(7, IBV_WR_ATOMIC_FETCH_AND_ADD, &sge, remote_.addr(0), remote_.rkey(), 3, 0)),
            0);
  ibv_wc wc = {};
  ASSERT_TRUE(PollOneCompletion(a_.send_cq.get(), &wc)) << "the atomic never completed";
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
  uint64_t returned = 0;
  uint64_t now = 0;
  std::memcpy(&returned, local_.data(), sizeof returned);
  std::memcpy(&now, remote_.data(), sizeof now);
  EXPECT_EQ(returned, 5u) << "the value the atomic returned";
  EXPECT_EQ(now, 8u) << "the remote value (5 + 3 once)";
}

// Rule: IBTA 9.7.5.1 (RC is reliable) and ibv_post_send(3): after a lost packet the requester
//   sends again from the first PSN its responder did not take; a local operation between (a bind
//   of a type 2 window: IBV_WR_BIND_MW, no packet) was done once and completes once.
// Checks: with the next delivery made to run out of memory (fault point "deliver_packet": the first
//   SEND is lost), a SEND, a bind of a type 2 window and a second SEND are posted in one list. All
//   three complete with IBV_WC_SUCCESS (the bind as IBV_WC_BIND_MW) and b_ receives both SENDs.
TEST_F(FaultInjectionTest, ResendAfterALostSendDoesNotBindTheWindowAgain) {
  ASSERT_TRUE(MakePair());
  Buffer window_memory;
  ASSERT_TRUE(window_memory.Register(pd(), 4096, kFullMrAccess | IBV_ACCESS_MW_BIND));
  ibv_mw* mw = ibv_alloc_mw(pd(), IBV_MW_TYPE_2);
  ASSERT_NE(mw, nullptr) << "ibv_alloc_mw: " << ErrnoName(errno);
  for (uint64_t id : {11, 13}) {
    ibv_sge rsge = remote_.Sge(64 * id, 64);
    ASSERT_EQ(PostRecv(b_.get(), id, &rsge, 1), 0);
  }
  ibv_sge sges[2] = {local_.Sge(0, 16), local_.Sge(64, 16)};
  std::vector<ibv_send_wr> wrs(3);
  wrs[0] = SendWr(1, &sges[0], 1);
  wrs[1].wr_id = 2;
  wrs[1].opcode = IBV_WR_BIND_MW;
  wrs[1].send_flags = IBV_SEND_SIGNALED;
  wrs[1].bind_mw.mw = mw;
  wrs[1].bind_mw.rkey = ibv_inc_rkey(mw->rkey);
  wrs[1].bind_mw.bind_info.mr = window_memory.mr();
  wrs[1].bind_mw.bind_info.addr = window_memory.addr(0);
  wrs[1].bind_mw.bind_info.length = 4096;
  wrs[1].bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
  wrs[2] = SendWr(3, &sges[1], 1);
  wrs[0].next = &wrs[1];
  wrs[1].next = &wrs[2];
  ASSERT_EQ(sim().FailAfter("deliver_packet", 0, ENOMEM), 0);
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(a_.get(), wrs.data(), &bad), 0);
  std::vector<ibv_wc> wcs;
  EXPECT_TRUE(PollCompletions(a_.send_cq.get(), 3, &wcs)) << "completions: " << DescribeWcs(wcs);
  for (size_t k = 0; k < wcs.size(); ++k) {
    EXPECT_EQ(wcs[k].wr_id, k + 1);
    EXPECT_EQ(wcs[k].status, IBV_WC_SUCCESS) << DescribeWc(wcs[k]);
  }
  std::vector<ibv_wc> received;
  EXPECT_TRUE(PollCompletions(b_.recv_cq.get(), 2, &received)) << "receives: " << DescribeWcs(received);
  ibv_dealloc_mw(mw);
}

// One verb per fault point: creates the object and destroys it again; returns
// 0 or the errno the creating call failed with.
using FaultVerb = std::function<int(ibv_context*, ibv_pd*, const ibv_ah_attr&)>;

template <typename T, typename Destroy>
int CreatedOrErrno(T* object, Destroy destroy) {
  if (object == nullptr) return errno != 0 ? errno : -1;
  destroy(object);
  return 0;
}

std::map<std::string, FaultVerb> FaultVerbs() {
  static char buffer[4096];
  return {
      {"open_device",
       [](ibv_context* ctx, ibv_pd*, const ibv_ah_attr&) {
         errno = 0;
         return CreatedOrErrno(ibv_open_device(ctx->device), ibv_close_device);
       }},
      {"alloc_pd",
       [](ibv_context* ctx, ibv_pd*, const ibv_ah_attr&) {
         errno = 0;
         return CreatedOrErrno(ibv_alloc_pd(ctx), ibv_dealloc_pd);
       }},
      {"reg_mr",
       [](ibv_context*, ibv_pd* pd, const ibv_ah_attr&) {
         errno = 0;
         return CreatedOrErrno(ibv_reg_mr(pd, buffer, sizeof buffer, IBV_ACCESS_LOCAL_WRITE), ibv_dereg_mr);
       }},
      {"alloc_mw",
       [](ibv_context*, ibv_pd* pd, const ibv_ah_attr&) {
         errno = 0;
         return CreatedOrErrno(ibv_alloc_mw(pd, IBV_MW_TYPE_1), ibv_dealloc_mw);
       }},
      {"create_comp_channel",
       [](ibv_context* ctx, ibv_pd*, const ibv_ah_attr&) {
         errno = 0;
         return CreatedOrErrno(ibv_create_comp_channel(ctx), ibv_destroy_comp_channel);
       }},
      {"create_cq",
       [](ibv_context* ctx, ibv_pd*, const ibv_ah_attr&) {
         errno = 0;
         return CreatedOrErrno(ibv_create_cq(ctx, 4, nullptr, nullptr, 0), ibv_destroy_cq);
       }},
      {"create_srq",
       [](ibv_context*, ibv_pd* pd, const ibv_ah_attr&) {
         ibv_srq_init_attr init = {};
         init.attr.max_wr = 4;
         init.attr.max_sge = 1;
         errno = 0;
         return CreatedOrErrno(ibv_create_srq(pd, &init), ibv_destroy_srq);
       }},
      {"create_qp",
       [](ibv_context* ctx, ibv_pd* pd, const ibv_ah_attr&) {
         ibv_cq* cq = ibv_create_cq(ctx, 4, nullptr, nullptr, 0);
         if (cq == nullptr) return -1;
         ibv_qp_init_attr init = MakeInitAttr(IBV_QPT_RC, cq, cq);
         errno = 0;
         const int result = CreatedOrErrno(ibv_create_qp(pd, &init), ibv_destroy_qp);
         ibv_destroy_cq(cq);
         return result;
       }},
      {"create_ah",
       [](ibv_context*, ibv_pd* pd, const ibv_ah_attr& address) {
         ibv_ah_attr attr = address;
         errno = 0;
         return CreatedOrErrno(ibv_create_ah(pd, &attr), ibv_destroy_ah);
       }},
      {"open_xrcd",
       [](ibv_context* ctx, ibv_pd*, const ibv_ah_attr&) {
         ibv_xrcd_init_attr attr = {};
         attr.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
         attr.fd = -1;
         attr.oflags = 0;
         errno = 0;
         return CreatedOrErrno(ibv_open_xrcd(ctx, &attr), ibv_close_xrcd);
       }},
  };
}

// Rule: the man pages of every creating verb (ibv_alloc_pd(3), ibv_reg_mr(3), ibv_create_cq(3),
//   ibv_create_qp(3), ...): on failure they return NULL with errno set, ENOMEM for insufficient
//   resources; a failed call creates nothing.
// Checks: for every fault point the simulator declares, the armed call fails with ENOMEM, and the
//   very next call succeeds (the failure consumed nothing and the point disarmed). Each declared
//   point has a verb here, so a new point without coverage fails this test ("deliver_packet" is
//   not a verb: PacketLostForMemoryIsSentAgain and the cross-process checks cover it).
TEST_F(FaultInjectionTest, EveryFaultPointFailsItsVerbOnce) {
  const std::map<std::string, FaultVerb> verbs = FaultVerbs();
  const int count = sim().FaultPointCount();
  ASSERT_GT(count, 0);
  const ibv_ah_attr address = LocalAddress(roce());
  for (int i = 0; i < count; ++i) {
    const char* name = sim().FaultPointName(i);
    ASSERT_NE(name, nullptr) << "fault point " << i;
    SCOPED_TRACE(name);
    if (std::string(name) == "deliver_packet") continue;
    auto verb = verbs.find(name);
    ASSERT_NE(verb, verbs.end()) << "no verb for fault point " << name << ": add it to FaultVerbs()";
    if (std::string(name) == "alloc_mw" && !(device_attr().device_cap_flags & IBV_DEVICE_MEM_WINDOW)) continue;
    if (std::string(name) == "open_xrcd" && !(device_attr().device_cap_flags & IBV_DEVICE_XRC)) continue;
    ASSERT_EQ(sim().FailAfter(name, 0, ENOMEM), 0);
    EXPECT_EQ(verb->second(context(), pd(), address), ENOMEM) << "armed call";
    EXPECT_EQ(verb->second(context(), pd(), address), 0) << "the call after the failure";
  }
  EXPECT_EQ(sim().FaultPointName(count), nullptr);
}

// Rule: simverbs.h: simverbs_fail_after(point, calls, err) lets `calls` calls succeed and fails
//   the next one.
// Checks: armed with calls = 2, two ibv_alloc_pd calls succeed, the third fails with ENOMEM, the
//   fourth succeeds; an unknown point name or err 0 is EINVAL.
TEST_F(FaultInjectionTest, FailAfterCountsCalls) {
  ASSERT_EQ(sim().FailAfter("alloc_pd", 2, ENOMEM), 0);
  PdPtr first(ibv_alloc_pd(context()));
  PdPtr second(ibv_alloc_pd(context()));
  EXPECT_NE(first, nullptr);
  EXPECT_NE(second, nullptr);
  EXPECT_THAT(CaptureErrno([&] { return ibv_alloc_pd(context()); }), ReturnsNullWithErrno(ENOMEM));
  PdPtr fourth(ibv_alloc_pd(context()));
  EXPECT_NE(fourth, nullptr);
  EXPECT_EQ(sim().FailAfter("no_such_point", 0, ENOMEM), EINVAL);
  EXPECT_EQ(sim().FailAfter("alloc_pd", 0, 0), EINVAL);
}

}  // namespace
}  // namespace conformance
