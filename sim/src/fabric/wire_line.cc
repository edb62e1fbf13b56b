#include "fabric/wire_line.h"

#include "device.h"
#include "fabric/fabric.h"

namespace simverbs {

const WirePacket::Line* WireLine::Usable() const {
  return route_.Known() && has_line_ && PeerRoute::Open() ? &line_ : nullptr;
}

bool WireLine::Send(const WirePacket::Line& line, uint32_t psn, const uint8_t* bytes) const {
  return Fabric::Get().PushLine(route_.remote_device(), dst_qpn_, line, psn, bytes);
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
  if (!line.PlainAck() && !line.PlainSend() && !line.PlainReadResponse()) return;
  has_line_ = true;
  dst_qpn_ = pkt.dst_qpn;
  line_ = line;
}

}  // namespace simverbs
