#include "port_addresses.h"

#include "port_ipv4.h"

#include <arpa/inet.h>

#include <cstring>
#include <mutex>

namespace simverbs::rdmacm {

namespace {

bool Zero(const ibv_gid& gid) {
  for (uint8_t b : gid.raw) {
    if (b) return false;
  }
  return true;
}

}  // namespace

PortAddresses& PortAddresses::Get() {
  static PortAddresses* addresses = new PortAddresses();  // leaked: ids may outlive static destructors
  return *addresses;
}

PortAddresses::PortAddresses() {
  int count = 0;
  ibv_device** list = ibv_get_device_list(&count);
  if (!list) return;
  for (int d = 0; d < count; ++d) {
    ibv_context* verbs = ibv_open_device(list[d]);
    if (!verbs) continue;
    ibv_device_attr attr = {};
    if (ibv_query_device(verbs, &attr) != 0) continue;
    for (uint8_t p = 1; p <= attr.phys_port_cnt; ++p) {
      ibv_port_attr port = {};
      if (ibv_query_port(verbs, p, &port) != 0) continue;
      LocalPort lp;
      lp.verbs = verbs;
      lp.port = p;
      lp.ethernet = port.link_layer == IBV_LINK_LAYER_ETHERNET;
      lp.lid = port.lid;
      lp.active_mtu = port.active_mtu;
      for (int i = 0; i < port.gid_tbl_len; ++i) {
        ibv_gid gid = {};
        if (ibv_query_gid(verbs, p, i, &gid) != 0) break;
        lp.gids.push_back(gid);
      }
      lp.ipv4 = PortIpv4(lp.gids, [](const ibv_gid& g) { return g; }, lp.lid);
      // RoCE: the last GID that maps the address (the RoCE v2 one when a profile lists v1 first).
      for (size_t i = 0; i < lp.gids.size(); ++i) {
        uint32_t ip = 0;
        if (Ipv4Mapped(lp.gids[i], &ip) && ip == lp.ipv4) lp.ipv4_gid_index = static_cast<int>(i);
      }
      ports_.push_back(std::move(lp));
    }
  }
  ibv_free_device_list(list);
}

ibv_gid LocalPort::ConnectionGid() const {
  const int index = ConnectionGidIndex();
  return index < static_cast<int>(gids.size()) ? gids[index] : ibv_gid{};
}

ibv_ah_attr LocalPort::AhTo(uint16_t lid, const uint8_t gid[16]) const {
  ibv_ah_attr ah = {};
  ah.port_num = port;
  ah.dlid = lid;
  if (ethernet) {  // RoCE needs a GRH
    ah.is_global = 1;
    std::memcpy(ah.grh.dgid.raw, gid, 16);
    ah.grh.sgid_index = static_cast<uint8_t>(ipv4_gid_index);
    ah.grh.hop_limit = 64;
  }
  return ah;
}

const LocalPort* PortAddresses::FindIpv4(uint32_t ip) const {
  for (const LocalPort& p : ports_) {
    if (p.ipv4 == ip && !p.removed) return &p;
  }
  return nullptr;
}

void PortAddresses::MarkRemoved(const std::string& device) {
  for (LocalPort& p : ports_) {
    if (device == ibv_get_device_name(p.verbs->device)) p.removed = true;
  }
}

const LocalPort* PortAddresses::Find(const sockaddr* addr) const {
  if (!addr || ports_.empty()) return nullptr;
  if (IsWildcard(addr) || IsLoopback(addr)) {
    for (const LocalPort& p : ports_) {
      if (!p.removed) return &p;
    }
    return nullptr;
  }
  if (addr->sa_family == AF_INET) return FindIpv4(ntohl(reinterpret_cast<const sockaddr_in*>(addr)->sin_addr.s_addr));
  if (addr->sa_family == AF_INET6) {
    const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(addr)->sin6_addr;
    ibv_gid gid;
    std::memcpy(gid.raw, a.s6_addr, 16);
    uint32_t ip = 0;
    if (Ipv4Mapped(gid, &ip)) return FindIpv4(ip);
    for (const LocalPort& p : ports_) {
      for (const ibv_gid& g : p.gids) {
        if (!p.removed && !Zero(g) && std::memcmp(g.raw, gid.raw, 16) == 0) return &p;
      }
    }
  }
  return nullptr;
}

const LocalPort* PortAddresses::Find(ibv_context* verbs, uint8_t port) const {
  for (const LocalPort& p : ports_) {
    if (p.verbs == verbs && p.port == port) return &p;
  }
  return nullptr;
}

ibv_pd* PortAddresses::DefaultPd(ibv_context* verbs) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  for (auto& [ctx, pd] : pds_) {
    if (ctx == verbs) return pd;
  }
  ibv_pd* pd = ibv_alloc_pd(verbs);
  if (pd) pds_.emplace_back(verbs, pd);
  return pd;
}

std::vector<ibv_context*> PortAddresses::Contexts() const {
  std::vector<ibv_context*> out;
  for (const LocalPort& p : ports_) {
    if (out.empty() || out.back() != p.verbs) out.push_back(p.verbs);
  }
  return out;
}

std::string AddressText(const sockaddr* addr) {
  if (IsWildcard(addr)) return "any";
  char text[INET6_ADDRSTRLEN] = {};
  if (addr->sa_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(addr)->sin_addr, text, sizeof text);
  } else if (addr->sa_family == AF_INET6) {
    const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(addr)->sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(&a)) {
      inet_ntop(AF_INET, &a.s6_addr[12], text, sizeof text);
    } else {
      inet_ntop(AF_INET6, &a, text, sizeof text);
    }
  }
  return text;
}

uint16_t AddressPort(const sockaddr* addr) {
  if (addr->sa_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(addr)->sin_port);
  if (addr->sa_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(addr)->sin6_port);
  return 0;
}

void SetAddressPort(sockaddr* addr, uint16_t port) {
  if (addr->sa_family == AF_INET) reinterpret_cast<sockaddr_in*>(addr)->sin_port = htons(port);
  if (addr->sa_family == AF_INET6) reinterpret_cast<sockaddr_in6*>(addr)->sin6_port = htons(port);
}

bool IsWildcard(const sockaddr* addr) {
  if (addr->sa_family == AF_INET) return reinterpret_cast<const sockaddr_in*>(addr)->sin_addr.s_addr == INADDR_ANY;
  if (addr->sa_family == AF_INET6) {
    return IN6_IS_ADDR_UNSPECIFIED(&reinterpret_cast<const sockaddr_in6*>(addr)->sin6_addr);
  }
  return false;
}

bool IsLoopback(const sockaddr* addr) {
  if (addr->sa_family == AF_INET) {
    return (ntohl(reinterpret_cast<const sockaddr_in*>(addr)->sin_addr.s_addr) >> 24) == 127;
  }
  if (addr->sa_family == AF_INET6) {
    const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(addr)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(&a) || (IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127);
  }
  return false;
}

socklen_t AddressLength(const sockaddr* addr) {
  if (addr->sa_family == AF_INET) return sizeof(sockaddr_in);
  if (addr->sa_family == AF_INET6) return sizeof(sockaddr_in6);
  return 0;
}

}  // namespace simverbs::rdmacm
