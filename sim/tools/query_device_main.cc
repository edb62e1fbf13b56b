// simverbs-query-device: prints one RDMA device as a device entry of a simverbs profile
// (fixtures/FORMAT.md: "devices[]"), read through libibverbs. `simverbs record` runs it.
//
//   simverbs-query-device [--device NAME]     (default: the first device)
//
// Why a program of its own: the simverbs CLI links the simulator's internals, and a process
// cannot have both the simulator and the system libibverbs. This one links only the system
// libibverbs, so it reads whatever the loader gives it: the real device, or the simulator under
// `simverbs run` (which is how the clients suite tests it). It prints what the device reports,
// identity included; `simverbs record` makes the file stable and writes it.

#include <arpa/inet.h>
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

// Exported by libibverbs since IBVERBS_1.0 (ibv_devinfo reads board_id with it) but declared
// only in rdma-core's internal headers; the simulator provides it too.
extern "C" int ibv_read_sysfs_file(const char* dir, const char* file, char* buf, size_t size);

namespace {

using Json = nlohmann::ordered_json;

std::string Hex(uint64_t value, int digits = 0) {
  char text[32];
  std::snprintf(text, sizeof text, "0x%0*llx", digits, static_cast<unsigned long long>(value));
  return text;
}

// GUIDs as ibv_devinfo prints them: the __be64 read as a number.
std::string Guid(__be64 raw) { return Hex(be64toh(raw), 16); }

int MtuBytes(ibv_mtu mtu) { return 128 << mtu; }  // IBV_MTU_256 = 1 ... IBV_MTU_4096 = 5

const char* PortState(ibv_port_state state) {
  switch (state) {
    case IBV_PORT_DOWN: return "DOWN";
    case IBV_PORT_INIT: return "INIT";
    case IBV_PORT_ARMED: return "ARMED";
    case IBV_PORT_ACTIVE: return "ACTIVE";
    case IBV_PORT_ACTIVE_DEFER: return "ACTIVE_DEFER";
    default: return nullptr;
  }
}

const char* AtomicCap(ibv_atomic_cap cap) {
  switch (cap) {
    case IBV_ATOMIC_NONE: return "NONE";
    case IBV_ATOMIC_HCA: return "HCA";
    case IBV_ATOMIC_GLOB: return "GLOB";
  }
  return nullptr;
}

const char* GidType(uint32_t type) {
  switch (type) {
    case IBV_GID_TYPE_IB: return "IB";
    case IBV_GID_TYPE_ROCE_V1: return "RoCEv1";
    case IBV_GID_TYPE_ROCE_V2: return "RoCEv2";
    default: return nullptr;
  }
}

bool Fail(const std::string& what) {
  std::fprintf(stderr, "simverbs-query-device: %s\n", what.c_str());
  return false;
}

// The sysfs files a profile can carry that tools read (ibv_devinfo: board_id); those the device has.
Json Sysfs(ibv_device* device) {
  Json files = Json::object();
  for (const char* name : {"board_id", "hca_type", "hw_rev", "node_desc"}) {
    char value[256] = {};
    if (ibv_read_sysfs_file(device->ibdev_path, name, value, sizeof value) <= 0) continue;
    std::string text = value;
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    files[name] = text;
  }
  return files;
}

bool Device(const ibv_device_attr_ex& x, Json* out) {
  const ibv_device_attr& a = x.orig_attr;
  const char* atomic = AtomicCap(a.atomic_cap);
  if (!atomic) return Fail("unknown atomic_cap " + std::to_string(a.atomic_cap));
  *out = {
      {"fw_ver", a.fw_ver},
      {"node_guid", Guid(a.node_guid)},
      {"sys_image_guid", Guid(a.sys_image_guid)},
      {"max_mr_size", Hex(a.max_mr_size)},
      {"page_size_cap", Hex(a.page_size_cap)},
      {"vendor_id", Hex(a.vendor_id)},
      {"vendor_part_id", a.vendor_part_id},
      {"hw_ver", a.hw_ver},
      {"max_qp", a.max_qp},
      {"max_qp_wr", a.max_qp_wr},
      {"device_cap_flags", Hex(a.device_cap_flags, 8)},
      {"max_sge", a.max_sge},
      {"max_sge_rd", a.max_sge_rd},
      {"max_cq", a.max_cq},
      {"max_cqe", a.max_cqe},
      {"max_mr", a.max_mr},
      {"max_pd", a.max_pd},
      {"max_qp_rd_atom", a.max_qp_rd_atom},
      {"max_ee_rd_atom", a.max_ee_rd_atom},
      {"max_res_rd_atom", a.max_res_rd_atom},
      {"max_qp_init_rd_atom", a.max_qp_init_rd_atom},
      {"max_ee_init_rd_atom", a.max_ee_init_rd_atom},
      {"atomic_cap", atomic},
      {"max_ee", a.max_ee},
      {"max_rdd", a.max_rdd},
      {"max_mw", a.max_mw},
      {"max_raw_ipv6_qp", a.max_raw_ipv6_qp},
      {"max_raw_ethy_qp", a.max_raw_ethy_qp},
      {"max_mcast_grp", a.max_mcast_grp},
      {"max_mcast_qp_attach", a.max_mcast_qp_attach},
      {"max_total_mcast_qp_attach", a.max_total_mcast_qp_attach},
      {"max_ah", a.max_ah},
      {"max_fmr", a.max_fmr},
      {"max_map_per_fmr", a.max_map_per_fmr},
      {"max_srq", a.max_srq},
      {"max_srq_wr", a.max_srq_wr},
      {"max_srq_sge", a.max_srq_sge},
      {"max_pkeys", a.max_pkeys},
      {"local_ca_ack_delay", a.local_ca_ack_delay},
  };
  return true;
}

// device_ex: every field is optional and 0 when absent, so only the non-zero ones are written.
Json DeviceEx(const ibv_device_attr_ex& x) {
  Json ex = Json::object();
  const auto put = [&](const char* name, uint64_t value, bool hex) {
    if (value) ex[name] = hex ? Json(Hex(value)) : Json(value);
  };
  put("completion_timestamp_mask", x.completion_timestamp_mask, true);
  put("hca_core_clock", x.hca_core_clock, false);
  put("device_cap_flags_ex", x.device_cap_flags_ex, true);
  put("max_wq_type_rq", x.max_wq_type_rq, false);
  put("raw_packet_caps", x.raw_packet_caps, true);
  put("max_dm_size", x.max_dm_size, false);
  put("xrc_odp_caps", x.xrc_odp_caps, true);
  put("odp_general_caps", x.odp_caps.general_caps, true);
  put("odp_rc_caps", x.odp_caps.per_transport_caps.rc_odp_caps, true);
  put("odp_uc_caps", x.odp_caps.per_transport_caps.uc_odp_caps, true);
  put("odp_ud_caps", x.odp_caps.per_transport_caps.ud_odp_caps, true);
  return ex;
}

bool Port(ibv_context* context, uint8_t port_num, Json* out) {
  ibv_port_attr p = {};
  if (const int rc = ibv_query_port(context, port_num, &p); rc != 0) {
    return Fail("ibv_query_port(" + std::to_string(port_num) + ") failed: " + std::strerror(rc));
  }
  const char* state = PortState(p.state);
  if (!state) return Fail("unknown port state " + std::to_string(p.state));
  if (p.link_layer != IBV_LINK_LAYER_INFINIBAND && p.link_layer != IBV_LINK_LAYER_ETHERNET) {
    return Fail("port " + std::to_string(port_num) + ": link layer " + std::to_string(p.link_layer) +
                " (a profile has InfiniBand or Ethernet)");
  }
  // The table up to its first empty entry (a profile lists the GIDs from index 0 on).
  Json gids = Json::array();
  for (int i = 0; i < p.gid_tbl_len; ++i) {
    ibv_gid_entry entry = {};
    if (ibv_query_gid_ex(context, port_num, static_cast<uint32_t>(i), &entry, 0) != 0) break;  // ENODATA: empty
    static const uint8_t kZero[16] = {};
    if (std::memcmp(entry.gid.raw, kZero, sizeof kZero) == 0) break;
    const char* type = GidType(entry.gid_type);
    if (!type) return Fail("GID " + std::to_string(i) + ": unknown type " + std::to_string(entry.gid_type));
    char text[INET6_ADDRSTRLEN] = {};
    inet_ntop(AF_INET6, entry.gid.raw, text, sizeof text);
    gids.push_back({{"gid", text}, {"type", type}});
  }
  // The P_Key table without its trailing empty entries (at least one stays).
  Json pkeys = Json::array();
  int last_used = 0;
  for (int i = 0; i < p.pkey_tbl_len; ++i) {
    __be16 pkey = 0;
    if (ibv_query_pkey(context, port_num, i, &pkey) != 0) break;
    pkeys.push_back(Hex(ntohs(pkey)));
    if (ntohs(pkey) != 0) last_used = i;
  }
  if (pkeys.size() > 1) pkeys.erase(pkeys.begin() + last_used + 1, pkeys.end());
  *out = {
      {"state", state},
      {"max_mtu", MtuBytes(p.max_mtu)},
      {"active_mtu", MtuBytes(p.active_mtu)},
      {"gid_tbl_len", p.gid_tbl_len},
      {"port_cap_flags", Hex(p.port_cap_flags, 8)},
      {"max_msg_sz", Hex(p.max_msg_sz)},
      {"bad_pkey_cntr", p.bad_pkey_cntr},
      {"qkey_viol_cntr", p.qkey_viol_cntr},
      {"pkey_tbl_len", p.pkey_tbl_len},
      {"lid", p.lid},
      {"sm_lid", p.sm_lid},
      {"lmc", p.lmc},
      {"max_vl_num", p.max_vl_num},
      {"sm_sl", p.sm_sl},
      {"subnet_timeout", p.subnet_timeout},
      {"init_type_reply", p.init_type_reply},
      {"active_width", p.active_width},
      {"active_speed", p.active_speed},
      {"phys_state", p.phys_state},
      {"link_layer", p.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand"},
      {"flags", p.flags},
      {"port_cap_flags2", p.port_cap_flags2},
      {"gids", gids},
      {"pkeys", pkeys},
  };
  return true;
}

bool Query(ibv_device* device, Json* out) {
  const char* name = ibv_get_device_name(device);
  if (device->node_type != IBV_NODE_CA && device->node_type != IBV_NODE_RNIC) {
    return Fail(std::string(name) + ": node type " + ibv_node_type_str(device->node_type) + " (a profile has CA or RNIC)");
  }
  if (device->transport_type != IBV_TRANSPORT_IB && device->transport_type != IBV_TRANSPORT_IWARP) {
    return Fail(std::string(name) + ": transport " + std::to_string(device->transport_type) +
                " (a profile has InfiniBand or iWARP)");
  }
  std::unique_ptr<ibv_context, int (*)(ibv_context*)> context(ibv_open_device(device), ibv_close_device);
  if (!context) return Fail(std::string("ibv_open_device(") + name + ") failed: " + std::strerror(errno));
  ibv_device_attr_ex attr = {};
  if (const int rc = ibv_query_device_ex(context.get(), nullptr, &attr); rc != 0) {
    return Fail(std::string("ibv_query_device_ex failed: ") + std::strerror(rc));
  }
  Json device_attr;
  if (!Device(attr, &device_attr)) return false;
  Json ports = Json::array();
  for (uint8_t port = 1; port <= attr.orig_attr.phys_port_cnt; ++port) {
    Json entry;
    if (!Port(context.get(), port, &entry)) return false;
    ports.push_back(entry);
  }
  *out = {
      {"name", name},
      {"node_type", device->node_type == IBV_NODE_RNIC ? "RNIC" : "CA"},
      {"transport_type", device->transport_type == IBV_TRANSPORT_IWARP ? "iWARP" : "InfiniBand"},
      {"num_comp_vectors", context->num_comp_vectors},
      {"sysfs", Sysfs(device)},
      {"device", device_attr},
      {"device_ex", DeviceEx(attr)},
      {"ports", ports},
  };
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string wanted;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--device" && i + 1 < argc) {
      wanted = argv[++i];
    } else {
      std::fprintf(stderr, "usage: simverbs-query-device [--device NAME]\n");
      return 2;
    }
  }
  int count = 0;
  std::unique_ptr<ibv_device*, void (*)(ibv_device**)> list(ibv_get_device_list(&count), ibv_free_device_list);
  if (!list) {
    // ENOSYS: no RDMA subsystem at all (no /sys/class/infiniband).
    const std::string why = errno == ENOSYS ? "this machine has no RDMA devices (no /sys/class/infiniband); record "
                                              "needs a real HCA or rxe (rdma link add rxe0 type rxe netdev IF)"
                                            : std::string("ibv_get_device_list failed: ") + std::strerror(errno);
    return Fail(why), 1;
  }
  std::string seen;
  for (int i = 0; i < count; ++i) {
    const std::string name = ibv_get_device_name(list.get()[i]);
    if (!wanted.empty() && name != wanted) {
      seen += " " + name;
      continue;
    }
    Json device;
    if (!Query(list.get()[i], &device)) return 1;
    std::printf("%s\n", device.dump(2, ' ', false).c_str());
    return 0;
  }
  Fail(wanted.empty() ? "no RDMA device" : "no RDMA device named '" + wanted + "'; there are:" + (seen.empty() ? " none" : seen));
  return 1;
}
