#pragma once

// rdma_cm multicast: the group an IP multicast address names on a port, as the
// kernel's rdma_cm maps it (cma_set_mgid): on RoCE the IPv4-mapped address
// itself (::ffff:230.0.0.1), on InfiniBand the IPoIB mapping ff12:401b:<pkey>::
// with the low 28 bits of the address (byte 7 = 1 in the UDP port space: the
// "RDMA CM signature"). The MLID is derived from the MGID, so every process of
// the fabric finds the same one (there is no SA to assign it).

#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <cstring>

namespace simverbs::rdmacm {

struct MulticastGroup {
  sockaddr_storage addr = {};
  ibv_gid mgid = {};
  uint16_t mlid = 0;
  void* context = nullptr;  // the program's, handed back in MULTICAST_JOIN
  bool attached = false;    // the id's QP is attached (not a send-only join)
};

inline bool IsMulticastAddress(const sockaddr* addr) {
  if (addr->sa_family == AF_INET) {
    return IN_MULTICAST(ntohl(reinterpret_cast<const sockaddr_in*>(addr)->sin_addr.s_addr));
  }
  if (addr->sa_family == AF_INET6) return IN6_IS_ADDR_MULTICAST(&reinterpret_cast<const sockaddr_in6*>(addr)->sin6_addr);
  return false;
}

// The group of a multicast address on a port; false for an address that is not multicast.
inline bool GroupOf(const sockaddr* addr, bool ethernet, bool udp_port_space, MulticastGroup* group) {
  if (!IsMulticastAddress(addr)) return false;
  ibv_gid& gid = group->mgid;
  std::memset(gid.raw, 0, sizeof gid.raw);
  if (addr->sa_family == AF_INET6) {
    std::memcpy(gid.raw, reinterpret_cast<const sockaddr_in6*>(addr)->sin6_addr.s6_addr, 16);
  } else {
    const auto* ip = reinterpret_cast<const uint8_t*>(&reinterpret_cast<const sockaddr_in*>(addr)->sin_addr.s_addr);
    if (ethernet) {
      gid.raw[10] = gid.raw[11] = 0xff;
      std::memcpy(gid.raw + 12, ip, 4);
    } else {
      const uint8_t prefix[6] = {0xff, 0x12, 0x40, 0x1b, 0xff, 0xff};  // scope link, IPv4, default P_Key
      std::memcpy(gid.raw, prefix, sizeof prefix);
      // rdma_cm's own signature in RDMA_PS_UDP (cma_set_mgid: mc_map[7] = 0x01,
      // the MGID being mc_map + 4): ff12:4001:...
      if (udp_port_space) gid.raw[3] = 0x01;
      std::memcpy(gid.raw + 12, ip, 4);
      gid.raw[12] &= 0x0f;
    }
  }
  uint32_t hash = 2166136261u;
  for (uint8_t b : gid.raw) hash = (hash ^ b) * 16777619u;
  group->mlid = ethernet ? 0 : static_cast<uint16_t>(0xc000 | (hash % 0x3fff));
  std::memset(&group->addr, 0, sizeof group->addr);
  std::memcpy(&group->addr, addr, addr->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6));
  return true;
}

}  // namespace simverbs::rdmacm
