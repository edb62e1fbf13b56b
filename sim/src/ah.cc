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
}

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
  if (attr.is_global && !dev->Gid(attr.port_num, attr.grh.sgid_index)) return Result<Ah*>::Error(ENODATA);
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
    // As rdma-core's: a multicast GID is in no GID table; the next header
    // says which kind of GID the datagram was sent to (RoCE v2: UDP).
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
    const auto& gids = dev->profile().ports[port_num - 1].gids;
    for (size_t i = 0; i < gids.size(); ++i) {
      if (SameGid(gids[i].gid, grh->dgid) && gids[i].kind == kind) {
        out->grh.sgid_index = static_cast<uint8_t>(i);
        return 0;
      }
    }
    return ENOENT;
  }
  return 0;
}

}  // namespace simverbs
