#include "profile.h"

#include <arpa/inet.h>
#include <endian.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <stdexcept>

#include "json_error.h"

namespace simverbs {
namespace {

using nlohmann::json;

// Thrown inside the parser only; LoadProfileFile turns it into an error text.
struct ProfileError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Reads the fields of one JSON object. Every field read is remembered so that
// Finish() can reject the ones nobody asked for (typos must not pass silently).
class ObjectReader {
 public:
  ObjectReader(const json& j, std::string where) : j_(j), where_(std::move(where)) {
    if (!j_.is_object()) Fail(where_, "expected an object");
  }

  [[noreturn]] static void Fail(const std::string& field, const std::string& what) {
    throw ProfileError(field + ": " + what);
  }

  std::string Path(const std::string& key) const { return where_.empty() ? key : where_ + "." + key; }

  const json* Find(const std::string& key, bool required) {
    seen_.insert(key);
    auto it = j_.find(key);
    if (it == j_.end()) {
      if (required) Fail(Path(key), "missing field");
      return nullptr;
    }
    return &*it;
  }

  // Unsigned integers may be written as numbers or as "0x..." strings (flags, GUIDs).
  template <typename T>
  void Unsigned(const std::string& key, T* out, bool required = true) {
    const json* v = Find(key, required);
    if (v) *out = UnsignedValue<T>(*v, Path(key));
  }

  template <typename T>
  static T UnsignedValue(const json& v, const std::string& field) {
    uint64_t value = 0;
    if (v.is_number_unsigned()) {
      value = v.get<uint64_t>();
    } else if (v.is_string()) {
      const std::string s = v.get<std::string>();
      char* end = nullptr;
      errno = 0;
      value = std::strtoull(s.c_str(), &end, 0);
      if (s.empty() || s[0] == '-' || *end != '\0' || errno != 0) {
        Fail(field, "expected an unsigned integer, got \"" + s + "\"");
      }
    } else {
      Fail(field, "expected an unsigned integer, got " + std::string(v.type_name()));
    }
    if (value > std::numeric_limits<T>::max()) {
      Fail(field, "value " + std::to_string(value) + " does not fit (max " +
                      std::to_string(std::numeric_limits<T>::max()) + ")");
    }
    return static_cast<T>(value);
  }

  void Int(const std::string& key, int* out, bool required = true) {
    unsigned value = 0;
    Unsigned(key, &value, required);
    if (value > static_cast<unsigned>(std::numeric_limits<int>::max())) Fail(Path(key), "value too large");
    if (j_.contains(key)) *out = static_cast<int>(value);
  }

  std::string String(const std::string& key, bool required = true) {
    const json* v = Find(key, required);
    if (!v) return {};
    if (!v->is_string()) Fail(Path(key), "expected a string, got " + std::string(v->type_name()));
    return v->get<std::string>();
  }

  // A string that must be one of the names in `choices`.
  template <typename T>
  T Choice(const std::string& key, const std::vector<std::pair<const char*, T>>& choices) {
    const std::string s = String(key);
    std::string names;
    for (const auto& [name, value] : choices) {
      if (s == name) return value;
      names += names.empty() ? name : std::string(", ") + name;
    }
    Fail(Path(key), "unknown value \"" + s + "\" (expected one of: " + names + ")");
  }

  void Finish() const {
    for (auto it = j_.begin(); it != j_.end(); ++it) {
      if (!seen_.count(it.key())) Fail(Path(it.key()), "unknown field");
    }
  }

 private:
  const json& j_;
  std::string where_;
  std::set<std::string> seen_;
};

uint64_t ParseGuid(ObjectReader& r, const std::string& key) {
  uint64_t host = 0;
  r.Unsigned(key, &host);
  return htobe64(host);
}

ibv_mtu MtuFromBytes(ObjectReader& r, const std::string& key) {
  unsigned bytes = 0;
  r.Unsigned(key, &bytes);
  switch (bytes) {
    case 256: return IBV_MTU_256;
    case 512: return IBV_MTU_512;
    case 1024: return IBV_MTU_1024;
    case 2048: return IBV_MTU_2048;
    case 4096: return IBV_MTU_4096;
  }
  ObjectReader::Fail(r.Path(key), "expected one of 256, 512, 1024, 2048, 4096, got " + std::to_string(bytes));
}

void ParseDeviceAttr(const json& j, const std::string& where, ibv_device_attr* a) {
  ObjectReader r(j, where);
  const std::string fw = r.String("fw_ver");
  if (fw.size() >= sizeof(a->fw_ver)) ObjectReader::Fail(r.Path("fw_ver"), "longer than 63 characters");
  fw.copy(a->fw_ver, sizeof(a->fw_ver) - 1);
  a->node_guid = ParseGuid(r, "node_guid");
  a->sys_image_guid = ParseGuid(r, "sys_image_guid");
  r.Unsigned("max_mr_size", &a->max_mr_size);
  r.Unsigned("page_size_cap", &a->page_size_cap);
  r.Unsigned("vendor_id", &a->vendor_id);
  r.Unsigned("vendor_part_id", &a->vendor_part_id);
  r.Unsigned("hw_ver", &a->hw_ver);
  r.Int("max_qp", &a->max_qp);
  r.Int("max_qp_wr", &a->max_qp_wr);
  r.Unsigned("device_cap_flags", &a->device_cap_flags);
  r.Int("max_sge", &a->max_sge);
  r.Int("max_sge_rd", &a->max_sge_rd);
  r.Int("max_cq", &a->max_cq);
  r.Int("max_cqe", &a->max_cqe);
  r.Int("max_mr", &a->max_mr);
  r.Int("max_pd", &a->max_pd);
  r.Int("max_qp_rd_atom", &a->max_qp_rd_atom);
  r.Int("max_ee_rd_atom", &a->max_ee_rd_atom);
  r.Int("max_res_rd_atom", &a->max_res_rd_atom);
  r.Int("max_qp_init_rd_atom", &a->max_qp_init_rd_atom);
  r.Int("max_ee_init_rd_atom", &a->max_ee_init_rd_atom);
  a->atomic_cap = r.Choice<ibv_atomic_cap>(
      "atomic_cap", {{"NONE", IBV_ATOMIC_NONE}, {"HCA", IBV_ATOMIC_HCA}, {"GLOB", IBV_ATOMIC_GLOB}});
  r.Int("max_ee", &a->max_ee);
  r.Int("max_rdd", &a->max_rdd);
  r.Int("max_mw", &a->max_mw);
  r.Int("max_raw_ipv6_qp", &a->max_raw_ipv6_qp);
  r.Int("max_raw_ethy_qp", &a->max_raw_ethy_qp);
  r.Int("max_mcast_grp", &a->max_mcast_grp);
  r.Int("max_mcast_qp_attach", &a->max_mcast_qp_attach);
  r.Int("max_total_mcast_qp_attach", &a->max_total_mcast_qp_attach);
  r.Int("max_ah", &a->max_ah);
  r.Int("max_fmr", &a->max_fmr);
  r.Int("max_map_per_fmr", &a->max_map_per_fmr);
  r.Int("max_srq", &a->max_srq);
  r.Int("max_srq_wr", &a->max_srq_wr);
  r.Int("max_srq_sge", &a->max_srq_sge);
  r.Unsigned("max_pkeys", &a->max_pkeys);
  r.Unsigned("local_ca_ack_delay", &a->local_ca_ack_delay);
  r.Finish();
}

// Extended attributes are optional: a field that is absent reads as 0 (device_cap_flags_ex as
// device_cap_flags: ParseProfile).
void ParseDeviceAttrEx(const json& j, const std::string& where, ibv_device_attr_ex* a) {
  ObjectReader r(j, where);
  r.Unsigned("completion_timestamp_mask", &a->completion_timestamp_mask, false);
  r.Unsigned("hca_core_clock", &a->hca_core_clock, false);
  r.Unsigned("device_cap_flags_ex", &a->device_cap_flags_ex, false);
  r.Unsigned("max_wq_type_rq", &a->max_wq_type_rq, false);
  r.Unsigned("raw_packet_caps", &a->raw_packet_caps, false);
  r.Unsigned("max_dm_size", &a->max_dm_size, false);
  r.Unsigned("xrc_odp_caps", &a->xrc_odp_caps, false);
  r.Unsigned("odp_general_caps", &a->odp_caps.general_caps, false);
  r.Unsigned("odp_rc_caps", &a->odp_caps.per_transport_caps.rc_odp_caps, false);
  r.Unsigned("odp_uc_caps", &a->odp_caps.per_transport_caps.uc_odp_caps, false);
  r.Unsigned("odp_ud_caps", &a->odp_caps.per_transport_caps.ud_odp_caps, false);
  r.Finish();
}

GidProfile ParseGid(const json& j, const std::string& where) {
  ObjectReader r(j, where);
  GidProfile g;
  const std::string text = r.String("gid");
  if (inet_pton(AF_INET6, text.c_str(), g.gid.raw) != 1) {
    ObjectReader::Fail(r.Path("gid"), "not an IPv6-style GID: \"" + text + "\"");
  }
  g.kind = r.Choice<GidKind>("type", {{"IB", GidKind::kIbRoceV1}, {"RoCEv1", GidKind::kIbRoceV1},
                                      {"RoCEv2", GidKind::kRoceV2}});
  r.Finish();
  return g;
}

PortProfile ParsePort(const json& j, const std::string& where) {
  ObjectReader r(j, where);
  PortProfile p;
  ibv_port_attr& a = p.attr;
  a.state = r.Choice<ibv_port_state>("state", {{"DOWN", IBV_PORT_DOWN},
                                               {"INIT", IBV_PORT_INIT},
                                               {"ARMED", IBV_PORT_ARMED},
                                               {"ACTIVE", IBV_PORT_ACTIVE},
                                               {"ACTIVE_DEFER", IBV_PORT_ACTIVE_DEFER}});
  a.max_mtu = MtuFromBytes(r, "max_mtu");
  a.active_mtu = MtuFromBytes(r, "active_mtu");
  r.Int("gid_tbl_len", &a.gid_tbl_len);
  r.Unsigned("port_cap_flags", &a.port_cap_flags);
  r.Unsigned("max_msg_sz", &a.max_msg_sz);
  r.Unsigned("bad_pkey_cntr", &a.bad_pkey_cntr);
  r.Unsigned("qkey_viol_cntr", &a.qkey_viol_cntr);
  r.Unsigned("pkey_tbl_len", &a.pkey_tbl_len);
  r.Unsigned("lid", &a.lid);
  r.Unsigned("sm_lid", &a.sm_lid);
  r.Unsigned("lmc", &a.lmc);
  r.Unsigned("max_vl_num", &a.max_vl_num);
  r.Unsigned("sm_sl", &a.sm_sl);
  r.Unsigned("subnet_timeout", &a.subnet_timeout);
  r.Unsigned("init_type_reply", &a.init_type_reply);
  r.Unsigned("active_width", &a.active_width);
  r.Unsigned("active_speed", &a.active_speed);
  r.Unsigned("phys_state", &a.phys_state);
  a.link_layer = r.Choice<uint8_t>("link_layer", {{"InfiniBand", IBV_LINK_LAYER_INFINIBAND},
                                                  {"Ethernet", IBV_LINK_LAYER_ETHERNET}});
  r.Unsigned("flags", &a.flags);
  r.Unsigned("port_cap_flags2", &a.port_cap_flags2);

  const json* gids = r.Find("gids", true);
  if (!gids->is_array()) ObjectReader::Fail(r.Path("gids"), "expected an array");
  for (size_t i = 0; i < gids->size(); ++i) p.gids.push_back(ParseGid((*gids)[i], r.Path("gids") + "[" + std::to_string(i) + "]"));
  const json* pkeys = r.Find("pkeys", true);
  if (!pkeys->is_array()) ObjectReader::Fail(r.Path("pkeys"), "expected an array");
  for (size_t i = 0; i < pkeys->size(); ++i) {
    p.pkeys.push_back(ObjectReader::UnsignedValue<uint16_t>((*pkeys)[i], r.Path("pkeys") + "[" + std::to_string(i) + "]"));
  }
  r.Finish();

  if (p.gids.size() > static_cast<size_t>(a.gid_tbl_len)) {
    ObjectReader::Fail(r.Path("gids"), "more entries than gid_tbl_len");
  }
  if (p.pkeys.empty() || p.pkeys.size() > a.pkey_tbl_len) {
    ObjectReader::Fail(r.Path("pkeys"), "needs 1 to pkey_tbl_len entries");
  }
  return p;
}

DeviceProfile ParseDevice(const json& j, const std::string& where) {
  ObjectReader r(j, where);
  DeviceProfile d;
  d.name = r.String("name");
  if (d.name.empty() || d.name.size() >= IBV_SYSFS_NAME_MAX) ObjectReader::Fail(r.Path("name"), "must be 1 to 63 characters");
  d.node_type = r.Choice<ibv_node_type>("node_type", {{"CA", IBV_NODE_CA}, {"RNIC", IBV_NODE_RNIC}});
  d.transport_type = r.Choice<ibv_transport_type>("transport_type", {{"InfiniBand", IBV_TRANSPORT_IB},
                                                                     {"iWARP", IBV_TRANSPORT_IWARP}});
  r.Int("num_comp_vectors", &d.num_comp_vectors);
  if (d.num_comp_vectors < 1) ObjectReader::Fail(r.Path("num_comp_vectors"), "must be at least 1");

  if (const json* sysfs = r.Find("sysfs", false)) {
    if (!sysfs->is_object()) ObjectReader::Fail(r.Path("sysfs"), "expected an object of strings");
    for (auto it = sysfs->begin(); it != sysfs->end(); ++it) {
      if (!it->is_string()) ObjectReader::Fail(r.Path("sysfs." + it.key()), "expected a string");
      d.sysfs[it.key()] = it->get<std::string>();
    }
  }
  ParseDeviceAttr(*r.Find("device", true), r.Path("device"), &d.attr_ex.orig_attr);
  // The kernel reports its capability flags in both fields (ib_uverbs_ex_query_device: the legacy one
  // has their low 32 bits): an absent device_cap_flags_ex is device_cap_flags.
  d.attr_ex.device_cap_flags_ex = d.attr_ex.orig_attr.device_cap_flags;
  if (const json* ex = r.Find("device_ex", false)) ParseDeviceAttrEx(*ex, r.Path("device_ex"), &d.attr_ex);

  const json* ports = r.Find("ports", true);
  if (!ports->is_array() || ports->empty() || ports->size() > 254) {
    ObjectReader::Fail(r.Path("ports"), "expected an array of 1 to 254 ports");
  }
  for (size_t i = 0; i < ports->size(); ++i) {
    d.ports.push_back(ParsePort((*ports)[i], r.Path("ports") + "[" + std::to_string(i) + "]"));
  }
  d.attr_ex.orig_attr.phys_port_cnt = static_cast<uint8_t>(d.ports.size());
  d.attr_ex.phys_port_cnt_ex = static_cast<uint32_t>(d.ports.size());
  r.Finish();
  return d;
}

bool Bool(ObjectReader& r, const std::string& key, bool fallback) {
  const json* v = r.Find(key, false);
  if (!v) return fallback;
  if (!v->is_boolean()) ObjectReader::Fail(r.Path(key), "expected true or false, got " + std::string(v->type_name()));
  return v->get<bool>();
}

// Every field is optional; what is absent keeps the default of struct Behaviour.
Behaviour ParseBehaviour(const json& j, const std::string& where) {
  ObjectReader r(j, where);
  Behaviour b;
  if (r.Find("cq_overrun", false)) {
    b.cq_overrun = r.Choice<Behaviour::CqOverrun>("cq_overrun", {{"cascade", Behaviour::CqOverrun::kCascade},
                                                                {"lazy", Behaviour::CqOverrun::kLazy},
                                                                {"rxe-6.1", Behaviour::CqOverrun::kRxe61}});
  }
  if (r.Find("post_send_before_rts", false)) {
    b.queue_send_before_rts = r.Choice<bool>("post_send_before_rts", {{"error", false}, {"queue", true}});
  }
  b.qp_access_err_event = Bool(r, "qp_access_err_event", b.qp_access_err_event);
  b.last_wqe_reached_event = Bool(r, "last_wqe_reached_event", b.last_wqe_reached_event);
  b.comm_est_event = Bool(r, "comm_est_event", b.comm_est_event);
  if (r.Find("sq_drained_event", false)) {
    b.sq_drained_always = r.Choice<bool>("sq_drained_event", {{"requested", false}, {"always", true}});
  }
  if (r.Find("recv_wc_grh", false)) {
    b.recv_wc_grh_always = r.Choice<bool>("recv_wc_grh", {{"ud", false}, {"always", true}});
  }
  if (r.Find("misaligned_atomic", false)) {
    b.misaligned_atomic_post_error = r.Choice<bool>("misaligned_atomic", {{"nak", false}, {"einval", true}});
  }
  if (r.Find("solicited", false)) {
    b.solicited_receives_only = r.Choice<bool>("solicited", {{"se-or-error", false}, {"se-or-flush", true}});
  }
  if (r.Find("cq_size", false)) {
    b.cq_size_pow2_minus_one = r.Choice<bool>("cq_size", {{"exact", false}, {"pow2-1", true}});
  }
  if (r.Find("send_queue_release", false)) {
    b.send_slots_freed_at_poll = r.Choice<bool>("send_queue_release", {{"poll", true}, {"completion", false}});
  }
  if (r.Find("receive_queue_release", false)) {
    b.recv_slots_freed_at_poll =
        r.Choice<bool>("receive_queue_release", {{"poll", true}, {"consumption", false}});
  }
  if (r.Find("unreliable_send_error", false)) {
    b.unreliable_send_error_to_err = r.Choice<bool>("unreliable_send_error", {{"sqe", false}, {"err", true}});
  }
  if (r.Find("wr_qkey_high_bit", false)) {
    b.wr_qkey_high_bit_literal = r.Choice<bool>("wr_qkey_high_bit", {{"qp", false}, {"literal", true}});
  }
  if (r.Find("srq_receive_pd", false)) {
    b.srq_recv_checked_against_qp_pd = r.Choice<bool>("srq_receive_pd", {{"srq", false}, {"qp", true}});
  }
  if (r.Find("rereg_mr_no_flags", false)) {
    b.rereg_no_flags_cmd_error = r.Choice<bool>("rereg_mr_no_flags", {{"input", false}, {"cmd", true}});
  }
  if (r.Find("cq_ex_wc_flags", false)) {
    b.cq_ex_all_wc_flags = r.Choice<bool>("cq_ex_wc_flags", {{"all", true}, {"ib", false}});
  }
  if (r.Find("ignore_overrun", false)) {
    b.cq_ignore_overrun = r.Choice<bool>("ignore_overrun", {{"supported", true}, {"unsupported", false}});
  }
  if (r.Find("srq_size", false)) {
    b.srq_size_pow2_minus_one = r.Choice<bool>("srq_size", {{"exact", false}, {"pow2-1", true}});
  }
  if (r.Find("qp_size", false)) {
    b.qp_size_pow2_minus_one = r.Choice<bool>("qp_size", {{"exact", false}, {"pow2-1", true}});
  }
  if (r.Find("rate_limit", false)) {
    b.rate_limit_unsupported = r.Choice<bool>("rate_limit", {{"einval", false}, {"unsupported", true}});
  }
  if (r.Find("send_sge", false)) {
    b.send_sge_fills_inline_room = r.Choice<bool>("send_sge", {{"asked", false}, {"inline-room", true}});
  }
  if (r.Find("srq_zero_wr", false)) {
    b.srq_zero_wr_einval = r.Choice<bool>("srq_zero_wr", {{"one", false}, {"einval", true}});
  }
  if (r.Find("rereg_mr", false)) {
    b.rereg_mr_supported = r.Choice<bool>("rereg_mr", {{"supported", true}, {"unsupported", false}});
  }
  if (r.Find("reset_completions", false)) {
    b.reset_discards_completions = r.Choice<bool>("reset_completions", {{"discard", true}, {"keep", false}});
  }
  b.spurious_comp_events = Bool(r, "spurious_comp_events", b.spurious_comp_events);
  if (r.Find("srq_order", false)) {
    b.srq_any_order = r.Choice<bool>("srq_order", {{"fifo", false}, {"any", true}});
  }
  b.qp_number_reuse = Bool(r, "qp_number_reuse", b.qp_number_reuse);
  if (r.Find("error_wc_fields", false)) {
    b.error_wc_garbage = r.Choice<bool>("error_wc_fields", {{"zero", false}, {"garbage", true}});
  }
  r.Unsigned("max_inline_data", &b.max_inline_data, false);
  if (b.max_inline_data > 4096) ObjectReader::Fail(r.Path("max_inline_data"), "at most 4096");
  r.Unsigned("time_scale", &b.time_scale, false);
  if (b.time_scale == 0) ObjectReader::Fail(r.Path("time_scale"), "must be at least 1");
  r.Finish();
  return b;
}

}  // namespace

ProfileLoad LoadProfileFile(const std::string& path) {
  ProfileLoad out;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    out.error = "profile " + path + ": is a directory (give a profile's name or the path of its .json file)";
    return out;
  }
  std::ifstream in(path);
  if (!in) {
    out.error = "profile " + path + ": cannot open: " + std::strerror(errno);
    return out;
  }
  try {
    const json j = json::parse(in, nullptr, true, /*ignore_comments=*/true);
    ObjectReader r(j, "");
    Profile& p = out.profile;
    p.path = path;
    p.name = r.String("profile");
    p.description = r.String("description", false);
    const json* devices = r.Find("devices", true);
    if (!devices->is_array() || devices->empty()) ObjectReader::Fail("devices", "expected a non-empty array");
    std::set<std::string> names;
    for (size_t i = 0; i < devices->size(); ++i) {
      const std::string where = "devices[" + std::to_string(i) + "]";
      p.devices.push_back(ParseDevice((*devices)[i], where));
      if (!names.insert(p.devices.back().name).second) ObjectReader::Fail(where + ".name", "duplicate device name");
    }
    if (const json* b = r.Find("behaviour", false)) p.behaviour = ParseBehaviour(*b, "behaviour");
    r.Finish();
  } catch (const json::exception& e) {
    out.error = "profile " + path + ": not valid JSON: " + JsonErrorText(e);
  } catch (const ProfileError& e) {
    out.error = "profile " + path + ": " + e.what();
  } catch (const std::ios_base::failure& e) {
    out.error = "profile " + path + ": cannot read: " + e.what();
  }
  return out;
}

std::vector<std::string> ProfileSearchDirs() {
  std::vector<std::string> dirs;
  if (const char* dir = std::getenv("SIMVERBS_PROFILE_DIR"); dir && *dir) dirs.push_back(dir);
  dirs.push_back(SIMVERBS_PROFILE_DIR);
  dirs.push_back(SIMVERBS_INSTALLED_PROFILE_DIR);
  return dirs;
}

std::vector<std::string> AvailableProfiles() {
  std::set<std::string> names;
  for (const auto& dir : ProfileSearchDirs()) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
      if (entry.path().extension() == ".json") names.insert(entry.path().stem().string());
    }
  }
  return {names.begin(), names.end()};
}

ProfileLoad LoadProfile(const std::string& name_or_path) {
  const std::string name = name_or_path.empty() ? kDefaultProfileName : name_or_path;
  if (name.find('/') != std::string::npos || name.ends_with(".json")) return LoadProfileFile(name);
  std::string searched;
  for (const auto& dir : ProfileSearchDirs()) {
    const std::string candidate = dir + "/" + name + ".json";
    if (access(candidate.c_str(), R_OK) == 0) return LoadProfileFile(candidate);
    searched += (searched.empty() ? "" : ", ") + dir;
  }
  std::string available;
  for (const auto& n : AvailableProfiles()) available += (available.empty() ? "" : ", ") + n;
  ProfileLoad out;
  out.error = "unknown profile \"" + name + "\": no " + name + ".json in " + searched +
              " (available: " + (available.empty() ? "none" : available) + "; or give a path to a .json file)";
  return out;
}

}  // namespace simverbs
