#include "fabric/wire_line.h"

#include "device.h"
#include "fabric/fabric.h"
#include "fabric/profile_gids.h"
#include "gid.h"

namespace simverbs {

const WirePacket::Line* WireLine::Usable() const {
  return route_.Known() && has_line_ && PeerRoute::Open() ? &line_ : nullptr;
}

bool WireLine::Send(const WirePacket::Line& line, uint32_t psn, const uint8_t* bytes) const {
  return Fabric::Get().PushLine(route_.remote_device(), dst_qpn_, line, psn, bytes);
}

bool WireLine::SendRead(uint32_t psn, uint64_t remote_addr, uint32_t rkey, uint64_t dma_length) const {
  // As From decides: a RETH of zeros leaves the addressing line unused.
  const bool addressed = remote_addr || dma_length || rkey;
  WirePacket::Addressing a;
  a.dgid = dgid_;
  a.sgid = sgid_;
  a.remote_addr = remote_addr;
  a.dma_length = dma_length;
  a.rkey = rkey;
  return Fabric::Get().PushLine(route_.remote_device(), dst_qpn_, line_.ForRead(addressed), psn, nullptr, &a);
}

void WireLine::Learn(const Packet& pkt) {
  route_.Learn(pkt);
  has_line_ = false;  // none until the ports or the QP's attributes change
  if (route_.remote_device() < 0) return;
  // Written as SendRemote writes it (the payload area, 4 KiB, stays unused).
  WirePacket wire;
  wire.From(pkt, pkt.src_device->index(), WireSender{});
  uint32_t psn = 0;
  const WirePacket::Line line = wire.ReadLine(&psn);
  // A READ whose GIDs are not the profile's has them on its addressing line,
  // where a SEND of the same QP would have them too: no line for either.
  const bool gids_named_or_none =
      line.dgid_number != ProfileGids::kUnnamed || (IsZeroGid(pkt.dst.dgid) && IsZeroGid(pkt.sgid));
  if (!line.PlainAck() && !line.PlainSend() && !line.PlainReadResponse() && !(line.PlainRead() && gids_named_or_none)) {
    return;
  }
  has_line_ = true;
  dst_qpn_ = pkt.dst_qpn;
  line_ = line;
  dgid_ = pkt.dst.dgid;
  sgid_ = pkt.sgid;
}

}  // namespace simverbs
