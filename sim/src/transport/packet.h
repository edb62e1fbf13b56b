#pragma once

// A packet on the simulated wire: the fields of the IBTA headers that the
// transport uses (BTH, RETH, AtomicETH, AETH, ImmDt, IETH, DETH, GRH/LRH
// addressing). Payload bytes are gathered from the sender's memory when the
// packet is made.

#include <infiniband/verbs.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "transport/payload.h"
#include "wqe.h"

namespace simverbs {

class Device;
struct ResponseStream;

struct Packet {
  enum class Kind {
    kRequest,        // SEND / WRITE / READ request / atomic, requester → responder
    kAck,            // positive ACK (RC)
    kNak,            // AETH NAK (RC)
    kReadResponse,   // READ response data
    kAtomicAck,      // atomic ACK with the original value
    // XRC between processes (xrc_remote.h): a target QP hands a request to
    // the process that owns the XRC SRQ it names, which answers with the result.
    kXrcForward,
    kXrcResult,
  };
  enum class Nak {
    kNone,
    kRnr,
    kSequence,
    kInvalidRequest,
    kRemoteAccess,
    kRemoteOperational,
    // kXrcResult only (never to a requester): the message was delivered but
    // its receive completion was lost, the SRQ's CQ having overrun with it or
    // been in error already; the target QP takes it as its own lost completion.
    kCqOverrun,
    kCqErrored,
  };

  Kind kind = Kind::kRequest;
  ibv_qp_type transport = IBV_QPT_RC;
  ibv_wr_opcode op = IBV_WR_SEND;  // the request's operation (also echoed in responses)
  bool first = true;               // first / last packet of the message
  bool last = true;
  bool solicited = false;
  uint32_t psn = 0;

  // Addressing: who sent it and where it goes.
  Device* src_device = nullptr;
  uint8_t src_port = 1;
  uint16_t slid = 0;
  uint32_t src_qpn = 0;
  AddressVector dst;
  uint32_t dst_qpn = 0;
  bool from_peer = false;  // arrived from another process (a multicast copy is not sent on again)
  bool has_grh = false;
  ibv_gid sgid{};
  uint32_t qkey = 0;  // DETH (UD)
  uint32_t xrc_srqn = 0;  // XRCETH (XRC requests)
  uint64_t xrc_domain_dev = 0;  // kXrcForward: the target QP's XRC domain (its file's st_dev, st_ino)
  uint64_t xrc_domain_ino = 0;
  uint16_t pkey = 0xffff;

  // Extended headers.
  uint64_t remote_addr = 0;  // RETH / AtomicETH
  uint32_t rkey = 0;
  uint64_t dma_length = 0;  // RETH length (whole message)
  uint64_t compare_add = 0;
  uint64_t swap = 0;
  uint32_t imm_data = 0;  // ImmDt (network order) or IETH rkey
  Nak nak = Nak::kNone;
  uint64_t atomic_orig = 0;

  Payload payload;
  // A WRITE whose data the requester already put in the responder's memory
  // (fabric/fabric.h): no payload, and one packet stands for the whole
  // message, which still takes `psn_count` PSNs (one per path MTU). On a
  // SEND or a WRITE with immediate, the message the responder pulls from the
  // requester's memory (Qp::SendPulledLocked): a SEND, which has no RETH,
  // says where in remote_addr and the pull epoch in rkey; a WRITE with
  // immediate, whose RETH those are, in compare_add and swap.
  bool placed = false;
  uint32_t psn_count = 1;
  // A placed RDMA WRITE (no immediate) that the requester completed itself:
  // it checked everything the responder checks before placing, and no
  // receive is consumed, so nothing is left to answer. The responder still
  // takes its PSNs in order, but sends no ACK, and its owner need not be
  // woken for it (fabric/packet_ring.h): the data is in already.
  bool answered = false;
  // A whole READ answer, to be cut into packets as the wire takes them
  // (transport/response_stream.h); never crosses to another process as such.
  // Mutable: CutResponse sets it aside while it copies the other fields of
  // a const Packet (a copy and a release would be two atomic operations on
  // every packet of the answer).
  mutable std::shared_ptr<ResponseStream> stream;

  // Nothing would send it again if it were lost: an answered packet (its
  // requester completed the message, as after an ACK), or one between an
  // XRC target QP and the SRQ's owner (inside one HCA: xrc_remote.h, which
  // has no retransmission of its own). Never dropped, not even by a fault.
  bool Lossless() const { return answered || kind == Kind::kXrcForward || kind == Kind::kXrcResult; }
};

// A request with this operation is delivered into a receive WQE (a SEND of
// any kind, a WRITE with immediate).
inline bool ConsumesRecv(ibv_wr_opcode op) {
  return op == IBV_WR_SEND || op == IBV_WR_SEND_WITH_IMM || op == IBV_WR_SEND_WITH_INV ||
         op == IBV_WR_RDMA_WRITE_WITH_IMM;
}

// A READ request in one packet, as another process's ring holds it: what the
// responder needs of it, without a Packet made (Qp::ReceiveWholeReadLocked).
struct WholeRead {
  ibv_qp_type transport;
  uint32_t psn;
  uint64_t remote_addr;  // the RETH
  uint32_t rkey;
  uint64_t dma_length;
};

// A SEND that is a whole message in one packet of a connected QP, as another
// process's ring holds it: what the responder needs of it, without a Packet
// made (Qp::ReceiveWholeSendLocked). `bytes` are the sender's slot's until
// the receive has taken them.
struct WholeSend {
  ibv_qp_type transport;
  ibv_wr_opcode op;
  uint32_t psn;
  uint32_t imm_data;
  bool solicited;
  const uint8_t* bytes;
  uint32_t length;
};

}  // namespace simverbs
