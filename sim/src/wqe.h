#pragma once

// Work queue entries as the simulator keeps them after ibv_post_send /
// ibv_post_recv: everything of the work request that execution needs.

#include <infiniband/verbs.h>

#include <cstdint>
#include <vector>

namespace simverbs {

inline bool IsAtomic(ibv_wr_opcode op) { return op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD; }

// Where a packet goes: an ibv_ah_attr resolved at post/modify time.
struct AddressVector {
  uint16_t dlid = 0;
  bool is_global = false;
  ibv_gid dgid{};
  uint8_t sgid_index = 0;
  uint8_t sl = 0;
  uint8_t port_num = 1;

  static AddressVector From(const ibv_ah_attr& a) {
    AddressVector av;
    av.dlid = a.dlid;
    av.is_global = a.is_global;
    av.dgid = a.grh.dgid;
    av.sgid_index = a.grh.sgid_index;
    av.sl = a.sl;
    av.port_num = a.port_num;
    return av;
  }
};

// Everything of a SendWqe but its two buffers: plain values, so that a slot
// taken for a new WR is reset with a few stores (Qp::MakeSendWqe) while the
// buffers keep their capacity.
struct SendWqeValues {
  uint64_t wr_id = 0;
  ibv_wr_opcode opcode = IBV_WR_SEND;
  bool signaled = false;
  bool solicited = false;
  bool fence = false;
  bool is_inline = false;
  uint64_t length = 0;
  uint32_t imm_data = 0;  // network order, or the rkey to invalidate
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  uint64_t compare_add = 0;
  uint64_t swap = 0;
  // BIND_MW
  ibv_mw* mw = nullptr;
  ibv_mw_bind_info bind_info{};
  uint64_t bind_mr_serial = 0;  // the MR bind_info.mr named when it was posted (Mr::serial), 0: none
  // UD
  AddressVector av;
  bool ah_of_other_pd = false;  // the AH is not in the QP's PD: IBV_WC_LOC_QP_OP_ERR (IBTA C10-10)
  uint32_t remote_qpn = 0;
  uint32_t remote_qkey = 0;
  // XRC_SEND: the XRC SRQ at the target that takes the message
  uint32_t xrc_srqn = 0;

  // Its place in the QP's posting order, from 1 (Qp::sq_posted_): polling
  // its completion frees the send queue slots up to it (Qp::FreeSlots).
  uint64_t seq = 0;

  // Progress of the requester.
  uint32_t first_psn = 0;
  uint32_t last_psn = 0;
  bool transmitted = false;
  // Executed at least once: a resend that went back over it (an RNR NAK, a
  // sequence NAK, a timeout) leaves it outstanding, though not yet sent again.
  bool started = false;
  // Its whole data was put in the peer's memory by the requester itself
  // (one-copy WRITE, Qp::PlaceWriteLocked) in its latest transmission.
  bool placed = false;
  // A SEND whose latest transmission asked the responder to pull its bytes
  // (Qp::SendPulledLocked); and one that went out in packets through the
  // rings at least once, whose responder may hold part of it: it is never
  // pulled after that.
  bool pulled = false;
  bool sent_in_packets = false;
  bool acked = false;      // done on the wire (ACKed, answered, or failed)
  bool completed = false;  // its CQE (if any) has been generated
  bool before_sqd = false; // sent before RTS→SQD: may still be resent while draining
  ibv_wc_status status = IBV_WC_SUCCESS;
  ibv_wc_status injected = IBV_WC_SUCCESS;  // control API: complete with this instead of executing
  // A local error found at execution while a WQE before it still waited for
  // its answer: reported when its turn comes (completions are in order).
  ibv_wc_status deferred = IBV_WC_SUCCESS;
  // READ: what the responses so far have put in the local buffers (they are
  // taken in PSN order only); a resend asks for the rest.
  uint64_t read_offset = 0;
  uint32_t read_packets = 0;
};

struct SendWqe : SendWqeValues {
  std::vector<ibv_sge> sges;         // gather list; checked when the WQE executes
  std::vector<uint8_t> inline_data;  // copied at post time (IBV_SEND_INLINE)
};

struct RecvWqe {
  uint64_t wr_id = 0;
  std::vector<ibv_sge> sges;
  uint64_t length = 0;
};

}  // namespace simverbs
