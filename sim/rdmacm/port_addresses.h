#pragma once

// The IP addresses of the simulated ports, as rdma_cm resolves them.
// The wildcard and loopback addresses go to the first port whose device has
// not been removed.
//
// A port's IPv4 address is PortIpv4's (port_ipv4.h); its IPv6 addresses are
// its other GIDs (fe80::<GUID> on InfiniBand). 127.0.0.1, ::1 and the
// wildcard addresses resolve to the first port.

#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace simverbs::rdmacm {

struct LocalPort {
  ibv_context* verbs = nullptr;
  uint8_t port = 1;
  bool ethernet = false;
  uint16_t lid = 0;
  ibv_mtu active_mtu = IBV_MTU_1024;
  uint32_t ipv4 = 0;           // host byte order
  std::vector<ibv_gid> gids;   // the whole table, index = GID index
  int ipv4_gid_index = 0;      // the GID a RoCE connection to ipv4 uses (0 on InfiniBand)
  bool removed = false;        // DEVICE_REMOVAL: its addresses no longer resolve

  // The GID index and GID connections of this port use (the IPv4 one on RoCE, 0 on InfiniBand).
  int ConnectionGidIndex() const { return ethernet ? ipv4_gid_index : 0; }
  ibv_gid ConnectionGid() const;
  // The address handle from this port to a peer port with this LID and GID.
  ibv_ah_attr AhTo(uint16_t lid, const uint8_t gid[16]) const;
};

class PortAddresses {
 public:
  // Opens every simulated device once, for the life of the process. Never fails: a
  // device that cannot be opened has no ports here.
  static PortAddresses& Get();

  const std::vector<LocalPort>& ports() const { return ports_; }
  // The port `addr` names: its IPv4 or IPv6 address, loopback or wildcard (first port).
  const LocalPort* Find(const sockaddr* addr) const;
  // The port whose IPv4 address is `ip` (host byte order).
  const LocalPort* FindIpv4(uint32_t ip) const;
  // The port of a device context.
  const LocalPort* Find(ibv_context* verbs, uint8_t port) const;
  // A PD per device, for ids that are given none (librdmacm does the same).
  ibv_pd* DefaultPd(ibv_context* verbs);
  // The contexts, one per device, in device order.
  std::vector<ibv_context*> Contexts() const;
  // The device named `device` is gone: Find no longer gives its ports.
  // Requires: CmService::mu() (which every Find caller holds).
  void MarkRemoved(const std::string& device);

 private:
  PortAddresses();
  std::vector<LocalPort> ports_;
  std::vector<std::pair<ibv_context*, ibv_pd*>> pds_;
};

// "a.b.c.d", "any", or the IPv6 text of an address; the port number apart.
std::string AddressText(const sockaddr* addr);
uint16_t AddressPort(const sockaddr* addr);
void SetAddressPort(sockaddr* addr, uint16_t port);
bool IsWildcard(const sockaddr* addr);
bool IsLoopback(const sockaddr* addr);
socklen_t AddressLength(const sockaddr* addr);  // 0 for an unknown family

}  // namespace simverbs::rdmacm
