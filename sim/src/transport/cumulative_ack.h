#pragma once

// RC ACKs are cumulative (IBTA 9.7.5.1.1): a positive ACK for a PSN
// acknowledges every message of that QP up to it. Of two such ACKs that
// follow each other, the requester needs only the later one.

#include <cstdint>

#include "gid.h"
#include "transport/packet.h"

namespace simverbs {

// A positive ACK as a responder makes it: no NAK, no bytes.
inline bool IsPlainAck(const Packet& pkt) {
  return pkt.kind == Packet::Kind::kAck && pkt.nak == Packet::Nak::kNone && pkt.payload.size() == 0;
}

// `next` is a positive ACK from the QP that sent `held`, to the same QP at
// the same address, for a later PSN (24-bit, less than half the PSN space
// ahead): it acknowledges everything `held` does.
inline bool ReplacesAck(const Packet& held, const Packet& next) {
  constexpr uint32_t kPsnMask = 0xffffff;
  const uint32_t ahead = (next.psn - held.psn) & kPsnMask;
  return IsPlainAck(next) && IsPlainAck(held) && next.src_device == held.src_device &&
         next.src_qpn == held.src_qpn && next.dst_qpn == held.dst_qpn && next.transport == held.transport &&
         next.dst.is_global == held.dst.is_global && next.dst.dlid == held.dst.dlid &&
         SameGid(next.dst.dgid, held.dst.dgid) && next.dst.port_num == held.dst.port_num && ahead < kPsnMask / 2;
}

}  // namespace simverbs
