#include "ah.h"

#include <arpa/inet.h>

#include <atomic>
#include <cstring>

#include "context.h"
#include "device.h"
#include "pd.h"
#include "fault/fault_points.h"
#include "gid.h"

namespace simverbs {
namespace {
std::atomic<uint32_t> next_ah_handle{1};

// Which header the 40 bytes before a UD payload hold, as rdma-core tells
// (libibverbs/verbs.c: get_grh_header_version): 6 (a GRH), 4 (20 bytes, then
// an IPv4 header whose checksum holds: RoCE v2 over IPv4), or 0 (neither).
int HeaderVersion(const ibv_grh& grh) {
  const uint8_t* ip4 = reinterpret_cast<const uint8_t*>(&grh) + 20;
  if ((ntohl(grh.version_tclass_flow) >> 28) != 6) return (ip4[0] >> 4) == 4 ? 4 : 0;
  if ((ip4[0] & 0xf) != 5) return 6;
  // ipv4_calc_hdr_csum's sum, folded once as there, over the header with a
  // zero checksum field.
  uint16_t words[10];
  std::memcpy(words, ip4, sizeof words);
  const uint16_t check = words[5];
  words[5] = 0;
  uint32_t sum = 0;
  for (uint16_t w : words) sum += w;
  sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(~sum) == check ? 4 : 6;
}

ibv_gid Ipv4MappedGid(const uint8_t* address) {
  ibv_gid gid{};
  gid.raw[10] = gid.raw[11] = 0xff;
  std::memcpy(gid.raw + 12, address, 4);
  return gid;
}

}  // namespace

Ah::Ah(Pd* pd, const ibv_ah_attr& attr) : ctx_(pd->context()), pd_(pd), av_(AddressVector::From(attr)) {
  handle_.Bind(this);
  handle_.pub.context = ctx_->ibv();
  handle_.pub.pd = pd->ibv();
  handle_.pub.handle = next_ah_handle.fetch_add(1);
  pd->AddUser();
}

Ah::~Ah() {
  pd_->RemoveUser();
  handle_.Unbind();
}

Result<Ah*> Ah::Create(Pd* pd, const ibv_ah_attr& attr) {
  if (int err = FaultPoints::Get().Hit(FaultPoint::kCreateAh)) return Result<Ah*>::Error(err);
  Device* dev = pd->context()->device();
  if (!dev->ValidPort(attr.port_num)) return Result<Ah*>::Error(EINVAL);
  const ibv_port_attr& port = dev->profile().ports[attr.port_num - 1].attr;
  // RoCE addresses are GIDs: an AH without a GRH cannot reach anything.
  if (port.link_layer == IBV_LINK_LAYER_ETHERNET && !attr.is_global) return Result<Ah*>::Error(EINVAL);
  if (attr.is_global && attr.grh.sgid_index >= port.gid_tbl_len) return Result<Ah*>::Error(EINVAL);
  // An empty entry has no source address (rdma_create_user_ah -> rdma_fill_sgid_attr: ENODATA).
  const GidProfile* sgid = attr.is_global ? dev->Gid(attr.port_num, attr.grh.sgid_index) : nullptr;
  if (attr.is_global && !sgid) return Result<Ah*>::Error(ENODATA);
  if (port.link_layer == IBV_LINK_LAYER_ETHERNET) {
    if (int err = RoceDestinationError(sgid->gid, sgid->kind == GidKind::kIbRoceV1, attr.grh.dgid)) {
      return Result<Ah*>::Error(err);
    }
  }
  if (!pd->context()->ReserveObject(Device::Kind::kAh)) return Result<Ah*>::Error(ENOMEM);
  return new Ah(pd, attr);
}

int Ah::Destroy() {
  ctx_->ReleaseObject(Device::Kind::kAh);
  delete this;
  return 0;
}

int Ah::InitFromWc(Context* ctx, uint8_t port_num, const ibv_wc& wc, const ibv_grh* grh, ibv_ah_attr* out) {
  Device* dev = ctx->device();
  if (!dev->ValidPort(port_num) || !out) return EINVAL;
  std::memset(out, 0, sizeof *out);
  out->dlid = wc.slid;
  out->sl = wc.sl;
  out->src_path_bits = wc.dlid_path_bits;
  out->port_num = port_num;
  if (wc.wc_flags & IBV_WC_GRH) {
    if (!grh) return EINVAL;
    out->is_global = 1;
    const int version = HeaderVersion(*grh);
    if (version == 0) return EPROTONOSUPPORT;
    if (version == 4) {
      // As rdma-core's set_ah_attr_by_ipv4: the datagram came to a RoCE v2
      // GID of ours; the answer goes to its source address.
      const uint8_t* ip4 = reinterpret_cast<const uint8_t*>(grh) + 20;
      if ((ip4[16] & 0xf0) == 0xe0) return EINVAL;  // multicast: in no GID table
      const int index = dev->GidIndex(port_num, Ipv4MappedGid(ip4 + 16), GidKind::kRoceV2);
      if (index < 0) return ENOENT;
      out->grh.dgid = Ipv4MappedGid(ip4 + 12);
      out->grh.sgid_index = static_cast<uint8_t>(index);
      out->grh.hop_limit = ip4[8];
      out->grh.traffic_class = ip4[1];
      return 0;
    }
    // As rdma-core's set_ah_attr_by_ipv6: a multicast GID is in no GID table;
    // the next header says which kind of GID the datagram was sent to (RoCE
    // v2: UDP).
    if (grh->dgid.raw[0] == 0xff) return EINVAL;
    constexpr uint8_t kIbNextHeader = 0x1b;
    constexpr uint8_t kUdpNextHeader = 17;
    if (grh->next_hdr != kIbNextHeader && grh->next_hdr != kUdpNextHeader) return EPROTONOSUPPORT;
    const GidKind kind = grh->next_hdr == kUdpNextHeader ? GidKind::kRoceV2 : GidKind::kIbRoceV1;
    out->grh.dgid = grh->sgid;
    out->grh.flow_label = ntohl(grh->version_tclass_flow) & 0xfffff;
    out->grh.hop_limit = grh->hop_limit;
    out->grh.traffic_class = (ntohl(grh->version_tclass_flow) >> 20) & 0xff;
    // The local GID the datagram was sent to becomes the source GID.
    const int index = dev->GidIndex(port_num, grh->dgid, kind);
    if (index < 0) return ENOENT;
    out->grh.sgid_index = static_cast<uint8_t>(index);
    return 0;
  }
  return 0;
}

}  // namespace simverbs
