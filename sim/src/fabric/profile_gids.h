#pragma once

// The distinct GIDs in the profile's tables (every port of every device),
// numbered from 1 in the order the profile lists them. A packet that crosses
// between processes names its GIDs by these numbers in its first line,
// instead of carrying 32 bytes on a line of its own that would move between
// CPUs with every RoCE packet (fabric/wire_packet.h). Every process of a
// fabric runs the same profile (fabric/fabric.h), so a number means the same
// GID in each.

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>

#include "gid.h"
#include "profile.h"

namespace simverbs {

class ProfileGids {
 public:
  static constexpr uint8_t kUnnamed = 0;
  static constexpr size_t kMaxNumbers = 255;  // a number is one byte

  // The table of the profile this process runs (DeviceList).
  static const ProfileGids& Get();
  explicit ProfileGids(const Profile& profile);

  // `gid`'s number; kUnnamed for the zero GID and a GID the profile has not
  // (a multicast group), or that came after kMaxNumbers others. A look-up in
  // a small hash table: most cost one 16-byte compare.
  uint8_t NumberOf(const ibv_gid& gid) const;
  // The GID numbered `number`; the zero GID for kUnnamed and for a number
  // the table has not (another process wrote it).
  ibv_gid At(uint8_t number) const;
  size_t size() const { return count_; }

 private:
  static size_t Hash(const ibv_gid& gid);
  // Number n at n - 1. Not a vector: the table is made at the first packet's
  // push, where nothing may throw.
  ibv_gid gids_[kMaxNumbers] = {};
  size_t count_ = 0;
  // By Hash, probed linearly: a number, or kUnnamed where the probe ends.
  // One more entry than numbers, so a probe always ends.
  uint8_t by_hash_[kMaxNumbers + 1] = {};
};

}  // namespace simverbs
