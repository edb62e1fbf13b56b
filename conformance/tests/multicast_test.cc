// UD multicast (ibv_attach_mcast(3)): attaching and detaching QPs, one
// datagram sent to a group reaching every attached QP once, and what a QP
// that is attached can no longer do.
//
// The group's MGID follows the source GID: ff12:401b::N (link-local scope) on
// InfiniBand and for IPv6 RoCE GIDs, ::ffff:239.1.27.N (an IPv4-mapped
// multicast address, as the kernel's rdma_cm builds it) when the run's RoCE
// GID is IPv4-mapped, since a RoCE v2 packet's IP version follows its GIDs.
// Datagrams are sent to QP 0xFFFFFF with an AH whose GRH names the MGID and,
// on InfiniBand, whose DLID is the MLID.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <vector>

#include "conformance/lib/backend_profile.h"
#include "conformance/lib/errno_capture.h"
#include "conformance/lib/qp_pair.h"
#include "conformance/lib/skip_if.h"
#include "conformance/lib/timeouts.h"
#include "conformance/lib/ud_constants.h"
#include "conformance/lib/verbs_matchers.h"

namespace conformance {
namespace {

// A multicast LID (IBTA Vol 1 ch. 4: LIDs 0xC000-0xFFFE are multicast).
constexpr uint16_t kMlid = 0xc001;
constexpr uint32_t kPayload = 64;
// Each receiving QP gets its own 1 KiB slice of recv_.
constexpr size_t kSlice = 1024;

bool IsV4Mapped(const ibv_gid& gid) {
  static constexpr uint8_t kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return std::memcmp(gid.raw, kPrefix, sizeof kPrefix) == 0;
}

class MulticastTest : public QpTest {
 protected:
  struct Attachment {
    ibv_qp* qp;
    ibv_gid gid;
    uint16_t lid;
  };

  void SetUp() override {
    QpTest::SetUp();
    if (HasFatalFailure() || IsSkipped()) return;
    SKIP_IF(device_attr().max_mcast_grp == 0 || device_attr().max_mcast_qp_attach == 0)
        << "(the device has no multicast groups)";
    ASSERT_TRUE(send_.Register(pd(), 4096));
    ASSERT_TRUE(recv_.Register(pd(), 8 * kSlice));
    send_.FillPattern(4);
  }

  void TearDown() override {
    // A QP that is still attached cannot be destroyed on Linux: detach first.
    for (const Attachment& a : attached_) ibv_detach_mcast(a.qp, &a.gid, a.lid);
    attached_.clear();
    ah_.reset();
    c_.reset();
    QpTest::TearDown();
  }

  // The group `n` (1, 2, ...) in the GID family of the run's source GID.
  ibv_gid Mgid(uint8_t n) const {
    ibv_gid sgid = {};
    EXPECT_EQ(ibv_query_gid(context(), port(), gid_index(), &sgid), 0) << "ibv_query_gid (--gid-index)";
    ibv_gid mgid = {};
    if (roce() && IsV4Mapped(sgid)) {
      mgid.raw[10] = 0xff;
      mgid.raw[11] = 0xff;
      mgid.raw[12] = 239;
      mgid.raw[13] = 1;
      mgid.raw[14] = 27;
      mgid.raw[15] = n;
    } else {
      mgid.raw[0] = 0xff;
      mgid.raw[1] = 0x12;
      mgid.raw[2] = 0x40;
      mgid.raw[3] = 0x1b;
      mgid.raw[15] = n;
    }
    return mgid;
  }

  // Creates a UD QP and brings it to RTS.
  void MakeUdEnd(QpEnd* end) {
    EndConfig config;
    config.type = IBV_QPT_UD;
    ASSERT_TRUE(CreateEnd(end, config));
    ASSERT_TRUE(BringUp(end->get(), port(), 0, LocalAddress(), ConnectParams{}));
  }

  // The sender a_ and receivers b_ and c_, all UD in RTS.
  void MakeUdQps() {
    ASSERT_NO_FATAL_FAILURE(MakeUdEnd(&a_));
    ASSERT_NO_FATAL_FAILURE(MakeUdEnd(&b_));
    ASSERT_NO_FATAL_FAILURE(MakeUdEnd(&c_));
  }

  // ibv_attach_mcast, remembered for TearDown when it succeeds.
  int Attach(ibv_qp* qp, const ibv_gid& gid, uint16_t lid = kMlid) {
    const int rc = ibv_attach_mcast(qp, &gid, lid);
    if (rc == 0) attached_.push_back({qp, gid, lid});
    return rc;
  }

  // ibv_detach_mcast, forgetting the attachment when it succeeds.
  int Detach(ibv_qp* qp, const ibv_gid& gid, uint16_t lid = kMlid) {
    const int rc = ibv_detach_mcast(qp, &gid, lid);
    if (rc == 0) {
      for (auto it = attached_.begin(); it != attached_.end(); ++it) {
        if (it->qp == qp && it->lid == lid && std::memcmp(&it->gid, &gid, sizeof gid) == 0) {
          attached_.erase(it);
          break;
        }
      }
    }
    return rc;
  }

  // The address handle of group mgid: a GRH to the MGID from the run's GID index, DLID the MLID.
  void MakeGroupAh(const ibv_gid& mgid) {
    ibv_ah_attr attr = {};
    attr.port_num = port();
    attr.dlid = kMlid;
    attr.is_global = 1;
    attr.grh.dgid = mgid;
    attr.grh.sgid_index = static_cast<uint8_t>(gid_index());
    attr.grh.hop_limit = 64;
    errno = 0;
    ah_.reset(ibv_create_ah(pd(), &attr));
    ASSERT_NE(ah_, nullptr) << "ibv_create_ah (multicast group): " << ErrnoName(errno);
  }

  // Posts a receive for one datagram into slice `slice` of recv_.
  void PostGroupRecv(QpEnd& end, size_t slice, uint64_t wr_id) {
    ibv_sge sge = recv_.Sge(slice * kSlice, kGrhBytes + kPayload);
    ASSERT_EQ(PostRecv(end.get(), wr_id, &sge, 1), 0);
  }

  // Sends one datagram of kPayload bytes from a_ to the group of ah_ and waits for its send completion.
  void SendToGroup() {
    ibv_sge sge = send_.Sge(0, kPayload);
    ASSERT_EQ(PostOne(a_.get(), UdSendWr(1, &sge, 1, ah_.get(), kMulticastQpn)), 0);
    ibv_wc wc = {};
    ASSERT_TRUE(PollOneCompletion(a_.send_cq.get(), &wc));
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
  }

  // Waits for end's receive of the datagram into `slice` and checks it.
  void ExpectDelivered(QpEnd& end, size_t slice, uint64_t wr_id) {
    ibv_wc wc = {};
    ASSERT_TRUE(PollOneCompletion(end.recv_cq.get(), &wc)) << "QP " << end.qp_num() << " got no datagram";
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
    EXPECT_EQ(wc.wr_id, wr_id);
    EXPECT_EQ(wc.byte_len, kGrhBytes + kPayload) << DescribeWc(wc);
    EXPECT_EQ(wc.src_qp, a_.qp_num());
    EXPECT_EQ(recv_.Bytes(slice * kSlice + kGrhBytes, kPayload), send_.Bytes(0, kPayload));
  }

  Buffer send_;
  Buffer recv_;
  QpEnd c_;
  AhPtr ah_;
  std::vector<Attachment> attached_;
};

// Rule: ibv_attach_mcast(3): "ibv_attach_mcast() attaches the QP qp to the multicast group having MGID gid
//   and MLID lid. ibv_detach_mcast() detaches the QP qp ... returns 0 on success".
// Checks: attaching a UD QP in RTS to a group returns 0, and detaching it again returns 0.
TEST_F(MulticastTest, AttachAndDetachSucceed) {
  ASSERT_NO_FATAL_FAILURE(MakeUdEnd(&b_));
  const ibv_gid mgid = Mgid(1);
  EXPECT_EQ(Attach(b_.get(), mgid), 0);
  EXPECT_EQ(Detach(b_.get(), mgid), 0);
}

// Rule: ibv_attach_mcast(3): "Only QPs of Transport Service Type IBV_QPT_UD may be attached to multicast
//   groups"; "returns ... the value of errno on failure" (EINVAL, the kernel's ib_attach_mcast()).
// Checks: ibv_attach_mcast of an RC QP returns EINVAL.
TEST_F(MulticastTest, AttachFails_RcQp) {
  ASSERT_TRUE(CreateEnd(&b_));
  EXPECT_THAT(Attach(b_.get(), Mgid(2)), ReturnsErrno(EINVAL));
}

// Rule: ibv_attach_mcast(3): the group is named by its MGID; IBTA Vol 1 ch. 4 (GIDs): a multicast GID starts with
//   0xFF (RoCE v2 also accepts an IPv4-mapped multicast address), so a unicast GID names no group; the
//   kernel's ib_attach_mcast() returns EINVAL for it.
// Checks: attaching a UD QP to the port's own (unicast) GID returns EINVAL.
TEST_F(MulticastTest, AttachFails_UnicastGid) {
  ASSERT_NO_FATAL_FAILURE(MakeUdEnd(&b_));
  ibv_gid own = {};
  ASSERT_EQ(ibv_query_gid(context(), port(), gid_index(), &own), 0);
  EXPECT_THAT(Attach(b_.get(), own), ReturnsErrno(EINVAL));
}

// Rule: ibv_attach_mcast(3): a QP attached to a group receives the messages sent to it; IBTA Vol 1 ch. 10
//   (multicast): a datagram sent to a multicast group is delivered to every QP attached to the group.
// Checks: with b_ and c_ attached to one group, a 64-byte datagram from a_ to the group (AH with the MGID,
//   QP 0xFFFFFF) reaches both, each with its payload and src_qp == a_.
TEST_F(MulticastTest, DatagramReachesEveryAttachedQp) {
  ASSERT_NO_FATAL_FAILURE(MakeUdQps());
  const ibv_gid mgid = Mgid(3);
  ASSERT_EQ(Attach(b_.get(), mgid), 0);
  ASSERT_EQ(Attach(c_.get(), mgid), 0);
  ASSERT_NO_FATAL_FAILURE(PostGroupRecv(b_, 0, 10));
  ASSERT_NO_FATAL_FAILURE(PostGroupRecv(c_, 1, 11));
  ASSERT_NO_FATAL_FAILURE(MakeGroupAh(mgid));
  ASSERT_NO_FATAL_FAILURE(SendToGroup());
  ASSERT_NO_FATAL_FAILURE(ExpectDelivered(b_, 0, 10));
  ASSERT_NO_FATAL_FAILURE(ExpectDelivered(c_, 1, 11));
}

// Rule: ibv_attach_mcast(3): a QP attached to a group receives the messages sent to it, the sender's
//   own among them: rxe delivers to every attached QP (rxe_recv.c rxe_rcv_mcast_pkt), and verbs
//   offer IBV_QP_CREATE_BLOCK_SELF_MCAST_LB (ibv_create_qp_ex(3)) to turn that loopback off.
// Checks: with a_ (the sender) and b_ attached to one group, a datagram from a_ to the group reaches
//   both, each with its payload and src_qp == a_.
TEST_F(MulticastTest, SenderAttachedToTheGroupHearsItsOwnDatagram) {
  ASSERT_NO_FATAL_FAILURE(MakeUdQps());
  const ibv_gid mgid = Mgid(9);
  ASSERT_EQ(Attach(a_.get(), mgid), 0);
  ASSERT_EQ(Attach(b_.get(), mgid), 0);
  ASSERT_NO_FATAL_FAILURE(PostGroupRecv(a_, 0, 20));
  ASSERT_NO_FATAL_FAILURE(PostGroupRecv(b_, 1, 21));
  ASSERT_NO_FATAL_FAILURE(MakeGroupAh(mgid));
  ASSERT_NO_FATAL_FAILURE(SendToGroup());
  ASSERT_NO_FATAL_FAILURE(ExpectDelivered(b_, 1, 21));
  ASSERT_NO_FATAL_FAILURE(ExpectDelivered(a_, 0, 20));
}

// Rule: ibv_attach_mcast(3): "If a QP is attached to the same multicast group multiple times, the QP will
//   still receive a single copy of a multicast message".
// Checks: b_ attached twice to one group (both calls return 0) receives a datagram sent to the group once:
//   one completion, then none for 200 ms although a second receive is posted.
TEST_F(MulticastTest, AttachTwiceDeliversOneCopy) {
  ASSERT_NO_FATAL_FAILURE(MakeUdQps());
  const ibv_gid mgid = Mgid(4);
  ASSERT_EQ(Attach(b_.get(), mgid), 0);
  ASSERT_EQ(Attach(b_.get(), mgid), 0);
  ASSERT_NO_FATAL_FAILURE(PostGroupRecv(b_, 0, 10));
  ASSERT_NO_FATAL_FAILURE(PostGroupRecv(b_, 1, 11));
  ASSERT_NO_FATAL_FAILURE(MakeGroupAh(mgid));
  ASSERT_NO_FATAL_FAILURE(SendToGroup());
  ibv_wc wc = {};
  ASSERT_TRUE(PollOneCompletion(b_.recv_cq.get(), &wc)) << "the attached QP got no datagram";
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
  EXPECT_TRUE(NoCompletionWithin(b_.recv_cq.get(), kBlockWindow)) << "a second copy arrived";
}

// Rule: ibv_attach_mcast(3): lid is the "multicast group LID"; the kernel's ib_attach_mcast() refuses
//   one outside the multicast range on an InfiniBand port (is_valid_mcast_lid: below 0xC000 or the
//   permissive 0xFFFF: EINVAL), while RoCE ignores the LID ("RoCE annex declares that multicast LID
//   should be ignored").
// Checks: on InfiniBand, attaching a UD QP with LID 1 or 0xFFFF returns EINVAL; on RoCE, LID 0 is
//   taken (0).
TEST_F(MulticastTest, AttachLidFollowsTheLinkLayer) {
  ASSERT_NO_FATAL_FAILURE(MakeUdEnd(&b_));
  const ibv_gid mgid = Mgid(10);
  if (port_attr().link_layer == IBV_LINK_LAYER_ETHERNET) {
    EXPECT_EQ(Attach(b_.get(), mgid, 0), 0);
    return;
  }
  EXPECT_THAT(Attach(b_.get(), mgid, 1), ReturnsErrno(EINVAL));
  EXPECT_THAT(Attach(b_.get(), mgid, 0xffff), ReturnsErrno(EINVAL));
}

// Rule: ibv_attach_mcast(3): ibv_detach_mcast() detaches the QP from the group named by gid and lid; the
//   kernel keeps a QP's attachments by (MGID, MLID) and refuses to detach a pair it does not have
//   (uverbs_cmd.c ib_uverbs_detach_mcast: EINVAL).
// Checks: a UD QP attached with the test's MLID: detaching with another MLID returns EINVAL, then
//   detaching with the one it attached with returns 0.
TEST_F(MulticastTest, DetachFails_AnotherMlid) {
  ASSERT_NO_FATAL_FAILURE(MakeUdEnd(&b_));
  const ibv_gid mgid = Mgid(11);
  ASSERT_EQ(Attach(b_.get(), mgid), 0);
  EXPECT_THAT(Detach(b_.get(), mgid, static_cast<uint16_t>(kMlid + 1)), ReturnsErrno(EINVAL));
  EXPECT_EQ(Detach(b_.get(), mgid), 0);
}

// Rule: ibv_attach_mcast(3): "ibv_detach_mcast() detaches the QP qp to the multicast group"; a QP no longer
//   attached is not a member, so datagrams to the group do not reach it.
// Checks: with b_ and c_ attached and then c_ detached (0), a datagram to the group reaches b_ but c_ gets no
//   completion within 200 ms.
TEST_F(MulticastTest, DetachedQpReceivesNothing) {
  ASSERT_NO_FATAL_FAILURE(MakeUdQps());
  const ibv_gid mgid = Mgid(5);
  ASSERT_EQ(Attach(b_.get(), mgid), 0);
  ASSERT_EQ(Attach(c_.get(), mgid), 0);
  ASSERT_EQ(Detach(c_.get(), mgid), 0);
  ASSERT_NO_FATAL_FAILURE(PostGroupRecv(b_, 0, 10));
  ASSERT_NO_FATAL_FAILURE(PostGroupRecv(c_, 1, 11));
  ASSERT_NO_FATAL_FAILURE(MakeGroupAh(mgid));
  ASSERT_NO_FATAL_FAILURE(SendToGroup());
  ibv_wc wc = {};
  ASSERT_TRUE(PollOneCompletion(b_.recv_cq.get(), &wc)) << "the attached QP got no datagram";
  EXPECT_TRUE(NoCompletionWithin(c_.recv_cq.get(), kBlockWindow)) << "the detached QP received the datagram";
}

// Rule: ibv_attach_mcast(3): ibv_detach_mcast() "returns 0 on success, or the value of errno on failure";
//   detaching from a group the QP is not attached to has nothing to undo (EINVAL from the kernel's
//   ib_uverbs_detach_mcast(), which finds no such attachment).
// Checks: ibv_detach_mcast of a UD QP that was never attached to the group returns EINVAL.
TEST_F(MulticastTest, DetachFails_NotAttached) {
  ASSERT_NO_FATAL_FAILURE(MakeUdEnd(&b_));
  const ibv_gid mgid = Mgid(6);
  EXPECT_THAT(ibv_detach_mcast(b_.get(), &mgid, kMlid), ReturnsErrno(EINVAL));
}

// Rule: ibv_destroy_qp(3): "returns 0 on success, or the value of errno on failure"; the kernel refuses to
//   destroy a QP that is still attached to a multicast group (uverbs_free_qp(): "do not allow destruction
//   until the user cleans up all the mcast bindings", EBUSY; backend question DestroyQpWhileAttachedFails).
// Checks: ibv_destroy_qp of a UD QP attached to a group returns EBUSY; after ibv_detach_mcast, destroying
//   it returns 0.
TEST_F(MulticastTest, DestroyQpFails_WhileAttached) {
  SKIP_IF(!Backend().Answer("DestroyQpWhileAttachedFails", true)) << "(the backend destroys such a QP)";
  ASSERT_NO_FATAL_FAILURE(MakeUdEnd(&b_));
  const ibv_gid mgid = Mgid(7);
  ASSERT_EQ(Attach(b_.get(), mgid), 0);
  const int rc = ibv_destroy_qp(b_.get());
  if (rc == 0) {
    b_.qp.release();  // destroyed after all
    attached_.clear();
  }
  EXPECT_THAT(rc, ReturnsErrno(EBUSY));
  if (b_.qp) {
    ASSERT_EQ(Detach(b_.get(), mgid), 0);
    EXPECT_EQ(ibv_destroy_qp(b_.qp.release()), 0) << "the QP did not survive the failed destroy";
  }
}

// Rule: IBTA Vol 1 (multicast): a datagram to a multicast group carries DestQP 0xFFFFFF; one to a
//   multicast address that names another QP is not a multicast delivery (rxe_rcv hands a packet to
//   the group only when its BTH names 0xFFFFFF).
// Checks: with b_ attached to the group, a datagram to the group's address with DestQP 0x123456 (no
//   such QP) completes at a_ and gives b_ no receive completion within 200 ms.
TEST_F(MulticastTest, DatagramWithAnotherQpnReachesNoMember) {
  ASSERT_NO_FATAL_FAILURE(MakeUdQps());
  const ibv_gid mgid = Mgid(8);
  ASSERT_EQ(Attach(b_.get(), mgid), 0);
  ASSERT_NO_FATAL_FAILURE(MakeGroupAh(mgid));
  ASSERT_NO_FATAL_FAILURE(PostGroupRecv(b_, 0, 1));
  ibv_sge sge = send_.Sge(0, kPayload);
  ASSERT_EQ(PostOne(a_.get(), UdSendWr(1, &sge, 1, ah_.get(), 0x123456)), 0);
  ibv_wc wc = {};
  ASSERT_TRUE(PollOneCompletion(a_.send_cq.get(), &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << DescribeWc(wc);
  EXPECT_TRUE(NoCompletionWithin(b_.recv_cq.get())) << "a datagram not for DestQP 0xFFFFFF reached the group";
}

// Rule: ibv_query_device(3): max_mcast_qp_attach is the "Maximum number of QPs per multicast group
//   which can be attached"; an attachment beyond it fails (ENOMEM in rxe's __rxe_init_mca and from
//   the kernel's other drivers).
// Checks: max_mcast_qp_attach UD QPs attach to one group; one more returns ENOMEM (skipped when the
//   limit is above 64).
TEST_F(MulticastTest, AttachBeyondMaxQpsPerGroupFailsEnomem) {
  const int limit = device_attr().max_mcast_qp_attach;
  SKIP_IF(limit > 64) << "(the device attaches " << limit << " QPs to a group)";
  const ibv_gid mgid = Mgid(9);
  std::vector<QpEnd> ends(static_cast<size_t>(limit) + 1);
  for (int k = 0; k < limit; ++k) {
    ASSERT_NO_FATAL_FAILURE(MakeUdEnd(&ends[static_cast<size_t>(k)]));
    ASSERT_EQ(Attach(ends[static_cast<size_t>(k)].get(), mgid), 0) << "QP " << k;
  }
  ASSERT_NO_FATAL_FAILURE(MakeUdEnd(&ends.back()));
  EXPECT_THAT(Attach(ends.back().get(), mgid), ReturnsErrno(ENOMEM));
  // Detached before the QPs go (TearDown would be too late).
  for (const Attachment& a : attached_) ibv_detach_mcast(a.qp, &a.gid, a.lid);
  attached_.clear();
}

}  // namespace
}  // namespace conformance
