#pragma once

// A packet as it crosses between processes: a fixed-size, pointer-free copy
// of transport/packet.h, so it can live in a shared-memory ring.

#include <cstdint>
#include <cstring>

#include "transport/packet.h"

namespace simverbs {

struct WirePacket {
  static constexpr uint32_t kMaxPayload = 4096;  // the largest IB MTU

  uint8_t kind;
  uint8_t transport;
  uint8_t op;
  uint8_t flags;  // bit 0 first, 1 last, 2 solicited, 3 has_grh, 4 placed, 5 answered
  uint8_t nak;
  uint8_t src_port;
  uint16_t slid;
  int32_t src_device;  // index in the profile's device list
  uint32_t psn;
  uint32_t src_qpn;
  AddressVector dst;
  uint32_t dst_qpn;
  ibv_gid sgid;
  uint32_t qkey;
  uint32_t xrc_srqn;
  uint64_t xrc_domain_dev;
  uint64_t xrc_domain_ino;
  uint16_t pkey;
  uint64_t remote_addr;
  uint32_t rkey;
  uint64_t dma_length;
  uint64_t compare_add;
  uint64_t swap;
  uint32_t imm_data;
  uint64_t atomic_orig;
  uint32_t psn_count;
  uint32_t payload_len;
  uint8_t payload[kMaxPayload];

  void From(const Packet& p, int src_device_index) {
    kind = static_cast<uint8_t>(p.kind);
    transport = static_cast<uint8_t>(p.transport);
    op = static_cast<uint8_t>(p.op);
    flags = (p.first ? 1 : 0) | (p.last ? 2 : 0) | (p.solicited ? 4 : 0) | (p.has_grh ? 8 : 0) | (p.placed ? 16 : 0) |
            (p.answered ? 32 : 0);
    nak = static_cast<uint8_t>(p.nak);
    src_port = p.src_port;
    slid = p.slid;
    src_device = src_device_index;
    psn = p.psn;
    src_qpn = p.src_qpn;
    dst = p.dst;
    dst_qpn = p.dst_qpn;
    sgid = p.sgid;
    qkey = p.qkey;
    xrc_srqn = p.xrc_srqn;
    xrc_domain_dev = p.xrc_domain_dev;
    xrc_domain_ino = p.xrc_domain_ino;
    pkey = p.pkey;
    remote_addr = p.remote_addr;
    rkey = p.rkey;
    dma_length = p.dma_length;
    compare_add = p.compare_add;
    swap = p.swap;
    imm_data = p.imm_data;
    atomic_orig = p.atomic_orig;
    psn_count = p.psn_count;
    payload_len = static_cast<uint32_t>(p.payload.size());
    if (payload_len) std::memcpy(payload, p.payload.data(), payload_len);
  }

  // Fills `p`, whose payload buffer is reused (its capacity kept).
  // `borrow`: the payload refers to this slot's bytes instead of copying
  // them (Payload::Borrow): only while the slot is held.
  void ToPacket(Device* src_device_ptr, Packet* out, bool borrow = false) const {
    Packet& p = *out;
    p.kind = static_cast<Packet::Kind>(kind);
    p.transport = static_cast<ibv_qp_type>(transport);
    p.op = static_cast<ibv_wr_opcode>(op);
    p.first = flags & 1;
    p.last = flags & 2;
    p.solicited = flags & 4;
    p.has_grh = flags & 8;
    p.placed = flags & 16;
    p.answered = (flags & 48) == 48;  // only a placed packet can be
    p.nak = static_cast<Packet::Nak>(nak);
    p.src_device = src_device_ptr;
    p.src_port = src_port;
    p.slid = slid;
    p.psn = psn;
    p.src_qpn = src_qpn;
    p.dst = dst;
    p.dst_qpn = dst_qpn;
    p.sgid = sgid;
    p.qkey = qkey;
    p.xrc_srqn = xrc_srqn;
    p.xrc_domain_dev = xrc_domain_dev;
    p.xrc_domain_ino = xrc_domain_ino;
    p.pkey = pkey;
    p.remote_addr = remote_addr;
    p.rkey = rkey;
    p.dma_length = dma_length;
    p.compare_add = compare_add;
    p.swap = swap;
    p.imm_data = imm_data;
    p.atomic_orig = atomic_orig;
    p.psn_count = psn_count;
    // Read once and clamped: another process wrote it.
    const uint32_t len = payload_len <= kMaxPayload ? payload_len : kMaxPayload;
    if (borrow) {
      p.payload.Borrow(payload, len);
    } else {
      p.payload.assign(payload, payload + len);
    }
  }
};

}  // namespace simverbs
