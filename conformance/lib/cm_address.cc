#include "conformance/lib/cm_address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <rdma/rdma_cma.h>

#include <cstring>
#include <vector>

#include "conformance/lib/cm_handles.h"
#include "conformance/lib/errno_capture.h"

namespace conformance {
namespace {

std::string Text(in_addr a) {
  char text[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &a, text, sizeof text);
  return text;
}

// Where rdma_bind_addr puts `a`: "" when it lands on the device and port, else what happened.
std::string BindsTo(in_addr a, const std::string& device, uint8_t port) {
  rdma_cm_id* raw = nullptr;
  if (rdma_create_id(nullptr, &raw, nullptr, RDMA_PS_TCP) != 0) return "rdma_create_id: " + ErrnoName(errno);
  CmIdPtr id(raw);
  sockaddr_in sin = {};
  sin.sin_family = AF_INET;
  sin.sin_addr = a;
  if (rdma_bind_addr(id.get(), reinterpret_cast<sockaddr*>(&sin)) != 0) return "rdma_bind_addr: " + ErrnoName(errno);
  if (!id->verbs) return "bound to no device";
  const std::string name = ibv_get_device_name(id->verbs->device);
  if (name != device || id->port_num != port) return "bound to " + name + " port " + std::to_string(id->port_num);
  return "";
}

std::vector<in_addr> Candidates(ibv_context* context, uint8_t port) {
  std::vector<in_addr> out;
  ibv_port_attr attr = {};
  if (ibv_query_port(context, port, &attr) == 0) {
    static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    for (int i = 0; i < attr.gid_tbl_len && i < 256; ++i) {
      ibv_gid gid = {};
      if (ibv_query_gid(context, port, i, &gid) != 0) continue;
      if (std::memcmp(gid.raw, kMapped, sizeof kMapped) != 0) continue;
      in_addr a = {};
      std::memcpy(&a, gid.raw + 12, 4);
      out.push_back(a);
    }
  }
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) == 0) {
    for (ifaddrs* i = list; i; i = i->ifa_next) {
      if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET) {
        out.push_back(reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr);
      }
    }
    freeifaddrs(list);
  }
  in_addr loopback = {};
  loopback.s_addr = htonl(INADDR_LOOPBACK);
  out.push_back(loopback);
  return out;
}

}  // namespace

bool FindCmAddress(ibv_context* context, uint8_t port, const std::string& wanted, in_addr* found, std::string* why) {
  const std::string device = ibv_get_device_name(context->device);
  const std::string where = device + " port " + std::to_string(port);
  if (!wanted.empty()) {
    in_addr a = {};
    if (inet_pton(AF_INET, wanted.c_str(), &a) != 1) {
      *why = "--cm-address '" + wanted + "' is not an IPv4 address";
      return false;
    }
    if (std::string bound = BindsTo(a, device, port); !bound.empty()) {
      *why = "--cm-address " + wanted + " does not reach " + where + " (" + bound + ")";
      return false;
    }
    *found = a;
    return true;
  }
  std::string tried;
  for (in_addr a : Candidates(context, port)) {
    const std::string bound = BindsTo(a, device, port);
    if (bound.empty()) {
      *found = a;
      return true;
    }
    tried += (tried.empty() ? "" : "; ") + Text(a) + ": " + bound;
  }
  *why = "no IPv4 address reaches " + where + " through rdma_cm (tried " + tried +
         "); give one with --cm-address";
  return false;
}

}  // namespace conformance
