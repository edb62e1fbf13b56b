#pragma once

// A connected QP's plain ACKs and one-packet READ responses to a QP of
// another process differ in their kind, operation, payload and PSN alone, and
// its one-packet SENDs in their operation, solicited bit, immediate data, PSN
// and payload, while its attributes and the ports stay as they are. A
// WireLine keeps the first line of the first such packet made as a Packet
// (WirePacket::From, the same bytes SendRemote would write), and sends later
// ones as that line with their own fields (WirePacket::Line::ForAck,
// ForReadResponse, ForSend; Fabric::PushLine): no Packet is made, routed or
// converted. In a ping-pong that is every message and its ACK; in a bandwidth
// test of small SENDs, every message; in a latency test of small READs,
// every answer.

#include <cstdint>

#include "fabric/peer_route.h"
#include "fabric/wire_packet.h"
#include "transport/packet.h"

namespace simverbs {

class WireLine {
 public:
  // The line learned, when a packet written from it goes out now to another
  // process as Engine::Transmit would send its Packet (PeerRoute::Open), from
  // a line learned with the ports as they are now; nullptr: make the Packet.
  // Requires: engine lock.
  const WirePacket::Line* Usable() const;
  // Sends `line` (Usable()'s with this packet's own fields) with `psn` and
  // line.payload_len bytes of `bytes`. False: nothing was sent; make the
  // Packet. Requires: engine lock, Usable() just said yes.
  bool Send(const WirePacket::Line& line, uint32_t psn, const uint8_t* bytes = nullptr) const;
  // Sends a READ request of this QP with `psn` and its RETH, from a line
  // learned of a one-packet SEND or a READ request (Line::ForRead). False:
  // nothing was sent; make the Packet. Requires: engine lock, Usable() just
  // said yes.
  bool SendRead(uint32_t psn, uint64_t remote_addr, uint32_t rkey, uint64_t dma_length) const;
  // Learn was called since the QP's attributes or the ports last changed.
  bool Known() const { return route_.Known(); }
  // Learns the line of `pkt`, a plain ACK, a one-packet READ response, a
  // one-packet SEND or a READ request made by Qp::NewPacket, about to be
  // transmitted (WirePacket::Line::PlainAck, PlainReadResponse, PlainSend,
  // PlainRead; a READ's only when its GIDs, if any, are the profile's, as a
  // plain SEND's are). One for a QP of this process, or that no route reaches,
  // leaves no line: Usable says nullptr until the next Forget or port change.
  // Requires: engine lock.
  void Learn(const Packet& pkt);
  // The QP's attributes changed (ibv_modify_qp): its packets may have too.
  void Forget() { route_.Forget(); }

 private:
  PeerRoute route_;  // where the packet of the line went
  bool has_line_ = false;
  uint32_t dst_qpn_ = 0;
  WirePacket::Line line_{};
  ibv_gid dgid_{};  // the packet's GIDs, which an addressed READ's addressing line repeats (WirePacket::From)
  ibv_gid sgid_{};
};

}  // namespace simverbs
