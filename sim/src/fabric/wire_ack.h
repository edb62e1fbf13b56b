#pragma once

// A QP's positive ACKs to a QP of another process differ in their PSN alone
// while its attributes and the ports stay as they are. WireAck keeps the
// first line of the last one made as a Packet (WirePacket::From, the same
// bytes SendRemote would write), and sends later ones as that line with
// another PSN (Fabric::PushAck): no Packet is made, routed or converted. In
// a ping-pong that is every message's ACK.

#include <infiniband/verbs.h>

#include <cstdint>

#include "fabric/peer_route.h"
#include "fabric/wire_packet.h"
#include "transport/packet.h"

namespace simverbs {

class WireAck {
 public:
  // Sends a plain ACK of `psn` for a request of `op` from the line learned,
  // when it goes out now to another process as Engine::Transmit would send
  // its Packet (PeerRoute::Open), from a line learned with the ports as they
  // are now. False: nothing was sent; make the Packet. Requires: engine lock.
  bool Send(ibv_wr_opcode op, uint32_t psn) const;
  // Learn was called since the QP's attributes or the ports last changed.
  bool Known() const { return route_.Known(); }
  // Learns the line of `ack`, a plain ACK made by Qp::NewPacket, about to be
  // transmitted. One for a QP of this process, or that no route reaches,
  // leaves no line: Send says false until the next Forget or port change.
  // Requires: engine lock.
  void Learn(const Packet& ack);
  // The QP's attributes changed (ibv_modify_qp): its ACKs may have too.
  void Forget() { route_.Forget(); }

 private:
  PeerRoute route_;  // where the ACK of the line went
  bool has_line_ = false;
  uint32_t dst_qpn_ = 0;
  WirePacket::AckLine line_{};
};

}  // namespace simverbs
