#pragma once

// What two processes' connection managers say to each other: the IBTA CM's
// messages (REQ, REP, RTU, REJ, DREQ, DREP, SIDR REQ/REP) carried over a Unix
// SEQPACKET socket, one message per packet. A message from the peer is
// hostile input: it is read whole into a local copy, and Valid() checks every
// length and range before anything is used.

#include <sys/socket.h>

#include <cstddef>
#include <cstdint>

namespace simverbs::rdmacm {

enum class CmMessageType : uint8_t {
  kReq = 1,
  kRep,
  kRtu,
  kRej,
  kDreq,
  kDrep,
  kSidrReq,
  kSidrRep,
  // Not an IBTA message: the simulated wire telling the sender that its REQ
  // or SIDR REQ (`reason`: which) was lost before the receiving CM took it,
  // by a fault armed in the receiving process. The sender resends it as it
  // would one lost at its own end (cm_service.h).
  kLost,
};

// Private data limits of the IBTA CM messages (Vol 1 12.6). A REQ / SIDR REQ
// carries rdma_cm's 36-byte header before the user's data (UserDataOffset).
constexpr size_t kReqPrivateData = 92;
constexpr size_t kRepPrivateData = 196;
constexpr size_t kRejPrivateData = 148;
constexpr size_t kRtuPrivateData = 224;
constexpr size_t kDreqPrivateData = 220;
constexpr size_t kDrepPrivateData = 224;
constexpr size_t kSidrReqPrivateData = 216;
constexpr size_t kSidrRepPrivateData = 136;
constexpr size_t kCmaHeader = 36;
constexpr size_t kMaxPrivateData = 224;

// Where the program's data starts in a REQ / SIDR REQ from an id of this
// address family: after rdma_cm's header, left out for AF_IB addresses only,
// whatever the port space (the kernel's cma_user_data_offset).
inline size_t UserDataOffset(sa_family_t family) { return family == AF_IB ? 0 : kCmaHeader; }

// IBTA CM reject reasons rdma_cm reports in the event's status.
constexpr int kRejInvalidServiceId = 8;
constexpr int kRejConsumerDefined = 28;
// The kernel's net.rdma_ucm.max_backlog default: rdma_listen's backlog when it gives none (or more).
constexpr int kMaxBacklog = 1024;
// SIDR REP statuses (IBTA Vol 1 12.11.2), the status of the UD client's
// UNREACHABLE: no listener for the service ID, and rdma_reject.
constexpr int kSidrUnsupported = 1;
constexpr int kSidrReject = 2;

constexpr uint32_t kCmMagic = 0x53434d31;  // "SCM1"

struct CmMessage {
  uint32_t magic = kCmMagic;
  CmMessageType type = CmMessageType::kReq;
  uint8_t private_data_len = 0;
  uint8_t responder_resources = 0;
  uint8_t initiator_depth = 0;
  uint8_t retry_count = 7;
  uint8_t rnr_retry_count = 7;
  uint8_t flow_control = 0;
  uint8_t srq = 0;
  uint8_t reason = 0;     // REJ
  uint8_t mtu = 0;        // ibv_mtu of the sender's port
  uint16_t port_space = 0;  // enum rdma_port_space
  uint32_t qpn = 0;
  uint32_t psn = 0;
  uint32_t qkey = 0;
  uint16_t lid = 0;
  uint8_t gid[16] = {};
  sockaddr_storage src = {};  // the sender's address and port
  sockaddr_storage dst = {};
  uint8_t private_data[kMaxPrivateData] = {};

  bool Valid() const {
    if (magic != kCmMagic || type < CmMessageType::kReq || type > CmMessageType::kLost) return false;
    if (private_data_len > kMaxPrivateData || mtu > 5 || qpn > 0xffffff || psn > 0xffffff) return false;
    for (const sockaddr_storage* a : {&src, &dst}) {
      if (a->ss_family != AF_INET && a->ss_family != AF_INET6) return false;
    }
    return true;
  }
};

}  // namespace simverbs::rdmacm
