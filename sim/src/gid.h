#pragma once

// Comparisons of GIDs, as the 16 bytes they are on the wire.

#include <infiniband/verbs.h>

#include <cstring>

namespace simverbs {

inline bool SameGid(const ibv_gid& a, const ibv_gid& b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// The zero GID: an unused table entry, or no GID at all (a packet without a GRH).
inline bool IsZeroGid(const ibv_gid& gid) { return gid.global.subnet_prefix == 0 && gid.global.interface_id == 0; }

// An IPv4 address in a GID (::ffff:a.b.c.d), as RoCE v2 GIDs of IPv4 interfaces are.
inline bool IsIpv4MappedGid(const ibv_gid& gid) {
  static constexpr uint8_t kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return std::memcmp(gid.raw, kPrefix, sizeof kPrefix) == 0;
}

}  // namespace simverbs
