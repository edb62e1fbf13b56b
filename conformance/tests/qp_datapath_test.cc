// The data path between two QPs on the fixture's port (loopback): SEND,
// RDMA WRITE / READ, atomics, immediate data, gather/scatter, segmentation,
// signaling, inline data, the ibv_wr_* API, UC, UD with address handles,
// solicited events; and one RC connection across two simulated devices.

#include <arpa/inet.h>
#include <netinet/ip.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "conformance/lib/backend_profile.h"
#include "conformance/lib/blocking_call.h"
#include "conformance/lib/device_opener.h"
#include "conformance/lib/errno_capture.h"
#include "conformance/lib/event_wait.h"
#include "conformance/lib/qp_pair.h"
#include "conformance/lib/skip_if.h"
#include "conformance/lib/timeouts.h"
#include "conformance/lib/ud_constants.h"
#include "conformance/lib/verbs_matchers.h"
#include "conformance/lib/watchdog.h"

namespace conformance {
namespace {

constexpr size_t kBufSize = 16384;

uint64_t Load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

void Store64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, sizeof v); }

class QpDatapathTest : public QpTest {
 protected:
  void SetUp() override {
    QpTest::SetUp();
    if (HasFatalFailure() || IsSkipped()) return;
    ASSERT_TRUE(src_.Register(pd(), kBufSize));
    ASSERT_TRUE(dst_.Register(pd(), kBufSize));
    src_.FillPattern(1);
  }

  // Posts a receive of dst_[0, length) on b_ and a signaled
  // SEND of src_[0, length) from a_, and waits for both completions.
  void SendAndReceive(uint32_t length, ibv_wc* send_wc, ibv_wc* recv_wc, unsigned extra_flags = 0,
                      ibv_wr_opcode opcode = IBV_WR_SEND, uint32_t imm = 0) {
    SendAndReceiveInto(dst_.Sge(0, length), length, send_wc, recv_wc, extra_flags, opcode, imm);
  }
  // The same with the receive's buffer given.
  void SendAndReceiveInto(ibv_sge rsge, uint32_t length, ibv_wc* send_wc, ibv_wc* recv_wc, unsigned extra_flags = 0,
                          ibv_wr_opcode opcode = IBV_WR_SEND, uint32_t imm = 0) {
    ASSERT_EQ(PostRecv(b_.get(), 100, &rsge, 1), 0);
    ibv_sge ssge = src_.Sge(0, length);
    ibv_send_wr wr = SendWr(200, &ssge, 1, IBV_SEND_SIGNALED | extra_flags, opcode);
    wr.imm_data = imm;
    ASSERT_EQ(PostOne(a_.get(), wr), 0);
    ASSERT_TRUE(PollOneCompletion(b_.recv_cq.get(), recv_wc));
    ASSERT_TRUE(PollOneCompletion(a_.send_cq.get(), send_wc));
  }

  // A QP made with ibv_create_qp_ex and IBV_QP_INIT_ATTR_SEND_OPS_FLAGS.
  testing::AssertionResult CreateQpExEnd(QpEnd* end, uint64_t send_ops, const QpCaps& caps = {}) {
    errno = 0;
    end->send_cq.reset(ibv_create_cq(context(), std::max(64, static_cast<int>(caps.max_send_wr)), nullptr, nullptr, 0));
    end->recv_cq.reset(ibv_create_cq(context(), 64, nullptr, nullptr, 0));
    if (!end->send_cq || !end->recv_cq) return testing::AssertionFailure() << "ibv_create_cq: " << ErrnoName(errno);
    ibv_qp_init_attr_ex attr = {};
    attr.qp_type = IBV_QPT_RC;
    attr.send_cq = end->send_cq.get();
    attr.recv_cq = end->recv_cq.get();
    attr.cap.max_send_wr = caps.max_send_wr;
    attr.cap.max_recv_wr = caps.max_recv_wr;
    attr.cap.max_send_sge = caps.max_send_sge;
    attr.cap.max_recv_sge = caps.max_recv_sge;
    attr.cap.max_inline_data = caps.max_inline_data;
    attr.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    attr.pd = pd();
    attr.send_ops_flags = send_ops;
    end->qp.reset(ibv_create_qp_ex(context(), &attr));
    if (!end->qp) return testing::AssertionFailure() << "ibv_create_qp_ex: " << ErrnoName(errno);
    return testing::AssertionSuccess();
  }

  // A UD pair a_ -> b_ and an address handle for b_'s port.
  void MakeUdPair(bool grh) {
    EndConfig config;
    config.type = IBV_QPT_UD;
    ASSERT_TRUE(MakePair(config));
    ibv_ah_attr attr = LocalAddress(grh);
    errno = 0;
    ah_.reset(ibv_create_ah(pd(), &attr));
    ASSERT_NE(ah_, nullptr) << "ibv_create_ah: " << ErrnoName(errno);
  }

  // Posts a receive on b_ (wr_id 1: the GRH area and 64 bytes of dst_), sends 64 bytes of src_ from
  // a_ through ah_ (wr_id 2) and waits for the receive's completion, which must be a success.
  void SendOneDatagram(ibv_wc* rwc) {
    ibv_sge rsge = dst_.Sge(0, kGrhBytes + 64);
    ASSERT_EQ(PostRecv(b_.get(), 1, &rsge, 1), 0);
    ibv_sge sge = src_.Sge(0, 64);
    ASSERT_EQ(PostOne(a_.get(), UdSendWr(2, &sge, 1, ah_.get(), b_.qp_num())), 0);
    ASSERT_TRUE(PollOneCompletion(b_.recv_cq.get(), rwc));
    ASSERT_EQ(rwc->status, IBV_WC_SUCCESS) << DescribeWc(*rwc);
  }

  Buffer src_;
  Buffer dst_;
  AhPtr ah_;
};

// Rule: ibv_post_send(3) / ibv_post_recv(3): a SEND's gather list is delivered into the buffers
//   of the next receive WR at the destination QP (IBTA Vol 1 ch. 9, SEND operation).
// Checks: 256 bytes sent from a_ arrive unchanged in b_'s receive buffer.
TEST_F(QpDatapathTest, SendDeliversData) {
  ASSERT_TRUE(MakePair());
  ibv_wc swc = {};
  ibv_wc rwc = {};
  ASSERT_NO_FATAL_FAILURE(SendAndReceive(256, &swc, &rwc));
  ASSERT_EQ(rwc.status, IBV_WC_SUCCESS) << DescribeWc(rwc);
  EXPECT_EQ(dst_.Bytes(0, 256), src_.Bytes(0, 256));
}

// Rule: ibv_poll_cq(3): wr_id is the "ID of the completed Work Request (WR)", opcode the "Operation
//   type specified in the completed WR", qp_num the "Local QP number of completed WR".
// Checks: the sender's completion has status SUCCESS, opcode IBV_WC_SEND, the posted wr_id and
//   qp_num == the sending QP.
TEST_F(QpDatapathTest, SendCompletionReportsFields) {
  ASSERT_TRUE(MakePair());
  ibv_wc swc = {};
  ibv_wc rwc = {};
  ASSERT_NO_FATAL_FAILURE(SendAndReceive(64, &swc, &rwc));
  EXPECT_EQ(swc.status, IBV_WC_SUCCESS) << DescribeWc(swc);
  EXPECT_EQ(swc.opcode, IBV_WC_SEND);
  EXPECT_EQ(swc.wr_id, 200u);
  EXPECT_EQ(swc.qp_num, a_.qp_num());
}

// Rule: ibv_poll_cq(3): byte_len is the "Number of bytes transferred"; IBV_WC_WITH_IMM means
//   "Immediate data value is valid"; qp_num is the "Local QP number of completed WR".
// Checks: the receiver's completion has status SUCCESS, opcode IBV_WC_RECV, byte_len 100, the
//   receive's wr_id, qp_num == the receiving QP and no IBV_WC_WITH_IMM.
TEST_F(QpDatapathTest, RecvCompletionReportsFields) {
  ASSERT_TRUE(MakePair());
  ibv_wc swc = {};
  ibv_wc rwc = {};
  ASSERT_NO_FATAL_FAILURE(SendAndReceive(100, &swc, &rwc));
  EXPECT_EQ(rwc.status, IBV_WC_SUCCESS) << DescribeWc(rwc);
  EXPECT_EQ(rwc.opcode, IBV_WC_RECV);
  EXPECT_EQ(rwc.byte_len, 100u);
  EXPECT_EQ(rwc.wr_id, 100u);
  EXPECT_EQ(rwc.qp_num, b_.qp_num());
  EXPECT_EQ(rwc.wc_flags & IBV_WC_WITH_IMM, 0u);
}

// Rule: ibv_poll_cq(3): IBV_WC_GRH means "GRH is present (valid only for UD QPs)". What a
//   provider puts in that bit for an RC receive is its choice (RcRecvCompletionHasGrhFlag: rxe
//   sets it in every successful receive completion of a user CQ, drivers/infiniband/sw/rxe/
//   rxe_resp.c: do_complete).
// Checks: an RC receive completion has IBV_WC_GRH exactly when the backend answers that it sets it.
TEST_F(QpDatapathTest, RcRecvCompletionGrhFlagFollowsBackend) {
  ASSERT_TRUE(MakePair());
  ibv_wc swc = {};
  ibv_wc rwc = {};
  ASSERT_NO_FATAL_FAILURE(SendAndReceive(100, &swc, &rwc));
  ASSERT_EQ(rwc.status, IBV_WC_SUCCESS) << DescribeWc(rwc);
  EXPECT_EQ((rwc.wc_flags & IBV_WC_GRH) != 0, Backend().Answer("RcRecvCompletionHasGrhFlag", false))
      << "wc_flags " << rwc.wc_flags;
}

// Rule: ibv_post_send(3): imm_data is "Immediate data (in network byte order)"; ibv_poll_cq(3):
//   IBV_WC_WITH_IMM "Immediate data value is valid", imm_data "(in network byte order)".
// Checks: a SEND_WITH_IMM completes at the receiver as IBV_WC_RECV with IBV_WC_WITH_IMM and the
//   imm_data exactly as posted, and the payload arrives.
TEST_F(QpDatapathTest, SendWithImmDeliversImmData) {
  ASSERT_TRUE(MakePair());
  ibv_wc swc = {};
  ibv_wc rwc = {};
  ASSERT_NO_FATAL_FAILURE(SendAndReceive(32, &swc, &rwc, 0, IBV_WR_SEND_WITH_IMM, htonl(0x12345678)));
  ASSERT_EQ(rwc.status, IBV_WC_SUCCESS) << DescribeWc(rwc);
  EXPECT_EQ(rwc.opcode, IBV_WC_RECV);
  EXPECT_NE(rwc.wc_flags & IBV_WC_WITH_IMM, 0u);
  EXPECT_EQ(rwc.imm_data, htonl(0x12345678));
  EXPECT_EQ(dst_.Bytes(0, 32), src_.Bytes(0, 32));
}

// Rule: ibv_post_send(3): RDMA WRITE writes the gather list to remote_addr in the MR named by rkey
//   (IBTA Vol 1 ch. 9 (RDMA WRITE)); ibv_poll_cq(3): opcode is the operation of the completed WR.
// Checks: a 512-byte WRITE to offset 64 of b_'s MR lands there unchanged, the bytes before it
//   stay untouched, and the requester completes with IBV_WC_RDMA_WRITE.
TEST_F(QpDatapathTest, RdmaWriteLandsData) {
  ASSERT_TRUE(MakePair());
  ibv_sge sge = src_.Sge(0, 512);
  ASSERT_EQ(PostOne(a_.get(), RdmaWr(1, IBV_WR_RDMA_WRITE, &sge, 1, dst_.addr(64), dst_.rkey())), 0);
  ibv_wc wc = {};
  ASSERT_TRUE(PollOneCompletion(a_.send_cq.get(), &wc));
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
  EXPECT_EQ(wc.opcode, IBV_WC_RDMA_WRITE);
  EXPECT_EQ(dst_.Bytes(64, 512), src_.Bytes(0, 512));
  EXPECT_EQ(dst_.Bytes(0, 64), std::vector<uint8_t>(64, 0));
}

// Rule: IBTA Vol 1 ch. 9 (RDMA WRITE): an RDMA WRITE (without immediate) does not consume a receive WQE at
//   the responder and generates no receive completion.
// Checks: with one receive posted on b_, a WRITE completes, b_ gets no completion within 200 ms,
//   and a later SEND is delivered into that same receive (its wr_id).
TEST_F(QpDatapathTest, RdmaWriteConsumesNoRecv) {
  ASSERT_TRUE(MakePair());
  ibv_sge rsge = dst_.Sge(4096, 64);
  ASSERT_EQ(PostRecv(b_.get(), 77, &rsge, 1), 0);
  ibv_sge sge = src_.Sge(0, 64);
  ASSERT_EQ(PostOne(a_.get(), RdmaWr(1, IBV_WR_RDMA_WRITE, &sge, 1, dst_.addr(), dst_.rkey())), 0);
  ibv_wc wc = {};
  ASSERT_TRUE(PollOneCompletion(a_.send_cq.get(), &wc));
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
  EXPECT_TRUE(NoCompletionWithin(b_.recv_cq.get())) << "the WRITE produced a receive completion";
  ASSERT_EQ(PostOne(a_.get(), SendWr(2, &sge, 1)), 0);
  ibv_wc rwc = {};
  ASSERT_TRUE(PollOneCompletion(b_.recv_cq.get(), &rwc));
  EXPECT_EQ(rwc.wr_id, 77u) << "the WRITE used up the receive";
}

// Rule: ibv_wr_post(3): "The _imm version causes the remote side to get a
//   IBV_WC_RECV_RDMA_WITH_IMM containing the 32 bits of immediate data"; IBTA Vol 1 ch. 9 (RDMA WRITE): RDMA
//   WRITE with immediate consumes a receive WQE.
// Checks: a WRITE_WITH_IMM lands its data in b_'s MR and completes the posted receive (its wr_id)
//   with opcode IBV_WC_RECV_RDMA_WITH_IMM, IBV_WC_WITH_IMM and the posted imm_data.
TEST_F(QpDatapathTest, WriteWithImmConsumesRecv) {
  ASSERT_TRUE(MakePair());
  ibv_sge rsge = dst_.Sge(8192, 16);
  ASSERT_EQ(PostRecv(b_.get(), 5, &rsge, 1), 0);
  ibv_sge sge = src_.Sge(0, 128);
  ibv_send_wr wr = RdmaWr(1, IBV_WR_RDMA_WRITE_WITH_IMM, &sge, 1, dst_.addr(), dst_.rkey());
  wr.imm_data = htonl(0xcafe0001);
  ASSERT_EQ(PostOne(a_.get(), wr), 0);
  ibv_wc rwc = {};
  ASSERT_TRUE(PollOneCompletion(b_.recv_cq.get(), &rwc));
  ASSERT_EQ(rwc.status, IBV_WC_SUCCESS) << DescribeWc(rwc);
  EXPECT_EQ(rwc.wr_id, 5u);
  EXPECT_EQ(rwc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_NE(rwc.wc_flags & IBV_WC_WITH_IMM, 0u);
  EXPECT_EQ(rwc.imm_data, htonl(0xcafe0001));
  EXPECT_EQ(dst_.Bytes(0, 128), src_.Bytes(0, 128));
}

// Rule: ibv_poll_cq(3) leaves open what a sender's completion says of an immediate; the providers
//   set IBV_WC_WITH_IMM in the sender's completion of SEND_WITH_IMM and RDMA_WRITE_WITH_IMM too
//   (drivers/infiniband/sw/rxe/rxe_comp.c: make_send_cqe; rdma-core providers/mlx5/cq.c:
//   handle_good_req), so code that tells receives by that bit alone fails on them.
// Checks: the sender's completions of a signaled SEND, SEND_WITH_IMM and RDMA_WRITE_WITH_IMM are
//   IBV_WC_SEND, IBV_WC_SEND and IBV_WC_RDMA_WRITE, and only the two with an immediate have
//   IBV_WC_WITH_IMM.
TEST_F(QpDatapathTest, SenderCompletionOfImmediateHasWithImmFlag) {
  ASSERT_TRUE(MakePair());
  for (uint64_t id = 10; id < 13; ++id) {  // a receive for each of the three
    ibv_sge rsge = dst_.Sge(8192 + (id - 10) * 64, 64);
    ASSERT_EQ(PostRecv(b_.get(), id, &rsge, 1), 0);
  }
  ibv_sge sge = src_.Sge(0, 32);
  ibv_send_wr send = SendWr(1, &sge, 1);
  ASSERT_EQ(PostOne(a_.get(), send), 0);
  ibv_send_wr send_imm = SendWr(2, &sge, 1, IBV_SEND_SIGNALED, IBV_WR_SEND_WITH_IMM);
  send_imm.imm_data = htonl(0xcafe0002);
  ASSERT_EQ(PostOne(a_.get(), send_imm), 0);
  ibv_send_wr write_imm = RdmaWr(3, IBV_WR_RDMA_WRITE_WITH_IMM, &sge, 1, dst_.addr(), dst_.rkey());
  write_imm.imm_data = htonl(0xcafe0003);
  ASSERT_EQ(PostOne(a_.get(), write_imm), 0);
  const ibv_wc_opcode expected_opcode[] = {IBV_WC_SEND, IBV_WC_SEND, IBV_WC_RDMA_WRITE};
  for (uint64_t id = 1; id <= 3; ++id) {
    ibv_wc wc = {};
    ASSERT_TRUE(PollOneCompletion(a_.send_cq.get(), &wc)) << "no completion for wr_id " << id;
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
    ASSERT_EQ(wc.wr_id, id);
    EXPECT_EQ(wc.opcode, expected_opcode[id - 1]) << "wr_id " << id;
    EXPECT_EQ((wc.wc_flags & IBV_WC_WITH_IMM) != 0, id != 1) << "wr_id " << id << ": wc_flags " << wc.wc_flags;
  }
}

// Rule: ibv_post_send(3): RDMA READ reads remote_addr of the MR named by rkey into the local
//   scatter list (IBTA Vol 1 ch. 9 (RDMA READ)); ibv_poll_cq(3): opcode IBV_WC_RDMA_READ.
// Checks: a 512-byte READ of b_'s MR fills a_'s buffer with the remote bytes and completes with
//   IBV_WC_RDMA_READ.
TEST_F(QpDatapathTest, RdmaReadReturnsRemoteData) {
  ASSERT_TRUE(MakePair());
  dst_.FillPattern(9);
  ibv_sge sge = src_.Sge(1024, 512);
  ASSERT_EQ(PostOne(a_.get(), RdmaWr(1, IBV_WR_RDMA_READ, &sge, 1, dst_.addr(256), dst_.rkey())), 0);
  ibv_wc wc = {};
  ASSERT_TRUE(PollOneCompletion(a_.send_cq.get(), &wc));
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
  EXPECT_EQ(wc.opcode, IBV_WC_RDMA_READ);
  EXPECT_EQ(src_.Bytes(1024, 512), dst_.Bytes(256, 512));
}

// Rule: ibv_wr_post(3): ibv_wr_atomic_fetch_add "Add add to the 64 bit memory location specified rkey and
//   remote_addr"; IBTA Vol 1 ch. 9 (atomic operations): the original value is returned to the requester.
// Checks: FETCH_AND_ADD of 5 on a remote 100 returns 100 into the local buffer, leaves 105 remote,
//   and completes with IBV_WC_FETCH_ADD.
TEST_F(QpDatapathTest, FetchAddReturnsOriginalAndAdds) {
  SKIP_IF(!HasAtomics()) << "(atomic_cap is IBV_ATOMIC_NONE)";
  ASSERT_TRUE(MakePair());
  Store64(dst_.data(), 100);
  Store64(src_.data(), 0);
  ibv_sge sge = src_.Sge(0, 8);
  ASSERT_EQ(PostOne(a_.get(), AtomicWr(1, IBV_WR_ATOMIC_FETCH_AND_ADD, &sge, dst_.addr(), dst_.rkey(), 5, 0)), 0);
  ibv_wc wc = {};
  ASSERT_TRUE(PollOneCompletion(a_.send_cq.get(), &wc));
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
  EXPECT_EQ(wc.opcode, IBV_WC_FETCH_ADD);
  EXPECT_EQ(Load64(src_.data()), 100u);
  EXPECT_EQ(Load64(dst_.data()), 105u);
}

// Rule: ibv_wr_post(3): ibv_wr_atomic_cmp_swp "If the remote 64 bit memory location specified by rkey and
//   remote_addr equals compare then set it to swap"; IBTA Vol 1 ch. 9 (atomic operations): the original value
//   is returned.
// Checks: COMPARE_AND_SWAP(compare 100, swap 7) on a remote 100 returns 100, leaves 7 remote, and
//   completes with IBV_WC_COMP_SWAP.
TEST_F(QpDatapathTest, CmpSwpSwaps_ValueMatches) {
  SKIP_IF(!HasAtomics()) << "(atomic_cap is IBV_ATOMIC_NONE)";
  ASSERT_TRUE(MakePair());
  Store64(dst_.data() + 8, 100);
  ibv_sge sge = src_.Sge(0, 8);
  ASSERT_EQ(PostOne(a_.get(), AtomicWr(1, IBV_WR_ATOMIC_CMP_AND_SWP, &sge, dst_.addr(8), dst_.rkey(), 100, 7)), 0);
  ibv_wc wc = {};
  ASSERT_TRUE(PollOneCompletion(a_.send_cq.get(), &wc));
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
  EXPECT_EQ(wc.opcode, IBV_WC_COMP_SWAP);
  EXPECT_EQ(Load64(src_.data()), 100u);
  EXPECT_EQ(Load64(dst_.data() + 8), 7u);
}

// Rule: ibv_wr_post(3): ibv_wr_atomic_cmp_swp sets the location to swap only if it "equals
//   compare"; IBTA Vol 1 ch. 9 (atomic operations): the original value is returned either way.
// Checks: COMPARE_AND_SWAP(compare 99, swap 7) on a remote 100 returns 100 and leaves 100 remote.
TEST_F(QpDatapathTest, CmpSwpKeepsValue_ValueDiffers) {
  SKIP_IF(!HasAtomics()) << "(atomic_cap is IBV_ATOMIC_NONE)";
  ASSERT_TRUE(MakePair());
  Store64(dst_.data() + 16, 100);
  ibv_sge sge = src_.Sge(0, 8);
  ASSERT_EQ(PostOne(a_.get(), AtomicWr(1, IBV_WR_ATOMIC_CMP_AND_SWP, &sge, dst_.addr(16), dst_.rkey(), 99, 7)), 0);
  ibv_wc wc = {};
  ASSERT_TRUE(PollOneCompletion(a_.send_cq.get(), &wc));
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
  EXPECT_EQ(Load64(src_.data()), 100u);
  EXPECT_EQ(Load64(dst_.data() + 16), 100u);
}

// Rule: ibv_wr_post(3): ibv_wr_set_sge_list data is "a list of buffers, logically concatenated
//   together"; ibv_post_send(3): sg_list is the "Pointer to the s/g array".
// Checks: a SEND gathering three SGEs (100, 50 and 200 bytes from different places) arrives as
//   their concatenation in one receive buffer, byte_len 350.
TEST_F(QpDatapathTest, MultiSgeSendGathers) {
  EndConfig config;
  config.caps.max_send_sge = 3;
  ASSERT_TRUE(MakePair(config));
  ibv_sge rsge = dst_.Sge(0, 1024);
  ASSERT_EQ(PostRecv(b_.get(), 1, &rsge, 1), 0);
  ibv_sge sges[3] = {src_.Sge(0, 100), src_.Sge(1000, 50), src_.Sge(2000, 200)};
  ASSERT_EQ(PostOne(a_.get(), SendWr(2, sges, 3)), 0);
  ibv_wc rwc = {};
  ASSERT_TRUE(PollOneCompletion(b_.recv_cq.get(), &rwc));
  ASSERT_EQ(rwc.status, IBV_WC_SUCCESS) << DescribeWc(rwc);
  EXPECT_EQ(rwc.byte_len, 350u);
  std::vector<uint8_t> want = src_.Bytes(0, 100);
  for (const auto& part : {src_.Bytes(1000, 50), src_.Bytes(2000, 200)}) {
    want.insert(want.end(), part.begin(), part.end());
  }
  EXPECT_EQ(dst_.Bytes(0, 350), want);
}

// Rule: ibv_post_recv(3): the incoming message is placed in "the buffer(s) in the scatter list",
//   filled in order (IBTA Vol 1 ch. 9 (SEND)).
// Checks: a 300-byte SEND into a receive of three 100-byte SGEs fills them in order; the bytes
//   after the third SGE stay untouched.
TEST_F(QpDatapathTest, MultiSgeRecvScatters) {
  EndConfig config;
  config.caps.max_recv_sge = 3;
  ASSERT_TRUE(MakePair(config));
  ibv_sge rsges[3] = {dst_.Sge(0, 100), dst_.Sge(500, 100), dst_.Sge(1000, 100)};
  ASSERT_EQ(PostRecv(b_.get(), 1, rsges, 3), 0);
  ibv_sge sge = src_.Sge(0, 300);
  ASSERT_EQ(PostOne(a_.get(), SendWr(2, &sge, 1)), 0);
  ibv_wc rwc = {};
  ASSERT_TRUE(PollOneCompletion(b_.recv_cq.get(), &rwc));
  ASSERT_EQ(rwc.status, IBV_WC_SUCCESS) << DescribeWc(rwc);
  EXPECT_EQ(rwc.byte_len, 300u);
  EXPECT_EQ(dst_.Bytes(0, 100), src_.Bytes(0, 100));
  EXPECT_EQ(dst_.Bytes(500, 100), src_.Bytes(100, 100));
  EXPECT_EQ(dst_.Bytes(1000, 100), src_.Bytes(200, 100));
  EXPECT_EQ(dst_.Bytes(1100, 16), std::vector<uint8_t>(16, 0));
}

// Rule: IBTA Vol 1 ch. 9 (packets; packet sequences): a message longer than the path MTU is carried
//   in several packets (First, Middle, Last) and delivered as one message; ibv_modify_qp(3): path_mtu is the
//   path MTU.
// Checks: with path_mtu 1024 (or the port's active MTU if smaller), a SEND of 3 MTUs + 100 bytes
//   arrives intact with byte_len equal to its size.
TEST_F(QpDatapathTest, SendLargerThanPathMtuArrivesIntact) {
  ConnectParams params;
  params.path_mtu = DefaultMtu();
  ASSERT_TRUE(MakePair({}, params));
  const uint32_t mtu = 128u << params.path_mtu;
  const uint32_t length = 3 * mtu + 100;
  ASSERT_LE(length, kBufSize);
  ibv_wc swc = {};
  ibv_wc rwc = {};
  ASSERT_NO_FATAL_FAILURE(SendAndReceive(length, &swc, &rwc));
  ASSERT_EQ(rwc.status, IBV_WC_SUCCESS) << DescribeWc(rwc);
  EXPECT_EQ(rwc.byte_len, length);
  EXPECT_EQ(dst_.Bytes(0, length), src_.Bytes(0, length));
}

// Rule: ibv_post_send(3): a SEND delivers the bytes its gather list holds when it is posted; a
//   packet is read out of local memory whole before it is written at the responder (IBTA Vol 1
//   ch. 9). (Across several packets the order of reads and writes is the device's own.)
// Checks: a one-packet SEND (a path MTU of bytes) from one buffer into a receive buffer that
//   overlaps it (the same registered memory, 40 bytes further on) delivers the bytes the buffer
//   held before.
TEST_F(QpDatapathTest, SendIntoOverlappingReceiveBufferDeliversOriginalBytes) {
  ConnectParams params;
  params.path_mtu = DefaultMtu();
  ASSERT_TRUE(MakePair({}, params));
  const uint32_t length = 128u << params.path_mtu;
  constexpr uint32_t kShift = 40;
  ASSERT_LE(length + kShift, kBufSize);
  const std::vector<uint8_t> original = src_.Bytes(0, length);
  ibv_wc swc = {};
  ibv_wc rwc = {};
  ASSERT_NO_FATAL_FAILURE(SendAndReceiveInto(src_.Sge(kShift, length), length, &swc, &rwc));
  ASSERT_EQ(rwc.status, IBV_WC_SUCCESS) << DescribeWc(rwc);
  EXPECT_EQ(src_.Bytes(kShift, length), original);
}

// Rule: IBTA Vol 1 ch. 9 (packet sequences; RDMA READ): an RDMA READ longer than the path MTU is
//   answered with several READ response packets, all placed in the requester's scatter list.
// Checks: a READ of 3 MTUs + 100 bytes returns every remote byte.
TEST_F(QpDatapathTest, ReadLargerThanPathMtuArrivesIntact) {
  ConnectParams params;
  params.path_mtu = DefaultMtu();
  ASSERT_TRUE(MakePair({}, params));
  const uint32_t length = 3 * (128u << params.path_mtu) + 100;
  ASSERT_LE(length, kBufSize);
  dst_.FillPattern(3);
  std::memset(src_.data(), 0, kBufSize);
  ibv_sge sge = src_.Sge(0, length);
  ASSERT_EQ(PostOne(a_.get(), RdmaWr(1, IBV_WR_RDMA_READ, &sge, 1, dst_.addr(), dst_.rkey())), 0);
  ibv_wc wc = {};
  ASSERT_TRUE(PollOneCompletion(a_.send_cq.get(), &wc));
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
  EXPECT_EQ(src_.Bytes(0, length), dst_.Bytes(0, length));
}

// Rule: ibv_create_qp(3): with sq_sig_all 0 only WRs with IBV_SEND_SIGNALED generate a completion;
//   ibv_post_send(3): IBV_SEND_SIGNALED "Set the completion notification indicator".
// Checks: on a QP with sq_sig_all = 0, an unsignaled WRITE followed by a signaled one gives exactly
//   one completion, the signaled one's.
TEST_F(QpDatapathTest, UnsignaledWrHasNoCompletion_SqSigAllZero) {
  ASSERT_TRUE(MakePair());
  ibv_sge sge = src_.Sge(0, 8);
  ASSERT_EQ(PostOne(a_.get(), RdmaWr(1, IBV_WR_RDMA_WRITE, &sge, 1, dst_.addr(), dst_.rkey(), 0)), 0);
  ASSERT_EQ(PostOne(a_.get(), RdmaWr(2, IBV_WR_RDMA_WRITE, &sge, 1, dst_.addr(8), dst_.rkey())), 0);
  ibv_wc wc = {};
  ASSERT_TRUE(PollOneCompletion(a_.send_cq.get(), &wc));
  EXPECT_EQ(wc.wr_id, 2u) << DescribeWc(wc);
  EXPECT_TRUE(NoCompletionWithin(a_.send_cq.get(), kQuietWindow));
}

// Rule: ibv_create_qp(3): sq_sig_all "If set, each Work Request (WR) submitted to the SQ generates
//   a completion entry"; ibv_post_send(3): IBV_SEND_SIGNALED is "Relevant only if QP was created
//   with sq_sig_all=0".
// Checks: on a QP with sq_sig_all = 1, a WRITE posted without IBV_SEND_SIGNALED completes.
TEST_F(QpDatapathTest, UnsignaledWrHasCompletion_SqSigAll) {
  EndConfig config;
  config.sq_sig_all = 1;
  ASSERT_TRUE(MakePair(config));
  ibv_sge sge = src_.Sge(0, 8);
  ASSERT_EQ(PostOne(a_.get(), RdmaWr(9, IBV_WR_RDMA_WRITE, &sge, 1, dst_.addr(), dst_.rkey(), 0)), 0);
  ibv_wc wc = {};
  ASSERT_TRUE(PollOneCompletion(a_.send_cq.get(), &wc));
  EXPECT_EQ(wc.wr_id, 9u);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
}

// Rule: IBTA Vol 1 ch. 10 (work request ordering): send queue WRs of an RC QP complete in the
//   order they were posted, whatever the operation (READ completions included).
// Checks: WRITE, SEND, READ, WRITE, SEND, READ posted as one list complete with wr_ids 0..5 in
//   that order, all successfully.
TEST_F(QpDatapathTest, SendCompletionsInPostingOrder) {
  ASSERT_TRUE(MakePair());
  ibv_sge rsges[2] = {dst_.Sge(8192, 64), dst_.Sge(8192 + 64, 64)};
  ASSERT_EQ(PostRecv(b_.get(), 50, &rsges[0], 1), 0);
  ASSERT_EQ(PostRecv(b_.get(), 51, &rsges[1], 1), 0);
  ibv_sge sges[6];
  ibv_send_wr wrs[6];
  const ibv_wr_opcode ops[6] = {IBV_WR_RDMA_WRITE, IBV_WR_SEND, IBV_WR_RDMA_READ,
                                IBV_WR_RDMA_WRITE, IBV_WR_SEND, IBV_WR_RDMA_READ};
  for (int i = 0; i < 6; ++i) {
    sges[i] = src_.Sge(static_cast<size_t>(i) * 64, 64);
    wrs[i] = RdmaWr(static_cast<uint64_t>(i), ops[i], &sges[i], 1, dst_.addr(static_cast<size_t>(i) * 64),
                    dst_.rkey());
    wrs[i].next = i < 5 ? &wrs[i + 1] : nullptr;
  }
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(a_.get(), wrs, &bad), 0);
  std::vector<ibv_wc> wcs;
  ASSERT_TRUE(PollCompletions(a_.send_cq.get(), 6, &wcs));
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(wcs[i].wr_id, static_cast<uint64_t>(i)) << DescribeWcs(wcs);
    EXPECT_EQ(wcs[i].status, IBV_WC_SUCCESS) << DescribeWc(wcs[i]);
  }
}

// Rule: IBTA Vol 1 ch. 10 (work request ordering): receive WQEs of a QP are consumed, and complete, in the
//   order they were posted.
// Checks: four receives (wr_ids 10..13) taken by four SENDs complete in posting order, each
//   holding the matching message.
TEST_F(QpDatapathTest, RecvCompletionsInPostingOrder) {
  ASSERT_TRUE(MakePair());
  ibv_sge rsges[4];
  for (int i = 0; i < 4; ++i) {
    rsges[i] = dst_.Sge(static_cast<size_t>(i) * 64, 64);
    ASSERT_EQ(PostRecv(b_.get(), 10 + static_cast<uint64_t>(i), &rsges[i], 1), 0);
  }
  for (int i = 0; i < 4; ++i) {
    ibv_sge sge = src_.Sge(static_cast<size_t>(i) * 64, 64);
    ASSERT_EQ(PostOne(a_.get(), SendWr(static_cast<uint64_t>(i), &sge, 1)), 0);
  }
  std::vector<ibv_wc> wcs;
  ASSERT_TRUE(PollCompletions(b_.recv_cq.get(), 4, &wcs));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(wcs[i].wr_id, 10 + static_cast<uint64_t>(i)) << DescribeWcs(wcs);
  EXPECT_EQ(dst_.Bytes(0, 256), src_.Bytes(0, 256));
}

// Rule: ibv_post_send(3): IBV_SEND_INLINE "Send data in given gather list as inline data ... The
//   L_Key will not be checked"; "if the IBV_SEND_INLINE flag was set, the buffer can be reused
//   immediately after the call returns."
// Checks: an inline SEND from an unregistered buffer (lkey 0) that is overwritten right after
//   ibv_post_send returns delivers the original bytes.
TEST_F(QpDatapathTest, InlineSendDeliversOriginalBytes) {
  EndConfig config;
  config.caps.max_inline_data = 64;
  ASSERT_TRUE(MakePair(config));
  uint8_t message[32];
  const std::vector<uint8_t> original = Pattern(5, sizeof message);
  std::memcpy(message, original.data(), sizeof message);
  ibv_sge rsge = dst_.Sge(0, 64);
  ASSERT_EQ(PostRecv(b_.get(), 1, &rsge, 1), 0);
  ibv_sge sge = {reinterpret_cast<uintptr_t>(message), sizeof message, 0};
  ASSERT_EQ(PostOne(a_.get(), SendWr(2, &sge, 1, IBV_SEND_SIGNALED | IBV_SEND_INLINE)), 0);
  std::memset(message, 0xee, sizeof message);
  ibv_wc rwc = {};
  ASSERT_TRUE(PollOneCompletion(b_.recv_cq.get(), &rwc));
  ASSERT_EQ(rwc.status, IBV_WC_SUCCESS) << DescribeWc(rwc);
  EXPECT_EQ(rwc.byte_len, sizeof message);
  EXPECT_EQ(dst_.Bytes(0, sizeof message), original);
}

// Rule: ibv_poll_cq(3): byte_len is the "Number of bytes transferred"; IBTA Vol 1 ch. 9 (SEND): a SEND may
//   carry no data and still consumes a receive WQE.
// Checks: a SEND with no SGE completes the posted receive with byte_len 0.
TEST_F(QpDatapathTest, ZeroLengthSendCompletesRecv) {
  ASSERT_TRUE(MakePair());
  ibv_sge rsge = dst_.Sge(0, 64);
  ASSERT_EQ(PostRecv(b_.get(), 3, &rsge, 1), 0);
  ASSERT_EQ(PostOne(a_.get(), SendWr(4, nullptr, 0)), 0);
  ibv_wc rwc = {};
  ASSERT_TRUE(PollOneCompletion(b_.recv_cq.get(), &rwc));
  ASSERT_EQ(rwc.status, IBV_WC_SUCCESS) << DescribeWc(rwc);
  EXPECT_EQ(rwc.wr_id, 3u);
  EXPECT_EQ(rwc.byte_len, 0u);
}

// Rule: ibv_poll_cq(3): byte_len is the "Number of bytes transferred"; IBTA Vol 1 ch. 9 (RDMA READ): a READ
//   of length 0 is legal, moves no data and needs no R_Key check.
// Checks: an RDMA READ whose one SGE has length 0 completes with IBV_WC_SUCCESS and IBV_WC_RDMA_READ.
TEST_F(QpDatapathTest, ZeroLengthReadCompletes) {
  ASSERT_TRUE(MakePair());
  ibv_sge sge = dst_.Sge(0, 0);
  ASSERT_EQ(PostOne(a_.get(), RdmaWr(5, IBV_WR_RDMA_READ, &sge, 1, src_.addr(0), src_.rkey())), 0);
  ibv_wc wc = {};
  ASSERT_TRUE(PollOneCompletion(a_.send_cq.get(), &wc));
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
  EXPECT_EQ(wc.wr_id, 5u);
  EXPECT_EQ(wc.opcode, IBV_WC_RDMA_READ);
}

// Rule: ibv_wr_post(3): "qpx->wr_id = 1; ibv_wr_send(qpx); ibv_wr_set_sge(qpx, lkey, &data,
//   sizeof(data));" posts a SEND once ibv_wr_complete() returns success.
// Checks: wr_start / wr_send / wr_set_sge / wr_complete returns 0, the data arrives at b_, and a_
//   completes with IBV_WC_SEND and the wr_id set in the ibv_qp_ex.
TEST_F(QpDatapathTest, WrApiSendDelivers) {
  ASSERT_TRUE(CreateQpExEnd(&a_, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE));
  ASSERT_TRUE(CreateEnd(&b_));
  ASSERT_TRUE(Connect(a_, b_));
  ibv_qp_ex* qpx = ibv_qp_to_qp_ex(a_.get());
  ASSERT_NE(qpx, nullptr);
  ibv_sge rsge = dst_.Sge(0, 128);
  ASSERT_EQ(PostRecv(b_.get(), 1, &rsge, 1), 0);
  ibv_wr_start(qpx);
  qpx->wr_id = 42;
  qpx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send(qpx);
  ibv_wr_set_sge(qpx, src_.lkey(), src_.addr(), 128);
  ASSERT_EQ(ibv_wr_complete(qpx), 0);
  ibv_wc rwc = {};
  ASSERT_TRUE(PollOneCompletion(b_.recv_cq.get(), &rwc));
  ASSERT_EQ(rwc.status, IBV_WC_SUCCESS) << DescribeWc(rwc);
  EXPECT_EQ(dst_.Bytes(0, 128), src_.Bytes(0, 128));
  ibv_wc swc = {};
  ASSERT_TRUE(PollOneCompletion(a_.send_cq.get(), &swc));
  EXPECT_EQ(swc.wr_id, 42u);
  EXPECT_EQ(swc.opcode, IBV_WC_SEND);
}

// Rule: ibv_wr_post(3): ibv_wr_rdma_write() "Write to the remote memory location specified rkey
//   and remote_addr ... the local location to get the data, is determined by the DATA buffers set
//   after this call".
// Checks: wr_rdma_write + wr_set_sge lands 256 bytes in b_'s MR and completes with
//   IBV_WC_RDMA_WRITE.
TEST_F(QpDatapathTest, WrApiRdmaWriteLands) {
  ASSERT_TRUE(CreateQpExEnd(&a_, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE));
  ASSERT_TRUE(CreateEnd(&b_));
  ASSERT_TRUE(Connect(a_, b_));
  ibv_qp_ex* qpx = ibv_qp_to_qp_ex(a_.get());
  ASSERT_NE(qpx, nullptr);
  ibv_wr_start(qpx);
  qpx->wr_id = 7;
  qpx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_rdma_write(qpx, dst_.rkey(), dst_.addr(512));
  ibv_wr_set_sge(qpx, src_.lkey(), src_.addr(), 256);
  ASSERT_EQ(ibv_wr_complete(qpx), 0);
  ibv_wc wc = {};
  ASSERT_TRUE(PollOneCompletion(a_.send_cq.get(), &wc));
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
  EXPECT_EQ(wc.opcode, IBV_WC_RDMA_WRITE);
  EXPECT_EQ(dst_.Bytes(512, 256), src_.Bytes(0, 256));
}

// Rule: ibv_wr_post(3): "Inline setters will copy the send data during the setter and allows the
//   caller to immediately re-use the buffer"; ibv_wr_set_inline_data() copies "from a single buffer
//   given by the addr and length".
// Checks: a SEND built with wr_set_inline_data from a stack buffer that is overwritten right after
//   the setter delivers the original bytes.
TEST_F(QpDatapathTest, WrApiInlineSendDeliversOriginalBytes) {
  QpCaps caps;
  caps.max_inline_data = 64;
  ASSERT_TRUE(CreateQpExEnd(&a_, IBV_QP_EX_WITH_SEND, caps));
  ASSERT_TRUE(CreateEnd(&b_));
  ASSERT_TRUE(Connect(a_, b_));
  ibv_qp_ex* qpx = ibv_qp_to_qp_ex(a_.get());
  ASSERT_NE(qpx, nullptr);
  ibv_sge rsge = dst_.Sge(0, 64);
  ASSERT_EQ(PostRecv(b_.get(), 1, &rsge, 1), 0);
  uint8_t message[24];
  const std::vector<uint8_t> original = Pattern(6, sizeof message);
  std::memcpy(message, original.data(), sizeof message);
  ibv_wr_start(qpx);
  qpx->wr_id = 8;
  qpx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send(qpx);
  ibv_wr_set_inline_data(qpx, message, sizeof message);
  std::memset(message, 0xee, sizeof message);
  ASSERT_EQ(ibv_wr_complete(qpx), 0);
  ibv_wc rwc = {};
  ASSERT_TRUE(PollOneCompletion(b_.recv_cq.get(), &rwc));
  ASSERT_EQ(rwc.status, IBV_WC_SUCCESS) << DescribeWc(rwc);
  EXPECT_EQ(rwc.byte_len, sizeof message);
  EXPECT_EQ(dst_.Bytes(0, sizeof message), original);
}

// Rule: ibv_wr_post(3): "No work is executed to the queue until ibv_wr_complete() returns success.
//   ibv_wr_abort() will discard all work prepared since ibv_wr_start()."
// Checks: a SEND (wr_id 1) built and then aborted is never executed: after a second SEND (wr_id 2)
//   is completed normally, a_'s only completion is wr_id 2 and b_'s only receive holds its bytes.
TEST_F(QpDatapathTest, WrAbortPostsNothing) {
  ASSERT_TRUE(CreateQpExEnd(&a_, IBV_QP_EX_WITH_SEND));
  ASSERT_TRUE(CreateEnd(&b_));
  ASSERT_TRUE(Connect(a_, b_));
  ibv_qp_ex* qpx = ibv_qp_to_qp_ex(a_.get());
  ASSERT_NE(qpx, nullptr);
  ibv_sge rsges[2] = {dst_.Sge(0, 64), dst_.Sge(64, 64)};
  ASSERT_EQ(PostRecv(b_.get(), 10, &rsges[0], 1), 0);
  ASSERT_EQ(PostRecv(b_.get(), 11, &rsges[1], 1), 0);
  ibv_wr_start(qpx);
  qpx->wr_id = 1;
  qpx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send(qpx);
  ibv_wr_set_sge(qpx, src_.lkey(), src_.addr(0), 64);
  ibv_wr_abort(qpx);
  ibv_wr_start(qpx);
  qpx->wr_id = 2;
  qpx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send(qpx);
  ibv_wr_set_sge(qpx, src_.lkey(), src_.addr(64), 64);
  ASSERT_EQ(ibv_wr_complete(qpx), 0);
  ibv_wc swc = {};
  ASSERT_TRUE(PollOneCompletion(a_.send_cq.get(), &swc));
  EXPECT_EQ(swc.wr_id, 2u) << "the aborted WR was executed: " << DescribeWc(swc);
  ibv_wc rwc = {};
  ASSERT_TRUE(PollOneCompletion(b_.recv_cq.get(), &rwc));
  EXPECT_EQ(rwc.wr_id, 10u);
  EXPECT_EQ(dst_.Bytes(0, 64), src_.Bytes(64, 64)) << "the first receive holds the aborted WR's data";
  EXPECT_TRUE(NoCompletionWithin(b_.recv_cq.get(), kQuietWindow));
}

// Rule: ibv_wr_post(3): "If a failure is detected during operation, for instance due to an invalid
//   argument, then ibv_wr_complete() will return failure and the entire posting will be aborted", and
//   "No work is executed to the queue until ibv_wr_complete() returns success".
// Checks: a posting of a good WRITE (wr_id 1) followed by one with the QP's max_send_sge + 1 SGEs, and
//   a posting of the QP's max_send_wr + 1 good WRITEs, each make ibv_wr_complete fail; neither WRITEs
//   a byte nor completes a WR; a good WRITE (wr_id 3) posted after them is the first completion.
TEST_F(QpDatapathTest, WrCompleteWithARefusedWrPostsNothing) {
  ASSERT_TRUE(CreateQpExEnd(&a_, IBV_QP_EX_WITH_RDMA_WRITE));
  ASSERT_TRUE(CreateEnd(&b_));
  ASSERT_TRUE(Connect(a_, b_));
  ibv_qp_ex* qpx = ibv_qp_to_qp_ex(a_.get());
  ASSERT_NE(qpx, nullptr);
  ibv_qp_attr attr = {};
  ibv_qp_init_attr init = {};
  ASSERT_EQ(ibv_query_qp(a_.get(), &attr, IBV_QP_CAP, &init), 0);
  ASSERT_LE(init.cap.max_send_wr, 4096u) << "unexpectedly deep send queue";
  const std::vector<uint8_t> before = dst_.Bytes(0, 64);

  ibv_wr_start(qpx);
  qpx->wr_id = 1;
  qpx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_rdma_write(qpx, dst_.rkey(), dst_.addr(0));
  ibv_wr_set_sge(qpx, src_.lkey(), src_.addr(0), 32);
  qpx->wr_id = 2;
  ibv_wr_rdma_write(qpx, dst_.rkey(), dst_.addr(32));
  const std::vector<ibv_sge> sges(init.cap.max_send_sge + 1, src_.Sge(0, 4));
  ibv_wr_set_sge_list(qpx, sges.size(), sges.data());
  EXPECT_NE(ibv_wr_complete(qpx), 0) << "a WR with " << sges.size() << " SGEs was taken";

  ibv_wr_start(qpx);
  for (uint32_t i = 0; i <= init.cap.max_send_wr; ++i) {
    qpx->wr_id = 100 + i;
    qpx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_rdma_write(qpx, dst_.rkey(), dst_.addr(0));
    ibv_wr_set_sge(qpx, src_.lkey(), src_.addr(0), 8);
  }
  EXPECT_NE(ibv_wr_complete(qpx), 0) << init.cap.max_send_wr + 1 << " WRs were taken by a queue of "
                                     << init.cap.max_send_wr;
  EXPECT_TRUE(NoCompletionWithin(a_.send_cq.get(), kQuietWindow)) << "a WR of a failed posting ran";
  EXPECT_EQ(dst_.Bytes(0, 64), before) << "a WRITE of a failed posting landed";

  ibv_wr_start(qpx);
  qpx->wr_id = 3;
  qpx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_rdma_write(qpx, dst_.rkey(), dst_.addr(0));
  ibv_wr_set_sge(qpx, src_.lkey(), src_.addr(0), 64);
  ASSERT_EQ(ibv_wr_complete(qpx), 0);
  ibv_wc wc = {};
  ASSERT_TRUE(PollOneCompletion(a_.send_cq.get(), &wc));
  EXPECT_EQ(wc.wr_id, 3u) << DescribeWc(wc);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
  EXPECT_EQ(dst_.Bytes(0, 64), src_.Bytes(0, 64));
}

// Rule: ibv_wr_post(3), CONCURRENCY: "The provider will provide locking to ensure that ibv_wr_start()
//   and ibv_wr_complete()/abort() form a per-QP critical section where no other threads can enter."
// Checks: while this thread is between ibv_wr_start and ibv_wr_complete, a second thread's ibv_wr_start
//   on the same QP does not return within 200 ms; once this thread's ibv_wr_complete (a WRITE, wr_id 1)
//   returns 0, the second thread's ibv_wr_start returns and its WRITE (wr_id 2) posts; both complete
//   with success.
TEST_F(QpDatapathTest, WrStartToCompleteIsAPerQpCriticalSection) {
  ASSERT_TRUE(CreateQpExEnd(&a_, IBV_QP_EX_WITH_RDMA_WRITE));
  ASSERT_TRUE(CreateEnd(&b_));
  ASSERT_TRUE(Connect(a_, b_));
  ibv_qp_ex* qpx = ibv_qp_to_qp_ex(a_.get());
  ASSERT_NE(qpx, nullptr);
  // Whether `flag` is set within `window` (a bounded look, not a sleep).
  const auto set_within = [](const std::atomic<bool>& flag, std::chrono::milliseconds window) {
    const auto deadline = std::chrono::steady_clock::now() + window;
    while (!flag.load() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    return flag.load();
  };
  ibv_wr_start(qpx);
  std::atomic<bool> entered{false};
  std::atomic<int> other_rc{-1};
  std::thread other([&] {
    ibv_wr_start(qpx);
    entered.store(true);
    qpx->wr_id = 2;
    qpx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_rdma_write(qpx, dst_.rkey(), dst_.addr(64));
    ibv_wr_set_sge(qpx, src_.lkey(), src_.addr(64), 8);
    other_rc.store(ibv_wr_complete(qpx));
  });
  EXPECT_FALSE(set_within(entered, kQuietWindow)) << "a second thread entered the QP's open wr_start section";
  qpx->wr_id = 1;
  qpx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_rdma_write(qpx, dst_.rkey(), dst_.addr(0));
  ibv_wr_set_sge(qpx, src_.lkey(), src_.addr(0), 8);
  EXPECT_EQ(ibv_wr_complete(qpx), 0);
  if (!set_within(entered, kReturnWindow)) {
    other.detach();  // blocked for good: the section never ended for it
    FAIL() << "the second thread's ibv_wr_start did not return after ibv_wr_complete";
  }
  other.join();
  EXPECT_EQ(other_rc.load(), 0);
  std::vector<ibv_wc> wcs;
  ASSERT_TRUE(PollCompletions(a_.send_cq.get(), 2, &wcs));
  std::set<uint64_t> ids;
  for (const ibv_wc& wc : wcs) {
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
    ids.insert(wc.wr_id);
  }
  EXPECT_EQ(ids, (std::set<uint64_t>{1, 2}));
}

// Rule: ibv_wr_post(3), Flags: wr_flags takes IBV_SEND_FENCE, IBV_SEND_IP_CSUM, IBV_SEND_SIGNALED and
//   IBV_SEND_SOLICITED; inline data is given by the inline setters ("Inline setters will copy the send
//   data during the setter"), the DATA of ibv_wr_set_sge is the buffer it names.
// Checks: a SEND built with wr_flags SIGNALED | INLINE and ibv_wr_set_sge of 16 bytes either is refused
//   by ibv_wr_complete or delivers those 16 bytes (byte_len 16); it never completes with other data.
TEST_F(QpDatapathTest, WrApiSgeSendWithInlineFlagDeliversTheSgeBytes) {
  QpCaps caps;
  caps.max_inline_data = 64;
  ASSERT_TRUE(CreateQpExEnd(&a_, IBV_QP_EX_WITH_SEND, caps));
  ASSERT_TRUE(CreateEnd(&b_));
  ASSERT_TRUE(Connect(a_, b_));
  ibv_qp_ex* qpx = ibv_qp_to_qp_ex(a_.get());
  ASSERT_NE(qpx, nullptr);
  ibv_sge rsge = dst_.Sge(0, 64);
  ASSERT_EQ(PostRecv(b_.get(), 1, &rsge, 1), 0);
  ibv_wr_start(qpx);
  qpx->wr_id = 9;
  qpx->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
  ibv_wr_send(qpx);
  ibv_wr_set_sge(qpx, src_.lkey(), src_.addr(0), 16);
  if (ibv_wr_complete(qpx) != 0) return;  // refused: allowed, INLINE is no wr_flags flag
  ibv_wc rwc = {};
  ASSERT_TRUE(PollOneCompletion(b_.recv_cq.get(), &rwc));
  ASSERT_EQ(rwc.status, IBV_WC_SUCCESS) << DescribeWc(rwc);
  EXPECT_EQ(rwc.byte_len, 16u);
  EXPECT_EQ(dst_.Bytes(0, 16), src_.Bytes(0, 16));
}

// Rule: IBTA Vol 1 ch. 10 (RTR state): a QP in Ready To Receive processes incoming requests with
//   its receive queue (and answers them, for RC), though it cannot send yet.
// Checks: a SEND to a responder left in RTR arrives intact and both sides complete successfully.
TEST_F(QpDatapathTest, SendDelivers_ResponderInRtr) {
  ASSERT_TRUE(CreateEnd(&a_));
  ASSERT_TRUE(CreateEnd(&b_));
  ConnectParams params;
  params.path_mtu = DefaultMtu();
  const ibv_ah_attr self = LocalAddress();
  ASSERT_TRUE(BringUp(a_.get(), port(), b_.qp_num(), self, params));
  ASSERT_TRUE(ModifyToInit(b_.get(), port(), params));
  ASSERT_TRUE(ModifyToRtr(b_.get(), a_.qp_num(), self, params));
  ibv_wc swc = {};
  ibv_wc rwc = {};
  ASSERT_NO_FATAL_FAILURE(SendAndReceive(64, &swc, &rwc));
  EXPECT_EQ(rwc.status, IBV_WC_SUCCESS) << DescribeWc(rwc);
  EXPECT_EQ(swc.status, IBV_WC_SUCCESS) << DescribeWc(swc);
  EXPECT_EQ(dst_.Bytes(0, 64), src_.Bytes(0, 64));
}

// Rule: IBTA Vol 1 ch. 10 (QP states): from Reset a QP is set up again like a new one (Reset -> Init -> RTR
//   -> RTS), whatever it went through before - Reset forgets its queues and connection state.
// Checks: a pair that carried a SEND, went to ERR and then RESET, and is connected again (with new
//   PSNs) delivers a second SEND intact.
TEST_F(QpDatapathTest, SendDelivers_AfterErrAndReset) {
  ASSERT_TRUE(MakePair());
  ibv_wc swc = {};
  ibv_wc rwc = {};
  ASSERT_NO_FATAL_FAILURE(SendAndReceive(64, &swc, &rwc));
  ASSERT_EQ(rwc.status, IBV_WC_SUCCESS) << DescribeWc(rwc);
  for (QpEnd* end : {&a_, &b_}) {
    ASSERT_TRUE(ModifyToState(end->get(), IBV_QPS_ERR));
    ASSERT_TRUE(ModifyToState(end->get(), IBV_QPS_RESET));
  }
  ConnectParams params;
  params.sq_psn = 0x1000;
  ASSERT_TRUE(Connect(a_, b_, params, params));
  src_.FillPattern(2);
  ASSERT_NO_FATAL_FAILURE(SendAndReceive(128, &swc, &rwc));
  EXPECT_EQ(rwc.status, IBV_WC_SUCCESS) << DescribeWc(rwc);
  EXPECT_EQ(swc.status, IBV_WC_SUCCESS) << DescribeWc(swc);
  EXPECT_EQ(dst_.Bytes(0, 128), src_.Bytes(0, 128));
}

// Rule: ibv_post_send(3): the opcode table allows IBV_WR_SEND on IBV_QPT_UC; IBTA Vol 1 ch. 9 (Unreliable
//   Connection) (unreliable connection) delivers a SEND into the next receive of the connected QP.
// Checks: on a UC pair, a 200-byte SEND arrives intact, and the sender completes successfully.
TEST_F(QpDatapathTest, UcSendDelivers) {
  EndConfig config;
  config.type = IBV_QPT_UC;
  ASSERT_TRUE(MakePair(config));
  ibv_wc swc = {};
  ibv_wc rwc = {};
  ASSERT_NO_FATAL_FAILURE(SendAndReceive(200, &swc, &rwc));
  EXPECT_EQ(rwc.status, IBV_WC_SUCCESS) << DescribeWc(rwc);
  EXPECT_EQ(rwc.byte_len, 200u);
  EXPECT_EQ(swc.status, IBV_WC_SUCCESS) << DescribeWc(swc);
  EXPECT_EQ(dst_.Bytes(0, 200), src_.Bytes(0, 200));
}

// Rule: ibv_post_send(3): the opcode table allows IBV_WR_RDMA_WRITE on IBV_QPT_UC; IBTA Vol 1 ch. 9
//   (Unreliable Connection): UC delivers the messages of a connection in order.
// Checks: on a UC pair whose responder enables IBV_ACCESS_REMOTE_WRITE, a 300-byte WRITE completes
//   with IBV_WC_RDMA_WRITE, and once a SEND posted after it has arrived, the WRITE's bytes are in
//   the remote MR.
TEST_F(QpDatapathTest, UcWriteLands) {
  EndConfig config;
  config.type = IBV_QPT_UC;
  ASSERT_TRUE(MakePair(config));
  ibv_sge rsge = dst_.Sge(8192, 16);
  ASSERT_EQ(PostRecv(b_.get(), 1, &rsge, 1), 0);
  ibv_sge sge = src_.Sge(0, 300);
  ASSERT_EQ(PostOne(a_.get(), RdmaWr(2, IBV_WR_RDMA_WRITE, &sge, 1, dst_.addr(100), dst_.rkey())), 0);
  ibv_sge marker = src_.Sge(0, 16);
  ASSERT_EQ(PostOne(a_.get(), SendWr(3, &marker, 1)), 0);
  ibv_wc wc = {};
  ASSERT_TRUE(PollOneCompletion(a_.send_cq.get(), &wc));
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
  EXPECT_EQ(wc.opcode, IBV_WC_RDMA_WRITE);
  ibv_wc rwc = {};
  ASSERT_TRUE(PollOneCompletion(b_.recv_cq.get(), &rwc));
  EXPECT_EQ(dst_.Bytes(100, 300), src_.Bytes(0, 300));
}

// Rule: IBTA Vol 1 ch. 9 (Unreliable Connection): a message longer than the path MTU travels as
//   first, middle and last packets, which the responder takes in order into the one WRITE.
// Checks: on a UC pair with a 1024-byte path MTU, a 4 KiB WRITE completes with success, and once a
//   SEND posted after it has arrived, all 4 KiB are in the remote MR.
TEST_F(QpDatapathTest, UcWriteLands_MultiPacket) {
  EndConfig config;
  config.type = IBV_QPT_UC;
  ConnectParams params;
  params.path_mtu = IBV_MTU_1024;
  ASSERT_TRUE(MakePair(config, params));
  ibv_sge rsge = dst_.Sge(8192, 16);
  ASSERT_EQ(PostRecv(b_.get(), 1, &rsge, 1), 0);
  ibv_sge sge = src_.Sge(0, 4096);
  ASSERT_EQ(PostOne(a_.get(), RdmaWr(2, IBV_WR_RDMA_WRITE, &sge, 1, dst_.addr(0), dst_.rkey())), 0);
  ibv_sge marker = src_.Sge(0, 16);
  ASSERT_EQ(PostOne(a_.get(), SendWr(3, &marker, 1)), 0);
  ibv_wc wc = {};
  ASSERT_TRUE(PollOneCompletion(a_.send_cq.get(), &wc));
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
  ibv_wc rwc = {};
  ASSERT_TRUE(PollOneCompletion(b_.recv_cq.get(), &rwc));
  EXPECT_EQ(rwc.status, IBV_WC_SUCCESS) << DescribeWc(rwc);
  EXPECT_EQ(dst_.Bytes(0, 4096), src_.Bytes(0, 4096));
}

// Rule: ibv_post_recv(3): for a UD QP "the actual data of the incoming message will start at an offset of 40
//   bytes"; ibv_poll_cq(3): IBV_WC_GRH "GRH is present (valid only for UD QPs)", src_qp the "Source QP number
//   (remote QP number)"; IBTA Vol 1 ch. 11 (Poll for Completion): a UD receive's length includes the 40-byte
//   GRH area.
// Checks: a 64-byte UD SEND addressed by LID without a GRH completes at b_ with IBV_WC_GRH clear,
//   src_qp == a_'s QP number, byte_len 64 + 40, and the payload at offset 40.
TEST_F(QpDatapathTest, UdSendArrives_WithoutGrh) {
  SKIP_IF(roce()) << "(RoCE carries every packet in a GRH)";
  ASSERT_NO_FATAL_FAILURE(MakeUdPair(false));
  ibv_wc rwc = {};
  ASSERT_NO_FATAL_FAILURE(SendOneDatagram(&rwc));
  EXPECT_EQ(rwc.opcode, IBV_WC_RECV);
  EXPECT_EQ(rwc.wc_flags & IBV_WC_GRH, 0u);
  EXPECT_EQ(rwc.src_qp, a_.qp_num());
  EXPECT_EQ(rwc.byte_len, kGrhBytes + 64);
  EXPECT_EQ(dst_.Bytes(kGrhBytes, 64), src_.Bytes(0, 64));
  ibv_wc swc = {};
  ASSERT_TRUE(PollOneCompletion(a_.send_cq.get(), &swc));
  EXPECT_EQ(swc.status, IBV_WC_SUCCESS) << DescribeWc(swc);
}

// Rule: ibv_post_recv(3): "the Global Routing Header (GRH) of the incoming message will be placed
//   in the first 40 bytes of the buffer(s) ... the actual data ... will start at an offset of 40
//   bytes"; ibv_poll_cq(3): IBV_WC_GRH "GRH is present".
// Checks: a 64-byte UD SEND through an AH with a GRH (is_global, the run's GID index) completes at
//   b_ with IBV_WC_GRH set, src_qp == a_'s QP number, byte_len 64 + 40, payload at offset 40.
TEST_F(QpDatapathTest, UdSendArrives_WithGrh) {
  ASSERT_NO_FATAL_FAILURE(MakeUdPair(true));
  ibv_wc rwc = {};
  ASSERT_NO_FATAL_FAILURE(SendOneDatagram(&rwc));
  EXPECT_NE(rwc.wc_flags & IBV_WC_GRH, 0u);
  EXPECT_EQ(rwc.src_qp, a_.qp_num());
  EXPECT_EQ(rwc.byte_len, kGrhBytes + 64);
  EXPECT_EQ(dst_.Bytes(kGrhBytes, 64), src_.Bytes(0, 64));
}

// Rule: ibv_poll_cq(3): sl is the "Service Level" of the received message (UD); IBTA Vol 1 ch. 7: the SL
//   travels in the LRH of an InfiniBand packet. A RoCE frame has no LRH and, untagged, no priority bits:
//   rxe leaves sl 0 (rxe_resp.c do_complete), mlx5 reports the VLAN priority (0 untagged).
// Checks: a UD SEND through an AH with sl 5 completes at b_ with sl 5 on InfiniBand, 0 on RoCE.
TEST_F(QpDatapathTest, UdRecvCompletionSlFollowsTheLinkLayer) {
  ASSERT_NO_FATAL_FAILURE(MakeUdPair(roce()));
  ibv_ah_attr attr = LocalAddress(roce());
  attr.sl = 5;
  errno = 0;
  ah_.reset(ibv_create_ah(pd(), &attr));
  ASSERT_NE(ah_, nullptr) << "ibv_create_ah: " << ErrnoName(errno);
  ibv_wc rwc = {};
  ASSERT_NO_FATAL_FAILURE(SendOneDatagram(&rwc));
  EXPECT_EQ(rwc.sl, roce() ? 0 : 5);
}

// Rule: IBTA Vol 1 C10-93.1.1 (quoted in rxe's rxe_req.c): "If the total sum of all the buffer
//   lengths specified for a UD message exceeds the MTU of the port as returned by QueryHCA, the CI
//   shall not emit any packets for this message. Further, the CI shall not generate an error due to
//   this condition."
// Checks: a UD SEND of the port's MTU + 1 bytes completes at a_ with success and gives b_ no
//   receive completion within 200 ms; a_ stays in RTS, and a SEND of the MTU after it arrives with
//   its bytes.
TEST_F(QpDatapathTest, UdSendLongerThanTheMtuCompletesAndEmitsNothing) {
  ASSERT_NO_FATAL_FAILURE(MakeUdPair(roce()));
  const uint32_t mtu = 128u << port_attr().active_mtu;
  ASSERT_LE(kGrhBytes + mtu + 1, kBufSize);
  ibv_sge rsge = dst_.Sge(0, static_cast<uint32_t>(kGrhBytes + mtu + 1));
  ASSERT_EQ(PostRecv(b_.get(), 1, &rsge, 1), 0);
  src_.FillPattern(3);
  ibv_sge sge = src_.Sge(0, mtu + 1);
  ASSERT_EQ(PostOne(a_.get(), UdSendWr(2, &sge, 1, ah_.get(), b_.qp_num())), 0);
  ibv_wc swc = {};
  ASSERT_TRUE(PollOneCompletion(a_.send_cq.get(), &swc));
  EXPECT_EQ(swc.status, IBV_WC_SUCCESS) << DescribeWc(swc);
  EXPECT_TRUE(NoCompletionWithin(b_.recv_cq.get())) << "a datagram longer than the MTU arrived";
  ibv_qp_state state = IBV_QPS_RESET;
  EXPECT_TRUE(QueryQpState(a_.get(), &state));
  EXPECT_EQ(state, IBV_QPS_RTS);
  sge = src_.Sge(0, mtu);
  ASSERT_EQ(PostOne(a_.get(), UdSendWr(3, &sge, 1, ah_.get(), b_.qp_num())), 0);
  ibv_wc rwc = {};
  ASSERT_TRUE(PollOneCompletion(b_.recv_cq.get(), &rwc)) << "the datagram of the MTU did not arrive";
  EXPECT_EQ(rwc.status, IBV_WC_SUCCESS) << DescribeWc(rwc);
  EXPECT_EQ(rwc.byte_len, kGrhBytes + mtu);
  EXPECT_EQ(dst_.Bytes(kGrhBytes, mtu), src_.Bytes(0, mtu));
  ASSERT_TRUE(PollOneCompletion(a_.send_cq.get(), &swc));
  EXPECT_EQ(swc.status, IBV_WC_SUCCESS) << DescribeWc(swc);
}

// Rule: IBTA Vol 1 ch. 10 (Q_Keys): a UD datagram whose Q_Key does not match the
//   destination QP's Q_Key is silently dropped; the UD sender completes it anyway (unreliable).
// Checks: a UD SEND with remote_qkey = the QP's Q_Key + 1 completes successfully at a_ and gives
//   b_ no receive completion within 200 ms.
TEST_F(QpDatapathTest, UdSendDropped_QkeyMismatch) {
  ASSERT_NO_FATAL_FAILURE(MakeUdPair(roce()));
  ibv_sge rsge = dst_.Sge(0, kGrhBytes + 64);
  ASSERT_EQ(PostRecv(b_.get(), 1, &rsge, 1), 0);
  ibv_sge sge = src_.Sge(0, 64);
  ASSERT_EQ(PostOne(a_.get(), UdSendWr(2, &sge, 1, ah_.get(), b_.qp_num(), kTestQkey + 1)), 0);
  ibv_wc swc = {};
  ASSERT_TRUE(PollOneCompletion(a_.send_cq.get(), &swc));
  EXPECT_EQ(swc.status, IBV_WC_SUCCESS) << DescribeWc(swc);
  EXPECT_TRUE(NoCompletionWithin(b_.recv_cq.get())) << "a datagram with the wrong Q_Key was delivered";
}

// Rule: IBTA Vol 1 C10-10 (cited by google/rdma-unit-test, pd_test SendAhOnOtherPd): the address handle
//   of a UD work request must be in the QP's protection domain; one of another PD completes the WR with
//   IBV_WC_LOC_QP_OP_ERR and nothing is sent. The QP then leaves RTS: a UD send error moves it to SQE
//   (IBA 10.3.1), or to ERR where every send error is fatal (backend question UnreliableSendErrorState).
// Checks: a UD SEND through an AH made on another PD completes at a_ with IBV_WC_LOC_QP_OP_ERR, b_ gets
//   no receive completion within 200 ms, and a_ is in SQE (or the backend's answer).
TEST_F(QpDatapathTest, UdSendThroughAhOfAnotherPdFails) {
  ASSERT_NO_FATAL_FAILURE(MakeUdPair(roce()));
  PdPtr other_pd(ibv_alloc_pd(context()));
  ASSERT_NE(other_pd, nullptr) << ErrnoName(errno);
  ibv_ah_attr attr = LocalAddress(roce());
  AhPtr other_ah(ibv_create_ah(other_pd.get(), &attr));
  ASSERT_NE(other_ah, nullptr) << "ibv_create_ah: " << ErrnoName(errno);
  ibv_sge rsge = dst_.Sge(0, kGrhBytes + 64);
  ASSERT_EQ(PostRecv(b_.get(), 1, &rsge, 1), 0);
  ibv_sge sge = src_.Sge(0, 64);
  ASSERT_EQ(PostOne(a_.get(), UdSendWr(2, &sge, 1, other_ah.get(), b_.qp_num())), 0);
  ibv_wc swc = {};
  ASSERT_TRUE(PollOneCompletion(a_.send_cq.get(), &swc));
  EXPECT_EQ(swc.wr_id, 2u);
  EXPECT_EQ(swc.status, IBV_WC_LOC_QP_OP_ERR) << DescribeWc(swc);
  EXPECT_TRUE(NoCompletionWithin(b_.recv_cq.get())) << "a datagram through an AH of another PD was delivered";
  EXPECT_TRUE(QpStateBecomes(a_.get(), UnreliableSendErrorState()));
}

// Rule: IBTA Vol 1 10.2.4 (Q_Keys): a UD work request whose Q_Key has its high-order bit set sends with the
//   QP's own Q_Key instead (the bit marks a controlled Q_Key, which only the QP's context may hold). Backend
//   question WrQkeyHighBitTakesQpQkey (a backend may send the WR's value as it is, which no receiver with an
//   ordinary Q_Key takes).
// Checks: a_ and b_ both have the test's Q_Key; a UD SEND from a_ with remote_qkey 0x80000001 completes at
//   a_ with success and arrives at b_ with its bytes (where the backend sends the value: arrives nowhere
//   within 200 ms).
TEST_F(QpDatapathTest, UdWrQkeyWithHighBitSendsTheQpsQkey) {
  ASSERT_NO_FATAL_FAILURE(MakeUdPair(roce()));
  ibv_sge rsge = dst_.Sge(0, kGrhBytes + 64);
  ASSERT_EQ(PostRecv(b_.get(), 1, &rsge, 1), 0);
  ibv_sge sge = src_.Sge(0, 64);
  ASSERT_EQ(PostOne(a_.get(), UdSendWr(2, &sge, 1, ah_.get(), b_.qp_num(), 0x80000001u)), 0);
  ibv_wc swc = {};
  ASSERT_TRUE(PollOneCompletion(a_.send_cq.get(), &swc));
  EXPECT_EQ(swc.status, IBV_WC_SUCCESS) << DescribeWc(swc);
  if (!Backend().Answer("WrQkeyHighBitTakesQpQkey", true)) {
    EXPECT_TRUE(NoCompletionWithin(b_.recv_cq.get())) << "a datagram with Q_Key 0x80000001 was delivered";
    return;
  }
  ibv_wc rwc = {};
  ASSERT_TRUE(PollOneCompletion(b_.recv_cq.get(), &rwc)) << "the datagram did not arrive";
  EXPECT_EQ(rwc.status, IBV_WC_SUCCESS) << DescribeWc(rwc);
  EXPECT_EQ(dst_.Bytes(kGrhBytes, 64), src_.Bytes(0, 64));
}

// Rule: ibv_create_ah_from_wc(3): "creates an AH ... using attributes from the work completion wc
//   and the Global Routing Header (GRH) structure grh"; its purpose is replying to the sender.
// Checks: b_ makes an AH from the completion (and the GRH area) of a datagram from a_ and sends a
//   reply to wc.src_qp; a_ receives it with src_qp == b_'s QP number and the reply's bytes.
TEST_F(QpDatapathTest, AhFromWcReachesSender) {
  ASSERT_NO_FATAL_FAILURE(MakeUdPair(roce()));
  ibv_wc rwc = {};
  ASSERT_NO_FATAL_FAILURE(SendOneDatagram(&rwc));
  errno = 0;
  AhPtr reply(ibv_create_ah_from_wc(pd(), &rwc, reinterpret_cast<ibv_grh*>(dst_.data()), port()));
  ASSERT_NE(reply, nullptr) << "ibv_create_ah_from_wc: " << ErrnoName(errno);
  ibv_sge back_rsge = src_.Sge(4096, kGrhBytes + 32);
  ASSERT_EQ(PostRecv(a_.get(), 3, &back_rsge, 1), 0);
  dst_.FillPattern(7);
  ibv_sge back = dst_.Sge(1024, 32);
  ASSERT_EQ(PostOne(b_.get(), UdSendWr(4, &back, 1, reply.get(), rwc.src_qp)), 0);
  ibv_wc back_wc = {};
  ASSERT_TRUE(PollOneCompletion(a_.recv_cq.get(), &back_wc));
  ASSERT_EQ(back_wc.status, IBV_WC_SUCCESS) << DescribeWc(back_wc);
  EXPECT_EQ(back_wc.src_qp, b_.qp_num());
  EXPECT_EQ(src_.Bytes(4096 + kGrhBytes, 32), dst_.Bytes(1024, 32));
}

// Rule: ibv_init_ah_from_wc(3): "returns 0 on success, and -1 on error" and fills ah_attr from the
//   completion and the GRH: the reply goes to the GRH's source GID, with its hop limit (rdma-core
//   libibverbs/verbs.c set_ah_attr_by_ipv6); a multicast destination GID is in no GID table, so
//   one is an error (EINVAL).
// Checks: from a datagram received with a GRH, ibv_init_ah_from_wc returns 0, is_global, dgid the
//   GRH's sgid, hop_limit the GRH's (RoCE v2 over IPv4: the IPv4 header's source address and TTL);
//   with the destination made multicast (ff0e::1, or 224.0.0.1) it returns -1 and errno is EINVAL.
TEST_F(QpDatapathTest, InitAhFromWcReturnsMinusOne_MulticastDestination) {
  ASSERT_NO_FATAL_FAILURE(MakeUdPair(true));
  ibv_wc rwc = {};
  ASSERT_NO_FATAL_FAILURE(SendOneDatagram(&rwc));
  ASSERT_NE(rwc.wc_flags & IBV_WC_GRH, 0u);
  ibv_grh grh = {};
  std::memcpy(&grh, dst_.data(), sizeof grh);
  ibv_ah_attr attr = {};
  ASSERT_EQ(ibv_init_ah_from_wc(context(), port(), &rwc, &grh, &attr), 0) << ErrnoName(errno);
  EXPECT_EQ(attr.is_global, 1);
  // RoCE v2 over IPv4 puts an IPv4 header in the last 20 bytes of the area instead of the IPv6 one.
  const bool ipv6 = (ntohl(grh.version_tclass_flow) >> 28) == 6;
  iphdr ip4 = {};
  std::memcpy(&ip4, reinterpret_cast<const uint8_t*>(&grh) + 20, sizeof ip4);
  if (ipv6) {
    EXPECT_EQ(std::memcmp(&attr.grh.dgid, &grh.sgid, sizeof grh.sgid), 0) << "the reply's destination GID";
    EXPECT_EQ(attr.grh.hop_limit, grh.hop_limit);
    grh.dgid = {};
    grh.dgid.raw[0] = 0xff;
    grh.dgid.raw[1] = 0x0e;
    grh.dgid.raw[15] = 1;
  } else {
    EXPECT_EQ(std::memcmp(attr.grh.dgid.raw + 12, &ip4.saddr, 4), 0) << "the reply's destination address";
    EXPECT_EQ(attr.grh.hop_limit, ip4.ttl);
    ip4.daddr = htonl(0xe0000001);  // 224.0.0.1
    std::memcpy(reinterpret_cast<uint8_t*>(&grh) + 20, &ip4, sizeof ip4);
  }
  errno = 0;
  EXPECT_EQ(ibv_init_ah_from_wc(context(), port(), &rwc, &grh, &attr), -1);
  EXPECT_EQ(errno, EINVAL) << ErrnoName(errno);
}

// Rule: ibv_create_ah(3) returns NULL "if the request fails"; on RoCE the kernel resolves a unicast
//   destination GID through the IP stack (drivers/infiniband/core/verbs.c: rdma_create_user_ah ->
//   ib_resolve_eth_dmac -> rdma_addr_find_l2_eth_by_grh), which refuses the zero GID, and a source and
//   destination of different IP families, with EINVAL (a link-local destination from a RoCE v1 GID
//   is not looked up).
// Checks: (a RoCE port) ibv_create_ah with the test's GID as source and an all-zero dgid returns NULL
//   with errno EINVAL; so does, from a RoCE v2 GID, a dgid of the other family (fe80::1 from an
//   IPv4-mapped GID, ::ffff:10.0.0.1 from an IPv6 one).
TEST_F(QpDatapathTest, CreateAhFails_UnresolvableDestinationGidOnRoce) {
  SKIP_IF(!roce()) << "(an InfiniBand address is its LID)";
  ibv_ah_attr attr = LocalAddress(true);
  attr.grh.dgid = {};
  EXPECT_THAT(CaptureErrno([&] { return ibv_create_ah(pd(), &attr); }), ReturnsNullWithErrno(EINVAL)) << "dgid ::";
  ibv_gid_entry entry = {};
  ASSERT_EQ(ibv_query_gid_ex(context(), port(), attr.grh.sgid_index, &entry, 0), 0) << ErrnoName(errno);
  SKIP_IF(entry.gid_type != IBV_GID_TYPE_ROCE_V2) << "(the test's GID is RoCE v1)";
  static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  attr.grh.dgid = {};
  if (std::memcmp(entry.gid.raw, kMapped, sizeof kMapped) == 0) {
    attr.grh.dgid.raw[0] = 0xfe;
    attr.grh.dgid.raw[1] = 0x80;
    attr.grh.dgid.raw[15] = 1;
  } else {
    std::memcpy(attr.grh.dgid.raw, kMapped, sizeof kMapped);
    attr.grh.dgid.raw[12] = 10;
    attr.grh.dgid.raw[15] = 1;
  }
  EXPECT_THAT(CaptureErrno([&] { return ibv_create_ah(pd(), &attr); }), ReturnsNullWithErrno(EINVAL))
      << "a dgid of the other IP family";
}

// Rule: ibv_req_notify_cq(3): "If solicited_only is non-zero, an event is only generated for a new
//   CQE with that is considered solicited. A CQE is solicited if it is a receive completion for a
//   message with the Solicited Event header bit set"; ibv_post_send(3): IBV_SEND_SOLICITED "Set the
//   solicited event indicator".
// Checks: with b_'s receive CQ armed solicited-only, a SEND with IBV_SEND_SOLICITED gives one
//   completion event for that CQ.
TEST_F(QpDatapathTest, SolicitedSendRaisesEvent_SolicitedOnlyArm) {
  channel_.reset(ibv_create_comp_channel(context()));
  ASSERT_NE(channel_, nullptr) << ErrnoName(errno);
  EndConfig b_config;
  b_config.recv_channel = channel_.get();
  ASSERT_TRUE(MakePair({}, b_config, {}, {}));
  ASSERT_EQ(ibv_req_notify_cq(b_.recv_cq.get(), 1), 0);
  ibv_wc swc = {};
  ibv_wc rwc = {};
  ASSERT_NO_FATAL_FAILURE(SendAndReceive(16, &swc, &rwc, IBV_SEND_SOLICITED));
  ibv_cq* cq = nullptr;
  void* cq_context = nullptr;
  ASSERT_TRUE(GetCqEventWithin(channel_.get(), &cq, &cq_context, kReturnWindow));
  acks_.AddCqEvent(cq);
  EXPECT_EQ(cq, b_.recv_cq.get());
}

// Rule: ibv_req_notify_cq(3): "All other successful receive completions, or any successful send
//   completion is unsolicited" - a solicited-only arm ignores them.
// Checks: with b_'s receive CQ armed solicited-only, a SEND without IBV_SEND_SOLICITED completes
//   at b_ but raises no completion event.
TEST_F(QpDatapathTest, UnsolicitedSendRaisesNoEvent_SolicitedOnlyArm) {
  channel_.reset(ibv_create_comp_channel(context()));
  ASSERT_NE(channel_, nullptr) << ErrnoName(errno);
  EndConfig b_config;
  b_config.recv_channel = channel_.get();
  ASSERT_TRUE(MakePair({}, b_config, {}, {}));
  ASSERT_EQ(ibv_req_notify_cq(b_.recv_cq.get(), 1), 0);
  ibv_wc swc = {};
  ibv_wc rwc = {};
  ASSERT_NO_FATAL_FAILURE(SendAndReceive(16, &swc, &rwc));
  ASSERT_EQ(rwc.status, IBV_WC_SUCCESS) << DescribeWc(rwc);
  EXPECT_TRUE(NoCqEventWithin(channel_.get(), kQuietWindow)) << "an unsolicited SEND fired a solicited-only arm";
}

// Rule: ibv_req_notify_cq(3): "Upon the addition of a new CQ entry (CQE) to cq, a completion event
//   will be added to the completion channel"; "The request for notification is "one shot." Only
//   one completion event will be generated for each call".
// Checks: with b_'s receive CQ armed, one received SEND gives exactly one completion event naming
//   the CQ.
TEST_F(QpDatapathTest, ArmedRecvCompletionRaisesOneEvent) {
  channel_.reset(ibv_create_comp_channel(context()));
  ASSERT_NE(channel_, nullptr) << ErrnoName(errno);
  EndConfig b_config;
  b_config.recv_channel = channel_.get();
  ASSERT_TRUE(MakePair({}, b_config, {}, {}));
  ASSERT_EQ(ibv_req_notify_cq(b_.recv_cq.get(), 0), 0);
  ibv_wc swc = {};
  ibv_wc rwc = {};
  ASSERT_NO_FATAL_FAILURE(SendAndReceive(16, &swc, &rwc));
  ibv_cq* cq = nullptr;
  void* cq_context = nullptr;
  ASSERT_TRUE(GetCqEventWithin(channel_.get(), &cq, &cq_context, kReturnWindow));
  acks_.AddCqEvent(cq);
  EXPECT_EQ(cq, b_.recv_cq.get());
  EXPECT_TRUE(NoCqEventWithin(channel_.get(), kQuietWindow)) << "a second event for one completion";
}

// Rule: ibv_create_cq_ex(3): with IBV_WC_EX_WITH_COMPLETION_TIMESTAMP, ibv_wc_read_completion_ts returns
//   the completion's timestamp "in HCA clock units"; ibv_query_device_ex(3): hca_core_clock is the HCA
//   clock's frequency and completion_timestamp_mask its valid bits; ibv_query_rt_values_ex(3) reads that
//   clock (IBV_VALUES_MASK_RAW_CLOCK).
// Checks: on a device with a completion_timestamp_mask, a_'s send CQ made with the flag: two RDMA WRITEs,
//   each completed before the next is posted, have non-zero timestamps, the second not before the first,
//   and the raw clock ibv_query_rt_values_ex reads afterwards is not before the second.
TEST_F(QpDatapathTest, CompletionTimestampsFollowTheHcaClock) {
  ibv_device_attr_ex attr_ex = {};
  ASSERT_EQ(ibv_query_device_ex(context(), nullptr, &attr_ex), 0);
  SKIP_IF(attr_ex.completion_timestamp_mask == 0) << "(the device has no completion timestamps)";
  EndConfig config;
  config.send_cq_wc_flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
  ASSERT_TRUE(MakePair(config, ConnectParams{}));
  ibv_cq_ex* cq = reinterpret_cast<ibv_cq_ex*>(a_.send_cq.get());
  ibv_sge sge = src_.Sge(0, 64);
  uint64_t stamps[2] = {};
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(PostOne(a_.get(), RdmaWr(10 + i, IBV_WR_RDMA_WRITE, &sge, 1, dst_.addr(), dst_.rkey())), 0);
    ibv_poll_cq_attr poll = {};
    int rc = ENOENT;
    for (int tries = 0; tries < 1000000 && rc == ENOENT; ++tries) rc = ibv_start_poll(cq, &poll);
    ASSERT_EQ(rc, 0) << "no completion of WRITE " << i;
    EXPECT_EQ(cq->status, IBV_WC_SUCCESS);
    stamps[i] = ibv_wc_read_completion_ts(cq);
    ibv_end_poll(cq);
  }
  EXPECT_NE(stamps[0], 0u);
  EXPECT_GE(stamps[1], stamps[0]);
  ibv_values_ex values = {};
  values.comp_mask = IBV_VALUES_MASK_RAW_CLOCK;
  ASSERT_EQ(ibv_query_rt_values_ex(context(), &values), 0);
  EXPECT_TRUE(values.comp_mask & IBV_VALUES_MASK_RAW_CLOCK);
  const uint64_t clock = static_cast<uint64_t>(values.raw_clock.tv_sec) * 1000000000u +
                         static_cast<uint64_t>(values.raw_clock.tv_nsec);
  EXPECT_GE(clock & attr_ex.completion_timestamp_mask, stamps[1]);
}

// Rule: ibv_create_cq_ex(3): ibv_start_poll ... ibv_end_poll is a polling section of one CQ ("lock
//   the CQ" against other pollers); nothing in ibv_post_send(3) or ibv_post_recv(3) forbids posting
//   from inside it, the usual "repost as you poll" loop, and the HCA keeps writing CQEs meanwhile.
// Checks: with a_'s send CQ made by ibv_create_cq_ex, inside ibv_start_poll (one completion
//   found) a_ posts another signaled RDMA WRITE, which returns 0; ibv_next_poll and ibv_end_poll
//   return, and both WRITEs complete successfully.
TEST_F(QpDatapathTest, PostInsidePollSectionReturns) {
  // The watchdog runs the check in a child of fork(), which a kernel provider does not let use its
  // parent's verbs objects (uverbs refuses a process that did not open the device file).
  SKIP_IF(!Sim()) << "(the check runs in a child of fork(), which cannot use its parent's context on a kernel provider)";
  const ChildResult result = RunChecksInChild(
      [&] {
        EndConfig config;
        config.send_cq_flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED;
        ASSERT_TRUE(MakePair(config, ConnectParams{}));
        ibv_cq_ex* cq = reinterpret_cast<ibv_cq_ex*>(a_.send_cq.get());
        ibv_sge sge = src_.Sge(0, 64);
        ASSERT_EQ(PostOne(a_.get(), RdmaWr(1, IBV_WR_RDMA_WRITE, &sge, 1, dst_.addr(), dst_.rkey())), 0);
        ibv_wc first = {};
        ibv_poll_cq_attr attr = {};
        int rc = ENOENT;
        for (int tries = 0; tries < 1000000 && rc == ENOENT; ++tries) rc = ibv_start_poll(cq, &attr);
        ASSERT_EQ(rc, 0) << "no completion of the first WRITE";
        first.wr_id = cq->wr_id;
        first.status = cq->status;
        EXPECT_EQ(PostOne(a_.get(), RdmaWr(2, IBV_WR_RDMA_WRITE, &sge, 1, dst_.addr(64), dst_.rkey())), 0);
        std::vector<uint64_t> done = {first.wr_id};
        EXPECT_EQ(first.status, IBV_WC_SUCCESS);
        if (ibv_next_poll(cq) == 0) {
          done.push_back(cq->wr_id);
          EXPECT_EQ(cq->status, IBV_WC_SUCCESS);
        }
        ibv_end_poll(cq);
        if (done.size() < 2) {
          ibv_wc second = {};
          ASSERT_TRUE(PollOneCompletion(a_.send_cq.get(), &second));
          EXPECT_EQ(second.status, IBV_WC_SUCCESS) << DescribeWc(second);
          done.push_back(second.wr_id);
        }
        EXPECT_EQ(done, (std::vector<uint64_t>{1, 2}));
      },
      kChildTimeout, "a post inside ibv_start_poll / ibv_end_poll");
  EXPECT_TRUE(Passed(result));
}

// Rule: ibv_create_cq_ex(3): ibv_start_poll ... ibv_end_poll is a polling section that holds the CQ
//   against other pollers (rxe and mlx5 take the CQ's lock in start_poll and drop it in end_poll,
//   and ibv_poll_cq takes the same lock); a CQ made without IBV_CREATE_CQ_ATTR_SINGLE_THREADED may
//   be polled from several threads.
// Checks: with two completions on a_'s send CQ (made by ibv_create_cq_ex), while this thread holds a
//   polling section on the first, an ibv_poll_cq of another thread does not return within
//   kBlockWindow; after ibv_end_poll it returns the second completion only (none is seen twice).
TEST_F(QpDatapathTest, PollCqWaitsForAnotherThreadsPollSection) {
  SKIP_IF(!Sim()) << "(the check runs in a child of fork(), which cannot use its parent's context on a kernel provider)";
  const ChildResult result = RunChecksInChild(
      [&] {
        EndConfig config;
        config.send_cq_ex = true;  // without IBV_CREATE_CQ_ATTR_SINGLE_THREADED: polled from two threads
        ASSERT_TRUE(MakePair(config, ConnectParams{}));
        ibv_cq_ex* cq = reinterpret_cast<ibv_cq_ex*>(a_.send_cq.get());
        ibv_sge sge = src_.Sge(0, 64);
        ASSERT_EQ(PostOne(a_.get(), RdmaWr(1, IBV_WR_RDMA_WRITE, &sge, 1, dst_.addr(), dst_.rkey())), 0);
        ASSERT_EQ(PostOne(a_.get(), RdmaWr(2, IBV_WR_RDMA_WRITE, &sge, 1, dst_.addr(64), dst_.rkey())), 0);
        ibv_poll_cq_attr attr = {};
        int rc = ENOENT;
        for (int tries = 0; tries < 1000000 && rc == ENOENT; ++tries) rc = ibv_start_poll(cq, &attr);
        ASSERT_EQ(rc, 0) << "no completion of the first WRITE";
        EXPECT_EQ(cq->wr_id, 1u);
        ibv_wc polled[2] = {};
        BlockingCall other([&] {
          int n = 0;
          for (int tries = 0; tries < 1000000 && n == 0; ++tries) n = ibv_poll_cq(a_.send_cq.get(), 2, polled);
          return n;
        });
        EXPECT_FALSE(other.WaitFor(kBlockWindow)) << "ibv_poll_cq returned " << other.result()
                                                  << " completion(s) inside another thread's polling section";
        ibv_end_poll(cq);
        ASSERT_TRUE(other.WaitFor(kReturnWindow)) << "ibv_poll_cq did not return after ibv_end_poll";
        ASSERT_EQ(other.result(), 1) << "completions returned by the other thread";
        EXPECT_EQ(polled[0].wr_id, 2u) << "the first completion was seen by both threads";
        EXPECT_EQ(polled[0].status, IBV_WC_SUCCESS) << DescribeWc(polled[0]);
      },
      kChildTimeout, "ibv_poll_cq against another thread's ibv_start_poll / ibv_end_poll");
  EXPECT_TRUE(Passed(result));
}

// Rule: IBTA Vol 1 ch. 9 (RC) / ch. 10 (addressing): an RC connection joins QPs of any two channel adapters
//   on one fabric, addressed by LID (or GID on RoCE); the simulator's profiles put sim0 and sim1 on one
//   fabric (fixtures/devices/*.json).
// Checks: on the simulator with a second device, an RC QP of the run's device connected to one of
//   the other device sends 256 bytes that arrive intact, and both sides complete successfully.
TEST_F(QpDatapathTest, CrossDeviceSendDelivers) {
  SKIP_IF(!Sim()) << "(only the simulator's profiles promise two devices on one fabric)";
  std::string other;
  for (const std::string& name : DeviceNames()) {
    if (name != device_name()) other = name;
  }
  SKIP_IF(other.empty()) << "(the device list has fewer than 2 devices)";
  std::string error;
  ContextPtr far_context = OpenDeviceByName(other, &error);
  ASSERT_NE(far_context, nullptr) << error;
  PdPtr far_pd(ibv_alloc_pd(far_context.get()));
  ASSERT_NE(far_pd, nullptr) << ErrnoName(errno);
  Buffer far_buf;
  ASSERT_TRUE(far_buf.Register(far_pd.get(), 4096));
  QpEnd far;
  ASSERT_TRUE(CreateEndOn(far_context.get(), far_pd.get(), &far, EndConfig{}));
  ASSERT_TRUE(CreateEnd(&a_));
  ibv_ah_attr to_far = {};
  ibv_ah_attr to_near = {};
  ASSERT_TRUE(PortAddress(far_context.get(), 1, gid_index(), false, &to_far));
  ASSERT_TRUE(PortAddress(context(), port(), gid_index(), false, &to_near));
  ConnectParams params;
  params.path_mtu = DefaultMtu();
  ASSERT_TRUE(BringUp(a_.get(), port(), far.qp_num(), to_far, params));
  ASSERT_TRUE(BringUp(far.get(), 1, a_.qp_num(), to_near, params));
  ibv_sge rsge = far_buf.Sge(0, 256);
  ASSERT_EQ(PostRecv(far.get(), 1, &rsge, 1), 0);
  ibv_sge sge = src_.Sge(0, 256);
  ASSERT_EQ(PostOne(a_.get(), SendWr(2, &sge, 1)), 0);
  ibv_wc rwc = {};
  ASSERT_TRUE(PollOneCompletion(far.recv_cq.get(), &rwc));
  EXPECT_EQ(rwc.status, IBV_WC_SUCCESS) << DescribeWc(rwc);
  EXPECT_EQ(rwc.qp_num, far.qp_num());
  EXPECT_EQ(far_buf.Bytes(0, 256), src_.Bytes(0, 256));
  ibv_wc swc = {};
  ASSERT_TRUE(PollOneCompletion(a_.send_cq.get(), &swc));
  EXPECT_EQ(swc.status, IBV_WC_SUCCESS) << DescribeWc(swc);
}

}  // namespace
}  // namespace conformance
