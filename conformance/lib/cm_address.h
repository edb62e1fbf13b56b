#pragma once

#include <infiniband/verbs.h>
#include <netinet/in.h>

#include <cstdint>
#include <string>

namespace conformance {

// The IPv4 address by which rdma_cm reaches `port` of the device of `context`.
// With `wanted` (--cm-address) that address, which must bind there. Otherwise
// the first of these that rdma_bind_addr puts on that device and port: the
// addresses behind the port's IPv4-mapped GIDs (RoCE), the host's interface
// addresses (IPoIB), 127.0.0.1. False, with *why, when none does.
bool FindCmAddress(ibv_context* context, uint8_t port, const std::string& wanted, in_addr* found, std::string* why);

}  // namespace conformance
