#pragma once

// Where a connected QP's packets go while its attributes and the ports stay
// as they are: the device of its peer QP, when that QP is in another process.
// Learned from the first packet the QP sends (Engine::RemoteRoute), it lets
// later packets go to the peer's ring (Fabric::SendRemote) without being
// routed again on every send (Engine::Transmit, DeliverLocked, Route, FindQp).

#include <cstdint>

#include "transport/packet.h"

namespace simverbs {

class PeerRoute {
 public:
  // Learn was called since the QP's attributes or the ports last changed.
  bool Known() const;
  // Learns where `pkt`, a packet of the QP's own connection about to be
  // sent, goes. A QP of this process, or none that a route reaches, leaves
  // no device: Send says false until the next Forget or port change.
  // Requires: engine lock.
  void Learn(const Packet& pkt);
  // The QP's attributes changed (ibv_modify_qp): its peer may have too.
  void Forget() { known_ = false; }
  // The device of the peer's QP, in another process; -1: none. Valid while Known().
  int remote_device() const { return device_index_; }
  // Whether a packet may leave now without Engine::Transmit: nothing queued
  // in front of it, and no fault point armed (a delivery fault counts
  // packets). Requires: engine lock.
  static bool Open();
  // Sends `pkt` (learning the route first, if need be) to the peer's ring as
  // Engine::Transmit would, when it may leave now for another process. False:
  // nothing was sent; Transmit it. Requires: engine lock.
  bool Send(Packet& pkt);

 private:
  bool known_ = false;
  uint64_t port_changes_ = 0;  // Device::PortChanges when learned
  int device_index_ = -1;
};

}  // namespace simverbs
