#include "fabric/wire_ack.h"

#include "device.h"
#include "fabric/fabric.h"
#include "fault/fault_points.h"
#include "transport/engine.h"

namespace simverbs {

bool WireAck::Known() const { return known_ && port_changes_ == Device::PortChanges(); }

bool WireAck::Send(ibv_wr_opcode op, uint32_t psn) const {
  if (!Known() || device_index_ < 0 || FaultPoints::Get().AnyArmed() || !Engine::Get().nothing_queued()) {
    return false;
  }
  // The request's operation is a field of the line like any other (WirePacket::From).
  WirePacket::AckLine line = line_;
  line.op = static_cast<uint8_t>(op);
  return Fabric::Get().PushAck(device_index_, dst_qpn_, line, psn);
}

void WireAck::Learn(const Packet& ack) {
  // Read before routing: a port that changes meanwhile makes what is learned stale at once.
  known_ = true;
  port_changes_ = Device::PortChanges();
  device_index_ = -1;  // no line (until the ports or the QP's attributes change)
  const Device* remote = Fabric::Get().attached() && ack.src_device ? Engine::Get().RemoteRoute(ack) : nullptr;
  if (!remote) return;
  // Written as SendRemote writes it (the payload area, 4 KiB, stays unused).
  WirePacket wire;
  wire.From(ack, ack.src_device->index(), WireSender{});
  uint32_t psn = 0;
  const WirePacket::AckLine line = wire.ReadAckLine(&psn);
  if (!line.PlainAck()) return;
  device_index_ = remote->index();
  dst_qpn_ = ack.dst_qpn;
  line_ = line;
}

}  // namespace simverbs
