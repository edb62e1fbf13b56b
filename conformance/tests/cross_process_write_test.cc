// RDMA WRITE into the memory of another process: a child process owns the
// responder QP and an MR on page-aligned anonymous memory (the kind a
// bandwidth test registers); the parent's QP writes into it. Checks that the
// data lands, that the message takes its PSNs (a SEND after it is received),
// and that the remote access rules hold across processes as they do within
// one.

#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "conformance/lib/fd_poll.h"
#include "conformance/lib/pipe.h"
#include "conformance/lib/qp_pair.h"
#include "conformance/lib/timeouts.h"
#include "conformance/lib/watchdog.h"

namespace conformance {
namespace {

// Several path MTUs: the message is segmented on the wire.
constexpr size_t kLength = 65536;

// What the child tells the parent: its QP and the buffer to write into.
struct Target {
  uint32_t qpn = 0;
  uint32_t rkey = 0;
  uint64_t addr = 0;
};

class CrossProcessWriteTest : public QpTest {
 protected:
  void SetUp() override {
    QpTest::SetUp();
    if (HasFatalFailure() || IsSkipped()) return;
    ASSERT_TRUE(src_.Register(pd(), kLength));
  }

  // The child: opens its own context, registers kLength bytes of fresh
  // anonymous memory with `access`, connects an RC QP (`qp_access`) to a_, posts one
  // receive, tells the parent, then runs `body` with the buffer and its MR.
  // The parent creates a_ only after the fork (a child that inherited a copy
  // of it would answer that copy), connects it to the child's QP and runs
  // `parent` with the child's target. Each side gets the pipe ends to wait
  // for the other.
  void RunWithChild(unsigned access, unsigned qp_access,
                    const std::function<void(uint8_t*, ibv_mr*, ibv_cq*, int from_parent, int to_parent)>& body,
                    const std::function<void(const Target&, int to_child, int from_child)>& parent) {
    Pipe to_parent;
    Pipe to_child;
    ASSERT_GE(to_parent.fds[0], 0);
    ASSERT_GE(to_child.fds[0], 0);
    const ibv_ah_attr address = LocalAddress();
    ChildResult result;
    std::thread runner([&] {
      result = RunChecksInChild(
          [&] {
            ContextPtr context = OpenAnotherContext();
            ASSERT_NE(context, nullptr);
            PdPtr pd(ibv_alloc_pd(context.get()));
            ASSERT_NE(pd, nullptr);
            QpEnd end;
            ASSERT_TRUE(CreateEndOn(context.get(), pd.get(), &end, EndConfig{}));
            void* mem = mmap(nullptr, kLength, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            ASSERT_NE(mem, MAP_FAILED);
            auto* buf = static_cast<uint8_t*>(mem);
            ibv_mr* mr = ibv_reg_mr(pd.get(), buf, kLength, static_cast<int>(access));
            ASSERT_NE(mr, nullptr);
            const Target target{end.qp_num(), mr->rkey, reinterpret_cast<uintptr_t>(buf)};
            ASSERT_EQ(write(to_parent.fds[1], &target, sizeof target), static_cast<ssize_t>(sizeof target));
            uint32_t parent_qpn = 0;
            ASSERT_TRUE(WaitReadable(to_child.fds[0], kChildTimeout / 2));
            ASSERT_EQ(read(to_child.fds[0], &parent_qpn, sizeof parent_qpn), static_cast<ssize_t>(sizeof parent_qpn));
            ConnectParams params;
            params.access = qp_access;
            ASSERT_TRUE(BringUp(end.get(), port(), parent_qpn, address, params));
            ibv_sge rsge = {reinterpret_cast<uintptr_t>(buf), 64, mr->lkey};
            ASSERT_EQ(PostRecv(end.get(), 7, &rsge, 1), 0);
            ASSERT_EQ(write(to_parent.fds[1], "r", 1), 1);
            body(buf, mr, end.recv_cq.get(), to_child.fds[0], to_parent.fds[1]);
          },
          kChildTimeout, "the responder in a child process");
    });
    Target target;
    const bool got_target =
        WaitReadable(to_parent.fds[0], kChildTimeout) &&
        read(to_parent.fds[0], &target, sizeof target) == static_cast<ssize_t>(sizeof target);
    bool child_ready = false;
    if (got_target && CreateEnd(&a_) && BringUp(a_.get(), port(), target.qpn, address, ConnectParams{})) {
      const uint32_t qpn = a_.qp_num();
      char ready = 0;
      child_ready = write(to_child.fds[1], &qpn, sizeof qpn) == static_cast<ssize_t>(sizeof qpn) &&
                    WaitReadable(to_parent.fds[0], kChildTimeout) && read(to_parent.fds[0], &ready, 1) == 1;
    }
    if (child_ready) parent(target, to_child.fds[1], to_parent.fds[0]);
    runner.join();
    EXPECT_TRUE(got_target) << "the child never sent its QP and buffer";
    EXPECT_TRUE(child_ready) << "the two QPs were not connected";
    EXPECT_TRUE(Passed(result));
  }

  // Posts a signaled WRITE of src_ to the child's buffer and waits for its completion.
  ibv_wc Write(const Target& target) {
    ibv_sge sge = src_.Sge(0, kLength);
    ibv_wc wc = {};
    EXPECT_EQ(PostOne(a_.get(), RdmaWr(1, IBV_WR_RDMA_WRITE, &sge, 1, target.addr, target.rkey)), 0);
    EXPECT_TRUE(PollOneCompletion(a_.send_cq.get(), &wc, kChildTimeout / 2));
    return wc;
  }

  // A WRITE the child's side refuses (MR `access`, QP `qp_access`): it
  // completes with `status`, and the child's buffer is still zero.
  void ExpectWriteRefused(unsigned access, unsigned qp_access, ibv_wc_status status) {
    RunWithChild(
        access, qp_access,
        [](uint8_t* buf, ibv_mr*, ibv_cq*, int from_parent, int) {
          ASSERT_TRUE(WaitReadable(from_parent, kChildTimeout / 2));
          EXPECT_EQ(std::vector<uint8_t>(buf, buf + kLength), std::vector<uint8_t>(kLength, 0));
        },
        [&](const Target& target, int to_child, int) {
          src_.FillPattern(4);
          const ibv_wc wc = Write(target);
          EXPECT_EQ(wc.status, status) << DescribeWc(wc);
          EXPECT_EQ(write(to_child, "x", 1), 1);
        });
  }

  Buffer src_;
};

// Rule: ibv_post_send(3): RDMA WRITE writes the local buffers into the remote memory at remote_addr
//   (rkey); IBTA 9.7.1: every packet of a message takes a PSN, and the responder expects the next
//   message at the PSN after its last packet.
// Checks: a WRITE of 64 KiB into an MR of another process completes with success and the child reads
//   the bytes; a SEND posted after it reaches the child's receive (the PSNs stayed in step).
TEST_F(CrossProcessWriteTest, WriteLandsInAnotherProcess) {
  RunWithChild(
      kFullMrAccess, kRcRemoteAccess,
      [](uint8_t* buf, ibv_mr*, ibv_cq* recv_cq, int, int) {
        ibv_wc wc = {};
        ASSERT_TRUE(PollOneCompletion(recv_cq, &wc, kChildTimeout / 2));
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
        // The SEND put the same first 64 bytes again.
        EXPECT_EQ(std::vector<uint8_t>(buf, buf + kLength), Pattern(3, kLength));
      },
      [&](const Target& target, int, int) {
        src_.FillPattern(3);
        const ibv_wc wc = Write(target);
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
        ibv_sge sge = src_.Sge(0, 64);
        ASSERT_EQ(PostOne(a_.get(), SendWr(2, &sge, 1)), 0);
        ibv_wc send_wc = {};
        EXPECT_TRUE(PollOneCompletion(a_.send_cq.get(), &send_wc, kChildTimeout / 2));
        EXPECT_EQ(send_wc.status, IBV_WC_SUCCESS) << DescribeWc(send_wc);
      });
}

// Rule: IBTA C9-222 / ibv_post_send(3): a WRITE through an R_Key whose MR does not allow
//   IBV_ACCESS_REMOTE_WRITE is a remote access error; the requester's WR completes with
//   IBV_WC_REM_ACCESS_ERR and the memory is not written.
// Checks: the child's MR allows local write only; the parent's WRITE completes with
//   IBV_WC_REM_ACCESS_ERR and the child's buffer is still zero.
TEST_F(CrossProcessWriteTest, WriteWithoutRemoteWriteAccessFails) {
  ExpectWriteRefused(IBV_ACCESS_LOCAL_WRITE, kRcRemoteAccess, IBV_WC_REM_ACCESS_ERR);
}

// Rule: ibv_modify_qp(3): qp_access_flags without IBV_ACCESS_REMOTE_WRITE disables incoming RDMA
//   WRITEs; IBTA 9.7.5.2.3: such a request is an invalid request, the requester's WR completes with
//   IBV_WC_REM_INV_REQ_ERR, and the memory is not written.
// Checks: the child's MR allows remote write but its QP only remote read; the parent's WRITE
//   completes with IBV_WC_REM_INV_REQ_ERR and the child's buffer is still zero.
TEST_F(CrossProcessWriteTest, WriteToQpWithoutRemoteWriteFails) {
  ExpectWriteRefused(kFullMrAccess, IBV_ACCESS_REMOTE_READ, IBV_WC_REM_INV_REQ_ERR);
}

// Rule: ibv_dereg_mr(3) releases the MR: its R_Key no longer grants access, and a WRITE through it
//   completes with IBV_WC_REM_ACCESS_ERR without touching the memory (even when another MR still
//   covers it).
// Checks: a first WRITE lands; the child registers a second MR over the same buffer and deregisters
//   the first; a second WRITE with other bytes through the first rkey completes with
//   IBV_WC_REM_ACCESS_ERR and the child still reads the first WRITE's bytes.
TEST_F(CrossProcessWriteTest, WriteAfterDeregistrationDoesNotLand) {
  RunWithChild(
      kFullMrAccess, kRcRemoteAccess,
      [](uint8_t* buf, ibv_mr* mr, ibv_cq*, int from_parent, int to_parent) {
        char step = 0;
        ASSERT_TRUE(WaitReadable(from_parent, kChildTimeout / 2));
        ASSERT_EQ(read(from_parent, &step, 1), 1);
        MrPtr keep(ibv_reg_mr(mr->pd, buf, kLength, static_cast<int>(kFullMrAccess)));
        ASSERT_NE(keep, nullptr);
        ASSERT_EQ(ibv_dereg_mr(mr), 0);
        ASSERT_EQ(write(to_parent, "d", 1), 1);
        ASSERT_TRUE(WaitReadable(from_parent, kChildTimeout / 2));
        ASSERT_EQ(read(from_parent, &step, 1), 1);
        EXPECT_EQ(std::vector<uint8_t>(buf, buf + kLength), Pattern(5, kLength));
      },
      [&](const Target& target, int to_child, int from_child) {
        src_.FillPattern(5);
        const ibv_wc first = Write(target);
        EXPECT_EQ(first.status, IBV_WC_SUCCESS) << DescribeWc(first);
        EXPECT_EQ(write(to_child, "d", 1), 1);
        char step = 0;
        ASSERT_TRUE(WaitReadable(from_child, kChildTimeout / 2));
        ASSERT_EQ(read(from_child, &step, 1), 1);
        src_.FillPattern(6);
        const ibv_wc second = Write(target);
        EXPECT_EQ(second.status, IBV_WC_REM_ACCESS_ERR) << DescribeWc(second);
        EXPECT_EQ(write(to_child, "c", 1), 1);
      });
}

// Rule: ibv_is_fork_initialized(3): IBV_FORK_UNNEEDED means the kernel copies registered pages for
//   a child of fork() (copy-on-fork of pinned pages), so fork needs no ibv_fork_init: the child works
//   on its own copy and the parent's registered memory is not affected by it.
// Checks: with IBV_FORK_UNNEEDED, a child of fork() writes over a registered, page-aligned buffer
//   and reads its own bytes back; the parent still reads its bytes afterwards.
TEST_F(CrossProcessWriteTest, ChildOfForkWritesItsOwnCopy) {
  if (ibv_is_fork_initialized() != IBV_FORK_UNNEEDED) GTEST_SKIP() << "fork needs ibv_fork_init here";
  void* mem = mmap(nullptr, kLength, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  auto* buf = static_cast<uint8_t*>(mem);
  std::memset(buf, 1, kLength);
  MrPtr mr(ibv_reg_mr(pd(), buf, kLength, static_cast<int>(kFullMrAccess)));
  EXPECT_NE(mr, nullptr);
  const ChildResult result = RunChecksInChild(
      [&] {
        std::memset(buf, 2, kLength);
        EXPECT_EQ(std::vector<uint8_t>(buf, buf + kLength), std::vector<uint8_t>(kLength, 2));
      },
      kChildTimeout, "a child of fork writing registered memory");
  EXPECT_TRUE(Passed(result));
  EXPECT_EQ(std::vector<uint8_t>(buf, buf + kLength), std::vector<uint8_t>(kLength, 1));
  mr.reset();
  munmap(mem, kLength);
}

}  // namespace
}  // namespace conformance
