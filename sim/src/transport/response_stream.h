#pragma once

// A READ response not cut into packets yet. For an answer longer than one
// packet the responder hands the engine one Packet that stands for all of it
// (Packet::stream set); its
// MTU-sized packets are made one at a time as the wire takes them: at once
// for a QP of this process, and as room appears in the requester's packet
// ring for one of another process (fabric/fabric.h). So an answer that waits
// for room costs no memory, and none of it is dropped for want of room: a
// flow-controlled response is never lost (as behind an IB link's credits).
//
// Each packet's bytes are read from the responder's memory when the packet is
// made, as an HCA reads them when it sends: if the responder's QP or its MR
// is gone by then, the rest of the answer is never sent (the requester's
// retry timer decides). A packet borrows those bytes (Payload::Borrow): it is
// delivered, or copied into the requester's ring, before the engine lock is
// let go, and one kept for later owns a copy (Payload::Own).
//
// An answer of one packet is made at once, as a plain packet (Qp::ReceiveRequest):
// a stream would cost it more than it saves. One that waits for room holds a
// copy of its bytes (at most a path MTU), read when it was made.

#include <cstdint>

namespace simverbs {

class Device;
class Qp;
struct Packet;

struct ResponseStream {
  // Where `length` bytes at `va` are in the responder's memory, or nullptr
  // when the responder can no longer answer. Called with the engine lock.
  // (A function and the values it needs, not a closure: a closure of these
  // four would be allocated for every READ.)
  const uint8_t* (*locate)(const ResponseStream& s, uint64_t va, uint64_t length) = nullptr;
  Device* device = nullptr;  // the responder: its device, QP number and QP
  uint32_t qpn = 0;
  const Qp* qp = nullptr;    // compared only, never followed: the QP may be gone
  uint32_t rkey = 0;
  uint32_t mtu = 4096;
  uint64_t cut = 0;      // bytes made into packets so far
  uint32_t packets = 0;  // packets made so far
  bool ended = false;
};

// Makes the next packet of `whole` (kind kReadResponse, `dma_length` bytes
// from `remote_addr`, first PSN `psn`) into *out, its payload borrowed from
// the responder's memory. False when every packet has been made or the
// responder can no longer answer. Requires: engine lock.
bool CutResponse(const Packet& whole, Packet* out);

}  // namespace simverbs
