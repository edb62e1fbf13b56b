#pragma once

// The IPv4 address rdma_cm gives a simulated port (librdmacm.so.1 and
// `simverbs devices` share it): the address behind its first IPv4-mapped GID
// (::ffff:a.b.c.d, RoCE); a port without one (InfiniBand) gets
// 10.128.<LID high byte>.<LID low byte>, unique on the fabric as the LID is.

#include <infiniband/verbs.h>

#include <cstdint>
#include <cstring>
#include <string>

namespace simverbs::rdmacm {

// The address a GID maps (host byte order), if it is IPv4-mapped.
inline bool Ipv4Mapped(const ibv_gid& gid, uint32_t* ip) {
  static const uint8_t kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (std::memcmp(gid.raw, kPrefix, sizeof kPrefix) != 0) return false;
  *ip = (uint32_t{gid.raw[12]} << 24) | (uint32_t{gid.raw[13]} << 16) | (uint32_t{gid.raw[14]} << 8) | gid.raw[15];
  return true;
}

// `gids` is any range of ibv_gid (the port's table, index order).
template <typename Gids, typename GidOf>
uint32_t PortIpv4(const Gids& gids, GidOf gid_of, uint16_t lid) {
  for (const auto& entry : gids) {
    uint32_t ip = 0;
    if (Ipv4Mapped(gid_of(entry), &ip)) return ip;
  }
  return (10u << 24) | (128u << 16) | lid;
}

inline std::string Ipv4Text(uint32_t ip) {
  return std::to_string(ip >> 24) + "." + std::to_string((ip >> 16) & 0xff) + "." + std::to_string((ip >> 8) & 0xff) +
         "." + std::to_string(ip & 0xff);
}

}  // namespace simverbs::rdmacm
