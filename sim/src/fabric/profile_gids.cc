#include "fabric/profile_gids.h"

#include <iterator>

#include "device_list.h"

namespace simverbs {
const ProfileGids& ProfileGids::Get() {
  static const ProfileGids gids(DeviceList::Get().profile());
  return gids;
}

ProfileGids::ProfileGids(const Profile& profile) {
  for (const DeviceProfile& device : profile.devices) {
    for (const PortProfile& port : device.ports) {
      for (const GidProfile& entry : port.gids) {
        if (count_ == kMaxNumbers) return;
        if (NumberOf(entry.gid) != kUnnamed) continue;  // (and the zero GID)
        if (IsZeroGid(entry.gid)) continue;
        gids_[count_++] = entry.gid;
        size_t at = Hash(entry.gid);
        while (by_hash_[at] != kUnnamed) at = (at + 1) % std::size(by_hash_);
        by_hash_[at] = static_cast<uint8_t>(count_);
      }
    }
  }
}

size_t ProfileGids::Hash(const ibv_gid& gid) {
  uint64_t x = gid.global.interface_id ^ (gid.global.subnet_prefix * 0x9e3779b97f4a7c15u);
  x ^= x >> 29;
  x *= 0xbf58476d1ce4e5b9u;
  x ^= x >> 32;
  return static_cast<size_t>(x % (kMaxNumbers + 1));
}

uint8_t ProfileGids::NumberOf(const ibv_gid& gid) const {
  for (size_t at = Hash(gid);; at = (at + 1) % std::size(by_hash_)) {
    const uint8_t number = by_hash_[at];
    if (number == kUnnamed || SameGid(gids_[number - 1], gid)) return number;
  }
}

ibv_gid ProfileGids::At(uint8_t number) const {
  if (number == kUnnamed || number > count_) return ibv_gid{};
  return gids_[number - 1];
}

}  // namespace simverbs
