#pragma once

// Allocation failures on demand. Every point where the simulator creates an
// object is declared once, here; the control API arms a point by name
// (simverbs_fail_after) and a test can sweep them all (simverbs_fault_point_*).
// An armed point lets `calls` more calls succeed, fails the next one with the
// given errno (the call fails before it looks at its arguments, so nothing is
// created or counted), then disarms. Unarmed, a point costs one relaxed load.
// One point is not a verb: "deliver_packet" makes the next delivery of a
// packet (to a QP of this process) run out of memory, and the packet is lost
// as on a wire; the sender's transport recovers it. (Not a packet that nothing
// would send again, Packet::Lossless: one for a message its requester placed
// and completed itself, or one between an XRC target QP and an SRQ's owner.)

#include <atomic>
#include <cstddef>
#include <mutex>

namespace simverbs {

#define SIMVERBS_FAULT_POINTS(X)              \
  X(kOpenDevice, "open_device")               \
  X(kAllocPd, "alloc_pd")                     \
  X(kRegMr, "reg_mr")                         \
  X(kAllocMw, "alloc_mw")                     \
  X(kCreateCompChannel, "create_comp_channel") \
  X(kCreateCq, "create_cq")                   \
  X(kCreateSrq, "create_srq")                 \
  X(kCreateQp, "create_qp")                   \
  X(kCreateAh, "create_ah")                   \
  X(kOpenXrcd, "open_xrcd")                   \
  X(kDeliverPacket, "deliver_packet")

enum class FaultPoint {
#define SIMVERBS_FAULT_ENUM(id, name) id,
  SIMVERBS_FAULT_POINTS(SIMVERBS_FAULT_ENUM)
#undef SIMVERBS_FAULT_ENUM
      kCount
};

class FaultPoints {
 public:
  // (Inline: asked on every packet's path.)
  static FaultPoints& Get() {
    FaultPoints* points = instance_.load(std::memory_order_acquire);
    return points ? *points : Make();
  }
  static constexpr size_t kCount = static_cast<size_t>(FaultPoint::kCount);
  static const char* Name(size_t index);  // nullptr past the end

  // 0, or the errno this call must fail with.
  int Hit(FaultPoint point) {
    if (!any_armed_.load(std::memory_order_relaxed)) return 0;
    return HitSlow(point);
  }

  // Some point is armed: Hit may fail, and counts. (False again once every
  // armed point has failed its call: the paths that skip their shortcuts
  // while a fault may fire take them again.)
  bool AnyArmed() const { return any_armed_.load(std::memory_order_relaxed); }

  // EINVAL for an unknown name or err <= 0.
  int Arm(const char* name, unsigned calls, int err);
  void DisarmAll();

 private:
  static FaultPoints& Make();  // the first Get()
  static inline std::atomic<FaultPoints*> instance_{nullptr};
  FaultPoints() = default;
  int HitSlow(FaultPoint point);
  void ClearIfNoneArmed();

  struct Slot {
    std::atomic<long> remaining{-1};  // successful calls left; -1 = disarmed
    std::atomic<int> err{0};
  };
  Slot slots_[kCount];
  std::atomic<bool> any_armed_{false};
  // Arm, DisarmAll and ClearIfNoneArmed: a point armed while the last one
  // fires is not cleared with it.
  std::mutex arm_mu_;
};

}  // namespace simverbs
