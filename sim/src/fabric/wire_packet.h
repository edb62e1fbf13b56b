#pragma once

// A packet as it crosses between processes: a fixed-size, pointer-free copy
// of transport/packet.h, so it can live in a shared-memory ring.
//
// Layout. Every cache line of a slot that the producer writes and the owner
// reads moves between CPUs once per packet, which costs about as much as a
// hand-off. So the fields every packet needs come first and fill the line
// that holds the slot's sequence word (PacketRing::Slot); the payload
// starts on the next line; the fields only some packets use (GRH addresses,
// RETH, atomics, XRC) come after the payload area, in two lines that are
// written and read only when the flags say they are in use. A 64-byte SEND,
// or an ACK, touches one or two lines, with a GRH as well (the GIDs of the
// profile go by number: fabric/profile_gids.h).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "fabric/profile_gids.h"
#include "read_once.h"
#include "transport/copy_bytes.h"
#include "transport/packet.h"

namespace simverbs {

// The process that pushes a packet: its fabric slot (-1: none) and that
// slot's generation, and how far it had taken packets out of its own ring
// (its PacketRing::tail) when it wrote this one. The last tells a process
// that owes it a wake whether that owner has taken its packet already,
// without reading the owner's ring, whose lines the owner writes at every
// pop (fabric/fabric.h).
struct WireSender {
  int slot = -1;
  uint32_t generation = 0;
  uint64_t consumed = 0;
};

struct WirePacket {
  static constexpr uint32_t kMaxPayload = 4096;  // the largest IB MTU
  // flags
  static constexpr uint8_t kFirst = 1, kLast = 2, kSolicited = 4, kHasGrh = 8, kPlaced = 16, kAnswered = 32;
  static constexpr uint8_t kAddressing = 64;  // `addressing` is in use
  static constexpr uint8_t kExtended = 128;   // `extended` is in use

  // In the sequence word's line (56 bytes: full). The fields from `kind` to
  // `dst_port_num` are a Line's (below), in its order: a Line is written and
  // read as one block.
  uint8_t kind;
  uint8_t transport;
  uint8_t op;
  uint8_t flags;
  uint8_t nak;
  uint8_t src_port;
  uint16_t slid;
  uint32_t src_qpn;
  uint32_t dst_qpn;
  uint32_t imm_data;
  uint32_t psn_count;
  uint16_t payload_len;
  // The GIDs by number (fabric/profile_gids.h) when dgid_number is not
  // ProfileGids::kUnnamed: then neither is on the addressing line.
  uint8_t dgid_number;
  uint8_t sgid_number;
  uint32_t qkey;
  uint16_t pkey;
  uint16_t dst_dlid;
  int16_t src_device;  // index in the profile's device list
  uint8_t dst_is_global;
  uint8_t dst_sgid_index;
  uint8_t dst_sl;
  uint8_t dst_port_num;
  // Who wrote it (WireSender: sender_slot, sender_generation and
  // sender_consumed), for the owner's owed wakes only: a hint.
  int16_t sender_slot;
  uint32_t psn;
  uint32_t sender_generation;
  uint32_t sender_consumed;  // the low 32 bits

  uint8_t payload[kMaxPayload];

  // GRH addresses and RETH: one line.
  struct Addressing {
    ibv_gid dgid;
    ibv_gid sgid;
    uint64_t remote_addr;
    uint64_t dma_length;
    uint32_t rkey;
  };
  // Atomics and XRC: one line.
  struct Extended {
    uint64_t compare_add;
    uint64_t swap;
    uint64_t atomic_orig;
    uint64_t xrc_domain_dev;
    uint64_t xrc_domain_ino;
    uint32_t xrc_srqn;
  };
  Addressing addressing;
  uint8_t reserved_line[8];  // (so that `extended` starts a line of its own)
  Extended extended;

  // (Inlined: it is on every packet's path, PacketRing::Publish.)
  [[gnu::always_inline]] void From(const Packet& p, int src_device_index, const WireSender& sender) {
    // The rare lines first; FromLine then writes the payload, and the first
    // line last: the owner spins on the sequence word, in the first line,
    // until it is published.
    // GIDs the profile has go by number (a RoCE packet's line fewer); others
    // (a multicast group's) on the addressing line.
    uint8_t dgid_no = ProfileGids::kUnnamed;
    uint8_t sgid_no = ProfileGids::kUnnamed;
    const bool has_gids = !IsZeroGid(p.dst.dgid) || !IsZeroGid(p.sgid);
    if (has_gids) {
      const ProfileGids& gids = ProfileGids::Get();
      dgid_no = gids.NumberOf(p.dst.dgid);
      sgid_no = gids.NumberOf(p.sgid);
      if (sgid_no == ProfileGids::kUnnamed && !IsZeroGid(p.sgid)) dgid_no = ProfileGids::kUnnamed;
    }
    const bool gids_named = dgid_no != ProfileGids::kUnnamed;
    const bool addressed = p.remote_addr || p.dma_length || p.rkey || (has_gids && !gids_named);
    if (addressed) {
      addressing.dgid = p.dst.dgid;
      addressing.sgid = p.sgid;
      addressing.remote_addr = p.remote_addr;
      addressing.dma_length = p.dma_length;
      addressing.rkey = p.rkey;
    }
    const bool extended_used =
        p.compare_add || p.swap || p.atomic_orig || p.xrc_domain_dev || p.xrc_domain_ino || p.xrc_srqn;
    if (extended_used) CopyExtended(p, &extended);
    const Line line{
        .kind = static_cast<uint8_t>(p.kind),
        .transport = static_cast<uint8_t>(p.transport),
        .op = static_cast<uint8_t>(p.op),
        .flags = static_cast<uint8_t>((p.first ? kFirst : 0) | (p.last ? kLast : 0) | (p.solicited ? kSolicited : 0) |
                                      (p.has_grh ? kHasGrh : 0) | (p.placed ? kPlaced : 0) |
                                      (p.answered ? kAnswered : 0) | (addressed ? kAddressing : 0) |
                                      (extended_used ? kExtended : 0)),
        .nak = static_cast<uint8_t>(p.nak),
        .src_port = p.src_port,
        .slid = p.slid,
        .src_qpn = p.src_qpn,
        .dst_qpn = p.dst_qpn,
        .imm_data = p.imm_data,
        .psn_count = p.psn_count,
        .payload_len = static_cast<uint16_t>(p.payload.size()),
        .dgid_number = dgid_no,
        .sgid_number = gids_named ? sgid_no : ProfileGids::kUnnamed,
        .qkey = p.qkey,
        .pkey = p.pkey,
        .dst_dlid = p.dst.dlid,
        .src_device = static_cast<int16_t>(src_device_index),
        .dst_is_global = p.dst.is_global,
        .dst_sgid_index = p.dst.sgid_index,
        .dst_sl = p.dst.sl,
        .dst_port_num = p.dst.port_num,
    };
    FromLine(line, p.psn, p.payload.data(), sender);
  }

  // A first line's fields but the PSN and the sender hint (WireSender). Of
  // two plain positive ACKs whose lines are the same, the later acknowledges
  // everything the earlier does (transport/cumulative_ack.h): one that comes
  // behind the other needs no Packet made of it (Fabric::DrainInboundLocked).
  // A QP's plain ACKs, and its one-packet SENDs, are written from the line of
  // an earlier one (fabric/wire_line.h).
  struct Line {
    uint8_t kind, transport, op, flags, nak, src_port;
    uint16_t slid;
    uint32_t src_qpn, dst_qpn, imm_data, psn_count;
    uint16_t payload_len;
    uint8_t dgid_number, sgid_number;
    uint32_t qkey;
    uint16_t pkey, dst_dlid;
    int16_t src_device;
    uint8_t dst_is_global, dst_sgid_index, dst_sl, dst_port_num;
    uint16_t unused = 0;  // (no padding: lines are compared as bytes)
    // As bytes: field by field it took 22 comparisons on every ACK a drain holds.
    bool operator==(const Line& other) const { return std::memcmp(this, &other, sizeof *this) == 0; }
    // The bytes of a WirePacket's first line that a Line is.
    static constexpr size_t kBytes = 42;
    // A positive ACK without payload that uses neither rare line.
    bool PlainAck() const {
      return kind == static_cast<uint8_t>(Packet::Kind::kAck) && nak == static_cast<uint8_t>(Packet::Nak::kNone) &&
             payload_len == 0 && !(flags & (kAddressing | kExtended));
    }
    // The whole answer to a READ of at most one path MTU, with neither rare
    // line (a READ response carries no RETH: IBTA 9.4.3).
    bool PlainReadResponse() const {
      return kind == static_cast<uint8_t>(Packet::Kind::kReadResponse) &&
             nak == static_cast<uint8_t>(Packet::Nak::kNone) && (flags & (kFirst | kLast)) == (kFirst | kLast) &&
             !(flags & (kPlaced | kAnswered | kAddressing | kExtended | kSolicited)) && psn_count == 1 &&
             imm_data == 0;
    }
    // A READ request in one packet without the extended line: the RETH, if
    // any field of it is not zero, on the addressing line (with the GIDs
    // From writes there).
    bool PlainRead() const {
      return kind == static_cast<uint8_t>(Packet::Kind::kRequest) && op == static_cast<uint8_t>(IBV_WR_RDMA_READ) &&
             nak == static_cast<uint8_t>(Packet::Nak::kNone) && (flags & (kFirst | kLast)) == (kFirst | kLast) &&
             !(flags & (kPlaced | kAnswered | kExtended | kSolicited)) && psn_count == 1 && payload_len == 0 &&
             imm_data == 0;
    }
    // A request that is a whole message in one packet, with neither rare
    // line: a SEND of a connected QP (the payload aside).
    bool PlainSend() const {
      return kind == static_cast<uint8_t>(Packet::Kind::kRequest) && nak == static_cast<uint8_t>(Packet::Nak::kNone) &&
             (flags & (kFirst | kLast)) == (kFirst | kLast) && !(flags & (kPlaced | kAnswered | kAddressing | kExtended)) &&
             psn_count == 1;
    }
    // Where a packet of this line goes (ToPacket's `dst`), when it uses no
    // addressing line: a GID the profile does not name is zero then.
    AddressVector Destination() const {
      AddressVector dst;
      CopyDestination(*this, &dst);
      if (dgid_number != ProfileGids::kUnnamed) dst.dgid = ProfileGids::Get().At(dgid_number);
      return dst;
    }
    // A QP's plain ACKs and its one-packet READ responses differ in their
    // kind, operation, payload and PSN alone (both are a Packet that
    // Qp::NewPacket made, with first and last set): from the line of either,
    // the line of another of either.
    // The line of a plain ACK of the same QP, for a request of `ack_op` (the
    // request's operation is a field of the line like any other).
    Line ForAck(ibv_wr_opcode ack_op) const {
      Line line = *this;
      line.kind = static_cast<uint8_t>(Packet::Kind::kAck);
      line.op = static_cast<uint8_t>(ack_op);
      line.payload_len = 0;
      return line;
    }
    // The line of a one-packet READ response of the same QP, of
    // `response_len` bytes.
    Line ForReadResponse(uint16_t response_len) const {
      Line line = *this;
      line.kind = static_cast<uint8_t>(Packet::Kind::kReadResponse);
      line.op = static_cast<uint8_t>(IBV_WR_RDMA_READ);
      line.payload_len = response_len;
      return line;
    }
    // The line of another such SEND of the same QP: what From writes for a
    // Packet that differs from this line's in these fields alone.
    // (The line may be a READ's: ForRead.)
    Line ForSend(ibv_wr_opcode send_op, bool send_solicited, uint32_t send_imm_data, uint16_t send_payload_len) const {
      Line line = *this;
      line.op = static_cast<uint8_t>(send_op);
      line.flags = static_cast<uint8_t>((flags & ~(kSolicited | kAddressing)) | (send_solicited ? kSolicited : 0));
      line.imm_data = send_imm_data;
      line.payload_len = send_payload_len;
      return line;
    }
    // A QP's one-packet SENDs and its READ requests differ in their
    // operation, solicited bit, immediate data, payload, PSN and RETH alone,
    // when their GIDs (if any) are the profile's: from the line of either,
    // the line of a READ request of the same QP, whose RETH is on the
    // addressing line when `addressed` (FromRead).
    Line ForRead(bool addressed) const {
      Line line = *this;
      line.op = static_cast<uint8_t>(IBV_WR_RDMA_READ);
      line.flags = static_cast<uint8_t>((flags & ~(kSolicited | kAddressing)) | (addressed ? kAddressing : 0));
      line.imm_data = 0;
      line.payload_len = 0;
      return line;
    }
  };
  static_assert(std::has_unique_object_representations_v<Line>);
  // Reads the first line once: its Line, and its PSN into *psn_out.
  Line ReadLine(uint32_t* psn_out) const {
    *psn_out = ReadOnce(psn);
    Line line;
    ReadOnceBytes(&line, this, Line::kBytes);  // (`kind` first: see below)
    return line;
  }

  // Writes a packet whose first line is `line`, with `psn`, the sender hint
  // and line.payload_len bytes of `bytes` (null: none): the first line and
  // the payload. That is all of a plain ACK or a plain SEND (Line::PlainAck,
  // PlainSend: Fabric::PushLine), and what From writes after the rare lines.
  // (Inlined: on every packet's path.)
  [[gnu::always_inline]] void FromLine(const Line& line, uint32_t line_psn, const uint8_t* bytes,
                                       const WireSender& sender) {
    // The payload first, the first line last (see From).
    if (bytes) CopyBytes(payload, bytes, std::min<uint32_t>(line.payload_len, kMaxPayload));
    std::memcpy(static_cast<void*>(this), &line, Line::kBytes);  // (`kind` first: see below)
    psn = line_psn;
    sender_slot = static_cast<int16_t>(sender.slot);
    sender_generation = sender.generation;
    sender_consumed = static_cast<uint32_t>(sender.consumed);
  }

  // Writes a READ request whose first line is `line` (Line::ForRead), with
  // `psn`, the sender hint, and when the line says it is addressed, the
  // addressing line `a` (the GIDs From writes there, and the RETH).
  // (Inlined: on every such packet's path.)
  [[gnu::always_inline]] void FromReadLine(const Line& line, uint32_t line_psn, const Addressing& a,
                                           const WireSender& sender) {
    if (line.flags & kAddressing) {
      // Field by field, as From (the struct's padding stays as it was).
      addressing.dgid = a.dgid;
      addressing.sgid = a.sgid;
      addressing.remote_addr = a.remote_addr;
      addressing.dma_length = a.dma_length;
      addressing.rkey = a.rkey;
    }
    FromLine(line, line_psn, nullptr, sender);
  }

  // An operation no verb has (another process wrote it) becomes one the
  // responder drops, not a value outside the enumeration.
  static ibv_wr_opcode OpOf(uint8_t raw_op) {
    return raw_op <= IBV_WR_ATOMIC_WRITE ? static_cast<ibv_wr_opcode>(raw_op) : IBV_WR_DRIVER1;
  }

  // Fills every field of `p` but from_peer (the caller's), whose payload
  // buffer is reused (its capacity kept).
  // `borrow`: the payload refers to this slot's bytes instead of copying
  // them (Payload::Borrow): only while the slot is held.
  void ToPacket(Device* src_device_ptr, Packet* out, bool borrow = false) const {
    Packet& p = *out;
    const uint8_t f = ReadOnce(flags);
    p.kind = static_cast<Packet::Kind>(kind);
    p.transport = static_cast<ibv_qp_type>(transport);
    p.op = OpOf(ReadOnce(op));
    p.first = f & kFirst;
    p.last = f & kLast;
    p.solicited = f & kSolicited;
    p.has_grh = f & kHasGrh;
    p.placed = f & kPlaced;
    p.answered = (f & (kPlaced | kAnswered)) == (kPlaced | kAnswered);  // only a placed packet can be
    p.nak = static_cast<Packet::Nak>(nak);
    p.src_device = src_device_ptr;
    p.src_port = src_port;
    p.slid = slid;
    p.psn = psn;
    p.src_qpn = src_qpn;
    CopyDestination(*this, &p.dst);
    p.dst_qpn = dst_qpn;
    p.qkey = qkey;
    p.pkey = pkey;
    p.imm_data = imm_data;
    p.psn_count = psn_count;
    // A line not in use holds an older packet's values: the packet's own are zero.
    const Addressing a = f & kAddressing ? addressing : Addressing{};
    if (const uint8_t dgid_no = ReadOnce(dgid_number); dgid_no != ProfileGids::kUnnamed) {
      const ProfileGids& gids = ProfileGids::Get();
      p.dst.dgid = gids.At(dgid_no);
      p.sgid = gids.At(sgid_number);
    } else {
      p.dst.dgid = a.dgid;
      p.sgid = a.sgid;
    }
    p.remote_addr = a.remote_addr;
    p.dma_length = a.dma_length;
    p.rkey = a.rkey;
    CopyExtended(f & kExtended ? extended : Extended{}, &p);
    p.stream.reset();  // never crosses
    // Clamped: a longer one would read past the slot.
    const uint32_t len = std::min<uint32_t>(ReadOnce(payload_len), kMaxPayload);
    if (borrow) {
      p.payload.Borrow(payload, len);
    } else {
      p.payload.assign(payload, payload + len);
    }
  }

 private:
  // The destination's fields, which WirePacket and Line name alike, all but
  // its GID (named by number, or on the addressing line: the caller's).
  template <typename From>
  static void CopyDestination(const From& from, AddressVector* dst) {
    dst->dlid = from.dst_dlid;
    dst->is_global = from.dst_is_global;
    dst->sgid_index = from.dst_sgid_index;
    dst->sl = from.dst_sl;
    dst->port_num = from.dst_port_num;
  }
  // The atomic and XRC fields, which Packet and Extended name alike, either way.
  template <typename From, typename To>
  static void CopyExtended(const From& from, To* to) {
    to->compare_add = from.compare_add;
    to->swap = from.swap;
    to->atomic_orig = from.atomic_orig;
    to->xrc_domain_dev = from.xrc_domain_dev;
    to->xrc_domain_ino = from.xrc_domain_ino;
    to->xrc_srqn = from.xrc_srqn;
  }
};

// A Line is the first line's bytes from `kind` to `dst_port_num`, in the same
// places (ReadLine and FromLine copy them as one block).
static_assert(offsetof(WirePacket, kind) == 0 && offsetof(WirePacket::Line, kind) == 0);
static_assert(offsetof(WirePacket, transport) == offsetof(WirePacket::Line, transport) &&
              offsetof(WirePacket, op) == offsetof(WirePacket::Line, op) &&
              offsetof(WirePacket, flags) == offsetof(WirePacket::Line, flags) &&
              offsetof(WirePacket, nak) == offsetof(WirePacket::Line, nak) &&
              offsetof(WirePacket, src_port) == offsetof(WirePacket::Line, src_port) &&
              offsetof(WirePacket, slid) == offsetof(WirePacket::Line, slid) &&
              offsetof(WirePacket, src_qpn) == offsetof(WirePacket::Line, src_qpn) &&
              offsetof(WirePacket, dst_qpn) == offsetof(WirePacket::Line, dst_qpn) &&
              offsetof(WirePacket, imm_data) == offsetof(WirePacket::Line, imm_data) &&
              offsetof(WirePacket, psn_count) == offsetof(WirePacket::Line, psn_count) &&
              offsetof(WirePacket, payload_len) == offsetof(WirePacket::Line, payload_len) &&
              offsetof(WirePacket, dgid_number) == offsetof(WirePacket::Line, dgid_number) &&
              offsetof(WirePacket, sgid_number) == offsetof(WirePacket::Line, sgid_number) &&
              offsetof(WirePacket, qkey) == offsetof(WirePacket::Line, qkey) &&
              offsetof(WirePacket, pkey) == offsetof(WirePacket::Line, pkey) &&
              offsetof(WirePacket, dst_dlid) == offsetof(WirePacket::Line, dst_dlid) &&
              offsetof(WirePacket, src_device) == offsetof(WirePacket::Line, src_device) &&
              offsetof(WirePacket, dst_is_global) == offsetof(WirePacket::Line, dst_is_global) &&
              offsetof(WirePacket, dst_sgid_index) == offsetof(WirePacket::Line, dst_sgid_index) &&
              offsetof(WirePacket, dst_sl) == offsetof(WirePacket::Line, dst_sl) &&
              offsetof(WirePacket, dst_port_num) == offsetof(WirePacket::Line, dst_port_num) &&
              offsetof(WirePacket::Line, dst_port_num) + 1 == WirePacket::Line::kBytes &&
              offsetof(WirePacket, sender_slot) >= WirePacket::Line::kBytes);

// A slot is line-aligned and holds the sequence word (8 bytes) before the
// packet (PacketRing::Slot): the fields every packet needs fill the rest of
// its first line, and the payload and each rare part start lines of their own.
static_assert(offsetof(WirePacket, payload) + 8 == 64);
static_assert((offsetof(WirePacket, addressing) + 8) % 64 == 0 && sizeof(WirePacket::Addressing) <= 64);
static_assert((offsetof(WirePacket, extended) + 8) % 64 == 0 && sizeof(WirePacket::Extended) <= 64);

}  // namespace simverbs
