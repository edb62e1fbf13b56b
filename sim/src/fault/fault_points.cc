#include "fault/fault_points.h"

#include <cerrno>
#include <cstring>

#include "fork_locks.h"

namespace simverbs {
namespace {
constexpr const char* kNames[] = {
#define SIMVERBS_FAULT_NAME(id, name) name,
    SIMVERBS_FAULT_POINTS(SIMVERBS_FAULT_NAME)
#undef SIMVERBS_FAULT_NAME
};
static_assert(sizeof kNames / sizeof kNames[0] == FaultPoints::kCount);
}  // namespace

FaultPoints& FaultPoints::Make() {
  static FaultPoints* points = [] {
    auto* made = new FaultPoints();
    // A leaf lock: held across fork (fork_locks.h).
    HoldAcrossFork([] { Get().arm_mu_.lock(); }, [] { Get().arm_mu_.unlock(); });
    return made;
  }();
  instance_.store(points, std::memory_order_release);
  return *points;
}

const char* FaultPoints::Name(size_t index) { return index < kCount ? kNames[index] : nullptr; }

int FaultPoints::Arm(const char* name, unsigned calls, int err) {
  if (!name || err <= 0) return EINVAL;
  std::lock_guard<std::mutex> lock(arm_mu_);
  for (size_t i = 0; i < kCount; ++i) {
    if (std::strcmp(name, kNames[i]) != 0) continue;
    slots_[i].err.store(err);
    slots_[i].remaining.store(static_cast<long>(calls));
    any_armed_.store(true);
    return 0;
  }
  return EINVAL;
}

void FaultPoints::DisarmAll() {
  std::lock_guard<std::mutex> lock(arm_mu_);
  for (Slot& s : slots_) s.remaining.store(-1);
  any_armed_.store(false);
}

void FaultPoints::ClearIfNoneArmed() {
  std::lock_guard<std::mutex> lock(arm_mu_);
  for (const Slot& s : slots_) {
    if (s.remaining.load() >= 0) return;
  }
  any_armed_.store(false);
}

int FaultPoints::HitSlow(FaultPoint point) {
  Slot& s = slots_[static_cast<size_t>(point)];
  long left = s.remaining.load();
  while (left >= 0) {
    if (!s.remaining.compare_exchange_weak(left, left - 1)) continue;
    if (left > 0) return 0;
    const int err = s.err.load();
    ClearIfNoneArmed();  // that was its last call: it is disarmed now
    return err;
  }
  return 0;
}

}  // namespace simverbs
