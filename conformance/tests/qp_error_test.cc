// Errors on the data path: flushing on the way to ERR, remote access and
// invalid-request errors, local protection and length errors, RNR and
// transport retries. On an error completion only wr_id, status and qp_num
// are checked (ibv_poll_cq(3): the other fields are not valid).

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>

#include "conformance/lib/backend_profile.h"
#include "conformance/lib/errno_capture.h"
#include "conformance/lib/event_wait.h"
#include "conformance/lib/qp_pair.h"
#include "conformance/lib/skip_if.h"
#include "conformance/lib/timeouts.h"
#include "conformance/lib/verbs_matchers.h"

namespace conformance {
namespace {

// A key that names no MR: the key byte of a real key flipped.
uint32_t BadKey(uint32_t key) { return key ^ 0x80; }

// How long a transport retry may take to be given up: timeout 14 is 67 ms of
// protocol time per try on hardware, so retry_cnt 1 takes ~0.13 s there.
constexpr std::chrono::milliseconds kRetryWindow = std::chrono::seconds(5);

class QpErrorTest : public QpTest {
 protected:
  void SetUp() override {
    QpTest::SetUp();
    if (HasFatalFailure() || IsSkipped()) return;
    ASSERT_TRUE(local_.Register(pd(), 8192));
    ASSERT_TRUE(remote_.Register(pd(), 8192));
    local_.FillPattern(1);
  }

  // An RC QP a_ in RTS connected to a QP number that does not exist, with
  // the given transport timeout (0: wait forever) and retry count.
  testing::AssertionResult MakeRequesterToNobody(uint8_t timeout, uint8_t retry_cnt) {
    if (auto ok = CreateEnd(&a_); !ok) return ok;
    ConnectParams params;
    params.timeout = timeout;
    params.retry_cnt = retry_cnt;
    params.path_mtu = DefaultMtu();
    const uint32_t nobody = (a_.qp_num() ^ 0x5a5a00) & 0xffffff;
    return BringUp(a_.get(), port(), nobody, LocalAddress(), params);
  }

  // Posts one signaled WR from a_ and returns its completion.
  void PostAndComplete(const ibv_send_wr& wr, ibv_wc* wc, std::chrono::milliseconds timeout = kReturnWindow) {
    ASSERT_EQ(PostOne(a_.get(), wr), 0);
    ASSERT_TRUE(PollOneCompletion(a_.send_cq.get(), wc, timeout));
  }

  // A WRITE of 64 bytes from a_ to remote_ with the given rkey and offset.
  ibv_send_wr Write(uint64_t wr_id, uint32_t rkey, size_t offset = 0, uint32_t length = 64) {
    sge_ = local_.Sge(0, length);
    return RdmaWr(wr_id, IBV_WR_RDMA_WRITE, &sge_, 1, remote_.addr(offset), rkey);
  }

  Buffer local_;
  Buffer remote_;
  ibv_sge sge_ = {};
};

// Rule: ibv_modify_qp(3)/IBTA Vol 1 ch. 10 (Error state): on entering Error "all outstanding and
//   subsequently posted WRs are completed with a flush error" (IBV_WC_WR_FLUSH_ERR), in order.
// Checks: three receives posted on an RC QP in RTS complete with IBV_WC_WR_FLUSH_ERR, in posting
//   order, with qp_num == the QP, after it is moved to ERR.
TEST_F(QpErrorTest, ModifyToErrFlushesRecvsInOrder) {
  ASSERT_TRUE(MakePair());
  ibv_sge sges[3] = {local_.Sge(0, 64), local_.Sge(64, 64), local_.Sge(128, 64)};
  for (int i = 0; i < 3; ++i) ASSERT_EQ(PostRecv(b_.get(), 10 + static_cast<uint64_t>(i), &sges[i], 1), 0);
  ASSERT_TRUE(ModifyToState(b_.get(), IBV_QPS_ERR));
  std::vector<ibv_wc> wcs;
  ASSERT_TRUE(PollCompletions(b_.recv_cq.get(), 3, &wcs));
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(wcs[i].wr_id, 10 + static_cast<uint64_t>(i)) << DescribeWcs(wcs);
    EXPECT_EQ(wcs[i].status, IBV_WC_WR_FLUSH_ERR) << DescribeWc(wcs[i]);
    EXPECT_EQ(wcs[i].qp_num, b_.qp_num());
  }
}

// Rule: IBTA Vol 1 ch. 10 (Error state; work completion errors): outstanding send WRs are
//   completed with a flush error when the QP enters Error - a WR completed in error generates a completion
//   whether or not it was signaled.
// Checks: three WRITEs (the middle one unsignaled) that are never answered (no such destination,
//   timeout 0) complete with IBV_WC_WR_FLUSH_ERR in posting order after the QP is moved to ERR.
TEST_F(QpErrorTest, ModifyToErrFlushesSendsInOrder) {
  ASSERT_TRUE(MakeRequesterToNobody(0, 7));
  ibv_sge sge = local_.Sge(0, 8);
  for (uint64_t i = 1; i <= 3; ++i) {
    const unsigned flags = i == 2 ? 0 : IBV_SEND_SIGNALED;
    ASSERT_EQ(PostOne(a_.get(), RdmaWr(i, IBV_WR_RDMA_WRITE, &sge, 1, remote_.addr(), remote_.rkey(), flags)), 0);
  }
  EXPECT_TRUE(NoCompletionWithin(a_.send_cq.get(), kQuietWindow)) << "an unanswered WRITE completed";
  ASSERT_TRUE(ModifyToState(a_.get(), IBV_QPS_ERR));
  std::vector<ibv_wc> wcs;
  ASSERT_TRUE(PollCompletions(a_.send_cq.get(), 3, &wcs));
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(wcs[i].wr_id, static_cast<uint64_t>(i + 1)) << DescribeWcs(wcs);
    EXPECT_EQ(wcs[i].status, IBV_WC_WR_FLUSH_ERR) << DescribeWc(wcs[i]);
    EXPECT_EQ(wcs[i].qp_num, a_.qp_num());
  }
}

// Rule: IBTA Vol 1 ch. 10 (Error state): WRs posted to a QP in the Error state are completed with a
//   flush error; ibv_post_send(3) "returns 0 on success".
// Checks: a SEND posted to an RC QP in ERR is accepted (0) and completes with IBV_WC_WR_FLUSH_ERR,
//   its wr_id and qp_num.
TEST_F(QpErrorTest, PostSendInErrCompletesWithFlushErr) {
  ASSERT_TRUE(MakePair());
  ASSERT_TRUE(ModifyToState(a_.get(), IBV_QPS_ERR));
  ibv_sge sge = local_.Sge(0, 16);
  ibv_wc wc = {};
  ASSERT_NO_FATAL_FAILURE(PostAndComplete(SendWr(33, &sge, 1), &wc));
  EXPECT_EQ(wc.wr_id, 33u);
  EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR) << DescribeWc(wc);
  EXPECT_EQ(wc.qp_num, a_.qp_num());
}

// Rule: IBTA Vol 1 ch. 10 (Error state): receive WRs posted to a QP in the Error state are completed
//   with a flush error.
// Checks: a receive posted to an RC QP in ERR is accepted (0) and completes with
//   IBV_WC_WR_FLUSH_ERR, its wr_id and qp_num.
TEST_F(QpErrorTest, PostRecvInErrCompletesWithFlushErr) {
  ASSERT_TRUE(MakePair());
  ASSERT_TRUE(ModifyToState(b_.get(), IBV_QPS_ERR));
  ibv_sge sge = local_.Sge(0, 16);
  ASSERT_EQ(PostRecv(b_.get(), 44, &sge, 1), 0);
  ibv_wc wc = {};
  ASSERT_TRUE(PollOneCompletion(b_.recv_cq.get(), &wc));
  EXPECT_EQ(wc.wr_id, 44u);
  EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR) << DescribeWc(wc);
  EXPECT_EQ(wc.qp_num, b_.qp_num());
}

// Rule: IBTA Vol 1 ch. 9 (responder checks) / C9-222.1.1 (R_Key violation): the responder NAKs with Remote
//   Access Error; the requester completes the WR with IBV_WC_REM_ACCESS_ERR.
// Checks: a WRITE with an R_Key that names no MR completes with IBV_WC_REM_ACCESS_ERR.
TEST_F(QpErrorTest, WriteFails_BadRkey) {
  ASSERT_TRUE(MakePair());
  ibv_wc wc = {};
  ASSERT_NO_FATAL_FAILURE(PostAndComplete(Write(1, BadKey(remote_.rkey())), &wc));
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR) << DescribeWc(wc);
  EXPECT_EQ(wc.qp_num, a_.qp_num());
}

// Rule: IBTA Vol 1 ch. 10 (work completion errors) / ch. 11 (completion errors): an RC requester that
//   completes a WR with a remote error enters the Error state, and its later WRs are completed with flush
//   errors.
// Checks: a WRITE with a bad R_Key followed by a good WRITE in one list: the first completes with
//   IBV_WC_REM_ACCESS_ERR, the second with IBV_WC_WR_FLUSH_ERR, and the requester reads ERR.
TEST_F(QpErrorTest, RequesterEntersErr_RemoteAccessError) {
  ASSERT_TRUE(MakePair());
  ibv_sge sges[2] = {local_.Sge(0, 64), local_.Sge(64, 64)};
  ibv_send_wr wrs[2] = {
      RdmaWr(1, IBV_WR_RDMA_WRITE, &sges[0], 1, remote_.addr(), BadKey(remote_.rkey())),
      RdmaWr(2, IBV_WR_RDMA_WRITE, &sges[1], 1, remote_.addr(64), remote_.rkey()),
  };
  wrs[0].next = &wrs[1];
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(a_.get(), wrs, &bad), 0);
  std::vector<ibv_wc> wcs;
  ASSERT_TRUE(PollCompletions(a_.send_cq.get(), 2, &wcs));
  EXPECT_EQ(wcs[0].wr_id, 1u) << DescribeWcs(wcs);
  EXPECT_EQ(wcs[0].status, IBV_WC_REM_ACCESS_ERR) << DescribeWc(wcs[0]);
  EXPECT_EQ(wcs[1].wr_id, 2u) << DescribeWcs(wcs);
  EXPECT_EQ(wcs[1].status, IBV_WC_WR_FLUSH_ERR) << DescribeWc(wcs[1]);
  EXPECT_TRUE(QpStateBecomes(a_.get(), IBV_QPS_ERR));
}

// Rule: IBTA Vol 1 ch. 9 (responder checks) / C9-222.1.1: an R_Key violation on an incoming RDMA WRITE is a
//   responder error that moves the responder QP to the Error state.
// Checks: after a WRITE with a bad R_Key, the responder QP reads ERR.
TEST_F(QpErrorTest, ResponderEntersErr_RemoteAccessError) {
  ASSERT_TRUE(MakePair());
  ibv_wc wc = {};
  ASSERT_NO_FATAL_FAILURE(PostAndComplete(Write(1, BadKey(remote_.rkey())), &wc));
  EXPECT_TRUE(QpStateBecomes(b_.get(), IBV_QPS_ERR));
}

// Rule: IBTA Vol 1 C9-222.1.1 and ch. 11 (affiliated asynchronous events): an R_Key violation detected by the
//   responder raises the affiliated asynchronous error IBV_EVENT_QP_ACCESS_ERR ("Local access violation
//   error", ibv_get_async_event(3)) on the responder QP (backend question
//   ResponderAccessErrorRaisesQpAccessErr; rxe 6.1 raises none).
// Checks: after a WRITE with a bad R_Key, IBV_EVENT_QP_ACCESS_ERR arrives with element.qp == the
//   responder QP.
TEST_F(QpErrorTest, ResponderRaisesQpAccessErr_BadRkey) {
  SKIP_IF(!Backend().Answer("ResponderAccessErrorRaisesQpAccessErr", true)) << "(the backend raises no event)";
  ASSERT_TRUE(MakePair());
  ibv_wc wc = {};
  ASSERT_NO_FATAL_FAILURE(PostAndComplete(Write(1, BadKey(remote_.rkey())), &wc));
  EXPECT_TRUE(WaitForAsyncEvent(context(), IBV_EVENT_QP_ACCESS_ERR, b_.get(), &acks_));
}

// Rule: ibv_reg_mr(3): the MR covers [addr, addr + length); IBTA Vol 1 C9-222.1.1 / ch. 10 (memory
//   protection): an access outside the MR's range is an R_Key violation (Remote Access Error).
// Checks: a 16-byte WRITE starting 8 bytes before the end of the remote MR completes with
//   IBV_WC_REM_ACCESS_ERR.
TEST_F(QpErrorTest, WriteFails_OutOfMrBounds) {
  ASSERT_TRUE(MakePair());
  ibv_wc wc = {};
  ASSERT_NO_FATAL_FAILURE(PostAndComplete(Write(1, remote_.rkey(), remote_.size() - 8, 16), &wc));
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR) << DescribeWc(wc);
}

// Rule: ibv_reg_mr(3): IBV_ACCESS_REMOTE_WRITE "Enable Remote Write Access"; IBTA Vol 1 ch. 10 (memory access
//   rights): an RDMA WRITE to an MR without remote write access is an R_Key violation.
// Checks: a WRITE to an MR registered with LOCAL_WRITE | REMOTE_READ only completes with
//   IBV_WC_REM_ACCESS_ERR.
TEST_F(QpErrorTest, WriteFails_MrWithoutRemoteWrite) {
  ASSERT_TRUE(MakePair());
  Buffer read_only;
  ASSERT_TRUE(read_only.Register(pd(), 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ));
  ibv_sge sge = local_.Sge(0, 64);
  ibv_wc wc = {};
  ASSERT_NO_FATAL_FAILURE(
      PostAndComplete(RdmaWr(1, IBV_WR_RDMA_WRITE, &sge, 1, read_only.addr(), read_only.rkey()), &wc));
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR) << DescribeWc(wc);
}

// Rule: IBTA Vol 1 ch. 9 (responder checks) / C9-222.1.1: an R_Key violation on an RDMA READ is NAKed with
//   Remote Access Error (IBV_WC_REM_ACCESS_ERR at the requester).
// Checks: a READ with an R_Key that names no MR completes with IBV_WC_REM_ACCESS_ERR.
TEST_F(QpErrorTest, ReadFails_BadRkey) {
  ASSERT_TRUE(MakePair());
  ibv_sge sge = local_.Sge(0, 64);
  ibv_wc wc = {};
  ASSERT_NO_FATAL_FAILURE(
      PostAndComplete(RdmaWr(1, IBV_WR_RDMA_READ, &sge, 1, remote_.addr(), BadKey(remote_.rkey())), &wc));
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR) << DescribeWc(wc);
}

// Rule: IBTA Vol 1 ch. 9 (responder checks) / C9-222.1.1: an R_Key violation on an atomic operation is NAKed
//   with Remote Access Error (IBV_WC_REM_ACCESS_ERR at the requester).
// Checks: a FETCH_AND_ADD with an R_Key that names no MR completes with IBV_WC_REM_ACCESS_ERR.
TEST_F(QpErrorTest, AtomicFails_BadRkey) {
  SKIP_IF(!HasAtomics()) << "(atomic_cap is IBV_ATOMIC_NONE)";
  ASSERT_TRUE(MakePair());
  ibv_sge sge = local_.Sge(0, 8);
  ibv_wc wc = {};
  ASSERT_NO_FATAL_FAILURE(PostAndComplete(
      AtomicWr(1, IBV_WR_ATOMIC_FETCH_AND_ADD, &sge, remote_.addr(), BadKey(remote_.rkey()), 1, 0), &wc));
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR) << DescribeWc(wc);
}

// Rule: IBTA Vol 1 ch. 9 (atomic operations, responder checks): the remote address of an atomic
//   must be 8-byte aligned; a misaligned one is NAKed as an invalid request (IBV_WC_REM_INV_REQ_ERR
//   at the requester). Where it is caught is the provider's choice (MisalignedAtomicFailsAtPost):
//   rxe's provider refuses it at post time, ibv_post_send(3) EINVAL "Invalid value provided in wr",
//   with the WR in *bad_wr.
// Checks: a FETCH_AND_ADD to remote_addr + 4 either completes with IBV_WC_REM_INV_REQ_ERR or, when
//   the backend answers that it fails at post, returns EINVAL with *bad_wr set and never completes;
//   either way the remote memory is untouched.
TEST_F(QpErrorTest, MisalignedAtomicFollowsBackend) {
  SKIP_IF(!HasAtomics()) << "(atomic_cap is IBV_ATOMIC_NONE)";
  ASSERT_TRUE(MakePair());
  remote_.FillPattern(2);
  ibv_sge sge = local_.Sge(0, 8);
  ibv_send_wr wr = AtomicWr(1, IBV_WR_ATOMIC_FETCH_AND_ADD, &sge, remote_.addr(4), remote_.rkey(), 1, 0);
  if (Backend().Answer("MisalignedAtomicFailsAtPost", false)) {
    ibv_send_wr* bad = nullptr;
    EXPECT_THAT(ibv_post_send(a_.get(), &wr, &bad), ReturnsErrno(EINVAL));
    EXPECT_EQ(bad, &wr);
    EXPECT_TRUE(NoCompletionWithin(a_.send_cq.get(), kQuietWindow)) << "the refused WR completed";
  } else {
    ibv_wc wc = {};
    ASSERT_NO_FATAL_FAILURE(PostAndComplete(wr, &wc));
    EXPECT_EQ(wc.wr_id, 1u);
    EXPECT_EQ(wc.status, IBV_WC_REM_INV_REQ_ERR) << DescribeWc(wc);
  }
  EXPECT_EQ(remote_.Bytes(0, 16), Pattern(2, 16)) << "the misaligned atomic changed the remote memory";
}

// Rule: ibv_modify_qp(3): qp_access_flags is the "Mask of enabled remote access operations";
//   IBTA Vol 1 ch. 9 (responder checks): an RDMA WRITE to a QP that has not enabled it is an invalid request
//   (NAK Invalid Request, IBV_WC_REM_INV_REQ_ERR at the requester).
// Checks: a WRITE to a responder QP whose qp_access_flags lack IBV_ACCESS_REMOTE_WRITE completes
//   with IBV_WC_REM_INV_REQ_ERR.
TEST_F(QpErrorTest, WriteFails_QpWithoutRemoteWrite) {
  ConnectParams b_params;
  b_params.access = IBV_ACCESS_REMOTE_READ;
  ASSERT_TRUE(MakePair({}, {}, {}, b_params));
  ibv_wc wc = {};
  ASSERT_NO_FATAL_FAILURE(PostAndComplete(Write(1, remote_.rkey()), &wc));
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(wc.status, IBV_WC_REM_INV_REQ_ERR) << DescribeWc(wc);
}

// Rule: ibv_modify_qp(3): max_dest_rd_atomic is the "Number of responder resources for handling
//   incoming RDMA reads & atomics operations"; with none, an incoming READ or atomic is an invalid
//   request (IBTA Vol 1 ch. 9, responder resources; rxe_resp.c check_resource:
//   RESPST_ERR_TOO_MANY_RDMA_ATM_REQ, NAK Invalid Request), IBV_WC_REM_INV_REQ_ERR at the requester.
// Checks: a 64-byte READ to a responder QP with max_dest_rd_atomic 0 completes with
//   IBV_WC_REM_INV_REQ_ERR and leaves the local buffer as it was; where the device has atomics, a
//   FETCH_AND_ADD on a second such pair does too and leaves the remote word unchanged.
TEST_F(QpErrorTest, ReadOrAtomicFails_ResponderWithoutResources) {
  ConnectParams b_params;
  b_params.max_dest_rd_atomic = 0;
  ASSERT_TRUE(MakePair({}, {}, {}, b_params));
  remote_.FillPattern(2);
  local_.FillPattern(3);
  ibv_sge sge = local_.Sge(0, 64);
  ibv_wc wc = {};
  ASSERT_NO_FATAL_FAILURE(
      PostAndComplete(RdmaWr(1, IBV_WR_RDMA_READ, &sge, 1, remote_.addr(0), remote_.rkey()), &wc));
  EXPECT_EQ(wc.status, IBV_WC_REM_INV_REQ_ERR) << DescribeWc(wc);
  EXPECT_EQ(local_.Bytes(0, 64), Pattern(3, 64)) << "the READ brought data";
  if (!HasAtomics()) return;
  a_.reset();
  b_.reset();
  ASSERT_TRUE(MakePair({}, {}, {}, b_params));
  ibv_sge atomic_sge = local_.Sge(0, 8);
  ASSERT_NO_FATAL_FAILURE(PostAndComplete(
      AtomicWr(2, IBV_WR_ATOMIC_FETCH_AND_ADD, &atomic_sge, remote_.addr(0), remote_.rkey(), 1, 0), &wc));
  EXPECT_EQ(wc.status, IBV_WC_REM_INV_REQ_ERR) << DescribeWc(wc);
  EXPECT_EQ(remote_.Bytes(0, 8), Pattern(2, 8)) << "the atomic changed the remote memory";
}

// Rule: IBTA Vol 1 ch. 11 (affiliated asynchronous events): an invalid request detected by the responder
//   raises the affiliated asynchronous error IBV_EVENT_QP_REQ_ERR ("Invalid Request Local Work Queue Error",
//   ibv_get_async_event(3)) on the responder QP (backend question ResponderInvalidRequestRaisesQpReqErr).
// Checks: after a WRITE to a QP without IBV_ACCESS_REMOTE_WRITE, IBV_EVENT_QP_REQ_ERR arrives with
//   element.qp == the responder QP.
TEST_F(QpErrorTest, ResponderRaisesQpReqErr_QpWithoutRemoteWrite) {
  SKIP_IF(!Backend().Answer("ResponderInvalidRequestRaisesQpReqErr", true)) << "(the backend raises no event)";
  ConnectParams b_params;
  b_params.access = IBV_ACCESS_REMOTE_READ;
  ASSERT_TRUE(MakePair({}, {}, {}, b_params));
  ibv_wc wc = {};
  ASSERT_NO_FATAL_FAILURE(PostAndComplete(Write(1, remote_.rkey()), &wc));
  EXPECT_TRUE(WaitForAsyncEvent(context(), IBV_EVENT_QP_REQ_ERR, b_.get(), &acks_));
}

// Rule: ibv_reg_mr(3): lkey is "The local key (L_Key)" used in struct ibv_sge; IBTA Vol 1 ch. 10 (memory
//   protection) / ch. 11 (completion errors): an invalid L_Key in a send WR is a Local Protection Error
//   (IBV_WC_LOC_PROT_ERR).
// Checks: a SEND whose SGE has an L_Key that names no MR completes with IBV_WC_LOC_PROT_ERR.
TEST_F(QpErrorTest, SendFails_BadLkey) {
  ASSERT_TRUE(MakePair());
  ibv_sge rsge = remote_.Sge(0, 64);
  ASSERT_EQ(PostRecv(b_.get(), 9, &rsge, 1), 0);
  ibv_sge sge = local_.Sge(0, 64);
  sge.lkey = BadKey(sge.lkey);
  ibv_wc wc = {};
  ASSERT_NO_FATAL_FAILURE(PostAndComplete(SendWr(1, &sge, 1), &wc));
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(wc.status, IBV_WC_LOC_PROT_ERR) << DescribeWc(wc);
  EXPECT_EQ(wc.qp_num, a_.qp_num());
}

// Rule: IBA 10.3.1 (QP states): a send error on a UC or UD QP moves it to SQE, not ERR: the send queue
//   stops, the receive queue goes on working. Backend question UnreliableSendErrorState (a backend may
//   take the QP to ERR, where its receives are flushed).
// Checks: after a UC SEND with a bad L_Key failed at a_, a_ is in SQE; a SEND from b_ then fills the
//   receive a_ had posted, with its bytes. (Under ERR: a_ is in ERR and that receive completes with
//   IBV_WC_WR_FLUSH_ERR.)
TEST_F(QpErrorTest, UcSendErrorStopsOnlyTheSendQueue) {
  EndConfig uc;
  uc.type = IBV_QPT_UC;
  ASSERT_TRUE(MakePair(uc, uc, ConnectParams{}, ConnectParams{}));
  ibv_sge rsge = local_.Sge(1024, 64);
  ASSERT_EQ(PostRecv(a_.get(), 7, &rsge, 1), 0);
  ibv_sge sge = local_.Sge(0, 64);
  sge.lkey = BadKey(sge.lkey);
  ibv_wc wc = {};
  ASSERT_NO_FATAL_FAILURE(PostAndComplete(SendWr(1, &sge, 1), &wc));
  ASSERT_NE(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
  const ibv_qp_state after_error = UnreliableSendErrorState();
  ASSERT_TRUE(QpStateBecomes(a_.get(), after_error));
  if (after_error == IBV_QPS_ERR) {
    ibv_wc rwc = {};
    ASSERT_TRUE(PollOneCompletion(a_.recv_cq.get(), &rwc));
    EXPECT_EQ(rwc.wr_id, 7u);
    EXPECT_EQ(rwc.status, IBV_WC_WR_FLUSH_ERR) << DescribeWc(rwc);
    return;
  }
  remote_.FillPattern(5);
  ibv_sge back = remote_.Sge(0, 64);
  ASSERT_EQ(PostOne(b_.get(), SendWr(2, &back, 1)), 0);
  ibv_wc rwc = {};
  ASSERT_TRUE(PollOneCompletion(a_.recv_cq.get(), &rwc)) << "a_ in SQE received nothing";
  EXPECT_EQ(rwc.wr_id, 7u);
  EXPECT_EQ(rwc.status, IBV_WC_SUCCESS) << DescribeWc(rwc);
  EXPECT_EQ(local_.Bytes(1024, 64), remote_.Bytes(0, 64));
}

// Rule: IBTA Vol 1 ch. 10 (memory protection: an L_Key's PD must match the QP's PD): an L_Key of an MR in
//   another protection domain is a Local Protection Error (backend question SendChecksLkeyPd; rxe
//   does not check the PD).
// Checks: a SEND whose SGE uses the L_Key of an MR registered in another PD completes with
//   IBV_WC_LOC_PROT_ERR.
TEST_F(QpErrorTest, SendFails_LkeyOfOtherPd) {
  SKIP_IF(!Backend().Answer("SendChecksLkeyPd", true)) << "(the backend does not check the MR's PD)";
  ASSERT_TRUE(MakePair());
  PdPtr other_pd(ibv_alloc_pd(context()));
  ASSERT_NE(other_pd, nullptr) << ErrnoName(errno);
  Buffer other;
  ASSERT_TRUE(other.Register(other_pd.get(), 4096));
  ibv_sge rsge = remote_.Sge(0, 64);
  ASSERT_EQ(PostRecv(b_.get(), 9, &rsge, 1), 0);
  ibv_sge sge = other.Sge(0, 64);
  ibv_wc wc = {};
  ASSERT_NO_FATAL_FAILURE(PostAndComplete(SendWr(1, &sge, 1), &wc));
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(wc.status, IBV_WC_LOC_PROT_ERR) << DescribeWc(wc);
}

// Rule: IBTA Vol 1 ch. 9 (responder checks) / ch. 10 (work completion errors): a SEND longer than the receive
//   WQE's buffers is a Local Length Error at the responder (IBV_WC_LOC_LEN_ERR on the receive).
// Checks: a 64-byte SEND into a 16-byte receive completes that receive with IBV_WC_LOC_LEN_ERR.
TEST_F(QpErrorTest, RecvFails_BufferTooSmall) {
  ASSERT_TRUE(MakePair());
  ibv_sge rsge = remote_.Sge(0, 16);
  ASSERT_EQ(PostRecv(b_.get(), 9, &rsge, 1), 0);
  ibv_sge sge = local_.Sge(0, 64);
  ASSERT_EQ(PostOne(a_.get(), SendWr(1, &sge, 1)), 0);
  ibv_wc wc = {};
  ASSERT_TRUE(PollOneCompletion(b_.recv_cq.get(), &wc));
  EXPECT_EQ(wc.wr_id, 9u);
  EXPECT_EQ(wc.status, IBV_WC_LOC_LEN_ERR) << DescribeWc(wc);
  EXPECT_EQ(wc.qp_num, b_.qp_num());
}

// Rule: IBTA Vol 1 ch. 9 (NAK Invalid Request for a message too long for the receive WQE):
//   the requester completes the SEND with IBV_WC_REM_INV_REQ_ERR.
// Checks: a 64-byte SEND into a 16-byte receive completes at the requester with
//   IBV_WC_REM_INV_REQ_ERR.
TEST_F(QpErrorTest, SendFails_RemoteRecvTooSmall) {
  ASSERT_TRUE(MakePair());
  ibv_sge rsge = remote_.Sge(0, 16);
  ASSERT_EQ(PostRecv(b_.get(), 9, &rsge, 1), 0);
  ibv_sge sge = local_.Sge(0, 64);
  ibv_wc wc = {};
  ASSERT_NO_FATAL_FAILURE(PostAndComplete(SendWr(1, &sge, 1), &wc));
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(wc.status, IBV_WC_REM_INV_REQ_ERR) << DescribeWc(wc);
}

// Rule: IBTA Vol 1 ch. 10/11 (work completion status "Local Length Error"): a send WR whose message is
//   longer than the port's maximum message size (ibv_query_port(3): max_msg_sz, "Max message size")
//   completes with IBV_WC_LOC_LEN_ERR; nothing of it is sent.
// Checks: a SEND of max_msg_sz + 1 bytes (up to 16 SGEs over one untouched, registered mapping)
//   is accepted by ibv_post_send, completes with IBV_WC_LOC_LEN_ERR, and the peer's posted receive
//   gets nothing.
TEST_F(QpErrorTest, SendFails_LongerThanMaxMsgSz) {
  const uint64_t max_msg = port_attr().max_msg_sz;
  const uint32_t sges = static_cast<uint32_t>(std::min(device_attr().max_sge, 16));
  ASSERT_GE(sges, 1u);
  const uint64_t per_sge = (max_msg + 1 + sges - 1) / sges;
  ASSERT_LE(per_sge, uint64_t{UINT32_MAX}) << "max_msg_sz " << max_msg;
  // Reserved address space only: nothing reads these pages unless the SEND goes out.
  void* mem = mmap(nullptr, per_sge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(mem, MAP_FAILED) << ErrnoName(errno);
  MrPtr mr(ibv_reg_mr(pd(), mem, per_sge, 0));
  ASSERT_NE(mr, nullptr) << "ibv_reg_mr of " << per_sge << " bytes: " << ErrnoName(errno);
  EndConfig config;
  config.caps.max_send_sge = sges;
  ASSERT_TRUE(MakePair(config));
  ibv_sge rsge = remote_.Sge(0, 64);
  ASSERT_EQ(PostRecv(b_.get(), 9, &rsge, 1), 0);
  std::vector<ibv_sge> sg(sges, ibv_sge{reinterpret_cast<uintptr_t>(mem), static_cast<uint32_t>(per_sge), mr->lkey});
  ibv_wc wc = {};
  ASSERT_NO_FATAL_FAILURE(PostAndComplete(SendWr(1, sg.data(), static_cast<int>(sges)), &wc));
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(wc.status, IBV_WC_LOC_LEN_ERR) << DescribeWc(wc) << " (message of " << sges * per_sge
                                           << " bytes, max_msg_sz " << max_msg << ")";
  EXPECT_TRUE(NoCompletionWithin(b_.recv_cq.get(), kQuietWindow)) << "the receive took part of the message";
  mr.reset();
  munmap(mem, per_sge);
}

// Rule: ibv_modify_qp(3): rnr_retry is the "RNR retry" count; IBTA Vol 1 9.7.5.2.8: with no receive
//   posted the responder sends RNR NAKs, and when the RNR retries are used up the requester
//   completes the WR with IBV_WC_RNR_RETRY_EXC_ERR.
// Checks: with rnr_retry 0 and no receive posted at b_, a SEND completes with
//   IBV_WC_RNR_RETRY_EXC_ERR.
TEST_F(QpErrorTest, SendFails_NoRecvRnrRetryZero) {
  ConnectParams a_params;
  a_params.rnr_retry = 0;
  ASSERT_TRUE(MakePair({}, {}, a_params, {}));
  ibv_sge sge = local_.Sge(0, 16);
  ibv_wc wc = {};
  ASSERT_NO_FATAL_FAILURE(PostAndComplete(SendWr(1, &sge, 1), &wc));
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(wc.status, IBV_WC_RNR_RETRY_EXC_ERR) << DescribeWc(wc);
}

// Rule: IBTA Vol 1 9.7.5.2.8: an RNR retry count of 7 means "retry forever"; the requester resends
//   after each RNR NAK's timer until a receive is posted.
// Checks: with rnr_retry 7 and no receive posted, a SEND does not complete within 200 ms; once a
//   receive is posted, the SEND and the receive both complete successfully.
TEST_F(QpErrorTest, SendSucceeds_RnrRetryInfiniteThenRecvPosted) {
  ConnectParams params;
  params.rnr_retry = 7;
  params.min_rnr_timer = 1;
  ASSERT_TRUE(MakePair({}, params));
  ibv_sge sge = local_.Sge(0, 16);
  ASSERT_EQ(PostOne(a_.get(), SendWr(1, &sge, 1)), 0);
  EXPECT_TRUE(NoCompletionWithin(a_.send_cq.get())) << "the SEND completed with no receive posted";
  ibv_sge rsge = remote_.Sge(0, 16);
  ASSERT_EQ(PostRecv(b_.get(), 2, &rsge, 1), 0);
  ibv_wc rwc = {};
  ASSERT_TRUE(PollOneCompletion(b_.recv_cq.get(), &rwc));
  EXPECT_EQ(rwc.status, IBV_WC_SUCCESS) << DescribeWc(rwc);
  ibv_wc swc = {};
  ASSERT_TRUE(PollOneCompletion(a_.send_cq.get(), &swc));
  EXPECT_EQ(swc.status, IBV_WC_SUCCESS) << DescribeWc(swc);
}

// Rule: IBTA Vol 1 9.7.5.2.8: an RNR NAK of the first packet of a multi-packet message makes the
//   requester send the whole message again from its first packet; the responder never delivers a
//   part of it without a receive WQE.
// Checks: with rnr_retry 7 and no receive posted, a SEND of three path MTUs does not complete and
//   b_ stays usable (not ERR); once a receive is posted, the SEND and the receive complete
//   successfully with every byte.
TEST_F(QpErrorTest, SendSucceeds_RnrRetryInfiniteThenRecvPosted_MultiPacket) {
  ConnectParams params;
  params.rnr_retry = 7;
  params.min_rnr_timer = 1;
  params.path_mtu = DefaultMtu();
  ASSERT_TRUE(MakePair({}, params));
  const uint32_t length = 3 * (128u << params.path_mtu);
  ASSERT_LE(length, local_.size());
  ibv_sge sge = local_.Sge(0, length);
  ASSERT_EQ(PostOne(a_.get(), SendWr(1, &sge, 1)), 0);
  EXPECT_TRUE(NoCompletionWithin(a_.send_cq.get())) << "the SEND completed with no receive posted";
  ibv_qp_state b_state = IBV_QPS_RESET;
  ASSERT_TRUE(QueryQpState(b_.get(), &b_state));
  EXPECT_EQ(b_state, IBV_QPS_RTS) << QpStateName(b_state);
  ibv_sge rsge = remote_.Sge(0, length);
  ASSERT_EQ(PostRecv(b_.get(), 2, &rsge, 1), 0);
  ibv_wc rwc = {};
  ASSERT_TRUE(PollOneCompletion(b_.recv_cq.get(), &rwc));
  EXPECT_EQ(rwc.status, IBV_WC_SUCCESS) << DescribeWc(rwc);
  EXPECT_EQ(rwc.byte_len, length) << DescribeWc(rwc);
  EXPECT_EQ(remote_.Bytes(0, length), Pattern(1, length));
  ibv_wc swc = {};
  ASSERT_TRUE(PollOneCompletion(a_.send_cq.get(), &swc));
  EXPECT_EQ(swc.status, IBV_WC_SUCCESS) << DescribeWc(swc);
}

// Rule: ibv_modify_qp(3): timeout is the "Local ack timeout" (4.096 us * 2^timeout) and retry_cnt the "Retry
//   count"; IBTA Vol 1 ch. 9 (transport timer and retries): when no response arrives after retry_cnt retries
//   the requester completes the WR with IBV_WC_RETRY_EXC_ERR. A packet to a QP number that does not exist is
//   silently dropped (IBTA Vol 1 ch. 9, header validation).
// Checks: an RC QP connected to a QP number that does not exist (timeout 14, retry_cnt 1) completes
//   a SEND with IBV_WC_RETRY_EXC_ERR within 5 s.
TEST_F(QpErrorTest, SendFails_DestQpnDoesNotExist) {
  ASSERT_TRUE(MakeRequesterToNobody(14, 1));
  ibv_sge sge = local_.Sge(0, 16);
  ibv_wc wc = {};
  ASSERT_NO_FATAL_FAILURE(PostAndComplete(SendWr(1, &sge, 1), &wc, kRetryWindow));
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR) << DescribeWc(wc);
}

// Rule: IBTA Vol 1 ch. 10 (work completions): a send queue's completions are returned in the order its WRs
//   were posted, error completions included.
// Checks: on an RC QP connected to a QP number that does not exist, a signaled SEND (wr_id 1) waits for its
//   ACK while a SEND with a bad lkey (wr_id 2) is posted after it: the first completion is wr_id 1
//   (IBV_WC_RETRY_EXC_ERR), the second wr_id 2 (a local protection error or, the QP in ERR, a flush).
TEST_F(QpErrorTest, SendCompletionsInOrder_LaterWrFailsLocally) {
  ASSERT_TRUE(MakeRequesterToNobody(14, 1));
  ibv_sge sge = local_.Sge(0, 16);
  ASSERT_EQ(PostOne(a_.get(), SendWr(1, &sge, 1)), 0);
  ibv_sge bad = local_.Sge(0, 16);
  bad.lkey = BadKey(bad.lkey);
  ASSERT_EQ(PostOne(a_.get(), SendWr(2, &bad, 1)), 0);
  std::vector<ibv_wc> wcs;
  ASSERT_TRUE(PollCompletions(a_.send_cq.get(), 2, &wcs, kRetryWindow));
  EXPECT_EQ(wcs[0].wr_id, 1u) << DescribeWcs(wcs);
  EXPECT_EQ(wcs[0].status, IBV_WC_RETRY_EXC_ERR) << DescribeWcs(wcs);
  EXPECT_EQ(wcs[1].wr_id, 2u) << DescribeWcs(wcs);
  EXPECT_THAT(wcs[1].status, testing::AnyOf(IBV_WC_LOC_PROT_ERR, IBV_WC_WR_FLUSH_ERR)) << DescribeWcs(wcs);
}

// Rule: libibverbs (verbs.c) writes qp->state only in ibv_modify_qp and ibv_query_qp, from attr->qp_state
//   when they succeed with IBV_QP_STATE in the mask; ibv_query_qp(3): qp_state is the "Current QP state".
// Checks: after the HCA moves an RC QP to ERR (retries exhausted), qp->state still reads RTS;
//   ibv_query_qp with IBV_QP_STATE returns ERR and qp->state then reads ERR.
TEST_F(QpErrorTest, QpStateFieldKeepsLastModify_HcaMovesQpToErr) {
  ASSERT_TRUE(MakeRequesterToNobody(14, 1));
  ibv_sge sge = local_.Sge(0, 16);
  ibv_wc wc = {};
  ASSERT_NO_FATAL_FAILURE(PostAndComplete(SendWr(1, &sge, 1), &wc, kRetryWindow));
  ASSERT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR) << DescribeWc(wc);
  EXPECT_EQ(a_.get()->state, IBV_QPS_RTS);
  ASSERT_TRUE(QpStateBecomes(a_.get(), IBV_QPS_ERR));
  EXPECT_EQ(a_.get()->state, IBV_QPS_ERR);
}

// Rule: IBTA Vol 1 ch. 9 (Unreliable Connection, responder errors): a UC request that fails the R_Key check
//   is silently dropped, and a dropped message consumes no receive WQE; ibv_post_recv(3): receives are used
//   in the order they were posted.
// Checks: on a UC pair, after an RDMA WRITE with immediate with a bad R_Key, a SEND lands in the first
//   receive posted (wr_id 10), and the second (wr_id 11) is still queued: ERR flushes it.
TEST_F(QpErrorTest, UcRecvNotConsumed_WriteWithImmBadRkey) {
  EndConfig config;
  config.type = IBV_QPT_UC;
  ASSERT_TRUE(MakePair(config));
  ibv_sge rsges[2] = {remote_.Sge(0, 64), remote_.Sge(64, 64)};
  ASSERT_EQ(PostRecv(b_.get(), 10, &rsges[0], 1), 0);
  ASSERT_EQ(PostRecv(b_.get(), 11, &rsges[1], 1), 0);
  ibv_send_wr write = Write(1, BadKey(remote_.rkey()));
  write.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  ASSERT_EQ(PostOne(a_.get(), write), 0);
  ibv_sge sge = local_.Sge(0, 16);
  ASSERT_EQ(PostOne(a_.get(), SendWr(2, &sge, 1)), 0);
  std::vector<ibv_wc> sent;
  ASSERT_TRUE(PollCompletions(a_.send_cq.get(), 2, &sent));
  ibv_wc wc = {};
  ASSERT_TRUE(PollOneCompletion(b_.recv_cq.get(), &wc));
  EXPECT_EQ(wc.wr_id, 10u) << DescribeWc(wc);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
  EXPECT_EQ(wc.opcode, IBV_WC_RECV) << DescribeWc(wc);
  ASSERT_TRUE(ModifyToState(b_.get(), IBV_QPS_ERR));
  ASSERT_TRUE(PollOneCompletion(b_.recv_cq.get(), &wc));
  EXPECT_EQ(wc.wr_id, 11u) << DescribeWc(wc);
  EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR) << DescribeWc(wc);
}

// Rule: ibv_modify_qp(3): retry_cnt is the "Retry count"; IBTA Vol 1 ch. 9 (PSN sequence errors): a responder
//   answers a request beyond its expected PSN with a NAK (PSN sequence error), the requester retries, and each
//   retry counts against retry_cnt; when they run out the requester completes the WR with IBV_WC_RETRY_EXC_ERR.
// Checks: with a_'s sq_psn 0x1000 ahead of b's rq_psn (retry_cnt 1), ibv_post_send of a SEND returns and the
//   SEND completes with IBV_WC_RETRY_EXC_ERR within 5 s.
TEST_F(QpErrorTest, SendFails_PsnNeverExpected) {
  ASSERT_TRUE(CreateEnd(&a_));
  ASSERT_TRUE(CreateEnd(&b_));
  ConnectParams params;
  params.timeout = 14;
  params.retry_cnt = 1;
  params.path_mtu = DefaultMtu();
  ConnectParams a_params = params;
  a_params.sq_psn = 0x1000;  // b expects 0 (Connect would make them agree)
  ASSERT_TRUE(BringUp(a_.get(), port(), b_.qp_num(), LocalAddress(), a_params));
  ASSERT_TRUE(BringUp(b_.get(), port(), a_.qp_num(), LocalAddress(), params));
  ibv_sge rsge = remote_.Sge(0, 64);
  ASSERT_EQ(PostRecv(b_.get(), 2, &rsge, 1), 0);
  ibv_sge sge = local_.Sge(0, 16);
  ibv_wc wc = {};
  ASSERT_NO_FATAL_FAILURE(PostAndComplete(SendWr(1, &sge, 1), &wc, kRetryWindow));
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR) << DescribeWc(wc);
}

// Rule: IBTA Vol 1 ch. 9 (transport timer and retries): a requester whose peer no longer answers exhausts its
//   retries and completes the WR with IBV_WC_RETRY_EXC_ERR.
// Checks: after the connected peer QP is destroyed, a SEND (timeout 14, retry_cnt 1) completes with
//   IBV_WC_RETRY_EXC_ERR within 5 s.
TEST_F(QpErrorTest, SendFails_PeerDestroyed) {
  ConnectParams a_params;
  a_params.timeout = 14;
  a_params.retry_cnt = 1;
  ASSERT_TRUE(MakePair({}, {}, a_params, {}));
  b_.reset();
  ibv_sge sge = local_.Sge(0, 16);
  ibv_wc wc = {};
  ASSERT_NO_FATAL_FAILURE(PostAndComplete(SendWr(1, &sge, 1), &wc, kRetryWindow));
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR) << DescribeWc(wc);
}

// Rule: ibv_close_device(3): "ibv_close_device() does not release all the resources allocated using
//   context context"; what its QPs do afterwards is left open. On rxe 6.1 they keep answering (a
//   SEND to one completes with success: the QP's queues are mmapped from the command file, so
//   closing the fd does not release the file and uverbs_destroy_ufile_hw does not run). The
//   simulator takes a closed context's QPs off the wire instead, so nothing reaches the freed context.
// Checks: (simulator only) after the context that owns b (with a receive posted) is closed without
//   destroying b, a SEND from a_ (timeout 14, retry_cnt 1) completes with IBV_WC_RETRY_EXC_ERR.
TEST_F(QpErrorTest, SendFails_PeerContextClosedWithQpAlive) {
  SKIP_IF(!Sim()) << "(what a closed context's QPs do is the provider's choice; rxe keeps them answering)";
  // What ibv_close_device leaves to the program stays allocated and reachable
  // (a leak checker runs after static destructors: the list itself is never freed).
  static auto* left_to_the_program = new std::vector<void*>();
  static uint64_t recv_buf[8];
  ibv_context* doomed = OpenAnotherContext().release();
  ASSERT_NE(doomed, nullptr);
  ibv_pd* b_pd = ibv_alloc_pd(doomed);
  ASSERT_NE(b_pd, nullptr) << ErrnoName(errno);
  const int access = IBV_ACCESS_LOCAL_WRITE;  // an int: ibv_reg_mr's macro masks it with another enum
  ibv_mr* b_mr = ibv_reg_mr(b_pd, recv_buf, sizeof recv_buf, access);
  ASSERT_NE(b_mr, nullptr) << ErrnoName(errno);
  ibv_cq* b_cq = ibv_create_cq(doomed, 4, nullptr, nullptr, 0);
  ASSERT_NE(b_cq, nullptr) << ErrnoName(errno);
  ibv_qp_init_attr init = MakeInitAttr(IBV_QPT_RC, b_cq, b_cq);
  ibv_qp* b = ibv_create_qp(b_pd, &init);
  ASSERT_NE(b, nullptr) << ErrnoName(errno);
  left_to_the_program->insert(left_to_the_program->end(), {b_pd, b_mr, b_cq, b});
  ASSERT_TRUE(CreateEnd(&a_));
  ConnectParams params;
  params.timeout = 14;
  params.retry_cnt = 1;
  params.path_mtu = DefaultMtu();
  ASSERT_TRUE(BringUp(a_.get(), port(), b->qp_num, LocalAddress(), params));
  ASSERT_TRUE(BringUp(b, port(), a_.qp_num(), LocalAddress(), params));
  ibv_sge rsge = {reinterpret_cast<uintptr_t>(recv_buf), sizeof recv_buf, b_mr->lkey};
  ASSERT_EQ(PostRecv(b, 2, &rsge, 1), 0);
  ASSERT_EQ(ibv_close_device(doomed), 0);
  ibv_sge sge = local_.Sge(0, 16);
  ibv_wc wc = {};
  ASSERT_NO_FATAL_FAILURE(PostAndComplete(SendWr(1, &sge, 1), &wc, kRetryWindow));
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR) << DescribeWc(wc);
}

// Rule: IBTA Vol 1 ch. 10 (work completion errors) / ch. 11 (completion errors): an RC requester that
//   completes a WR with a transport error (retries exhausted) enters the Error state.
// Checks: after IBV_WC_RETRY_EXC_ERR (no such destination QP), the requester reads ERR.
TEST_F(QpErrorTest, RequesterEntersErr_RetryExceeded) {
  ASSERT_TRUE(MakeRequesterToNobody(14, 1));
  ibv_sge sge = local_.Sge(0, 16);
  ibv_wc wc = {};
  ASSERT_NO_FATAL_FAILURE(PostAndComplete(SendWr(1, &sge, 1), &wc, kRetryWindow));
  ASSERT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR) << DescribeWc(wc);
  EXPECT_TRUE(QpStateBecomes(a_.get(), IBV_QPS_ERR));
}

// Rule: IBTA Vol 1 ch. 10 (work completion errors) / ch. 11 (Post Send Request): a send WR that completes in
//   error always generates a work completion, whether or not it was signaled (IBV_SEND_SIGNALED only controls
//   successful ones).
// Checks: on a QP with sq_sig_all = 0, an unsignaled WRITE with a bad R_Key completes with
//   IBV_WC_REM_ACCESS_ERR and its wr_id.
TEST_F(QpErrorTest, UnsignaledWrCompletes_OnError) {
  ASSERT_TRUE(MakePair());
  ibv_sge sge = local_.Sge(0, 64);
  ASSERT_EQ(PostOne(a_.get(), RdmaWr(5, IBV_WR_RDMA_WRITE, &sge, 1, remote_.addr(), BadKey(remote_.rkey()), 0)),
            0);
  ibv_wc wc = {};
  ASSERT_TRUE(PollOneCompletion(a_.send_cq.get(), &wc)) << "the failed unsignaled WR gave no completion";
  EXPECT_EQ(wc.wr_id, 5u);
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR) << DescribeWc(wc);
}

// Rule: ibv_reg_mr(3): "IBV_ACCESS_LOCAL_WRITE: Enable Local Write Access" - without it the HCA may not write
//   the MR; IBTA Vol 1 ch. 10 (memory protection): an RDMA READ whose scatter list names such an MR is a
//   Local Protection Error.
// Checks: a READ into an MR registered without IBV_ACCESS_LOCAL_WRITE completes with
//   IBV_WC_LOC_PROT_ERR.
TEST_F(QpErrorTest, ReadFails_LocalMrWithoutLocalWrite) {
  ASSERT_TRUE(MakePair());
  Buffer read_only;
  ASSERT_TRUE(read_only.Register(pd(), 4096, 0));
  ibv_sge sge = read_only.Sge(0, 64);
  ibv_wc wc = {};
  ASSERT_NO_FATAL_FAILURE(PostAndComplete(RdmaWr(1, IBV_WR_RDMA_READ, &sge, 1, remote_.addr(), remote_.rkey()), &wc));
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(wc.status, IBV_WC_LOC_PROT_ERR) << DescribeWc(wc);
}

// Rule: IBTA Vol 1 ch. 10 (Reset state) and ch. 11 (Modify Queue Pair): moving a QP to Reset removes every WR
//   from its queues without generating completions.
// Checks: three receives posted on an RC QP in RTS give no completion within 200 ms after the QP
//   is moved to RESET.
TEST_F(QpErrorTest, ModifyToResetCompletesNothing) {
  ASSERT_TRUE(MakePair());
  ibv_sge sges[3] = {local_.Sge(0, 64), local_.Sge(64, 64), local_.Sge(128, 64)};
  for (int i = 0; i < 3; ++i) ASSERT_EQ(PostRecv(b_.get(), 10 + static_cast<uint64_t>(i), &sges[i], 1), 0);
  ASSERT_TRUE(ModifyToState(b_.get(), IBV_QPS_RESET));
  EXPECT_TRUE(NoCompletionWithin(b_.recv_cq.get())) << "RESET completed a receive";
}

// Rule: IBTA Vol 1 9.7.5.2.8: after an RNR NAK the requester resends from the NAKed message
//   (go-back-N), so the messages of an RC QP are still delivered and completed in order.
// Checks: with rnr_retry 7, two SENDs posted before any receive exists both complete successfully
//   once two receives are posted; the receives complete in order, each holding its own message.
TEST_F(QpErrorTest, SendsCompleteInOrder_AfterRnrRetries) {
  ConnectParams params;
  params.rnr_retry = 7;
  params.min_rnr_timer = 1;
  ASSERT_TRUE(MakePair({}, params));
  ibv_sge sges[2] = {local_.Sge(0, 32), local_.Sge(32, 32)};
  ASSERT_EQ(PostOne(a_.get(), SendWr(1, &sges[0], 1)), 0);
  ASSERT_EQ(PostOne(a_.get(), SendWr(2, &sges[1], 1)), 0);
  EXPECT_TRUE(NoCompletionWithin(a_.send_cq.get(), kQuietWindow)) << "a SEND completed with no receive posted";
  ibv_sge rsges[2] = {remote_.Sge(0, 32), remote_.Sge(1024, 32)};
  ASSERT_EQ(PostRecv(b_.get(), 10, &rsges[0], 1), 0);
  ASSERT_EQ(PostRecv(b_.get(), 11, &rsges[1], 1), 0);
  std::vector<ibv_wc> rwcs;
  ASSERT_TRUE(PollCompletions(b_.recv_cq.get(), 2, &rwcs));
  EXPECT_EQ(rwcs[0].wr_id, 10u) << DescribeWcs(rwcs);
  EXPECT_EQ(rwcs[1].wr_id, 11u) << DescribeWcs(rwcs);
  EXPECT_EQ(remote_.Bytes(0, 32), local_.Bytes(0, 32));
  EXPECT_EQ(remote_.Bytes(1024, 32), local_.Bytes(32, 32));
  std::vector<ibv_wc> swcs;
  ASSERT_TRUE(PollCompletions(a_.send_cq.get(), 2, &swcs));
  EXPECT_EQ(swcs[0].wr_id, 1u) << DescribeWcs(swcs);
  EXPECT_EQ(swcs[0].status, IBV_WC_SUCCESS) << DescribeWcs(swcs);
  EXPECT_EQ(swcs[1].wr_id, 2u) << DescribeWcs(swcs);
  EXPECT_EQ(swcs[1].status, IBV_WC_SUCCESS) << DescribeWcs(swcs);
}

// Rule: ibv_poll_cq(3): "If the completion status is other than IBV_WC_SUCCESS, only the
//   following attributes are valid: wr_id, status, qp_num, and vendor_err." What the others hold is
//   the backend's choice (ErrorCompletionFieldsZeroed): a program must not read them.
// Checks: on a backend that zeroes them, a flushed receive read into a wc filled with 0xff has
//   byte_len, imm_data, wc_flags, src_qp, pkey_index, slid, sl and dlid_path_bits all 0 (opcode
//   is left out: providers commonly keep the receive opcode on flushed receives).
TEST_F(QpErrorTest, FlushedCompletionInvalidFieldsZeroed) {
  SKIP_IF(!Backend().Answer("ErrorCompletionFieldsZeroed", false)) << "(the backend leaves them as they are)";
  ASSERT_TRUE(MakePair());
  ibv_sge sge = local_.Sge(0, 64);
  ASSERT_EQ(PostRecv(b_.get(), 5, &sge, 1), 0);
  ASSERT_TRUE(ModifyToState(b_.get(), IBV_QPS_ERR));
  ibv_wc wc;
  std::memset(&wc, 0xff, sizeof wc);
  const auto deadline = std::chrono::steady_clock::now() + kReturnWindow;
  int n = 0;
  while (n == 0 && std::chrono::steady_clock::now() < deadline) n = ibv_poll_cq(b_.recv_cq.get(), 1, &wc);
  ASSERT_EQ(n, 1) << "no flushed completion";
  ASSERT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR) << DescribeWc(wc);
  EXPECT_EQ(wc.byte_len, 0u) << DescribeWc(wc);
  EXPECT_EQ(wc.imm_data, 0u);
  EXPECT_EQ(wc.wc_flags, 0u);
  EXPECT_EQ(wc.src_qp, 0u);
  EXPECT_EQ(wc.pkey_index, 0);
  EXPECT_EQ(wc.slid, 0);
  EXPECT_EQ(wc.sl, 0);
  EXPECT_EQ(wc.dlid_path_bits, 0);
}

// Rule: ibv_modify_qp(3) leaves open what becomes of completions a QP already put in its CQs when it
//   is moved to RESET; the backend's choice is ResetDiscardsCompletions. mlx4/mlx5 remove them
//   (providers/mlx5/verbs.c: mlx5_modify_qp calls mlx5_cq_clean for IBV_QPS_RESET), and rdma-core's
//   own tests rely on it (tests/test_mr.py: test_mr_rereg_pd restates QPs through RESET and polls
//   again); rxe leaves them to be polled.
// Checks: b's receive is flushed by ERR (a completion event on its armed CQ says it is there), b
//   goes to RESET, and ibv_poll_cq then finds no completion on a backend that discards, or exactly
//   that flushed receive (wr_id 9, IBV_WC_WR_FLUSH_ERR) on one that keeps.
TEST_F(QpErrorTest, UnpolledCompletionsAtResetFollowBackend) {
  const bool discards = Backend().Answer("ResetDiscardsCompletions", true);
  channel_.reset(ibv_create_comp_channel(context()));
  ASSERT_NE(channel_, nullptr) << ErrnoName(errno);
  EndConfig b_config;
  b_config.recv_channel = channel_.get();
  ASSERT_TRUE(MakePair(EndConfig{}, b_config, ConnectParams{}, ConnectParams{}));
  ASSERT_EQ(ibv_req_notify_cq(b_.recv_cq.get(), 0), 0);
  ibv_sge sge = local_.Sge(0, 64);
  ASSERT_EQ(PostRecv(b_.get(), 9, &sge, 1), 0);
  ASSERT_TRUE(ModifyToState(b_.get(), IBV_QPS_ERR));
  ibv_cq* cq = nullptr;
  void* cq_context = nullptr;
  ASSERT_TRUE(GetCqEventWithin(channel_.get(), &cq, &cq_context, kReturnWindow)) << "the flushed receive never came";
  ibv_ack_cq_events(cq, 1);
  ASSERT_TRUE(ModifyToState(b_.get(), IBV_QPS_RESET));
  ibv_wc wc[2] = {};
  const int n = ibv_poll_cq(b_.recv_cq.get(), 2, wc);
  if (discards) {
    EXPECT_EQ(n, 0) << "the flushed receive is still in the CQ after RESET: " << DescribeWc(wc[0]);
  } else {
    ASSERT_EQ(n, 1) << "the flushed receive is gone from the CQ after RESET";
    EXPECT_EQ(wc[0].wr_id, 9u) << DescribeWc(wc[0]);
    EXPECT_EQ(wc[0].status, IBV_WC_WR_FLUSH_ERR) << DescribeWc(wc[0]);
  }
}

// Rule: ibv_query_qp(3) returns the QP's current attributes; sq_psn and rq_psn are where the send and
//   receive queues are now: rxe_qp_to_attr reports the requester's and responder's next PSN
//   (qp->req.psn, qp->resp.psn), mlx5 the QP context's next_send_psn and next_rcv_psn.
// Checks: an RC pair with every PSN starting at 100: after 3 one-packet SENDs a_ -> b_ completed,
//   ibv_query_qp reports sq_psn 103 on a_ and rq_psn 103 on b_.
TEST_F(QpErrorTest, QueryReportsTheNextPsns) {
  ConnectParams params;
  params.sq_psn = params.rq_psn = 100;
  ASSERT_TRUE(MakePair(EndConfig{}, EndConfig{}, params, params));
  for (uint64_t i = 0; i < 3; ++i) {
    ibv_sge rsge = remote_.Sge(0, 64);
    ASSERT_EQ(PostRecv(b_.get(), i, &rsge, 1), 0);
    ibv_sge sge = local_.Sge(0, 64);
    ASSERT_EQ(PostOne(a_.get(), SendWr(i, &sge, 1)), 0);
    ibv_wc wc = {};
    ASSERT_TRUE(PollOneCompletion(a_.send_cq.get(), &wc, kReturnWindow)) << "SEND " << i << " did not complete";
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
    ASSERT_TRUE(PollOneCompletion(b_.recv_cq.get(), &wc, kReturnWindow)) << "receive " << i << " did not complete";
  }
  ibv_qp_attr attr = {};
  ibv_qp_init_attr init = {};
  ASSERT_EQ(ibv_query_qp(a_.get(), &attr, IBV_QP_SQ_PSN, &init), 0);
  EXPECT_EQ(attr.sq_psn, 103u);
  ASSERT_EQ(ibv_query_qp(b_.get(), &attr, IBV_QP_RQ_PSN, &init), 0);
  EXPECT_EQ(attr.rq_psn, 103u);
}

// Rule: ibv_poll_cq(3): "A negative value is returned on an error"; num_entries is "the maximum number
//   of completions to return". The providers poll up to num_entries in a loop that a count of 0 or
//   less never enters, and report no error for it (providers/rxe/rxe.c rxe_poll_cq,
//   providers/mlx5/cq.c poll_cq: for (npolled = 0; npolled < ne; ...)): a program that computes
//   its count and reaches 0 or less sees an empty poll, not a CQ error.
// Checks: with a completion waiting (a flushed receive), ibv_poll_cq with num_entries 0 and -1
//   returns 0 and takes nothing: a poll for 1 then returns that completion.
TEST_F(QpErrorTest, PollForZeroOrFewerEntriesReturnsZero) {
  ASSERT_TRUE(MakePair());
  ibv_sge sge = local_.Sge(0, 64);
  ASSERT_EQ(PostRecv(b_.get(), 12, &sge, 1), 0);
  ASSERT_TRUE(ModifyToState(b_.get(), IBV_QPS_ERR));
  ibv_wc wc = {};
  EXPECT_EQ(ibv_poll_cq(b_.recv_cq.get(), 0, &wc), 0);
  EXPECT_EQ(ibv_poll_cq(b_.recv_cq.get(), -1, &wc), 0) << "a negative count is an error here";
  ASSERT_TRUE(PollOneCompletion(b_.recv_cq.get(), &wc, kReturnWindow)) << "the flushed receive was lost";
  EXPECT_EQ(wc.wr_id, 12u) << DescribeWc(wc);
}

// Rule: ibv_destroy_qp(3) leaves open what becomes of completions the QP already put in a CQ that
//   outlives it; the backend's choice is DestroyQpDiscardsCompletions. mlx5 removes them
//   (providers/mlx5/verbs.c: mlx5_destroy_qp calls __mlx5_cq_clean on its receive and send CQs), as
//   it does at RESET; rxe leaves them to be polled.
// Checks: a second RC QP, with b_'s armed receive CQ as its send and receive CQ, goes to INIT, takes
//   a receive and goes to ERR (a completion event says the flush is in the CQ), then is destroyed;
//   ibv_poll_cq then finds no completion on a backend that discards, or exactly that flushed
//   receive (wr_id 11, IBV_WC_WR_FLUSH_ERR, the destroyed QP's number) on one that keeps.
TEST_F(QpErrorTest, UnpolledCompletionsAtDestroyFollowBackend) {
  const bool discards = Backend().Answer("DestroyQpDiscardsCompletions", true);
  channel_.reset(ibv_create_comp_channel(context()));
  ASSERT_NE(channel_, nullptr) << ErrnoName(errno);
  EndConfig b_config;
  b_config.recv_channel = channel_.get();
  ASSERT_TRUE(MakePair(EndConfig{}, b_config, ConnectParams{}, ConnectParams{}));
  ibv_qp_init_attr init = MakeInitAttr(IBV_QPT_RC, b_.recv_cq.get(), b_.recv_cq.get());
  ibv_qp* doomed = ibv_create_qp(pd(), &init);
  ASSERT_NE(doomed, nullptr) << ErrnoName(errno);
  const uint32_t doomed_qpn = doomed->qp_num;
  QpPtr doomed_owner(doomed);
  ASSERT_TRUE(ModifyToInit(doomed, port(), ConnectParams{}));
  ASSERT_EQ(ibv_req_notify_cq(b_.recv_cq.get(), 0), 0);
  ibv_sge sge = local_.Sge(0, 64);
  ASSERT_EQ(PostRecv(doomed, 11, &sge, 1), 0);
  ASSERT_TRUE(ModifyToState(doomed, IBV_QPS_ERR));
  ibv_cq* cq = nullptr;
  void* cq_context = nullptr;
  ASSERT_TRUE(GetCqEventWithin(channel_.get(), &cq, &cq_context, kReturnWindow)) << "the flushed receive never came";
  ibv_ack_cq_events(cq, 1);
  ASSERT_EQ(ibv_destroy_qp(doomed_owner.release()), 0) << ErrnoName(errno);
  ibv_wc wc[2] = {};
  const int n = ibv_poll_cq(b_.recv_cq.get(), 2, wc);
  if (discards) {
    EXPECT_EQ(n, 0) << "the destroyed QP's flushed receive is still in the CQ: " << DescribeWc(wc[0]);
  } else {
    ASSERT_EQ(n, 1) << "the destroyed QP's flushed receive is gone from the CQ";
    EXPECT_EQ(wc[0].wr_id, 11u) << DescribeWc(wc[0]);
    EXPECT_EQ(wc[0].status, IBV_WC_WR_FLUSH_ERR) << DescribeWc(wc[0]);
    EXPECT_EQ(wc[0].qp_num, doomed_qpn) << DescribeWc(wc[0]);
  }
}

// Rule: ibv_rereg_mr(3): "IBV_REREG_MR_CHANGE_ACCESS Change access flags"; the MR's keys after the
//   call are those in the struct ibv_mr ("Conceptually, this call performs the functions deregister
//   memory region followed by register memory region. Where possible, resources are reused"). Whether
//   the keys stay is the backend's choice (ReregMrKeepsKeys): mlx5 keeps them where it can, rxe keeps
//   them (drivers/infiniband/sw/rxe/rxe_mr.c: rxe_rereg_user_mr changes only PD and access), and
//   rdma-core's tests/test_mr.py writes with an rkey exchanged before the rereg.
// Checks: an MR registered with LOCAL_WRITE only, re-registered with LOCAL_WRITE | REMOTE_WRITE, takes
//   a 64-byte WRITE from a_ through the rkey it now reports; on a backend that keeps keys, lkey and
//   rkey are those from before.
TEST_F(QpErrorTest, WriteLandsAfterReregAddsRemoteWrite) {
  SKIP_IF(!Backend().Answer("ReregMrSupported", true)) << "(the provider has no rereg_mr)";
  ASSERT_TRUE(MakePair());
  Buffer target;
  ASSERT_TRUE(target.Register(pd(), 4096, IBV_ACCESS_LOCAL_WRITE));
  ibv_mr* mr = target.mr();
  const uint32_t lkey = mr->lkey;
  const uint32_t rkey = mr->rkey;
  ASSERT_EQ(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0,
                         IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE),
            0)
      << ErrnoName(errno);
  if (Backend().Answer("ReregMrKeepsKeys", false)) {
    EXPECT_EQ(mr->lkey, lkey);
    EXPECT_EQ(mr->rkey, rkey);
  }
  sge_ = local_.Sge(0, 64);
  ibv_wc wc = {};
  ASSERT_NO_FATAL_FAILURE(PostAndComplete(RdmaWr(1, IBV_WR_RDMA_WRITE, &sge_, 1, target.addr(128), mr->rkey), &wc));
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
  EXPECT_EQ(target.Bytes(128, 64), local_.Bytes(0, 64));
}

}  // namespace
}  // namespace conformance
