#include "fabric/wire_ack.h"

#include "device.h"
#include "fabric/fabric.h"

namespace simverbs {

bool WireAck::Send(ibv_wr_opcode op, uint32_t psn) const {
  if (!route_.Known() || !has_line_ || !PeerRoute::Open()) return false;
  // The request's operation is a field of the line like any other (WirePacket::From).
  WirePacket::AckLine line = line_;
  line.op = static_cast<uint8_t>(op);
  return Fabric::Get().PushAck(route_.remote_device(), dst_qpn_, line, psn);
}

void WireAck::Learn(const Packet& ack) {
  route_.Learn(ack);
  has_line_ = false;  // none until the ports or the QP's attributes change
  if (route_.remote_device() < 0) return;
  // Written as SendRemote writes it (the payload area, 4 KiB, stays unused).
  WirePacket wire;
  wire.From(ack, ack.src_device->index(), WireSender{});
  uint32_t psn = 0;
  const WirePacket::AckLine line = wire.ReadAckLine(&psn);
  if (!line.PlainAck()) return;
  has_line_ = true;
  dst_qpn_ = ack.dst_qpn;
  line_ = line;
}

}  // namespace simverbs
