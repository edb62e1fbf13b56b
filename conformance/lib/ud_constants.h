#pragma once

// Numbers of the UD transport that tests of datagrams and multicast share.

#include <cstddef>
#include <cstdint>

namespace conformance {

// UD receive buffers start with the 40-byte GRH area (ibv_post_recv(3)).
inline constexpr size_t kGrhBytes = 40;
// IBTA Vol 1 (multicast): a datagram to a multicast group carries the destination QP 0xFFFFFF.
inline constexpr uint32_t kMulticastQpn = 0xffffff;

}  // namespace conformance
