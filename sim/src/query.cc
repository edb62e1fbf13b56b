#include "query.h"

#include <arpa/inet.h>
#include <net/if.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "context.h"
#include "cq.h"
#include "device.h"
#include "device_list.h"
#include "fabric/fabric.h"
#include "fault/device_fatal.h"
#include "gid.h"

namespace simverbs {
namespace {

Device* DeviceOf(ibv_context* ctx) {
  Context* c = Context::From(ctx);
  return c ? c->device() : nullptr;
}

ibv_gid_type GidEntryType(const Device* dev, uint32_t port_num, const GidProfile& g) {
  if (dev->profile().ports[port_num - 1].attr.link_layer != IBV_LINK_LAYER_ETHERNET) return IBV_GID_TYPE_IB;
  return g.kind == GidKind::kRoceV2 ? IBV_GID_TYPE_ROCE_V2 : IBV_GID_TYPE_ROCE_V1;
}

uint32_t LoopbackIfindex() {
  static const uint32_t index = [] {
    const unsigned int found = if_nametoindex("lo");
    return found != 0 ? found : 1u;  // (lo is the first interface of every network namespace)
  }();
  return index;
}

void FillGidEntry(Device* dev, uint32_t port_num, uint32_t index, const GidProfile& g, ibv_gid_entry* e) {
  std::memset(e, 0, sizeof *e);
  e->gid = g.gid;
  e->gid_index = index;
  e->port_num = port_num;
  e->gid_type = GidEntryType(dev, port_num, g);
  // RoCE GIDs belong to a netdev: the loopback interface, as `simverbs run --sysfs` names it (ndevs/N).
  e->ndev_ifindex = e->gid_type == IBV_GID_TYPE_IB ? 0 : LoopbackIfindex();
}

}  // namespace

int QueryDeviceOp(ibv_context* ctx, ibv_device_attr* attr) {
  Device* dev = DeviceOf(ctx);
  if (!dev || !attr) return EINVAL;
  *attr = dev->profile().attr_ex.orig_attr;
  return 0;
}

int QueryDeviceExOp(ibv_context* ctx, const ibv_query_device_ex_input* input, ibv_device_attr_ex* attr,
                    size_t attr_size) {
  Device* dev = DeviceOf(ctx);
  if (!dev || !attr) return EINVAL;
  if (input && input->comp_mask) return EINVAL;
  if (attr_size < sizeof(ibv_device_attr)) return EINVAL;
  const size_t n = std::min(attr_size, sizeof(ibv_device_attr_ex));
  std::memcpy(attr, &dev->profile().attr_ex, n);
  return 0;
}

int QueryRtValuesOp(ibv_context* ctx, ibv_values_ex* values) {
  Device* dev = DeviceOf(ctx);
  if (!dev || !values) return EINVAL;
  if (dev->profile().attr_ex.completion_timestamp_mask == 0) return EOPNOTSUPP;  // no HCA clock to read
  uint32_t answered = 0;
  if (values->comp_mask & IBV_VALUES_MASK_RAW_CLOCK) {
    values->raw_clock.tv_sec = 0;
    values->raw_clock.tv_nsec = static_cast<long>(Cq::HcaTicks(dev, MonotonicNs()));
    answered |= IBV_VALUES_MASK_RAW_CLOCK;
  }
  values->comp_mask = answered;
  return 0;
}

int QueryPortOp(ibv_context* ctx, uint8_t port_num, ibv_port_attr* attr, size_t attr_len) {
  Device* dev = DeviceOf(ctx);
  if (!dev || !attr) return EINVAL;
  if (!dev->ValidPort(port_num)) return EINVAL;
  if (DeviceFatal(ctx)) return EIO;  // the port is queried from the dead firmware (fault/device_fatal.h)
  const ibv_port_attr now = dev->PortAttr(port_num);
  std::memset(attr, 0, attr_len);
  std::memcpy(attr, &now, std::min(attr_len, sizeof now));
  return 0;
}

int QueryPortCompatOp(ibv_context* ctx, uint8_t port_num, void* attr) {
  // rdma-core's struct _compat_ibv_port_attr ends with flags (port_cap_flags2 and the speed fields after it
  // are not there).
  return QueryPortOp(ctx, port_num, static_cast<ibv_port_attr*>(attr),
                     offsetof(ibv_port_attr, flags) + sizeof(ibv_port_attr::flags));
}

int QueryGid(ibv_context* ctx, uint32_t port_num, int index, ibv_gid* gid) {
  Device* dev = DeviceOf(ctx);
  if (!dev || !gid || !dev->ValidPort(static_cast<int>(port_num))) return EINVAL;
  if (index < 0 || index >= dev->profile().ports[port_num - 1].attr.gid_tbl_len) return EINVAL;
  // An empty slot reads as the zero GID, as rdma-core does for ENODATA.
  const GidProfile* g = dev->Gid(static_cast<int>(port_num), static_cast<uint32_t>(index));
  if (g) {
    *gid = g->gid;
  } else {
    std::memset(gid, 0, sizeof *gid);
  }
  return 0;
}

int QueryGidEx(ibv_context* ctx, uint32_t port_num, uint32_t index, ibv_gid_entry* entry, uint32_t flags,
               size_t entry_size) {
  Device* dev = DeviceOf(ctx);
  if (!dev || !entry || flags != 0 || entry_size < sizeof(ibv_gid_entry)) return EINVAL;
  if (!dev->ValidPort(static_cast<int>(port_num))) return EINVAL;
  if (index >= static_cast<uint32_t>(dev->profile().ports[port_num - 1].attr.gid_tbl_len)) return EINVAL;
  const GidProfile* g = dev->Gid(static_cast<int>(port_num), index);
  if (!g) return ENODATA;
  FillGidEntry(dev, port_num, index, *g, entry);
  return 0;
}

ssize_t QueryGidTable(ibv_context* ctx, ibv_gid_entry* entries, size_t max_entries, uint32_t flags,
                      size_t entry_size) {
  Device* dev = DeviceOf(ctx);
  if (!dev || flags != 0 || entry_size < sizeof(ibv_gid_entry)) return -EINVAL;
  // rdma-core 44 hands the array to the kernel as one ioctl attribute, whose
  // length is 16 bits (fill_attr_out: more is EINVAL); a NULL array is
  // EINVAL too (measured on rxe 6.1, kernel and rdma-core 44).
  if (max_entries > 0xffff / entry_size || !entries) return -EINVAL;
  size_t n = 0;
  for (int port = 1; port <= dev->port_count(); ++port) {
    const PortProfile& p = dev->profile().ports[port - 1];
    for (uint32_t i = 0; i < p.gids.size(); ++i) {
      const GidProfile* g = dev->Gid(port, i);
      if (!g) continue;
      if (n == max_entries) return -EINVAL;  // the caller's array is too small
      FillGidEntry(dev, port, i, *g, reinterpret_cast<ibv_gid_entry*>(reinterpret_cast<char*>(entries) +
                                                                       n * entry_size));
      ++n;
    }
  }
  return static_cast<ssize_t>(n);
}

int QueryGidType(ibv_context* ctx, uint8_t port_num, unsigned index, int* type) {
  Device* dev = DeviceOf(ctx);
  if (!dev || !type || !dev->ValidPort(port_num)) return EINVAL;
  if (index >= static_cast<unsigned>(dev->profile().ports[port_num - 1].attr.gid_tbl_len)) return EINVAL;
  const GidProfile* g = dev->Gid(static_cast<int>(port_num), index);
  // rdma-core reports IB/RoCEv1 for an empty entry.
  *type = g && GidEntryType(dev, port_num, *g) == IBV_GID_TYPE_ROCE_V2 ? 1 : 0;
  return 0;
}

int QueryPkey(ibv_context* ctx, uint8_t port_num, int index, uint16_t* pkey_be) {
  Device* dev = DeviceOf(ctx);
  if (!dev || !pkey_be) return EINVAL;
  // rdma-core 44 reads ports/N/pkeys/I in sysfs: a port or index that has no
  // file there fails with the open's ENOENT; every index of the table has one.
  if (!dev->ValidPort(port_num)) return ENOENT;
  const PortProfile& p = dev->profile().ports[port_num - 1];
  if (index < 0 || index >= p.attr.pkey_tbl_len) return ENOENT;
  *pkey_be = static_cast<size_t>(index) < p.pkeys.size() ? htons(p.pkeys[index]) : 0;
  return 0;
}

int GetPkeyIndex(ibv_context* ctx, uint8_t port_num, uint16_t pkey_be) {
  // As rdma-core: ibv_query_pkey of index 0, 1, ... until it matches or fails
  // (an empty entry reads 0x0000).
  for (int i = 0;; ++i) {
    uint16_t entry = 0;
    if (int err = QueryPkey(ctx, port_num, i, &entry)) return -err;
    if (entry == pkey_be) return i;
  }
}

const char* SysfsValue(const char* dir, const char* file, char* scratch, size_t scratch_len) {
  if (!dir || !file) return nullptr;
  const std::string root = std::string(Device::kSysfsRoot) + "/";
  if (std::strncmp(dir, root.c_str(), root.size()) != 0) return nullptr;
  Device* dev = DeviceList::Get().Find(dir + root.size());
  if (!dev) return nullptr;
  const std::string name = file;
  auto it = dev->profile().sysfs.find(name);
  if (it != dev->profile().sysfs.end()) {
    std::snprintf(scratch, scratch_len, "%s\n", it->second.c_str());
    return scratch;
  }
  if (name == "fw_ver") {
    std::snprintf(scratch, scratch_len, "%s\n", dev->profile().attr_ex.orig_attr.fw_ver);
    return scratch;
  }
  if (name == "node_type") {
    std::snprintf(scratch, scratch_len, "1: CA\n");
    return scratch;
  }
  // ports/<n>/counters/port_xmit_discards: what the fabric dropped for
  // congestion at this port (Fabric::CountXmitDiscard).
  unsigned port = 0, index = 0;
  char counter[32] = {};
  if (std::sscanf(file, "ports/%u/counters/%31s", &port, counter) == 2 && dev->ValidPort(static_cast<int>(port)) &&
      std::strcmp(counter, "port_xmit_discards") == 0) {
    std::snprintf(scratch, scratch_len, "%llu\n",
                  static_cast<unsigned long long>(Fabric::Get().XmitDiscards(dev->index(), static_cast<int>(port))));
    return scratch;
  }
  // ports/<n>/gid_attrs/types/<i>: what ibv_query_gid_type reads on rdma-core.
  if (std::sscanf(file, "ports/%u/gid_attrs/types/%u", &port, &index) == 2 && dev->ValidPort(static_cast<int>(port))) {
    const auto& gids = dev->profile().ports[port - 1].gids;
    if (index >= gids.size()) return nullptr;
    const bool ethernet = dev->profile().ports[port - 1].attr.link_layer == IBV_LINK_LAYER_ETHERNET;
    std::snprintf(scratch, scratch_len, "%s\n",
                  ethernet && gids[index].kind == GidKind::kRoceV2 ? "RoCE v2" : "IB/RoCE v1");
    return scratch;
  }
  return nullptr;
}

}  // namespace simverbs
