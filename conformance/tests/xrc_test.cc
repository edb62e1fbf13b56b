// XRC: XRC domains (ibv_open_xrcd), XRC SRQs (ibv_create_srq_ex,
// ibv_get_srq_num), XRC_SEND / XRC_RECV QPs and their transitions, and
// delivery into the XRC SRQ that a send names. Devices without
// IBV_DEVICE_XRC (rxe) skip every test.

#include <fcntl.h>
#include <gmock/gmock.h>
#include <malloc.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "conformance/lib/device_opener.h"
#include "conformance/lib/errno_capture.h"
#include "conformance/lib/event_wait.h"
#include "conformance/lib/fd_poll.h"
#include "conformance/lib/pipe.h"
#include "conformance/lib/qp_pair.h"
#include "conformance/lib/skip_if.h"
#include "conformance/lib/timeouts.h"
#include "conformance/lib/verbs_matchers.h"
#include "conformance/lib/watchdog.h"

namespace conformance {
namespace {

// A temporary file whose inode names an XRC domain.
class TempFile {
 public:
  TempFile() {
    char path[] = "/tmp/verbs-conformance-xrcd-XXXXXX";
    fd_ = mkstemp(path);
    if (fd_ >= 0) path_ = path;
  }
  ~TempFile() {
    if (fd_ >= 0) {
      close(fd_);
      unlink(path_.c_str());
    }
  }
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
  std::string path_;
};

class XrcTest : public QpTest {
 protected:
  void SetUp() override {
    QpTest::SetUp();
    if (HasFatalFailure() || IsSkipped()) return;
    SKIP_IF(!(device_attr().device_cap_flags & IBV_DEVICE_XRC)) << "(the device has no XRC; rxe has none)";
    ASSERT_TRUE(send_buf_.Register(pd(), 4096));
    ASSERT_TRUE(recv_buf_.Register(pd(), 4096));
    for (CqPtr* cq : {&send_cq_, &srq_cq_, &other_srq_cq_}) {
      errno = 0;
      cq->reset(ibv_create_cq(context(), 64, nullptr, nullptr, 0));
      ASSERT_NE(*cq, nullptr) << "ibv_create_cq: " << ErrnoName(errno);
    }
    ASSERT_GE(file_.fd(), 0) << "mkstemp: " << ErrnoName(errno);
  }

  ibv_xrcd* OpenXrcd(int fd, int oflags) {
    ibv_xrcd_init_attr attr = {};
    attr.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
    attr.fd = fd;
    attr.oflags = oflags;
    return ibv_open_xrcd(context(), &attr);
  }

  // xrcd_: a private domain.
  void OpenPrivateXrcd() {
    errno = 0;
    xrcd_.reset(OpenXrcd(-1, O_CREAT));
    ASSERT_NE(xrcd_, nullptr) << "ibv_open_xrcd: " << ErrnoName(errno);
  }

  ibv_srq_init_attr_ex XrcSrqAttr(ibv_xrcd* xrcd, ibv_cq* cq) {
    ibv_srq_init_attr_ex attr = {};
    attr.attr.max_wr = 16;
    attr.attr.max_sge = 1;
    attr.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
    attr.srq_type = IBV_SRQT_XRC;
    attr.pd = pd();
    attr.xrcd = xrcd;
    attr.cq = cq;
    return attr;
  }

  // An XRC SRQ made in a child process, on a context of its own, in the
  // domain of the file `domain_fd`; members are destroyed in reverse order.
  struct ChildXrcSrq {
    ContextPtr context;
    PdPtr pd;
    CqPtr cq;
    XrcdPtr xrcd;
    SrqPtr srq;
  };
  // Call from the child, with ASSERT_NO_FATAL_FAILURE.
  void CreateXrcSrqInChild(int domain_fd, ChildXrcSrq* out, int cq_entries = 16, uint32_t max_wr = 4) {
    out->context = OpenAnotherContext();
    ASSERT_NE(out->context, nullptr);
    ibv_context* ctx = out->context.get();
    out->pd.reset(ibv_alloc_pd(ctx));
    ASSERT_NE(out->pd, nullptr) << "ibv_alloc_pd: " << ErrnoName(errno);
    out->cq.reset(ibv_create_cq(ctx, cq_entries, nullptr, nullptr, 0));
    ASSERT_NE(out->cq, nullptr) << "ibv_create_cq: " << ErrnoName(errno);
    ibv_xrcd_init_attr xattr = {};
    xattr.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
    xattr.fd = domain_fd;
    xattr.oflags = O_CREAT;
    out->xrcd.reset(ibv_open_xrcd(ctx, &xattr));
    ASSERT_NE(out->xrcd, nullptr) << "ibv_open_xrcd: " << ErrnoName(errno);
    ibv_srq_init_attr_ex sattr = {};
    sattr.attr.max_wr = max_wr;
    sattr.attr.max_sge = 1;
    sattr.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
    sattr.srq_type = IBV_SRQT_XRC;
    sattr.pd = out->pd.get();
    sattr.xrcd = out->xrcd.get();
    sattr.cq = out->cq.get();
    out->srq.reset(ibv_create_srq_ex(ctx, &sattr));
    ASSERT_NE(out->srq, nullptr) << "ibv_create_srq_ex: " << ErrnoName(errno);
  }

  // Runs `child` in a child process (RunChecksInChild; `what` names it in failures) and `parent`
  // here, each with the pipe ends to hear from the other and to tell it; the child's checks count
  // as the test's. `parent` must tell the child when it is done, even when it fails early.
  void RunWithChildProcess(const char* what, const std::function<void(int from_parent, int to_parent)>& child,
                           const std::function<void(int from_child, int to_child)>& parent) {
    Pipe to_parent;
    Pipe to_child;
    ASSERT_GE(to_parent.fds[0], 0);
    ASSERT_GE(to_child.fds[0], 0);
    ChildResult result;
    std::thread runner([&] {
      result = RunChecksInChild([&] { child(to_child.fds[0], to_parent.fds[1]); }, kChildTimeout, what);
    });
    parent(to_parent.fds[0], to_child.fds[1]);
    runner.join();
    EXPECT_TRUE(Passed(result));
  }

  // The child's side of SendToChildSrq: tells the parent its SRQ's number.
  static void TellSrqNumber(const ChildXrcSrq& child, int to_parent) {
    uint32_t num = 0;
    ASSERT_EQ(ibv_get_srq_num(child.srq.get(), &num), 0);
    ASSERT_EQ(write(to_parent, &num, sizeof num), static_cast<ssize_t>(sizeof num));
  }

  // The parent's side of a child that owns an XRC SRQ: reads the SRQ's number from the child, sends
  // it `length` bytes of send_buf_ as it is (wr_id 5), expects the send to complete with success,
  // and tells the child it is done.
  void SendToChildSrq(int from_child, int to_child, uint32_t length = 64) {
    uint32_t srq_num = 0;
    const bool got_number =
        WaitReadable(from_child, kChildTimeout) && read(from_child, &srq_num, sizeof srq_num) == 4;
    if (got_number) {
      EXPECT_EQ(SendTo(srq_num, 5, /*fill=*/false, length), 0);
      ibv_wc wc = {};
      EXPECT_TRUE(PollOneCompletion(send_cq_.get(), &wc, kChildTimeout / 2));
      EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
    }
    EXPECT_EQ(write(to_child, "x", 1), 1);
    EXPECT_TRUE(got_number) << "the child never sent its SRQ number";
  }

  void CreateXrcSrq(ibv_xrcd* xrcd, ibv_cq* cq, SrqPtr* out) {
    ibv_srq_init_attr_ex attr = XrcSrqAttr(xrcd, cq);
    errno = 0;
    out->reset(ibv_create_srq_ex(context(), &attr));
    ASSERT_NE(*out, nullptr) << "ibv_create_srq_ex: " << ErrnoName(errno);
  }

  uint32_t SrqNum(ibv_srq* srq) {
    uint32_t num = 0;
    EXPECT_EQ(ibv_get_srq_num(srq, &num), 0);
    return num;
  }

  void CreateTarget(ibv_xrcd* xrcd) {
    ibv_qp_init_attr_ex attr = {};
    attr.qp_type = IBV_QPT_XRC_RECV;
    attr.comp_mask = IBV_QP_INIT_ATTR_XRCD;
    attr.xrcd = xrcd;
    errno = 0;
    target_.reset(ibv_create_qp_ex(context(), &attr));
    ASSERT_NE(target_, nullptr) << "ibv_create_qp_ex(XRC_RECV): " << ErrnoName(errno);
  }

  // send_ops_flags != 0: the initiator is made for the ibv_wr_* API.
  void CreateInitiator(uint64_t send_ops_flags = 0) {
    ibv_qp_init_attr_ex attr = {};
    attr.qp_type = IBV_QPT_XRC_SEND;
    attr.send_cq = send_cq_.get();
    attr.cap.max_send_wr = 16;
    attr.cap.max_send_sge = 1;
    attr.comp_mask = IBV_QP_INIT_ATTR_PD;
    attr.pd = pd();
    if (send_ops_flags) {
      attr.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
      attr.send_ops_flags = send_ops_flags;
    }
    errno = 0;
    initiator_.reset(ibv_create_qp_ex(context(), &attr));
    ASSERT_NE(initiator_, nullptr) << "ibv_create_qp_ex(XRC_SEND): " << ErrnoName(errno);
  }

  ibv_qp_attr RtrAttr(uint32_t dest_qpn) {
    ibv_qp_attr attr = {};
    attr.qp_state = IBV_QPS_RTR;
    attr.path_mtu = DefaultMtu();
    attr.dest_qp_num = dest_qpn;
    attr.rq_psn = 0;
    attr.min_rnr_timer = 1;
    attr.ah_attr = LocalAddress();
    return attr;
  }

  ibv_qp_attr RtsAttr() {
    ibv_qp_attr attr = {};
    attr.qp_state = IBV_QPS_RTS;
    attr.timeout = 14;
    attr.retry_cnt = 7;
    attr.rnr_retry = 7;
    attr.sq_psn = 0;
    return attr;
  }

  static constexpr int kRtrIni = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
  static constexpr int kRtrTgt = kRtrIni | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  static constexpr int kRtsTgt = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_SQ_PSN;
  static constexpr int kRtsIni = kRtsTgt | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;

  // Connects initiator_ and target_ to each other with the masks ibv_xsrq_pingpong uses.
  void ConnectXrc() {
    ASSERT_TRUE(ModifyToInit(initiator_.get(), port(), ConnectParams{}));
    ASSERT_TRUE(ModifyToInit(target_.get(), port(), ConnectParams{}));
    ibv_qp_attr attr = RtrAttr(initiator_->qp_num);
    ASSERT_EQ(ibv_modify_qp(target_.get(), &attr, kRtrTgt), 0) << "target to RTR";
    attr = RtsAttr();
    ASSERT_EQ(ibv_modify_qp(target_.get(), &attr, kRtsTgt), 0) << "target to RTS";
    attr = RtrAttr(target_->qp_num);
    ASSERT_EQ(ibv_modify_qp(initiator_.get(), &attr, kRtrIni), 0) << "initiator to RTR";
    attr = RtsAttr();
    ASSERT_EQ(ibv_modify_qp(initiator_.get(), &attr, kRtsIni), 0) << "initiator to RTS";
  }

  // A private domain with one XRC SRQ (xrc_srq_, completing into srq_cq_), a target QP in it and
  // an initiator (made for the ibv_wr_* API when send_ops_flags is not 0), connected to each other.
  void ConnectThroughXrcSrq(uint64_t send_ops_flags = 0) {
    ASSERT_NO_FATAL_FAILURE(OpenPrivateXrcd());
    ASSERT_NO_FATAL_FAILURE(CreateXrcSrq(xrcd_.get(), srq_cq_.get(), &xrc_srq_));
    ASSERT_NO_FATAL_FAILURE(CreateTarget(xrcd_.get()));
    ASSERT_NO_FATAL_FAILURE(CreateInitiator(send_ops_flags));
    ASSERT_NO_FATAL_FAILURE(ConnectXrc());
  }

  void PostSrqReceive(ibv_srq* srq, uint64_t wr_id) {
    ibv_sge sge = recv_buf_.Sge(0, 256);
    ASSERT_EQ(PostSrqRecv(srq, wr_id, &sge, 1), 0);
  }

  // Sends `length` bytes of pattern from initiator_, naming the XRC SRQ `srq_num`.
  int SendTo(uint32_t srq_num, uint64_t wr_id, bool fill = true, uint32_t length = 64) {
    if (fill) send_buf_.FillPattern(7);
    ibv_sge sge = send_buf_.Sge(0, length);
    ibv_send_wr wr = SendWr(wr_id, &sge, 1);
    wr.qp_type.xrc.remote_srqn = srq_num;
    return PostOne(initiator_.get(), wr);
  }

  // A message sent to srq_ arrived there (and its send completed).
  void ExpectDelivered(uint64_t send_wr_id, uint64_t recv_wr_id) {
    ibv_wc wc = {};
    ASSERT_TRUE(PollOneCompletion(srq_cq_.get(), &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
    EXPECT_EQ(wc.wr_id, recv_wr_id) << DescribeWc(wc);
    EXPECT_EQ(wc.opcode, IBV_WC_RECV) << DescribeWc(wc);
    EXPECT_EQ(wc.byte_len, 64u) << DescribeWc(wc);
    EXPECT_EQ(wc.qp_num, target_->qp_num) << DescribeWc(wc);
    EXPECT_EQ(recv_buf_.Bytes(0, 64), Pattern(7, 64));
    ASSERT_TRUE(PollOneCompletion(send_cq_.get(), &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
    EXPECT_EQ(wc.wr_id, send_wr_id) << DescribeWc(wc);
  }

  // Destroyed last to first: QPs, SRQs, CQs, domains, file.
  TempFile file_;
  XrcdPtr xrcd_;
  XrcdPtr other_xrcd_;
  CqPtr send_cq_;
  CqPtr srq_cq_;
  CqPtr other_srq_cq_;
  Buffer send_buf_;
  Buffer recv_buf_;
  SrqPtr xrc_srq_;
  SrqPtr other_srq_;
  QpPtr target_;
  QpPtr initiator_;
};

using XrcdTest = XrcTest;
using XrcSrqTest = XrcTest;
using XrcQpTest = XrcTest;

// ---- XRC domains

// Rule: ibv_open_xrcd(3): "If fd equals -1, no inode is associated with the XRCD. To indicate that
//   XRCD should be created, use oflag = O_CREAT." ibv_close_xrcd returns 0 on success.
// Checks: a private domain opens, names the context, and closes with 0.
TEST_F(XrcdTest, OpenPrivateSucceeds) {
  ibv_xrcd* xrcd = OpenXrcd(-1, O_CREAT);
  ASSERT_NE(xrcd, nullptr) << "ibv_open_xrcd: " << ErrnoName(errno);
  EXPECT_EQ(xrcd->context, context());
  EXPECT_EQ(ibv_close_xrcd(xrcd), 0);
}

// Rule: ibv_open_xrcd(3): O_CREAT "Indicates that an XRCD should be created and associated with the
//   inode referenced by the given fd"; without it the kernel (ib_uverbs_open_xrcd) fails with EAGAIN
//   when the inode has no XRCD.
// Checks: opening a fresh file's inode with oflags 0 returns NULL with errno EAGAIN.
TEST_F(XrcdTest, NewInodeWithoutCreateFailsEagain) {
  EXPECT_THAT(CaptureErrno([&] { return OpenXrcd(file_.fd(), 0); }), ReturnsNullWithErrno(EAGAIN));
}

// Rule: ibv_open_xrcd(3): "If O_EXCL and O_CREAT are set, open will fail if an XRCD associated with the
//   inode exists" (EINVAL in ib_uverbs_open_xrcd).
// Checks: after an O_CREAT open of the inode, O_CREAT | O_EXCL returns NULL with errno EINVAL.
TEST_F(XrcdTest, ExistingInodeWithExclFailsEinval) {
  xrcd_.reset(OpenXrcd(file_.fd(), O_CREAT));
  ASSERT_NE(xrcd_, nullptr) << "ibv_open_xrcd: " << ErrnoName(errno);
  EXPECT_THAT(CaptureErrno([&] { return OpenXrcd(file_.fd(), O_CREAT | O_EXCL); }), ReturnsNullWithErrno(EINVAL));
}

// Rule: ibv_open_xrcd(3): "If the XRCD exists, this flag has no effect"; ibv_close_xrcd(3): "If this is
//   the last reference, the XRCD will be destroyed."
// Checks: a second open of the same inode without O_CREAT succeeds once the XRCD exists, and both
//   handles close with 0.
TEST_F(XrcdTest, ExistingInodeOpensWithoutCreate) {
  ibv_xrcd* first = OpenXrcd(file_.fd(), O_CREAT);
  ASSERT_NE(first, nullptr) << "ibv_open_xrcd: " << ErrnoName(errno);
  ibv_xrcd* second = OpenXrcd(file_.fd(), 0);
  EXPECT_NE(second, nullptr) << "ibv_open_xrcd: " << ErrnoName(errno);
  if (second) {
    EXPECT_EQ(ibv_close_xrcd(second), 0);
  }
  EXPECT_EQ(ibv_close_xrcd(first), 0);
}

// Rule: ibv_close_device(3) leaves the destruction of the context's objects to the kernel, which destroys
//   its XRCDs (uverbs_free_xrcd -> ib_uverbs_dealloc_xrcd drops the inode's reference; with the last, the
//   inode has no XRCD any more).
// Checks: an XRCD opened with O_CREAT on a file in a second context of the device, that context closed
//   without ibv_close_xrcd: opening the inode without O_CREAT then fails with EAGAIN, and with
//   O_CREAT | O_EXCL succeeds.
TEST_F(XrcdTest, DomainEndsWithTheContextOfItsLastHandle) {
  std::string error;
  ContextPtr other = OpenDeviceByName(device_name(), &error);
  ASSERT_NE(other, nullptr) << error;
  ibv_xrcd_init_attr attr = {};
  attr.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
  attr.fd = file_.fd();
  attr.oflags = O_CREAT;
  ASSERT_NE(ibv_open_xrcd(other.get(), &attr), nullptr) << "ibv_open_xrcd: " << ErrnoName(errno);
  other.reset();  // ibv_close_device, the XRCD still open
  EXPECT_THAT(CaptureErrno([&] { return OpenXrcd(file_.fd(), 0); }), ReturnsNullWithErrno(EAGAIN));
  xrcd_.reset(OpenXrcd(file_.fd(), O_CREAT | O_EXCL));
  EXPECT_NE(xrcd_, nullptr) << "ibv_open_xrcd(O_CREAT | O_EXCL): " << ErrnoName(errno);
}

// Rule: ibv_open_xrcd(3): "fd is the file descriptor to associate with the XRCD"; a descriptor that is
//   not open fails with EBADF (ib_uverbs_open_xrcd: fdget).
// Checks: a closed descriptor returns NULL with errno EBADF.
TEST_F(XrcdTest, ClosedFdFailsEbadf) {
  const int fd = dup(file_.fd());
  ASSERT_GE(fd, 0);
  close(fd);
  EXPECT_THAT(CaptureErrno([&] { return OpenXrcd(fd, O_CREAT); }), ReturnsNullWithErrno(EBADF));
}

// Rule: ibv_open_xrcd(3): comp_mask "Identifies valid fields"; libibverbs (ibv_cmd_open_xrcd) requires
//   both IBV_XRCD_INIT_ATTR_FD and IBV_XRCD_INIT_ATTR_OFLAGS and fails with EINVAL otherwise.
// Checks: a comp_mask without IBV_XRCD_INIT_ATTR_FD returns NULL with errno EINVAL.
TEST_F(XrcdTest, MissingFdMaskFailsEinval) {
  ibv_xrcd_init_attr attr = {};
  attr.comp_mask = IBV_XRCD_INIT_ATTR_OFLAGS;
  attr.fd = -1;
  attr.oflags = O_CREAT;
  EXPECT_THAT(CaptureErrno([&] { return ibv_open_xrcd(context(), &attr); }), ReturnsNullWithErrno(EINVAL));
}

// Rule: ibv_open_xrcd(3) NOTES: "ibv_close_xrcd() may fail if any other resource is still associated
//   with the XRCD being closed" (EBUSY: the kernel's XRCD usecnt).
// Checks: closing a domain with an XRC SRQ returns EBUSY; after the SRQ is destroyed it returns 0.
TEST_F(XrcdTest, CloseWithSrqFailsEbusy) {
  ASSERT_NO_FATAL_FAILURE(OpenPrivateXrcd());
  ASSERT_NO_FATAL_FAILURE(CreateXrcSrq(xrcd_.get(), srq_cq_.get(), &xrc_srq_));
  EXPECT_THAT(ibv_close_xrcd(xrcd_.get()), ReturnsErrno(EBUSY));
  ASSERT_EQ(ibv_destroy_srq(xrc_srq_.release()), 0);
  EXPECT_EQ(ibv_close_xrcd(xrcd_.release()), 0);
}

// Rule: ibv_open_xrcd(3) NOTES: "ibv_close_xrcd() may fail if any other resource is still associated
//   with the XRCD being closed".
// Checks: closing a domain with an XRC_RECV QP returns EBUSY; after the QP is destroyed it returns 0.
TEST_F(XrcdTest, CloseWithTargetQpFailsEbusy) {
  ASSERT_NO_FATAL_FAILURE(OpenPrivateXrcd());
  ASSERT_NO_FATAL_FAILURE(CreateTarget(xrcd_.get()));
  EXPECT_THAT(ibv_close_xrcd(xrcd_.get()), ReturnsErrno(EBUSY));
  ASSERT_EQ(ibv_destroy_qp(target_.release()), 0);
  EXPECT_EQ(ibv_close_xrcd(xrcd_.release()), 0);
}

// ---- XRC SRQs

// Rule: ibv_get_srq_num(3): "return the srq number associated with the given XRC shared receive
//   queue"; it returns 0 on success.
// Checks: two XRC SRQs of one domain are created and report different SRQ numbers.
TEST_F(XrcSrqTest, NumbersAreDistinct) {
  ASSERT_NO_FATAL_FAILURE(OpenPrivateXrcd());
  ASSERT_NO_FATAL_FAILURE(CreateXrcSrq(xrcd_.get(), srq_cq_.get(), &xrc_srq_));
  ASSERT_NO_FATAL_FAILURE(CreateXrcSrq(xrcd_.get(), other_srq_cq_.get(), &other_srq_));
  uint32_t first = 0;
  uint32_t second = 0;
  ASSERT_EQ(ibv_get_srq_num(xrc_srq_.get(), &first), 0);
  ASSERT_EQ(ibv_get_srq_num(other_srq_.get(), &second), 0);
  EXPECT_NE(first, second);
  EXPECT_EQ(xrc_srq_->context, context());
}

// Rule: ibv_create_srq_ex(3): "xrcd and cq ... are valid only when srq_type is IBV_SRQT_XRC"; the
//   kernel (ib_uverbs_create_srq) fails an XRC SRQ without its CQ with EINVAL.
// Checks: an XRC SRQ without IBV_SRQ_INIT_ATTR_CQ returns NULL with errno EINVAL.
TEST_F(XrcSrqTest, WithoutCqFailsEinval) {
  ASSERT_NO_FATAL_FAILURE(OpenPrivateXrcd());
  ibv_srq_init_attr_ex attr = XrcSrqAttr(xrcd_.get(), nullptr);
  attr.comp_mask &= ~IBV_SRQ_INIT_ATTR_CQ;
  EXPECT_THAT(CaptureErrno([&] { return ibv_create_srq_ex(context(), &attr); }), ReturnsNullWithErrno(EINVAL));
}

// Rule: ibv_create_srq_ex(3): an XRC SRQ belongs to the XRC domain given in xrcd; the kernel
//   (ib_uverbs_create_srq) fails an XRC SRQ without its XRCD with EINVAL.
// Checks: an XRC SRQ without IBV_SRQ_INIT_ATTR_XRCD returns NULL with errno EINVAL.
TEST_F(XrcSrqTest, WithoutXrcdFailsEinval) {
  ibv_srq_init_attr_ex attr = XrcSrqAttr(nullptr, srq_cq_.get());
  attr.comp_mask &= ~IBV_SRQ_INIT_ATTR_XRCD;
  EXPECT_THAT(CaptureErrno([&] { return ibv_create_srq_ex(context(), &attr); }), ReturnsNullWithErrno(EINVAL));
}

// Rule: the kernel's create_qp (drivers/infiniband/core/uverbs_cmd.c) refuses an XRC SRQ for any QP
//   but an XRC target QP (which takes its SRQ per message): EINVAL.
// Checks: ibv_create_qp of an RC QP with an XRC SRQ as its srq returns NULL with errno EINVAL, and
//   the SRQ can be destroyed at once (nothing uses it).
TEST_F(XrcSrqTest, RcQpOnXrcSrqFailsEinval) {
  ASSERT_NO_FATAL_FAILURE(OpenPrivateXrcd());
  ASSERT_NO_FATAL_FAILURE(CreateXrcSrq(xrcd_.get(), srq_cq_.get(), &xrc_srq_));
  ibv_qp_init_attr init = {};
  init.qp_type = IBV_QPT_RC;
  init.send_cq = init.recv_cq = send_cq_.get();
  init.srq = xrc_srq_.get();
  init.cap.max_send_wr = 1;
  init.cap.max_send_sge = 1;
  errno = 0;
  QpPtr qp(ibv_create_qp(pd(), &init));
  EXPECT_EQ(qp, nullptr);
  EXPECT_EQ(errno, EINVAL) << ErrnoName(errno);
  qp.reset();
  EXPECT_EQ(ibv_destroy_srq(xrc_srq_.release()), 0);
}

// Rule: (simulator) simverbs_fail_after(name, calls, err): "`calls` more calls succeed, the next one
//   fails" (sim/include/simverbs/simverbs.h); an XRC SRQ is one call of "create_srq".
// Checks: with "create_srq" armed to fail after 1 call, the first XRC SRQ is created and the second
//   fails with ENOMEM.
TEST_F(XrcSrqTest, FaultPointCountsAnXrcSrqOnce) {
  SKIP_IF(!Sim()) << "(the fault point is the simulator's)";
  ASSERT_NO_FATAL_FAILURE(OpenPrivateXrcd());
  ASSERT_EQ(sim().FailAfter("create_srq", 1, ENOMEM), 0);
  ibv_srq_init_attr_ex attr = XrcSrqAttr(xrcd_.get(), srq_cq_.get());
  errno = 0;
  xrc_srq_.reset(ibv_create_srq_ex(context(), &attr));
  EXPECT_NE(xrc_srq_, nullptr) << "the first: " << ErrnoName(errno);
  errno = 0;
  other_srq_.reset(ibv_create_srq_ex(context(), &attr));
  EXPECT_EQ(other_srq_, nullptr) << "the second was created";
  EXPECT_EQ(errno, ENOMEM) << ErrnoName(errno);
  sim().ClearFaults();
}

// Rule: ibv_destroy_cq(3): "fails if any queue pair is still associated with this CQ"; an XRC SRQ
//   completes into its CQ and holds it the same way (the kernel's CQ usecnt: EBUSY).
// Checks: destroying the CQ of a live XRC SRQ returns EBUSY.
TEST_F(XrcSrqTest, CqOfSrqIsBusy) {
  ASSERT_NO_FATAL_FAILURE(OpenPrivateXrcd());
  ASSERT_NO_FATAL_FAILURE(CreateXrcSrq(xrcd_.get(), srq_cq_.get(), &xrc_srq_));
  EXPECT_THAT(ibv_destroy_cq(srq_cq_.get()), ReturnsErrno(EBUSY));
}

// ---- XRC QPs

// Rule: ibv_create_qp_ex(3): comp_mask IBV_QP_INIT_ATTR_CREATE_FLAGS makes create_flags valid; with no flag
//   set it asks for nothing (mlx5 takes the bit for every QP type: MLX5_CREATE_QP_SUP_COMP_MASK).
// Checks: an XRC_RECV QP asked for with IBV_QP_INIT_ATTR_CREATE_FLAGS and create_flags 0 is created.
TEST_F(XrcQpTest, TargetTakesCreateFlagsWithNoFlagSet) {
  ASSERT_NO_FATAL_FAILURE(OpenPrivateXrcd());
  ibv_qp_init_attr_ex attr = {};
  attr.qp_type = IBV_QPT_XRC_RECV;
  attr.comp_mask = IBV_QP_INIT_ATTR_XRCD | IBV_QP_INIT_ATTR_CREATE_FLAGS;
  attr.xrcd = xrcd_.get();
  errno = 0;
  target_.reset(ibv_create_qp_ex(context(), &attr));
  EXPECT_NE(target_, nullptr) << "ibv_create_qp_ex(XRC_RECV, CREATE_FLAGS 0): " << ErrnoName(errno);
}

// Rule: IBTA / the kernel's qp_state_table (ib_modify_qp_is_ok): INIT -> RTR of an XRC_TGT QP requires
//   AV, PATH_MTU, DEST_QPN, RQ_PSN, MAX_DEST_RD_ATOMIC and MIN_RNR_TIMER; ibv_modify_qp fails with EINVAL.
// Checks: an XRC_RECV QP refused RTR without MIN_RNR_TIMER, then accepts the full mask.
TEST_F(XrcQpTest, TargetRtrRequiresMinRnrTimer) {
  ASSERT_NO_FATAL_FAILURE(OpenPrivateXrcd());
  ASSERT_NO_FATAL_FAILURE(CreateTarget(xrcd_.get()));
  ASSERT_TRUE(ModifyToInit(target_.get(), port(), ConnectParams{}));
  ibv_qp_attr attr = RtrAttr(target_->qp_num);
  EXPECT_THAT(ibv_modify_qp(target_.get(), &attr, kRtrTgt & ~IBV_QP_MIN_RNR_TIMER), ReturnsErrno(EINVAL));
  EXPECT_EQ(ibv_modify_qp(target_.get(), &attr, kRtrTgt), 0);
}

// Rule: ibv_modify_qp(3) reaches the kernel's modify_qp (drivers/infiniband/core/uverbs_cmd.c), which
//   drops MAX_DEST_RD_ATOMIC and MIN_RNR_TIMER from an XRC_INI QP's mask (modify_qp_mask) before the
//   qp_state_table checks it; INIT -> RTR still requires AV, PATH_MTU, DEST_QPN and RQ_PSN.
// Checks: an XRC_SEND QP refuses RTR without PATH_MTU (EINVAL), then accepts RTR with the required mask
//   plus MIN_RNR_TIMER and MAX_DEST_RD_ATOMIC (the RC mask, as perftest -c XRC passes it).
TEST_F(XrcQpTest, InitiatorRtrIgnoresResponderAttributes) {
  ASSERT_NO_FATAL_FAILURE(CreateInitiator());
  ASSERT_TRUE(ModifyToInit(initiator_.get(), port(), ConnectParams{}));
  ibv_qp_attr attr = RtrAttr(initiator_->qp_num);
  EXPECT_THAT(ibv_modify_qp(initiator_.get(), &attr, kRtrIni & ~IBV_QP_PATH_MTU), ReturnsErrno(EINVAL));
  EXPECT_EQ(ibv_modify_qp(initiator_.get(), &attr, kRtrIni | IBV_QP_MIN_RNR_TIMER | IBV_QP_MAX_DEST_RD_ATOMIC), 0);
}

// Rule: the kernel's qp_state_table: RTR -> RTS of an XRC_INI QP requires TIMEOUT, RETRY_CNT, RNR_RETRY,
//   SQ_PSN and MAX_QP_RD_ATOMIC, of an XRC_TGT QP only TIMEOUT and SQ_PSN; uverbs' modify_qp_mask drops
//   MAX_QP_RD_ATOMIC, RETRY_CNT and RNR_RETRY from an XRC_TGT QP's mask first.
// Checks: the initiator refuses RTS with the target's mask; the target accepts the initiator's.
TEST_F(XrcQpTest, RtsMasksDifferPerHalf) {
  ASSERT_NO_FATAL_FAILURE(OpenPrivateXrcd());
  ASSERT_NO_FATAL_FAILURE(CreateTarget(xrcd_.get()));
  ASSERT_NO_FATAL_FAILURE(CreateInitiator());
  ASSERT_TRUE(ModifyToInit(initiator_.get(), port(), ConnectParams{}));
  ASSERT_TRUE(ModifyToInit(target_.get(), port(), ConnectParams{}));
  ibv_qp_attr attr = RtrAttr(target_->qp_num);
  ASSERT_EQ(ibv_modify_qp(initiator_.get(), &attr, kRtrIni), 0);
  attr = RtrAttr(initiator_->qp_num);
  ASSERT_EQ(ibv_modify_qp(target_.get(), &attr, kRtrTgt), 0);
  attr = RtsAttr();
  EXPECT_THAT(ibv_modify_qp(initiator_.get(), &attr, kRtsTgt), ReturnsErrno(EINVAL));
  EXPECT_EQ(ibv_modify_qp(target_.get(), &attr, kRtsIni), 0);
}

// Rule: ibv_post_send(3): wr.qp_type.xrc.remote_srqn is "the remote XRC SRQ number" of an XRC_SEND
//   QP's send; the message consumes a receive of that SRQ and completes on the SRQ's CQ, with qp_num
//   the XRC_RECV QP that received it (ibv_create_srq_ex(3): cq is "the CQ to associate with the XRC SRQ").
// Checks: of two XRC SRQs in the domain, only the one named gets the completion (status, wr_id,
//   byte_len, qp_num of the target, the bytes); the send completes with success.
TEST_F(XrcQpTest, SendArrivesInNamedSrq) {
  ASSERT_NO_FATAL_FAILURE(OpenPrivateXrcd());
  ASSERT_NO_FATAL_FAILURE(CreateXrcSrq(xrcd_.get(), srq_cq_.get(), &xrc_srq_));
  ASSERT_NO_FATAL_FAILURE(CreateXrcSrq(xrcd_.get(), other_srq_cq_.get(), &other_srq_));
  ASSERT_NO_FATAL_FAILURE(CreateTarget(xrcd_.get()));
  ASSERT_NO_FATAL_FAILURE(CreateInitiator());
  ASSERT_NO_FATAL_FAILURE(ConnectXrc());
  ASSERT_NO_FATAL_FAILURE(PostSrqReceive(xrc_srq_.get(), 11));
  ASSERT_NO_FATAL_FAILURE(PostSrqReceive(other_srq_.get(), 12));
  ASSERT_EQ(SendTo(SrqNum(xrc_srq_.get()), 1), 0);
  ASSERT_NO_FATAL_FAILURE(ExpectDelivered(1, 11));
  EXPECT_TRUE(NoCompletionWithin(other_srq_cq_.get()));
}

// Rule: an XRC_RECV QP has no CQ of its own (ibv_create_qp_ex(3): "XRC_RECV QPs ... have no send or
//   receive queues"): the completions of what it received belong to the XRC SRQ's CQ, and moving it to
//   RESET or destroying it takes none away (mlx5_destroy_qp and the RESET path of mlx5_modify_qp clean
//   the QP's recv_cq, which is NULL for an XRC target: __mlx5_cq_clean returns at once).
// Checks: a message delivered into the XRC SRQ, its send completed, the SRQ's CQ not polled yet: after
//   the target QP goes to RESET and is then destroyed, the SRQ's CQ still holds the receive completion.
TEST_F(XrcQpTest, TargetResetOrDestroyKeepsTheSrqCompletions) {
  ASSERT_NO_FATAL_FAILURE(ConnectThroughXrcSrq());
  ASSERT_NO_FATAL_FAILURE(PostSrqReceive(xrc_srq_.get(), 11));
  ASSERT_EQ(SendTo(SrqNum(xrc_srq_.get()), 1), 0);
  ibv_wc wc = {};
  ASSERT_TRUE(PollOneCompletion(send_cq_.get(), &wc));
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
  const uint32_t target_qpn = target_->qp_num;
  ibv_qp_attr reset = {};
  reset.qp_state = IBV_QPS_RESET;
  ASSERT_EQ(ibv_modify_qp(target_.get(), &reset, IBV_QP_STATE), 0) << "target to RESET";
  target_.reset();
  ASSERT_TRUE(PollOneCompletion(srq_cq_.get(), &wc)) << "the receive completion was taken away";
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
  EXPECT_EQ(wc.wr_id, 11u) << DescribeWc(wc);
  EXPECT_EQ(wc.qp_num, target_qpn) << DescribeWc(wc);
}

// Rule: ibv_wr_post(3): ibv_wr_set_xrc_srqn sets "the XRC SRQ number" of the WR being built, as
//   remote_srqn does for ibv_post_send.
// Checks: a send built with ibv_wr_send + ibv_wr_set_xrc_srqn arrives in the named XRC SRQ.
TEST_F(XrcQpTest, WrApiSetXrcSrqnNamesSrq) {
  ASSERT_NO_FATAL_FAILURE(ConnectThroughXrcSrq(IBV_QP_EX_WITH_SEND));
  ASSERT_NO_FATAL_FAILURE(PostSrqReceive(xrc_srq_.get(), 21));
  send_buf_.FillPattern(7);
  ibv_qp_ex* qpx = ibv_qp_to_qp_ex(initiator_.get());
  ASSERT_NE(qpx, nullptr);
  ibv_wr_start(qpx);
  qpx->wr_id = 2;
  qpx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send(qpx);
  ibv_wr_set_xrc_srqn(qpx, SrqNum(xrc_srq_.get()));
  ibv_wr_set_sge(qpx, send_buf_.lkey(), send_buf_.addr(), 64);
  ASSERT_EQ(ibv_wr_complete(qpx), 0);
  ASSERT_NO_FATAL_FAILURE(ExpectDelivered(2, 21));
}

// Rule: ibv_open_xrcd(3): O_CREAT associates the XRCD "with the inode referenced by the given fd", and
//   an open of an inode whose XRCD exists opens that XRCD: handles on one inode are one domain.
// Checks: a target QP made with one handle delivers into an XRC SRQ made with another handle on the
//   same file.
TEST_F(XrcQpTest, HandlesOnOneInodeShareDomain) {
  xrcd_.reset(OpenXrcd(file_.fd(), O_CREAT));
  ASSERT_NE(xrcd_, nullptr) << "ibv_open_xrcd: " << ErrnoName(errno);
  other_xrcd_.reset(OpenXrcd(file_.fd(), 0));
  ASSERT_NE(other_xrcd_, nullptr) << "ibv_open_xrcd: " << ErrnoName(errno);
  ASSERT_NO_FATAL_FAILURE(CreateXrcSrq(other_xrcd_.get(), srq_cq_.get(), &xrc_srq_));
  ASSERT_NO_FATAL_FAILURE(CreateTarget(xrcd_.get()));
  ASSERT_NO_FATAL_FAILURE(CreateInitiator());
  ASSERT_NO_FATAL_FAILURE(ConnectXrc());
  ASSERT_NO_FATAL_FAILURE(PostSrqReceive(xrc_srq_.get(), 31));
  ASSERT_EQ(SendTo(SrqNum(xrc_srq_.get()), 3), 0);
  ASSERT_NO_FATAL_FAILURE(ExpectDelivered(3, 31));
}

// Rule: IBTA Annex A14 (XRC): a target QP delivers only into XRC SRQs of its own XRC domain; a request
//   naming an SRQ of another domain is not executed and is answered as an invalid request, which
//   completes the send with IBV_WC_REM_INV_REQ_ERR (ibv_poll_cq(3): "Remote Invalid Request Error").
// Checks: a send naming an XRC SRQ of another (private) domain completes with IBV_WC_REM_INV_REQ_ERR
//   and nothing arrives on that SRQ's CQ.
TEST_F(XrcQpTest, SrqOfOtherDomainIsRemoteInvalidRequest) {
  ASSERT_NO_FATAL_FAILURE(OpenPrivateXrcd());
  other_xrcd_.reset(OpenXrcd(-1, O_CREAT));
  ASSERT_NE(other_xrcd_, nullptr) << "ibv_open_xrcd: " << ErrnoName(errno);
  ASSERT_NO_FATAL_FAILURE(CreateXrcSrq(other_xrcd_.get(), other_srq_cq_.get(), &other_srq_));
  ASSERT_NO_FATAL_FAILURE(CreateTarget(xrcd_.get()));
  ASSERT_NO_FATAL_FAILURE(CreateInitiator());
  ASSERT_NO_FATAL_FAILURE(ConnectXrc());
  ASSERT_NO_FATAL_FAILURE(PostSrqReceive(other_srq_.get(), 41));
  ASSERT_EQ(SendTo(SrqNum(other_srq_.get()), 4), 0);
  ibv_wc wc = {};
  ASSERT_TRUE(PollOneCompletion(send_cq_.get(), &wc));
  EXPECT_EQ(wc.status, IBV_WC_REM_INV_REQ_ERR) << DescribeWc(wc);
  EXPECT_EQ(wc.wr_id, 4u) << DescribeWc(wc);
  EXPECT_TRUE(NoCompletionWithin(other_srq_cq_.get()));
}

// Rule: ibv_destroy_srq(3): "fails if any queue pair is still associated with this SRQ"; an XRC_RECV QP
//   is created with no SRQ (ibv_create_qp_ex(3)) and only names one per message, so it holds none.
// Checks: after a message was delivered into an XRC SRQ through a target QP, ibv_destroy_srq returns 0
//   while the target QP exists, and a later send naming the destroyed SRQ's number does not complete
//   successfully.
TEST_F(XrcQpTest, SrqDestroyDoesNotWaitForTargetQp) {
  ASSERT_NO_FATAL_FAILURE(ConnectThroughXrcSrq());
  ASSERT_NO_FATAL_FAILURE(PostSrqReceive(xrc_srq_.get(), 61));
  const uint32_t srq_num = SrqNum(xrc_srq_.get());
  ASSERT_EQ(SendTo(srq_num, 6), 0);
  ASSERT_NO_FATAL_FAILURE(ExpectDelivered(6, 61));
  ASSERT_EQ(ibv_destroy_srq(xrc_srq_.release()), 0);
  ASSERT_EQ(SendTo(srq_num, 7), 0);
  ibv_wc wc = {};
  ASSERT_TRUE(PollOneCompletion(send_cq_.get(), &wc));
  EXPECT_NE(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
}

// Rule: ibv_open_xrcd(3): an XRCD is "associated with the inode referenced by the given fd", so
//   processes that open the same file share it (the reason XRC exists); ibv_post_send(3): remote_srqn
//   names the XRC SRQ that receives, whichever process of the domain created it.
// Checks: a child process opens the same domain file, creates an XRC SRQ and posts a receive; the
//   parent's XRC_SEND -> XRC_RECV pair sends naming that SRQ; the child's SRQ CQ gets the message (the
//   parent's target QP number, 64 bytes, the pattern) and the parent's send completes with success.
TEST_F(XrcQpTest, SrqOfAnotherProcessReceives) {
  xrcd_.reset(OpenXrcd(file_.fd(), O_CREAT));
  ASSERT_NE(xrcd_, nullptr) << "ibv_open_xrcd: " << ErrnoName(errno);
  ASSERT_NO_FATAL_FAILURE(CreateTarget(xrcd_.get()));
  ASSERT_NO_FATAL_FAILURE(CreateInitiator());
  ASSERT_NO_FATAL_FAILURE(ConnectXrc());
  // Written before the fork: the parent does not touch its registered pages afterwards.
  send_buf_.FillPattern(7);
  const uint32_t target_qpn = target_->qp_num;
  const int domain_fd = file_.fd();
  RunWithChildProcess(
      "an XRC SRQ in a child process",
      [&](int from_parent, int to_parent) {
        ChildXrcSrq child;
        ASSERT_NO_FATAL_FAILURE(CreateXrcSrqInChild(domain_fd, &child));
        Buffer buf;
        ASSERT_TRUE(buf.Register(child.pd.get(), 4096));
        ibv_sge sge = buf.Sge(0, 256);
        ASSERT_EQ(PostSrqRecv(child.srq.get(), 51, &sge, 1), 0);
        ASSERT_NO_FATAL_FAILURE(TellSrqNumber(child, to_parent));
        ibv_wc wc = {};
        ASSERT_TRUE(PollOneCompletion(child.cq.get(), &wc, kChildTimeout / 2));
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
        EXPECT_EQ(wc.wr_id, 51u) << DescribeWc(wc);
        EXPECT_EQ(wc.byte_len, 64u) << DescribeWc(wc);
        EXPECT_EQ(wc.qp_num, target_qpn) << DescribeWc(wc);
        EXPECT_EQ(buf.Bytes(0, 64), Pattern(7, 64));
        // The SRQ stays until the parent has seen its send complete.
        ASSERT_TRUE(WaitReadable(from_parent, kChildTimeout / 2));
      },
      [&](int from_child, int to_child) { SendToChildSrq(from_child, to_child); });
}

// Rule: ibv_post_send(3) and IBTA ch. 9 (RC is reliable): an XRC message arrives whole in the SRQ
//   it names, or not at all; a packet lost on the way is sent again, never completed around.
// Checks: a child owns an XRC SRQ of the domain and arms its fault point "deliver_packet" to lose
//   the second packet it takes (simulator only); the parent sends it a message of four path MTUs.
//   The child's receive completes with success, byte_len the whole message and its bytes; the
//   parent's send completes with success.
TEST_F(XrcQpTest, MessageToSrqOfAnotherProcessArrivesWholeDespiteALoss) {
  SKIP_IF(!Sim()) << "(the fault point is the simulator's)";
  xrcd_.reset(OpenXrcd(file_.fd(), O_CREAT));
  ASSERT_NE(xrcd_, nullptr) << "ibv_open_xrcd: " << ErrnoName(errno);
  ASSERT_NO_FATAL_FAILURE(CreateTarget(xrcd_.get()));
  ASSERT_NO_FATAL_FAILURE(CreateInitiator());
  ASSERT_NO_FATAL_FAILURE(ConnectXrc());
  const uint32_t length = 4u * (128u << DefaultMtu());
  ASSERT_LE(length, 4096u);
  send_buf_.FillPattern(9);
  const int domain_fd = file_.fd();
  RunWithChildProcess(
      "an XRC SRQ owner that loses a packet",
      [&](int from_parent, int to_parent) {
        ChildXrcSrq child;
        ASSERT_NO_FATAL_FAILURE(CreateXrcSrqInChild(domain_fd, &child));
        Buffer buf;
        ASSERT_TRUE(buf.Register(child.pd.get(), 4096));
        ibv_sge sge = buf.Sge(0, 4096);
        ASSERT_EQ(PostSrqRecv(child.srq.get(), 61, &sge, 1), 0);
        ASSERT_EQ(sim().FailAfter("deliver_packet", 1, ENOMEM), 0);
        ASSERT_NO_FATAL_FAILURE(TellSrqNumber(child, to_parent));
        ibv_wc wc = {};
        ASSERT_TRUE(PollOneCompletion(child.cq.get(), &wc, kChildTimeout / 2));
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
        EXPECT_EQ(wc.byte_len, length) << DescribeWc(wc);
        EXPECT_EQ(buf.Bytes(0, length), Pattern(9, length));
        ASSERT_TRUE(WaitReadable(from_parent, kChildTimeout / 2));
      },
      [&](int from_child, int to_child) { SendToChildSrq(from_child, to_child, length); });
}

// Rule: (simulator, default profile) a CQ that overruns goes to error with IBV_EVENT_CQ_ERR, and
//   each work queue associated with it goes to error with IBV_EVENT_QP_FATAL (IBTA 11.6.2: "Local
//   Work Queue Catastrophic Error"); an XRC target QP's receive queue is the XRC SRQ it delivered
//   into, so the target QP whose receive overran the SRQ's CQ is one of them.
// Checks: an XRC SRQ on a CQ of its own, with one receive more posted than the CQ holds, and that
//   many messages sent to it (each but the last completes with success); the context gets
//   IBV_EVENT_CQ_ERR for the CQ, then IBV_EVENT_QP_FATAL for the target QP, which is in ERR.
TEST_F(XrcQpTest, SrqCqOverrunFailsTheTargetQp) {
  SKIP_IF(!Sim()) << "(the overrun cascade is the simulator's default profile)";
  CqPtr small(ibv_create_cq(context(), 2, nullptr, nullptr, 0));
  ASSERT_NE(small, nullptr) << "ibv_create_cq: " << ErrnoName(errno);
  const uint32_t messages = static_cast<uint32_t>(small->cqe) + 1;
  ASSERT_LE(messages, 16u) << "the CQ holds " << small->cqe;
  ASSERT_NO_FATAL_FAILURE(OpenPrivateXrcd());
  ASSERT_NO_FATAL_FAILURE(CreateXrcSrq(xrcd_.get(), small.get(), &xrc_srq_));
  ASSERT_NO_FATAL_FAILURE(CreateTarget(xrcd_.get()));
  ASSERT_NO_FATAL_FAILURE(CreateInitiator());
  ASSERT_NO_FATAL_FAILURE(ConnectXrc());
  for (uint32_t k = 0; k < messages; ++k) ASSERT_NO_FATAL_FAILURE(PostSrqReceive(xrc_srq_.get(), k));
  for (uint32_t k = 0; k < messages; ++k) {
    ASSERT_EQ(SendTo(SrqNum(xrc_srq_.get()), k), 0);
    if (k + 1 == messages) break;  // the one that overruns: its target QP acknowledges nothing
    ibv_wc wc = {};
    ASSERT_TRUE(PollOneCompletion(send_cq_.get(), &wc)) << "message " << k;
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << "message " << k << ": " << DescribeWc(wc);
  }
  ibv_async_event event = {};
  ASSERT_TRUE(GetAsyncEventWithin(context(), &event, kReturnWindow)) << "no IBV_EVENT_CQ_ERR";
  EXPECT_EQ(event.event_type, IBV_EVENT_CQ_ERR) << ibv_event_type_str(event.event_type);
  ibv_ack_async_event(&event);
  ASSERT_TRUE(GetAsyncEventWithin(context(), &event, kReturnWindow))
      << "no IBV_EVENT_QP_FATAL for the target QP whose receive overran the SRQ's CQ";
  EXPECT_EQ(event.event_type, IBV_EVENT_QP_FATAL) << ibv_event_type_str(event.event_type);
  EXPECT_EQ(event.element.qp, target_.get());
  ibv_ack_async_event(&event);
  ibv_qp_state state = IBV_QPS_RESET;
  EXPECT_TRUE(QueryQpState(target_.get(), &state));
  EXPECT_EQ(state, IBV_QPS_ERR);
  // Destroyed before the CQ they use.
  initiator_.reset();
  target_.reset();
  xrc_srq_.reset();
}

// Rule: (simulator, default profile) a CQ that overruns goes to error with IBV_EVENT_CQ_ERR and takes
//   every QP that completes into it to error with IBV_EVENT_QP_FATAL (IBTA 11.6.2: CQ overrun is
//   an affiliated error of the QPs associated with the CQ), also when the completion that overran
//   it was an XRC SRQ's receive for a target QP of another process; that target QP, whose
//   receive queue (the SRQ) is associated with the CQ, goes to error with IBV_EVENT_QP_FATAL too.
// Checks: a child owns an XRC SRQ whose CQ also serves one of its RC QPs (in INIT); it posts one
//   receive more than the CQ holds and does not poll. The parent sends that many messages to the
//   SRQ (each but the last completes with success); the child then gets IBV_EVENT_CQ_ERR for the
//   CQ and IBV_EVENT_QP_FATAL for its RC QP, which is in ERR; the parent gets IBV_EVENT_QP_FATAL
//   for its target QP, which is in ERR.
TEST_F(XrcQpTest, SrqCqOverrunFromAnotherProcessFailsTheQpsOnIt) {
  SKIP_IF(!Sim()) << "(the overrun cascade is the simulator's default profile)";
  xrcd_.reset(OpenXrcd(file_.fd(), O_CREAT));
  ASSERT_NE(xrcd_, nullptr) << "ibv_open_xrcd: " << ErrnoName(errno);
  ASSERT_NO_FATAL_FAILURE(CreateTarget(xrcd_.get()));
  ASSERT_NO_FATAL_FAILURE(CreateInitiator());
  ASSERT_NO_FATAL_FAILURE(ConnectXrc());
  send_buf_.FillPattern(7);
  const int domain_fd = file_.fd();
  RunWithChildProcess(
      "an XRC SRQ owner whose CQ overruns",
      [&](int from_parent, int to_parent) {
        ChildXrcSrq child;
        ASSERT_NO_FATAL_FAILURE(CreateXrcSrqInChild(domain_fd, &child, 2, 16));
        ibv_qp_init_attr init = {};
        init.qp_type = IBV_QPT_RC;
        init.send_cq = init.recv_cq = child.cq.get();
        init.cap.max_send_wr = init.cap.max_recv_wr = 1;
        init.cap.max_send_sge = init.cap.max_recv_sge = 1;
        QpPtr local(ibv_create_qp(child.pd.get(), &init));
        ASSERT_NE(local, nullptr) << "ibv_create_qp: " << ErrnoName(errno);
        ASSERT_TRUE(ModifyToInit(local.get(), port(), ConnectParams{}));
        const uint32_t messages = static_cast<uint32_t>(child.cq->cqe) + 1;
        ASSERT_LE(messages, 16u) << "the CQ holds " << child.cq->cqe;
        Buffer buf;
        ASSERT_TRUE(buf.Register(child.pd.get(), 4096));
        for (uint32_t k = 0; k < messages; ++k) {
          ibv_sge sge = buf.Sge(64 * k, 64);
          ASSERT_EQ(PostSrqRecv(child.srq.get(), k, &sge, 1), 0);
        }
        uint32_t said[2] = {0, messages};
        ASSERT_EQ(ibv_get_srq_num(child.srq.get(), &said[0]), 0);
        ASSERT_EQ(write(to_parent, said, sizeof said), static_cast<ssize_t>(sizeof said));
        ASSERT_TRUE(WaitReadable(from_parent, kChildTimeout / 2)) << "the parent did not send";
        ibv_async_event event = {};
        ASSERT_TRUE(GetAsyncEventWithin(child.context.get(), &event, kReturnWindow)) << "no IBV_EVENT_CQ_ERR";
        EXPECT_EQ(event.event_type, IBV_EVENT_CQ_ERR) << ibv_event_type_str(event.event_type);
        ibv_ack_async_event(&event);
        ASSERT_TRUE(GetAsyncEventWithin(child.context.get(), &event, kReturnWindow))
            << "no IBV_EVENT_QP_FATAL for the RC QP on the CQ that overran";
        EXPECT_EQ(event.event_type, IBV_EVENT_QP_FATAL) << ibv_event_type_str(event.event_type);
        EXPECT_EQ(event.element.qp, local.get());
        ibv_ack_async_event(&event);
        ibv_qp_state state = IBV_QPS_RESET;
        EXPECT_TRUE(QueryQpState(local.get(), &state));
        EXPECT_EQ(state, IBV_QPS_ERR);
      },
      [&](int from_child, int to_child) {
        uint32_t said[2] = {0, 0};
        const bool got_number =
            WaitReadable(from_child, kChildTimeout) && read(from_child, said, sizeof said) == sizeof said;
        for (uint32_t k = 0; got_number && k < said[1]; ++k) {
          EXPECT_EQ(SendTo(said[0], k, /*fill=*/false), 0);
          if (k + 1 == said[1]) break;  // the one that overruns: its target QP acknowledges nothing
          ibv_wc wc = {};
          EXPECT_TRUE(PollOneCompletion(send_cq_.get(), &wc, kChildTimeout / 4)) << "message " << k;
          EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << "message " << k << ": " << DescribeWc(wc);
        }
        EXPECT_EQ(write(to_child, "s", 1), 1);
        EXPECT_TRUE(got_number) << "the child never sent its SRQ number";
        if (!got_number) return;
        ibv_async_event event = {};
        ASSERT_TRUE(GetAsyncEventWithin(context(), &event, kReturnWindow))
            << "no IBV_EVENT_QP_FATAL for the target QP whose receive overran the SRQ's CQ";
        EXPECT_EQ(event.event_type, IBV_EVENT_QP_FATAL) << ibv_event_type_str(event.event_type);
        EXPECT_EQ(event.element.qp, target_.get());
        ibv_ack_async_event(&event);
        ibv_qp_state state = IBV_QPS_RESET;
        EXPECT_TRUE(QueryQpState(target_.get(), &state));
        EXPECT_EQ(state, IBV_QPS_ERR);
      });
}

// Rule: (simulator) the process that owns an XRC SRQ keeps what it needs of a message from another
//   process's target QP only while that message is in progress: a program whose peers make and drop
//   target QPs (ibv_xsrq_pingpong's clients, reconnecting) does not grow for each QP number it has
//   heard of.
// Checks: a child owns an XRC SRQ of the domain; the parent sends it 400 messages, each from a new
//   XRC_RECV target QP (a new QP number). Each arrives; the child's heap in use (mallinfo2) grows by
//   less than 16 KiB from the 20th message to the last (about 150 bytes for each QP number kept would
//   be some 55 KiB).
TEST_F(XrcQpTest, SrqOwnerKeepsNothingPerTargetQp) {
  SKIP_IF(!Sim()) << "(what a process keeps in memory is the simulator's own matter)";
  constexpr int kMessages = 400;
  constexpr int kWarmUp = 20;
  constexpr size_t kMaxGrowth = 16 * 1024;
  xrcd_.reset(OpenXrcd(file_.fd(), O_CREAT));
  ASSERT_NE(xrcd_, nullptr) << "ibv_open_xrcd: " << ErrnoName(errno);
  ASSERT_NO_FATAL_FAILURE(CreateInitiator());
  send_buf_.FillPattern(7);
  const int domain_fd = file_.fd();
  RunWithChildProcess(
      "an XRC SRQ owner hearing from many target QPs",
      [&](int from_parent, int to_parent) {
        ChildXrcSrq child;
        ASSERT_NO_FATAL_FAILURE(CreateXrcSrqInChild(domain_fd, &child));
        Buffer buf;
        ASSERT_TRUE(buf.Register(child.pd.get(), 4096));
        ibv_sge sge = buf.Sge(0, 256);
        ASSERT_EQ(PostSrqRecv(child.srq.get(), 0, &sge, 1), 0);
        ASSERT_NO_FATAL_FAILURE(TellSrqNumber(child, to_parent));
        size_t in_use_after_warm_up = 0;
        for (int k = 0; k < kMessages; ++k) {
          ibv_wc wc = {};
          ASSERT_TRUE(PollOneCompletion(child.cq.get(), &wc, kChildTimeout / 4)) << "message " << k;
          ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << "message " << k << ": " << DescribeWc(wc);
          ASSERT_EQ(PostSrqRecv(child.srq.get(), static_cast<uint64_t>(k + 1), &sge, 1), 0);
          if (k + 1 == kWarmUp) in_use_after_warm_up = mallinfo2().uordblks;
          ASSERT_EQ(write(to_parent, "r", 1), 1);
        }
        const size_t in_use = mallinfo2().uordblks;
        EXPECT_LT(in_use, in_use_after_warm_up + kMaxGrowth)
            << "the SRQ owner's heap grew by " << (in_use - in_use_after_warm_up) << " bytes over "
            << kMessages - kWarmUp << " messages from as many target QPs";
        ASSERT_TRUE(WaitReadable(from_parent, kChildTimeout / 2));
      },
      [&](int from_child, int to_child) {
        uint32_t srq_num = 0;
        const bool got_number =
            WaitReadable(from_child, kChildTimeout) && read(from_child, &srq_num, sizeof srq_num) == 4;
        for (int k = 0; got_number && k < kMessages && !HasFailure(); ++k) {
          target_.reset();
          EXPECT_TRUE(ModifyToState(initiator_.get(), IBV_QPS_RESET));
          CreateTarget(xrcd_.get());
          ConnectXrc();
          if (HasFailure()) break;
          EXPECT_EQ(SendTo(srq_num, static_cast<uint64_t>(k), /*fill=*/false), 0);
          ibv_wc wc = {};
          EXPECT_TRUE(PollOneCompletion(send_cq_.get(), &wc, kChildTimeout / 4)) << "message " << k;
          EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << "message " << k << ": " << DescribeWc(wc);
          char received = 0;
          EXPECT_TRUE(WaitReadable(from_child, kChildTimeout / 4) && read(from_child, &received, 1) == 1)
              << "the child did not receive message " << k;
        }
        EXPECT_EQ(write(to_child, "x", 1), 1);
        EXPECT_TRUE(got_number) << "the child never sent its SRQ number";
      });
}

// Rule: ibv_post_send(3): remote_srqn names the XRC SRQ that receives; a process that exits (or is
//   killed) takes its SRQs with it, so a message to one names an SRQ that does not exist, which the
//   responder answers as an invalid request (IBTA 9.7.5.2.4: NAK Invalid Request), not with an
//   endless wait.
// Checks: a child process creates an XRC SRQ in the domain and is stopped (SIGSTOP) so it never
//   answers; the parent sends to that SRQ, then kills the child (SIGKILL). The parent's send then
//   completes with IBV_WC_REM_INV_REQ_ERR (a child reading its number is killed on purpose: its
//   result is not checked).
TEST_F(XrcQpTest, SrqOwnerKilledMidMessageFailsSend) {
  xrcd_.reset(OpenXrcd(file_.fd(), O_CREAT));
  ASSERT_NE(xrcd_, nullptr) << "ibv_open_xrcd: " << ErrnoName(errno);
  ASSERT_NO_FATAL_FAILURE(CreateTarget(xrcd_.get()));
  ASSERT_NO_FATAL_FAILURE(CreateInitiator());
  ASSERT_NO_FATAL_FAILURE(ConnectXrc());
  send_buf_.FillPattern(7);
  Pipe to_parent;
  Pipe to_child;
  ASSERT_GE(to_parent.fds[0], 0);
  ASSERT_GE(to_child.fds[0], 0);
  const int domain_fd = file_.fd();

  std::thread runner([&] {
    RunChecksInChild(
        [&] {
          ChildXrcSrq child;
          ASSERT_NO_FATAL_FAILURE(CreateXrcSrqInChild(domain_fd, &child));
          uint32_t ids[2] = {0, static_cast<uint32_t>(getpid())};
          ASSERT_EQ(ibv_get_srq_num(child.srq.get(), &ids[0]), 0);
          ASSERT_EQ(write(to_parent.fds[1], ids, sizeof ids), static_cast<ssize_t>(sizeof ids));
          // Killed while waiting here.
          WaitReadable(to_child.fds[0], kChildTimeout);
        },
        kChildTimeout, "an XRC SRQ owner that is killed");
  });
  uint32_t ids[2] = {0, 0};
  const bool got_ids =
      WaitReadable(to_parent.fds[0], kChildTimeout) && read(to_parent.fds[0], ids, sizeof ids) == sizeof ids;
  if (got_ids) {
    const pid_t child = static_cast<pid_t>(ids[1]);
    ASSERT_EQ(kill(child, SIGSTOP), 0) << ErrnoName(errno);
    EXPECT_EQ(SendTo(ids[0], 6, /*fill=*/false), 0);
    ibv_wc wc = {};
    EXPECT_FALSE(PollOneCompletion(send_cq_.get(), &wc, std::chrono::milliseconds(200)))
        << "the send completed while the SRQ's owner was stopped: " << DescribeWc(wc);
    ASSERT_EQ(kill(child, SIGKILL), 0) << ErrnoName(errno);
    ASSERT_TRUE(PollOneCompletion(send_cq_.get(), &wc, kChildTimeout / 2))
        << "no completion after the SRQ's owner was killed";
    EXPECT_EQ(wc.status, IBV_WC_REM_INV_REQ_ERR) << DescribeWc(wc);
    EXPECT_EQ(wc.wr_id, 6u) << DescribeWc(wc);
  }
  EXPECT_EQ(write(to_child.fds[1], "x", 1), 1);
  runner.join();
  EXPECT_TRUE(got_ids) << "the child never sent its SRQ number";
}

}  // namespace
}  // namespace conformance
