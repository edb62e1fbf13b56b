#include "fabric/peer_route.h"

#include "device.h"
#include "fabric/fabric.h"
#include "fault/fault_points.h"
#include "transport/engine.h"

namespace simverbs {

bool PeerRoute::Known() const { return known_ && port_changes_ == Device::PortChanges(); }

void PeerRoute::Learn(const Packet& pkt) {
  // Read before routing: a port that changes meanwhile makes what is learned stale at once.
  known_ = true;
  port_changes_ = Device::PortChanges();
  const Device* remote = Fabric::Get().attached() && pkt.src_device ? Engine::Get().RemoteRoute(pkt) : nullptr;
  device_index_ = remote ? remote->index() : -1;
}

bool PeerRoute::Open() { return !FaultPoints::Get().AnyArmed() && Engine::Get().nothing_queued(); }

bool PeerRoute::Send(Packet& pkt) {
  if (!Known()) Learn(pkt);
  if (device_index_ < 0 || !Open()) return false;
  try {
    // False before anything was done: its QP is no longer where it was (in
    // this process now, or nobody's); routed again, it finds where it is.
    if (!Fabric::Get().SendRemote(device_index_, pkt)) return false;
  } catch (...) {
    // Out of memory for the peer's backlog: lost, as Engine::DeliverOrDropLocked loses it.
  }
  Engine::Get().RecyclePayload(pkt.payload.TakeBuffer());
  return true;
}

}  // namespace simverbs
