#pragma once

// Faults of this process's connection manager, armed through the control API
// (simverbs_rdmacm.h), which `simverbs inject` and fault plans reach through
// libibverbs: connection requests the CM rejects before a listener sees them,
// and CM messages lost on the way (the CM resends them, cm_service.h): one
// this process sends, or a REQ or SIDR REQ reaching its listeners. Every
// member is guarded by CmService::mu().

#include <array>
#include <cstdint>

#include "cm_message.h"

namespace simverbs::rdmacm {

class CmFaults {
 public:
  // The messages the CM resends when no answer comes: the only ones a fault may lose.
  static bool Resent(CmMessageType type) {
    return type == CmMessageType::kReq || type == CmMessageType::kRep || type == CmMessageType::kDreq ||
           type == CmMessageType::kSidrReq;
  }

  // count 0 disarms.
  void ArmReject(unsigned count, uint8_t reason) {
    reject_left_ = count;
    reject_reason_ = reason;
  }
  // True, with the reason, when the request that just came must be rejected.
  bool TakeReject(uint8_t* reason) {
    if (reject_left_ == 0) return false;
    --reject_left_;
    *reason = reject_reason_;
    return true;
  }

  // count 0 disarms; `type` must be Resent().
  void ArmDrop(CmMessageType type, unsigned count) { drop_left_[static_cast<size_t>(type)] = count; }
  // True when this message of `type` is lost.
  bool TakeDrop(CmMessageType type) {
    unsigned& left = drop_left_[static_cast<size_t>(type)];
    if (left == 0) return false;
    --left;
    return true;
  }

 private:
  unsigned reject_left_ = 0;
  uint8_t reject_reason_ = 0;
  std::array<unsigned, static_cast<size_t>(CmMessageType::kSidrRep) + 1> drop_left_ = {};
};

}  // namespace simverbs::rdmacm
