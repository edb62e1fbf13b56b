#pragma once

// Comparisons of GIDs, as the 16 bytes they are on the wire.

#include <infiniband/verbs.h>

#include <cerrno>
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

// An IPv6 multicast GID (ff00::/8), or an IPv4-mapped one (::ffff:224.0.0.0/4)
// as RoCE v2 uses with IPv4 addresses (the kernel's rdma_is_multicast_addr).
inline bool IsMulticastGid(const ibv_gid& gid) {
  return gid.raw[0] == 0xff || (IsIpv4MappedGid(gid) && (gid.raw[12] & 0xf0) == 0xe0);
}

// What the kernel answers for a RoCE address from `sgid` (a RoCE v1 GID or
// not) to `dgid` (drivers/infiniband/core/verbs.c: ib_resolve_eth_dmac, at
// ibv_create_ah and at ibv_modify_qp with IBV_QP_AV): a multicast destination
// maps to a MAC, a link-local one from a RoCE v1 GID too; any other is looked
// up through the IP stack (rdma_addr_find_l2_eth_by_grh), which refuses the
// zero address and a source and destination of different IP families: EINVAL.
inline int RoceDestinationError(const ibv_gid& sgid, bool sgid_roce_v1, const ibv_gid& dgid) {
  const bool link_local = dgid.raw[0] == 0xfe && (dgid.raw[1] & 0xc0) == 0x80;
  if (IsMulticastGid(dgid) || (link_local && sgid_roce_v1)) return 0;
  if (IsZeroGid(dgid)) return EINVAL;
  return IsIpv4MappedGid(sgid) == IsIpv4MappedGid(dgid) ? 0 : EINVAL;
}

}  // namespace simverbs
