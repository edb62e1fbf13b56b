#include "conformance/lib/banner.h"

#include <arpa/inet.h>
#include <endian.h>

#include <cinttypes>
#include <cstdio>

#include "conformance/lib/errno_capture.h"
#include "conformance/lib/sim_control.h"

namespace conformance {
namespace {

std::string FormatGuid(__be64 guid) {
  const uint64_t host = be64toh(guid);
  char text[20];
  std::snprintf(text, sizeof text, "%04x:%04x:%04x:%04x", static_cast<unsigned>(host >> 48) & 0xffff,
                static_cast<unsigned>(host >> 32) & 0xffff, static_cast<unsigned>(host >> 16) & 0xffff,
                static_cast<unsigned>(host) & 0xffff);
  return text;
}

const char* LinkLayerName(uint8_t link_layer) {
  switch (link_layer) {
    case IBV_LINK_LAYER_INFINIBAND:
      return "InfiniBand";
    case IBV_LINK_LAYER_ETHERNET:
      return "Ethernet";
    case IBV_LINK_LAYER_UNSPECIFIED:
      return "unspecified";
    default:
      return "unknown";
  }
}

}  // namespace

bool PrintBanner(ibv_context* context, const Options& options, const BackendSelection& selection,
                 const BackendProfile& backend) {
  ibv_device_attr device_attr = {};
  if (const int rc = ibv_query_device(context, &device_attr); rc != 0) {
    std::fprintf(stderr, "verbs-conformance: ibv_query_device failed: %s\n", ErrnoName(rc).c_str());
    return false;
  }
  ibv_port_attr port_attr = {};
  if (const int rc = ibv_query_port(context, static_cast<uint8_t>(options.port), &port_attr); rc != 0) {
    std::fprintf(stderr, "verbs-conformance: ibv_query_port(port %d) failed: %s (the device has %d port(s))\n",
                 options.port, ErrnoName(rc).c_str(), device_attr.phys_port_cnt);
    return false;
  }
  // Every test addresses the port through this GID: one that is not there fails them all, so say it once here.
  ibv_gid gid = {};
  if (options.gid_index >= port_attr.gid_tbl_len ||
      ibv_query_gid(context, static_cast<uint8_t>(options.port), options.gid_index, &gid) != 0) {
    std::fprintf(stderr, "verbs-conformance: --gid-index %d: port %d has no such GID (its table has %d entries; "
                 "ibv_devinfo -v lists them)\n", options.gid_index, options.port, port_attr.gid_tbl_len);
    return false;
  }
  in_addr address = {};
  if (!options.cm_address.empty() && inet_pton(AF_INET, options.cm_address.c_str(), &address) != 1) {
    std::fprintf(stderr, "verbs-conformance: --cm-address '%s' is not an IPv4 address (such as 10.0.0.1)\n",
                 options.cm_address.c_str());
    return false;
  }
  const char* device_name = ibv_get_device_name(context->device);
  std::printf("verbs-conformance\n");
  std::printf("  backend:      %s (%s)", selection.name.c_str(), selection.how.c_str());
  if (SimControl::Get().available()) std::printf(", simverbs API %d", SimControl::Get().version());
  std::printf("\n");
  std::printf("  device:       %s, port %d, gid index %d\n", device_name ? device_name : "?", options.port,
              options.gid_index);
  std::printf("  node GUID:    %s\n", FormatGuid(device_attr.node_guid).c_str());
  std::printf("  fw_ver:       %s\n", device_attr.fw_ver);
  std::printf("  link layer:   %s (port state %s)\n", LinkLayerName(port_attr.link_layer),
              ibv_port_state_str(port_attr.state));
  if (backend.file().empty()) {
    std::printf("  backend file: none (%s not found: spec defaults, no deviations)\n", selection.path.c_str());
  } else {
    std::printf("  backend file: %s (%zu answers, %zu deviations)\n", backend.file().c_str(),
                backend.questions().size(), backend.deviations().size());
  }
  if (!selection.kernel.empty()) std::printf("  kernel:       %s\n", selection.kernel.c_str());
  std::fflush(stdout);
  return true;
}

}  // namespace conformance
