// Memory windows (ibv_alloc_mw(3), ibv_bind_mw(3)): allocating type 1 and
// type 2 windows, binding them (ibv_bind_mw for type 1, IBV_WR_BIND_MW and
// ibv_wr_bind_mw for type 2), remote access through a window's R_Key and its
// limits, invalidation (zero-length bind, LOCAL_INV, SEND_WITH_INV) and an MR
// that still has a window bound to it.
//
// The windows are bound on b_ (the side that owns the memory) and a_ writes
// through them: a type 2 window belongs to the QP that bound it (IBTA Vol 1
// 10.6.7), so only b_ can be its target.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstdint>
#include <memory>
#include <ostream>
#include <vector>

#include "conformance/lib/backend_profile.h"
#include "conformance/lib/errno_capture.h"
#include "conformance/lib/qp_pair.h"
#include "conformance/lib/skip_if.h"
#include "conformance/lib/timeouts.h"
#include "conformance/lib/verbs_matchers.h"

namespace conformance {
namespace {

constexpr size_t kBufSize = 16384;
// The window the tests bind: [kWindowOffset, kWindowOffset + kWindowLength) of
// the MR, so that there is MR both before and after it.
constexpr size_t kWindowOffset = 4096;
constexpr uint64_t kWindowLength = 4096;
// An MR that windows may be bound to (ibv_bind_mw(3): remote write through a
// window needs local write on the MR).
constexpr unsigned kMwMrAccess = kFullMrAccess | IBV_ACCESS_MW_BIND;

struct MwDeleter {
  void operator()(ibv_mw* mw) const { ibv_dealloc_mw(mw); }
};
using MwPtr = std::unique_ptr<ibv_mw, MwDeleter>;

// What ibv_alloc_mw gave back and errno right after it (for the matchers of verbs_matchers.h).
struct MwCall {
  MwPtr ptr;
  int err = 0;
};

MwCall AllocMwCall(ibv_pd* pd, ibv_mw_type type) {
  errno = 0;
  ibv_mw* mw = ibv_alloc_mw(pd, type);
  const int err = errno;
  return MwCall{MwPtr(mw), err};
}

void PrintTo(const MwCall& call, std::ostream* os) {
  *os << (call.ptr ? "non-NULL" : "NULL") << " with errno " << ErrnoName(call.err);
}

ibv_mw_bind_info BindInfo(const Buffer& buf, size_t offset, uint64_t length, unsigned access) {
  ibv_mw_bind_info info = {};
  info.mr = buf.mr();
  info.addr = buf.addr(offset);
  info.length = length;
  info.mw_access_flags = access;
  return info;
}

// An IBV_WR_BIND_MW work request (type 2 windows).
ibv_send_wr BindWr(uint64_t wr_id, ibv_mw* mw, uint32_t rkey, const ibv_mw_bind_info& info) {
  ibv_send_wr wr = {};
  wr.wr_id = wr_id;
  wr.opcode = IBV_WR_BIND_MW;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.bind_mw.mw = mw;
  wr.bind_mw.rkey = rkey;
  wr.bind_mw.bind_info = info;
  return wr;
}

ibv_send_wr LocalInvWr(uint64_t wr_id, uint32_t rkey) {
  ibv_send_wr wr = {};
  wr.wr_id = wr_id;
  wr.opcode = IBV_WR_LOCAL_INV;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.invalidate_rkey = rkey;
  return wr;
}

class MwTest : public QpTest {
 protected:
  void SetUp() override {
    QpTest::SetUp();
    if (HasFatalFailure() || IsSkipped()) return;
    SKIP_IF(!HasType1() && !HasType2()) << "(the device has no memory windows)";
    ASSERT_TRUE(local_.Register(pd(), kBufSize));
    ASSERT_TRUE(remote_.Register(pd(), kBufSize, kMwMrAccess));
    local_.FillPattern(1);
  }

  void TearDown() override {
    // Windows first: a bound one holds its MR (and a type 2 one its QP).
    windows_.clear();
    QpTest::TearDown();
  }

  bool HasType1() const { return device_attr().device_cap_flags & IBV_DEVICE_MEM_WINDOW; }
  bool HasType2() const {
    return device_attr().device_cap_flags & (IBV_DEVICE_MEM_WINDOW_TYPE_2A | IBV_DEVICE_MEM_WINDOW_TYPE_2B);
  }

  // A window of `type` in pd (default: the fixture's), owned by the fixture.
  ibv_mw* AllocMw(ibv_mw_type type, ibv_pd* in = nullptr) {
    errno = 0;
    ibv_mw* mw = ibv_alloc_mw(in ? in : pd(), type);
    EXPECT_NE(mw, nullptr) << "ibv_alloc_mw(type " << type << "): " << ErrnoName(errno);
    if (mw) windows_.emplace_back(mw);
    return mw;
  }

  // ibv_bind_mw(3) of a type 1 window on qp; returns what ibv_bind_mw returns.
  static int BindType1(ibv_qp* qp, ibv_mw* mw, const ibv_mw_bind_info& info, uint64_t wr_id = 50) {
    ibv_mw_bind bind = {};
    bind.wr_id = wr_id;
    bind.send_flags = IBV_SEND_SIGNALED;
    bind.bind_info = info;
    return ibv_bind_mw(qp, mw, &bind);
  }

  // Binds a type 1 window on b_ and waits for the bind to complete successfully.
  void BindType1OnB(ibv_mw* mw, const ibv_mw_bind_info& info) {
    ASSERT_EQ(BindType1(b_.get(), mw, info), 0);
    ibv_wc wc = {};
    ASSERT_TRUE(PollOneCompletion(b_.send_cq.get(), &wc));
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << "the bind failed: " << DescribeWc(wc);
  }

  // Binds a type 2 window on b_ (IBV_WR_BIND_MW, rkey = ibv_inc_rkey(mw->rkey)),
  // waits for its successful completion and returns the window's new R_Key.
  void BindType2OnB(ibv_mw* mw, const ibv_mw_bind_info& info, uint32_t* rkey) {
    *rkey = ibv_inc_rkey(mw->rkey);
    ASSERT_EQ(PostOne(b_.get(), BindWr(60, mw, *rkey, info)), 0);
    ibv_wc wc = {};
    ASSERT_TRUE(PollOneCompletion(b_.send_cq.get(), &wc));
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << "the bind failed: " << DescribeWc(wc);
  }

  // A connected pair, and a type 2 window bound on b_ over remote_'s window range with remote
  // write; *rkey is its R_Key.
  void PairWithType2WriteWindowOnB(uint32_t* rkey) {
    ASSERT_TRUE(MakePair());
    ibv_mw* mw = AllocMw(IBV_MW_TYPE_2);
    ASSERT_NE(mw, nullptr);
    ASSERT_NO_FATAL_FAILURE(
        BindType2OnB(mw, BindInfo(remote_, kWindowOffset, kWindowLength, IBV_ACCESS_REMOTE_WRITE), rkey));
  }

  // A 64-byte (or `length`) RDMA WRITE from a_ to remote_ + offset with rkey, and its completion.
  void WriteFromA(uint32_t rkey, size_t offset, ibv_wc* wc, uint32_t length = 64) {
    ibv_sge sge = local_.Sge(0, length);
    ASSERT_EQ(PostOne(a_.get(), RdmaWr(1, IBV_WR_RDMA_WRITE, &sge, 1, remote_.addr(offset), rkey)), 0);
    ASSERT_TRUE(PollOneCompletion(a_.send_cq.get(), wc));
  }

  // An RC QP made with ibv_create_qp_ex and the ibv_wr_* operations of `send_ops`;
  // *err is errno when ibv_create_qp_ex fails.
  testing::AssertionResult CreateQpExEnd(QpEnd* end, uint64_t send_ops, int* err) {
    *err = 0;
    errno = 0;
    end->send_cq.reset(ibv_create_cq(context(), 64, nullptr, nullptr, 0));
    end->recv_cq.reset(ibv_create_cq(context(), 64, nullptr, nullptr, 0));
    if (!end->send_cq || !end->recv_cq) return testing::AssertionFailure() << "ibv_create_cq: " << ErrnoName(errno);
    ibv_qp_init_attr_ex attr = {};
    attr.qp_type = IBV_QPT_RC;
    attr.send_cq = end->send_cq.get();
    attr.recv_cq = end->recv_cq.get();
    attr.cap.max_send_wr = 16;
    attr.cap.max_recv_wr = 16;
    attr.cap.max_send_sge = 1;
    attr.cap.max_recv_sge = 1;
    attr.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    attr.pd = pd();
    attr.send_ops_flags = send_ops;
    errno = 0;
    end->qp.reset(ibv_create_qp_ex(context(), &attr));
    *err = errno;
    if (!end->qp) return testing::AssertionFailure() << "ibv_create_qp_ex: " << ErrnoName(*err);
    return testing::AssertionSuccess();
  }

  // a_ (plain) connected to b_, where b_ (or a_ when `on_a`) is made with
  // ibv_create_qp_ex and `send_ops`. Skips the test when the provider does not
  // take these send_ops_flags (ibv_create_qp_ex fails with EOPNOTSUPP): the
  // ibv_wr_* memory window operations are optional.
  void MakeWrApiPair(uint64_t send_ops, bool on_a = false) {
    int err = 0;
    testing::AssertionResult made = CreateQpExEnd(on_a ? &a_ : &b_, send_ops, &err);
    SKIP_IF(!made && err == EOPNOTSUPP) << "(ibv_create_qp_ex refuses send_ops_flags 0x" << std::hex << send_ops
                                        << std::dec << " with EOPNOTSUPP)";
    ASSERT_TRUE(made);
    ASSERT_TRUE(CreateEnd(on_a ? &b_ : &a_));
    ASSERT_TRUE(Connect(a_, b_));
  }

  Buffer local_;
  Buffer remote_;
  std::vector<MwPtr> windows_;
};

// Rule: ibv_alloc_mw(3): "ibv_alloc_mw() allocates a memory window (MW) associated with the protection domain
//   pd. The MW's type (1 or 2A/2B) is type ... ibv_dealloc_mw() returns 0 on success".
// Checks: a type 1 window is allocated with pd, context and type as asked, and ibv_dealloc_mw returns 0.
TEST_F(MwTest, AllocType1AndDeallocSucceed) {
  SKIP_IF(!HasType1()) << "(no IBV_DEVICE_MEM_WINDOW)";
  MwCall call = AllocMwCall(pd(), IBV_MW_TYPE_1);
  ASSERT_NE(call.ptr, nullptr) << "ibv_alloc_mw: " << ErrnoName(call.err);
  EXPECT_EQ(call.ptr->pd, pd());
  EXPECT_EQ(call.ptr->context, context());
  EXPECT_EQ(call.ptr->type, IBV_MW_TYPE_1);
  EXPECT_EQ(ibv_dealloc_mw(call.ptr.release()), 0);
}

// Rule: ibv_alloc_mw(3): "The MW's type (1 or 2A/2B) is type ... ibv_dealloc_mw() returns 0 on success";
//   ibv_query_device(3): IBV_DEVICE_MEM_WINDOW_TYPE_2A/2B announce type 2 windows.
// Checks: a type 2 window is allocated with pd, context and type as asked, and ibv_dealloc_mw returns 0.
TEST_F(MwTest, AllocType2AndDeallocSucceed) {
  SKIP_IF(!HasType2()) << "(no IBV_DEVICE_MEM_WINDOW_TYPE_2A/2B)";
  MwCall call = AllocMwCall(pd(), IBV_MW_TYPE_2);
  ASSERT_NE(call.ptr, nullptr) << "ibv_alloc_mw: " << ErrnoName(call.err);
  EXPECT_EQ(call.ptr->pd, pd());
  EXPECT_EQ(call.ptr->context, context());
  EXPECT_EQ(call.ptr->type, IBV_MW_TYPE_2);
  EXPECT_EQ(ibv_dealloc_mw(call.ptr.release()), 0);
}

// Rule: ibv_alloc_mw(3): the type is 1 or 2 (enum ibv_mw_type has IBV_MW_TYPE_1 and IBV_MW_TYPE_2 only);
//   "ibv_alloc_mw() returns ... NULL if the request fails" (EINVAL: an invalid argument, as the kernel's
//   ib_uverbs_alloc_mw answers an unknown type).
// Checks: ibv_alloc_mw with type 3 returns NULL with errno EINVAL.
TEST_F(MwTest, AllocFails_InvalidType) {
  EXPECT_THAT(AllocMwCall(pd(), static_cast<ibv_mw_type>(3)), ReturnsNullWithErrno(EINVAL));
}

// Rule: ibv_bind_mw(3): ibv_bind_mw "posts to the queue pair qp a request to bind the memory window";
//   ibv_poll_cq(3): opcode is the operation of the completed WR (IBV_WC_BIND_MW).
// Checks: ibv_bind_mw of a type 1 window over an MR with IBV_ACCESS_MW_BIND returns 0 and the signaled
//   bind completes with IBV_WC_SUCCESS, opcode IBV_WC_BIND_MW and its wr_id.
TEST_F(MwTest, BindType1CompletesWithBindMw) {
  SKIP_IF(!HasType1()) << "(no IBV_DEVICE_MEM_WINDOW)";
  ASSERT_TRUE(MakePair());
  ibv_mw* mw = AllocMw(IBV_MW_TYPE_1);
  ASSERT_NE(mw, nullptr);
  ASSERT_EQ(BindType1(b_.get(), mw, BindInfo(remote_, kWindowOffset, kWindowLength, IBV_ACCESS_REMOTE_WRITE), 77), 0);
  ibv_wc wc = {};
  ASSERT_TRUE(PollOneCompletion(b_.send_cq.get(), &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
  EXPECT_EQ(wc.opcode, IBV_WC_BIND_MW) << DescribeWc(wc);
  EXPECT_EQ(wc.wr_id, 77u);
}

// Rule: ibv_alloc_mw(3): the R_Key "will be changed during bind operations"; ibv_bind_mw(3): "In case of a
//   success, the R_key of the memory window after the bind is returned in the mw_bind->mw->rkey field".
// Checks: after a successful ibv_bind_mw, mw->rkey differs from the R_Key the window had before.
TEST_F(MwTest, BindType1ChangesRkey) {
  SKIP_IF(!HasType1()) << "(no IBV_DEVICE_MEM_WINDOW)";
  ASSERT_TRUE(MakePair());
  ibv_mw* mw = AllocMw(IBV_MW_TYPE_1);
  ASSERT_NE(mw, nullptr);
  const uint32_t before = mw->rkey;
  ASSERT_NO_FATAL_FAILURE(BindType1OnB(mw, BindInfo(remote_, kWindowOffset, kWindowLength, IBV_ACCESS_REMOTE_WRITE)));
  EXPECT_NE(mw->rkey, before);
}

// Rule: ibv_alloc_mw(3): "Once bound, the memory window allows RDMA (remote) access to a subset of the MR to
//   which it was bound ... The remote process places this rkey as the rkey field of struct ibv_send_wr".
// Checks: a 256-byte WRITE from a_ through a bound type 1 window's R_Key (REMOTE_WRITE) to 512 bytes into
//   the window succeeds and lands there; the MR byte just before the window stays untouched.
TEST_F(MwTest, WriteThroughType1WindowLands) {
  SKIP_IF(!HasType1()) << "(no IBV_DEVICE_MEM_WINDOW)";
  ASSERT_TRUE(MakePair());
  ibv_mw* mw = AllocMw(IBV_MW_TYPE_1);
  ASSERT_NE(mw, nullptr);
  ASSERT_NO_FATAL_FAILURE(BindType1OnB(mw, BindInfo(remote_, kWindowOffset, kWindowLength, IBV_ACCESS_REMOTE_WRITE)));
  ibv_wc wc = {};
  ASSERT_NO_FATAL_FAILURE(WriteFromA(mw->rkey, kWindowOffset + 512, &wc, 256));
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
  EXPECT_EQ(remote_.Bytes(kWindowOffset + 512, 256), local_.Bytes(0, 256));
  EXPECT_EQ(remote_.Bytes(kWindowOffset - 1, 1), std::vector<uint8_t>(1, 0));
}

// Rule: ibv_alloc_mw(3): a bound window allows access to "a subset of the MR", the range given in
//   ibv_mw_bind_info ("The address the MW should start at", "The length (in bytes) the MW should span");
//   IBTA Vol 1 10.6.7 / C9-222.1.1: an access outside the window's range is an R_Key violation (NAK Remote
//   Access Error, IBV_WC_REM_ACCESS_ERR at the requester).
// Checks: a 64-byte WRITE through the window's R_Key starting 32 bytes before the window's end (the rest
//   inside the MR, outside the window) completes with IBV_WC_REM_ACCESS_ERR.
TEST_F(MwTest, WriteFails_OutsideWindow) {
  SKIP_IF(!HasType1()) << "(no IBV_DEVICE_MEM_WINDOW)";
  ASSERT_TRUE(MakePair());
  ibv_mw* mw = AllocMw(IBV_MW_TYPE_1);
  ASSERT_NE(mw, nullptr);
  ASSERT_NO_FATAL_FAILURE(BindType1OnB(mw, BindInfo(remote_, kWindowOffset, kWindowLength, IBV_ACCESS_REMOTE_WRITE)));
  ibv_wc wc = {};
  ASSERT_NO_FATAL_FAILURE(WriteFromA(mw->rkey, kWindowOffset + kWindowLength - 32, &wc));
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR) << DescribeWc(wc);
}

// Rule: ibv_bind_mw(3): "The mw_access_flags define the allowed access to the MW after the bind completes
//   successfully" (IBV_ACCESS_REMOTE_WRITE "Enable Remote Write Access"); IBTA Vol 1 C9-222.1.1: an RDMA
//   WRITE through a window without remote write access is an R_Key violation.
// Checks: a WRITE through a type 1 window bound with IBV_ACCESS_REMOTE_READ only (over an MR that allows
//   remote write) completes with IBV_WC_REM_ACCESS_ERR.
TEST_F(MwTest, WriteFails_WindowWithoutRemoteWrite) {
  SKIP_IF(!HasType1()) << "(no IBV_DEVICE_MEM_WINDOW)";
  ASSERT_TRUE(MakePair());
  ibv_mw* mw = AllocMw(IBV_MW_TYPE_1);
  ASSERT_NE(mw, nullptr);
  ASSERT_NO_FATAL_FAILURE(BindType1OnB(mw, BindInfo(remote_, kWindowOffset, kWindowLength, IBV_ACCESS_REMOTE_READ)));
  ibv_wc wc = {};
  ASSERT_NO_FATAL_FAILURE(WriteFromA(mw->rkey, kWindowOffset, &wc));
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR) << DescribeWc(wc);
}

// Rule: ibv_reg_mr(3): IBV_ACCESS_MW_BIND "Enable Memory Window Binding"; IBTA Vol 1 C10-73: a window can
//   only be bound to an MR registered with Memory Window Binding; a failed bind completes with a Memory
//   Window Bind Error (IBV_WC_MW_BIND_ERR); ibv_bind_mw(3): the bind "is merely posted to the QP".
// Checks: ibv_bind_mw of a type 1 window over an MR registered without IBV_ACCESS_MW_BIND returns 0 and
//   the bind completes with IBV_WC_MW_BIND_ERR.
TEST_F(MwTest, BindFails_MrWithoutMwBind) {
  SKIP_IF(!HasType1()) << "(no IBV_DEVICE_MEM_WINDOW)";
  ASSERT_TRUE(MakePair());
  Buffer plain;
  ASSERT_TRUE(plain.Register(pd(), kBufSize, kFullMrAccess));
  ibv_mw* mw = AllocMw(IBV_MW_TYPE_1);
  ASSERT_NE(mw, nullptr);
  ASSERT_EQ(BindType1(b_.get(), mw, BindInfo(plain, 0, 4096, IBV_ACCESS_REMOTE_WRITE), 5), 0);
  ibv_wc wc = {};
  ASSERT_TRUE(PollOneCompletion(b_.send_cq.get(), &wc));
  EXPECT_EQ(wc.wr_id, 5u);
  EXPECT_EQ(wc.status, IBV_WC_MW_BIND_ERR) << DescribeWc(wc);
}

// Rule: ibv_bind_mw(3): "post a request to bind a type 1 memory window ... for type 2 MW, one should directly
//   post bind WR to the QP, using ibv_post_send"; verbs.h ibv_bind_mw() returns EINVAL for a window whose
//   type is not IBV_MW_TYPE_1 ("returns ... the value of errno on failure").
// Checks: ibv_bind_mw on a type 2 window returns EINVAL.
TEST_F(MwTest, BindFails_Type2WithIbvBindMw) {
  SKIP_IF(!HasType2()) << "(no IBV_DEVICE_MEM_WINDOW_TYPE_2A/2B)";
  ASSERT_TRUE(MakePair());
  ibv_mw* mw = AllocMw(IBV_MW_TYPE_2);
  ASSERT_NE(mw, nullptr);
  EXPECT_THAT(BindType1(b_.get(), mw, BindInfo(remote_, kWindowOffset, kWindowLength, IBV_ACCESS_REMOTE_WRITE)),
              ReturnsErrno(EINVAL));
}

// Rule: IBTA Vol 1 10.6.7 (a window is bound to an MR of its own protection domain); verbs.h ibv_bind_mw()
//   returns EPERM when bind_info.mr->pd is not the window's PD ("returns ... the value of errno on failure").
// Checks: ibv_bind_mw of a type 1 window over an MR registered in another PD returns EPERM.
TEST_F(MwTest, BindFails_MrOfOtherPd) {
  SKIP_IF(!HasType1()) << "(no IBV_DEVICE_MEM_WINDOW)";
  ASSERT_TRUE(MakePair());
  PdPtr other_pd(ibv_alloc_pd(context()));
  ASSERT_NE(other_pd, nullptr) << ErrnoName(errno);
  Buffer other;
  ASSERT_TRUE(other.Register(other_pd.get(), kBufSize, kMwMrAccess));
  ibv_mw* mw = AllocMw(IBV_MW_TYPE_1);
  ASSERT_NE(mw, nullptr);
  EXPECT_THAT(BindType1(b_.get(), mw, BindInfo(other, 0, 4096, IBV_ACCESS_REMOTE_WRITE)), ReturnsErrno(EPERM));
}

// Rule: ibv_post_send(3): IBV_WR_BIND_MW binds "Memory window (MW) of type 2" with "The desired new rkey of the
//   MW" (bind_mw.rkey; verbs.h ibv_inc_rkey "Increase the 8 lsb in the given rkey"); ibv_alloc_mw(3): once
//   bound the window allows RDMA access to the part of the MR it spans; ibv_poll_cq(3): IBV_WC_BIND_MW.
// Checks: a type 2 window bound on b_ by IBV_WR_BIND_MW with rkey ibv_inc_rkey(mw->rkey) completes with
//   IBV_WC_BIND_MW, and a 256-byte WRITE from a_ with that rkey lands in the window.
TEST_F(MwTest, WriteThroughType2WindowLands) {
  SKIP_IF(!HasType2()) << "(no IBV_DEVICE_MEM_WINDOW_TYPE_2A/2B)";
  ASSERT_TRUE(MakePair());
  ibv_mw* mw = AllocMw(IBV_MW_TYPE_2);
  ASSERT_NE(mw, nullptr);
  const uint32_t rkey = ibv_inc_rkey(mw->rkey);
  ASSERT_EQ(
      PostOne(b_.get(), BindWr(60, mw, rkey, BindInfo(remote_, kWindowOffset, kWindowLength, IBV_ACCESS_REMOTE_WRITE))),
      0);
  ibv_wc bind_wc = {};
  ASSERT_TRUE(PollOneCompletion(b_.send_cq.get(), &bind_wc));
  ASSERT_EQ(bind_wc.status, IBV_WC_SUCCESS) << DescribeWc(bind_wc);
  EXPECT_EQ(bind_wc.opcode, IBV_WC_BIND_MW) << DescribeWc(bind_wc);
  ibv_wc wc = {};
  ASSERT_NO_FATAL_FAILURE(WriteFromA(rkey, kWindowOffset + 128, &wc, 256));
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
  EXPECT_EQ(remote_.Bytes(kWindowOffset + 128, 256), local_.Bytes(0, 256));
}

// Rule: ibv_alloc_mw(3): a type 2 window is bound to a QP ("Type 2 ... Bind Memory Window through the QP"),
//   and remote access through it is allowed to that QP only (IBTA Vol 1 10.6.7.2.2, type 2 windows: the
//   QP number is checked); the binding is to the QP, not to its number (rxe_mw.c keeps the QP itself).
// Checks: (only where the device gives a destroyed QP's number to the next QP; profile-knobs runs it with
//   qp_number_reuse) a type 2 window bound on b_ grants nothing to the QP that takes b_'s number after b_
//   is destroyed: a WRITE from a_ to it through the window completes with IBV_WC_REM_ACCESS_ERR and lands
//   nothing.
TEST_F(MwTest, Type2WindowServesNotTheNextQpOfItsNumber) {
  SKIP_IF(!HasType2()) << "(no IBV_DEVICE_MEM_WINDOW_TYPE_2A/2B)";
  uint32_t rkey = 0;
  ASSERT_NO_FATAL_FAILURE(PairWithType2WriteWindowOnB(&rkey));
  const uint32_t number = b_.qp_num();
  b_.reset();
  ASSERT_TRUE(CreateEnd(&b_));
  SKIP_IF(b_.qp_num() != number) << "(the next QP did not get the destroyed QP's number)";
  ConnectParams params;
  params.path_mtu = DefaultMtu();
  ASSERT_TRUE(BringUp(b_.get(), port(), a_.qp_num(), LocalAddress(), params));
  const std::vector<uint8_t> before = remote_.Bytes(kWindowOffset, 64);
  ibv_wc wc = {};
  ASSERT_NO_FATAL_FAILURE(WriteFromA(rkey, kWindowOffset, &wc));
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR) << DescribeWc(wc);
  EXPECT_EQ(remote_.Bytes(kWindowOffset, 64), before) << "the WRITE landed through the dead QP's window";
}

// Rule: ibv_post_send(3): IBV_WR_LOCAL_INV with invalidate_rkey ("Remote rkey to invalidate"); ibv_wr_post(3):
//   local_inv "Invalidate a MW type 2 which is associated with rkey"; ibv_poll_cq(3): IBV_WC_LOCAL_INV.
// Checks: a LOCAL_INV of a bound type 2 window's R_Key, posted on the QP that bound it, completes with
//   IBV_WC_SUCCESS and opcode IBV_WC_LOCAL_INV.
TEST_F(MwTest, LocalInvCompletesWithLocalInv) {
  SKIP_IF(!HasType2()) << "(no IBV_DEVICE_MEM_WINDOW_TYPE_2A/2B)";
  uint32_t rkey = 0;
  ASSERT_NO_FATAL_FAILURE(PairWithType2WriteWindowOnB(&rkey));
  ASSERT_EQ(PostOne(b_.get(), LocalInvWr(61, rkey)), 0);
  ibv_wc wc = {};
  ASSERT_TRUE(PollOneCompletion(b_.send_cq.get(), &wc));
  EXPECT_EQ(wc.wr_id, 61u);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
  EXPECT_EQ(wc.opcode, IBV_WC_LOCAL_INV) << DescribeWc(wc);
}

// Rule: ibv_alloc_mw(3): a bound window allows remote access "until invalidated by ...
//   IBV_WR_LOCAL_INV/IBV_WR_SEND_WITH_INV WR opcode for type 2"; IBTA Vol 1 C9-222.1.1: an access with an
//   R_Key that names no valid window is an R_Key violation (IBV_WC_REM_ACCESS_ERR).
// Checks: after a successful LOCAL_INV of a type 2 window's R_Key, a WRITE from a_ with that R_Key
//   completes with IBV_WC_REM_ACCESS_ERR.
TEST_F(MwTest, WriteFails_AfterLocalInv) {
  SKIP_IF(!HasType2()) << "(no IBV_DEVICE_MEM_WINDOW_TYPE_2A/2B)";
  uint32_t rkey = 0;
  ASSERT_NO_FATAL_FAILURE(PairWithType2WriteWindowOnB(&rkey));
  ASSERT_EQ(PostOne(b_.get(), LocalInvWr(61, rkey)), 0);
  ibv_wc inv_wc = {};
  ASSERT_TRUE(PollOneCompletion(b_.send_cq.get(), &inv_wc));
  ASSERT_EQ(inv_wc.status, IBV_WC_SUCCESS) << DescribeWc(inv_wc);
  ibv_wc wc = {};
  ASSERT_NO_FATAL_FAILURE(WriteFromA(rkey, kWindowOffset, &wc));
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR) << DescribeWc(wc);
}

// Rule: ibv_wr_post(3): send_inv - "the remote side will invalidate the MR specified by invalidate_rkey before
//   delivering a completion"; ibv_poll_cq(3): IBV_WC_WITH_INV "Invalidated RKey data value is valid",
//   invalidated_rkey "Local RKey that was invalidated".
// Checks: a SEND_WITH_INV from a_ naming b_'s bound type 2 window completes b_'s receive with
//   IBV_WC_SUCCESS, opcode IBV_WC_RECV, IBV_WC_WITH_INV and invalidated_rkey == the window's R_Key.
TEST_F(MwTest, SendWithInvReportsInvalidatedRkey) {
  SKIP_IF(!HasType2()) << "(no IBV_DEVICE_MEM_WINDOW_TYPE_2A/2B)";
  uint32_t rkey = 0;
  ASSERT_NO_FATAL_FAILURE(PairWithType2WriteWindowOnB(&rkey));
  ibv_sge rsge = remote_.Sge(0, 64);
  ASSERT_EQ(PostRecv(b_.get(), 9, &rsge, 1), 0);
  ibv_sge sge = local_.Sge(0, 32);
  ibv_send_wr wr = SendWr(2, &sge, 1, IBV_SEND_SIGNALED, IBV_WR_SEND_WITH_INV);
  wr.invalidate_rkey = rkey;
  ASSERT_EQ(PostOne(a_.get(), wr), 0);
  ibv_wc rwc = {};
  ASSERT_TRUE(PollOneCompletion(b_.recv_cq.get(), &rwc));
  ASSERT_EQ(rwc.status, IBV_WC_SUCCESS) << DescribeWc(rwc);
  EXPECT_EQ(rwc.opcode, IBV_WC_RECV);
  EXPECT_NE(rwc.wc_flags & IBV_WC_WITH_INV, 0u) << DescribeWc(rwc);
  EXPECT_EQ(rwc.invalidated_rkey, rkey);
}

// Rule: ibv_alloc_mw(3): a type 2 window allows remote access "until invalidated by ...
//   IBV_WR_SEND_WITH_INV"; IBTA Vol 1 C9-222.1.1: an R_Key that names no valid window is an R_Key violation.
// Checks: after a SEND_WITH_INV from a_ invalidated b_'s type 2 window (receive completed), a WRITE from a_
//   with that R_Key completes with IBV_WC_REM_ACCESS_ERR.
TEST_F(MwTest, WriteFails_AfterSendWithInv) {
  SKIP_IF(!HasType2()) << "(no IBV_DEVICE_MEM_WINDOW_TYPE_2A/2B)";
  uint32_t rkey = 0;
  ASSERT_NO_FATAL_FAILURE(PairWithType2WriteWindowOnB(&rkey));
  ibv_sge rsge = remote_.Sge(0, 64);
  ASSERT_EQ(PostRecv(b_.get(), 9, &rsge, 1), 0);
  ibv_sge sge = local_.Sge(0, 32);
  ibv_send_wr wr = SendWr(2, &sge, 1, IBV_SEND_SIGNALED, IBV_WR_SEND_WITH_INV);
  wr.invalidate_rkey = rkey;
  ASSERT_EQ(PostOne(a_.get(), wr), 0);
  ibv_wc swc = {};
  ASSERT_TRUE(PollOneCompletion(a_.send_cq.get(), &swc));
  ASSERT_EQ(swc.status, IBV_WC_SUCCESS) << DescribeWc(swc);
  ibv_wc rwc = {};
  ASSERT_TRUE(PollOneCompletion(b_.recv_cq.get(), &rwc));
  ASSERT_EQ(rwc.status, IBV_WC_SUCCESS) << DescribeWc(rwc);
  ibv_wc wc = {};
  ASSERT_NO_FATAL_FAILURE(WriteFromA(rkey, kWindowOffset, &wc));
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR) << DescribeWc(wc);
}

// Rule: ibv_alloc_mw(3) NOTES: "ibv_dereg_mr() fails if any memory window is still bound to this MR"
//   (EBUSY: the object is in use, as mlx5 and the kernel's other usecnt checks answer; backend question
//   DeregMrWithBoundMwFails); ibv_dereg_mr "returns 0 on success, or the value of errno on failure".
// Checks: ibv_dereg_mr of an MR with a bound type 1 window returns EBUSY; once the window is deallocated,
//   ibv_dereg_mr of the same MR returns 0.
TEST_F(MwTest, DeregMrFails_WindowBound) {
  SKIP_IF(!HasType1()) << "(no IBV_DEVICE_MEM_WINDOW)";
  SKIP_IF(!Backend().Answer("DeregMrWithBoundMwFails", true)) << "(the backend deregisters such an MR)";
  ASSERT_TRUE(MakePair());
  std::vector<uint64_t> storage(kBufSize / 8);
  errno = 0;
  MrPtr mr(ibv_reg_mr(pd(), storage.data(), kBufSize, static_cast<int>(kMwMrAccess)));
  ASSERT_NE(mr, nullptr) << "ibv_reg_mr: " << ErrnoName(errno);
  MwPtr mw(ibv_alloc_mw(pd(), IBV_MW_TYPE_1));
  ASSERT_NE(mw, nullptr) << "ibv_alloc_mw: " << ErrnoName(errno);
  ibv_mw_bind_info info = {};
  info.mr = mr.get();
  info.addr = reinterpret_cast<uintptr_t>(storage.data());
  info.length = 4096;
  info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
  ASSERT_NO_FATAL_FAILURE(BindType1OnB(mw.get(), info));
  const int rc = ibv_dereg_mr(mr.get());
  if (rc == 0) mr.release();  // deregistered after all: nothing left to free
  EXPECT_THAT(rc, ReturnsErrno(EBUSY));
  ASSERT_EQ(ibv_dealloc_mw(mw.release()), 0);
  if (mr) {
    EXPECT_EQ(ibv_dereg_mr(mr.release()), 0) << "the MR did not survive the failed dereg";
  }
}

// Rule: ibv_rereg_mr(3): a reregistration is, conceptually, a deregistration and a registration,
//   and ibv_alloc_mw(3) NOTES: "ibv_dereg_mr() fails if any memory window is still bound to this MR"
//   (EBUSY; backend question DeregMrWithBoundMwFails); a window bound to the MR would otherwise keep
//   access the MR no longer gives.
// Checks: with a type 1 window (REMOTE_WRITE) bound to an MR, ibv_rereg_mr to REMOTE_READ access fails
//   (non-zero) with errno EBUSY; a WRITE through the window still lands (the MR kept its access).
TEST_F(MwTest, ReregMrFails_WindowBound) {
  SKIP_IF(!HasType1()) << "(no IBV_DEVICE_MEM_WINDOW)";
  SKIP_IF(!Backend().Answer("ReregMrSupported", true)) << "(the provider has no rereg_mr)";
  SKIP_IF(!Backend().Answer("DeregMrWithBoundMwFails", true)) << "(the backend deregisters such an MR)";
  ASSERT_TRUE(MakePair());
  MwPtr mw(ibv_alloc_mw(pd(), IBV_MW_TYPE_1));
  ASSERT_NE(mw, nullptr) << "ibv_alloc_mw: " << ErrnoName(errno);
  ibv_mw_bind_info info = {};
  info.mr = remote_.mr();
  info.addr = remote_.addr(kWindowOffset);
  info.length = kWindowLength;
  info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
  ASSERT_NO_FATAL_FAILURE(BindType1OnB(mw.get(), info));
  errno = 0;
  const int rc = ibv_rereg_mr(remote_.mr(), IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0,
                              IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_MW_BIND);
  EXPECT_NE(rc, 0) << "ibv_rereg_mr of an MR with a bound window succeeded";
  EXPECT_EQ(errno, EBUSY) << ErrnoName(errno);
  ibv_wc wc = {};
  ASSERT_NO_FATAL_FAILURE(WriteFromA(mw->rkey, kWindowOffset, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
  ASSERT_EQ(ibv_dealloc_mw(mw.release()), 0);
}

// Rule: ibv_bind_mw(3): bind_info.mr is "the MR to bind the MW to"; a bind executes when its turn on
//   the send queue comes, and an MR deregistered since names no MR (providers pass its L_Key: rxe
//   completes such a bind with IBV_WC_MW_BIND_ERR), even if a new MR takes its place meanwhile.
// Checks: on the simulator (where a bind waits for its turn behind a SEND held by an RNR NAK; rxe
//   executes it while the SEND waits for its answer), a type 1 bind on b_ naming MR A waits behind a
//   SEND that has no receive; A is deregistered and MR B registered on the same buffer (no remote
//   access); once a receive is posted, the SEND completes with success and the bind with
//   IBV_WC_MW_BIND_ERR.
TEST_F(MwTest, BindFails_MrDeregisteredBeforeItsTurn) {
  SKIP_IF(!Sim()) << "(only the simulator holds the bind back while the SEND waits)";
  SKIP_IF(!HasType1()) << "(no IBV_DEVICE_MEM_WINDOW)";
  ASSERT_TRUE(MakePair());
  std::vector<uint64_t> storage(kBufSize / 8);
  MwPtr mw(ibv_alloc_mw(pd(), IBV_MW_TYPE_1));
  ASSERT_NE(mw, nullptr) << "ibv_alloc_mw: " << ErrnoName(errno);
  ibv_sge sge = local_.Sge(0, 16);
  ASSERT_EQ(PostOne(b_.get(), SendWr(1, &sge, 1)), 0);
  ibv_mr* a = ibv_reg_mr(pd(), storage.data(), kBufSize, static_cast<int>(kMwMrAccess));
  ASSERT_NE(a, nullptr) << "ibv_reg_mr: " << ErrnoName(errno);
  ibv_mw_bind_info info = {};
  info.mr = a;
  info.addr = reinterpret_cast<uintptr_t>(storage.data());
  info.length = 4096;
  info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
  ASSERT_EQ(BindType1(b_.get(), mw.get(), info, 2), 0);
  ASSERT_EQ(ibv_dereg_mr(a), 0);
  MrPtr b(ibv_reg_mr(pd(), storage.data(), kBufSize, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND));
  ASSERT_NE(b, nullptr) << "ibv_reg_mr: " << ErrnoName(errno);
  ibv_sge rsge = local_.Sge(1024, 64);
  ASSERT_EQ(PostRecv(a_.get(), 9, &rsge, 1), 0);
  std::vector<ibv_wc> wcs;
  ASSERT_TRUE(PollCompletions(b_.send_cq.get(), 2, &wcs)) << DescribeWcs(wcs);
  EXPECT_EQ(wcs[0].wr_id, 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS) << DescribeWc(wcs[0]);
  EXPECT_EQ(wcs[1].wr_id, 2u);
  EXPECT_EQ(wcs[1].status, IBV_WC_MW_BIND_ERR) << DescribeWc(wcs[1]);
}

// Rule: ibv_alloc_mw(3): a window allows remote access "until invalidated by: ibv_bind_mw verb with zero
//   length for type 1"; IBTA Vol 1 C9-222.1.1: an R_Key that names no bound window is an R_Key violation.
// Checks: after a type 1 window (REMOTE_WRITE) is bound again with length 0 (bind completes successfully),
//   a WRITE from a_ with the window's R_Key (mw->rkey) completes with IBV_WC_REM_ACCESS_ERR.
TEST_F(MwTest, ZeroLengthBindUnbindsType1Window) {
  SKIP_IF(!HasType1()) << "(no IBV_DEVICE_MEM_WINDOW)";
  ASSERT_TRUE(MakePair());
  ibv_mw* mw = AllocMw(IBV_MW_TYPE_1);
  ASSERT_NE(mw, nullptr);
  ASSERT_NO_FATAL_FAILURE(BindType1OnB(mw, BindInfo(remote_, kWindowOffset, kWindowLength, IBV_ACCESS_REMOTE_WRITE)));
  // The MR stays named (some providers read bind_info.mr even for a zero length).
  ASSERT_NO_FATAL_FAILURE(BindType1OnB(mw, BindInfo(remote_, kWindowOffset, 0, IBV_ACCESS_REMOTE_WRITE)));
  ibv_wc wc = {};
  ASSERT_NO_FATAL_FAILURE(WriteFromA(mw->rkey, kWindowOffset, &wc));
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR) << DescribeWc(wc);
}

// Rule: IBTA Vol 1 o10-36.2.2: a type 1 window cannot be bound zero-based; ibv_bind_mw(3) "returns 0 on
//   success, or the value of errno on failure", and the providers refuse IBV_ACCESS_ZERO_BASED at the call
//   (rdma-core providers/rxe/rxe.c and mlx5: rxe_bind_mw / mlx5_bind_mw return EINVAL).
// Checks: ibv_bind_mw of a type 1 window with IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_ZERO_BASED returns
//   EINVAL, and no completion is queued for it on b_'s send CQ.
TEST_F(MwTest, BindFails_ZeroBasedType1) {
  SKIP_IF(!HasType1()) << "(no IBV_DEVICE_MEM_WINDOW)";
  ASSERT_TRUE(MakePair());
  ibv_mw* mw = AllocMw(IBV_MW_TYPE_1);
  ASSERT_NE(mw, nullptr);
  const auto info =
      BindInfo(remote_, kWindowOffset, kWindowLength, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_ZERO_BASED);
  EXPECT_THAT(BindType1(b_.get(), mw, info, 79), ReturnsErrno(EINVAL));
  ibv_wc wc = {};
  EXPECT_EQ(ibv_poll_cq(b_.send_cq.get(), 1, &wc), 0) << DescribeWc(wc);
}

// Rule: IBTA Vol 1 o10-37.2.40: a type 2 window is invalidated by a Local Invalidate or a Send with
//   Invalidate, not by a bind of length 0, which fails (rxe_mw.c rxe_check_bind_mw: "attempt to
//   invalidate type 2 MW by binding with NULL or zero length MR"); ibv_poll_cq(3): IBV_WC_MW_BIND_ERR.
// Checks: an IBV_WR_BIND_MW of a type 2 window with length 0 (the MR named) is accepted by
//   ibv_post_send and completes with IBV_WC_MW_BIND_ERR.
TEST_F(MwTest, BindFails_Type2OfLengthZero) {
  SKIP_IF(!HasType2()) << "(no IBV_DEVICE_MEM_WINDOW_TYPE_2A/2B)";
  ASSERT_TRUE(MakePair());
  ibv_mw* mw = AllocMw(IBV_MW_TYPE_2);
  ASSERT_NE(mw, nullptr);
  const auto info = BindInfo(remote_, kWindowOffset, 0, IBV_ACCESS_REMOTE_WRITE);
  ASSERT_EQ(PostOne(b_.get(), BindWr(80, mw, ibv_inc_rkey(mw->rkey), info)), 0);
  ibv_wc wc = {};
  ASSERT_TRUE(PollOneCompletion(b_.send_cq.get(), &wc));
  EXPECT_EQ(wc.wr_id, 80u);
  EXPECT_EQ(wc.status, IBV_WC_MW_BIND_ERR) << DescribeWc(wc);
}

// Rule: ibv_bind_mw(3): the bind is a work request on the QP's send queue, carried out when the HCA
//   processes it; ibv_dealloc_mw(3) frees the window before then, and a bind of a window that no
//   longer exists cannot succeed (IBTA Vol 1 10.6.7.2: the bind fails with a memory window binding
//   error when the window is not valid).
// Checks: a type 1 bind posted while b_ is in SQD (held there), then ibv_dealloc_mw of its window
//   (returns 0), then SQD -> RTS: the bind completes with an error status (not IBV_WC_SUCCESS).
TEST_F(MwTest, BindOfDeallocatedWindowFails) {
  SKIP_IF(!HasType1()) << "(no IBV_DEVICE_MEM_WINDOW)";
  ASSERT_TRUE(MakePair());
  ASSERT_TRUE(ModifyToState(b_.get(), IBV_QPS_SQD));
  ASSERT_TRUE(SqDrainEnds(b_.get()));
  errno = 0;
  ibv_mw* mw = ibv_alloc_mw(pd(), IBV_MW_TYPE_1);
  ASSERT_NE(mw, nullptr) << ErrnoName(errno);
  ASSERT_EQ(BindType1(b_.get(), mw, BindInfo(remote_, kWindowOffset, kWindowLength, IBV_ACCESS_REMOTE_WRITE), 78),
            0);
  ASSERT_EQ(ibv_dealloc_mw(mw), 0);
  ASSERT_TRUE(ModifyToState(b_.get(), IBV_QPS_RTS));
  ibv_wc wc = {};
  ASSERT_TRUE(PollOneCompletion(b_.send_cq.get(), &wc));
  EXPECT_EQ(wc.wr_id, 78u);
  EXPECT_NE(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
}

// Rule: ibv_bind_mw(3): "In case of a success, the R_key of the memory window after the bind is
//   returned in the mw_bind->mw->rkey field"; IBTA Vol 1 10.6.7: binding a window again gives it a
//   new R_Key, and the previous R_Key no longer grants access.
// Checks: a type 1 window bound on b_ (R_Key K1), then bound again while b_ is in SQD (executed
//   at SQD -> RTS, successfully, with a new mw->rkey): a WRITE from a_ with K1 fails with
//   IBV_WC_REM_ACCESS_ERR.
TEST_F(MwTest, WriteFails_OldRkeyAfterRebindHeldInSqd) {
  SKIP_IF(!HasType1()) << "(no IBV_DEVICE_MEM_WINDOW)";
  ASSERT_TRUE(MakePair());
  ibv_mw* mw = AllocMw(IBV_MW_TYPE_1);
  ASSERT_NE(mw, nullptr);
  const ibv_mw_bind_info info = BindInfo(remote_, kWindowOffset, kWindowLength, IBV_ACCESS_REMOTE_WRITE);
  ASSERT_NO_FATAL_FAILURE(BindType1OnB(mw, info));
  const uint32_t first_rkey = mw->rkey;
  ASSERT_TRUE(ModifyToState(b_.get(), IBV_QPS_SQD));
  ASSERT_TRUE(SqDrainEnds(b_.get()));
  ASSERT_EQ(BindType1(b_.get(), mw, info, 79), 0);
  ASSERT_TRUE(ModifyToState(b_.get(), IBV_QPS_RTS));
  ibv_wc bind_wc = {};
  ASSERT_TRUE(PollOneCompletion(b_.send_cq.get(), &bind_wc));
  ASSERT_EQ(bind_wc.status, IBV_WC_SUCCESS) << DescribeWc(bind_wc);
  ASSERT_NE(mw->rkey, first_rkey);
  ibv_wc wc = {};
  ASSERT_NO_FATAL_FAILURE(WriteFromA(first_rkey, kWindowOffset, &wc));
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR) << "the R_Key of the first binding: " << DescribeWc(wc);
}

// Rule: ibv_wr_post(3): ibv_wr_bind_mw "Bind a MW type 2 specified by mw, set a new rkey and set its
//   properties by bind_info"; ibv_alloc_mw(3): the bound window allows RDMA access to its part of the MR.
// Checks: a type 2 window bound on b_ with ibv_wr_bind_mw (rkey ibv_inc_rkey(mw->rkey)) completes with
//   IBV_WC_BIND_MW, and a WRITE from a_ with that rkey lands in the window.
TEST_F(MwTest, WrApiBindType2WindowGrantsWrite) {
  SKIP_IF(!HasType2()) << "(no IBV_DEVICE_MEM_WINDOW_TYPE_2A/2B)";
  ASSERT_NO_FATAL_FAILURE(MakeWrApiPair(IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_SEND));
  if (IsSkipped()) return;
  ibv_mw* mw = AllocMw(IBV_MW_TYPE_2);
  ASSERT_NE(mw, nullptr);
  ibv_qp_ex* qpx = ibv_qp_to_qp_ex(b_.get());
  ASSERT_NE(qpx, nullptr);
  const uint32_t rkey = ibv_inc_rkey(mw->rkey);
  const ibv_mw_bind_info info = BindInfo(remote_, kWindowOffset, kWindowLength, IBV_ACCESS_REMOTE_WRITE);
  ibv_wr_start(qpx);
  qpx->wr_id = 70;
  qpx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_bind_mw(qpx, mw, rkey, &info);
  ASSERT_EQ(ibv_wr_complete(qpx), 0);
  ibv_wc bind_wc = {};
  ASSERT_TRUE(PollOneCompletion(b_.send_cq.get(), &bind_wc));
  ASSERT_EQ(bind_wc.status, IBV_WC_SUCCESS) << DescribeWc(bind_wc);
  EXPECT_EQ(bind_wc.opcode, IBV_WC_BIND_MW) << DescribeWc(bind_wc);
  ibv_wc wc = {};
  ASSERT_NO_FATAL_FAILURE(WriteFromA(rkey, kWindowOffset + 64, &wc, 128));
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
  EXPECT_EQ(remote_.Bytes(kWindowOffset + 64, 128), local_.Bytes(0, 128));
}

// Rule: ibv_wr_post(3): ibv_wr_local_inv "Invalidate a MW type 2 which is associated with rkey"; IBTA Vol 1
//   C9-222.1.1: an R_Key that names no valid window is an R_Key violation (IBV_WC_REM_ACCESS_ERR).
// Checks: after ibv_wr_bind_mw and ibv_wr_local_inv of that rkey on b_ (both complete successfully, the
//   second as IBV_WC_LOCAL_INV), a WRITE from a_ with the rkey completes with IBV_WC_REM_ACCESS_ERR.
TEST_F(MwTest, WrApiLocalInvInvalidatesType2Window) {
  SKIP_IF(!HasType2()) << "(no IBV_DEVICE_MEM_WINDOW_TYPE_2A/2B)";
  ASSERT_NO_FATAL_FAILURE(MakeWrApiPair(IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_SEND));
  if (IsSkipped()) return;
  ibv_mw* mw = AllocMw(IBV_MW_TYPE_2);
  ASSERT_NE(mw, nullptr);
  ibv_qp_ex* qpx = ibv_qp_to_qp_ex(b_.get());
  ASSERT_NE(qpx, nullptr);
  const uint32_t rkey = ibv_inc_rkey(mw->rkey);
  const ibv_mw_bind_info info = BindInfo(remote_, kWindowOffset, kWindowLength, IBV_ACCESS_REMOTE_WRITE);
  ibv_wr_start(qpx);
  qpx->wr_id = 70;
  qpx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_bind_mw(qpx, mw, rkey, &info);
  qpx->wr_id = 71;
  qpx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_local_inv(qpx, rkey);
  ASSERT_EQ(ibv_wr_complete(qpx), 0);
  std::vector<ibv_wc> wcs;
  ASSERT_TRUE(PollCompletions(b_.send_cq.get(), 2, &wcs));
  ASSERT_EQ(wcs[0].status, IBV_WC_SUCCESS) << DescribeWcs(wcs);
  ASSERT_EQ(wcs[1].status, IBV_WC_SUCCESS) << DescribeWcs(wcs);
  EXPECT_EQ(wcs[1].opcode, IBV_WC_LOCAL_INV) << DescribeWcs(wcs);
  ibv_wc wc = {};
  ASSERT_NO_FATAL_FAILURE(WriteFromA(rkey, kWindowOffset, &wc));
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR) << DescribeWc(wc);
}

// Rule: ibv_wr_post(3): ibv_wr_send_inv - "the remote side will invalidate the MR specified by
//   invalidate_rkey before delivering a completion"; ibv_poll_cq(3): IBV_WC_WITH_INV, invalidated_rkey.
// Checks: a SEND posted on a_ with ibv_wr_send_inv naming b_'s bound type 2 window completes b_'s receive
//   with IBV_WC_SUCCESS, IBV_WC_WITH_INV and invalidated_rkey == the window's R_Key.
TEST_F(MwTest, WrApiSendInvReportsInvalidatedRkey) {
  SKIP_IF(!HasType2()) << "(no IBV_DEVICE_MEM_WINDOW_TYPE_2A/2B)";
  ASSERT_NO_FATAL_FAILURE(MakeWrApiPair(IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_INV, /*on_a=*/true));
  if (IsSkipped()) return;
  ibv_mw* mw = AllocMw(IBV_MW_TYPE_2);
  ASSERT_NE(mw, nullptr);
  uint32_t rkey = 0;
  ASSERT_NO_FATAL_FAILURE(
      BindType2OnB(mw, BindInfo(remote_, kWindowOffset, kWindowLength, IBV_ACCESS_REMOTE_WRITE), &rkey));
  ibv_sge rsge = remote_.Sge(0, 64);
  ASSERT_EQ(PostRecv(b_.get(), 9, &rsge, 1), 0);
  ibv_qp_ex* qpx = ibv_qp_to_qp_ex(a_.get());
  ASSERT_NE(qpx, nullptr);
  ibv_wr_start(qpx);
  qpx->wr_id = 80;
  qpx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send_inv(qpx, rkey);
  ibv_wr_set_sge(qpx, local_.lkey(), local_.addr(), 32);
  ASSERT_EQ(ibv_wr_complete(qpx), 0);
  ibv_wc rwc = {};
  ASSERT_TRUE(PollOneCompletion(b_.recv_cq.get(), &rwc));
  ASSERT_EQ(rwc.status, IBV_WC_SUCCESS) << DescribeWc(rwc);
  EXPECT_NE(rwc.wc_flags & IBV_WC_WITH_INV, 0u) << DescribeWc(rwc);
  EXPECT_EQ(rwc.invalidated_rkey, rkey);
}

// Rule: ibv_bind_mw(3) lists remote access flags for mw_access_flags and does not say a bind with
//   IBV_ACCESS_LOCAL_WRITE fails; rxe takes it (drivers/infiniband/sw/rxe/rxe_mw.c: rxe_check_bind_mw
//   checks no other bits) and rdma-core's own tests bind with REMOTE_WRITE | LOCAL_WRITE (tests/test_mr.py
//   MWRes, tests/test_qpex.py test_qp_ex_rc_bind_mw). The window grants remote access only.
// Checks: a type 1 bind with IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE completes successfully and a
//   256-byte WRITE from a_ through the window lands.
TEST_F(MwTest, BindWithLocalWriteInWindowAccessGrantsRemoteWrite) {
  SKIP_IF(!HasType1()) << "(no IBV_DEVICE_MEM_WINDOW)";
  ASSERT_TRUE(MakePair());
  ibv_mw* mw = AllocMw(IBV_MW_TYPE_1);
  ASSERT_NE(mw, nullptr);
  ASSERT_NO_FATAL_FAILURE(BindType1OnB(
      mw, BindInfo(remote_, kWindowOffset, kWindowLength, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE)));
  ibv_wc wc = {};
  ASSERT_NO_FATAL_FAILURE(WriteFromA(mw->rkey, kWindowOffset + 256, &wc, 256));
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
  EXPECT_EQ(remote_.Bytes(kWindowOffset + 256, 256), local_.Bytes(0, 256));
}

}  // namespace
}  // namespace conformance
