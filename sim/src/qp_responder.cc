// The responder of a QP: request packets in, data into registered memory,
// receive completions, and the ACKs/NAKs back to the requester.

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstring>
#include <new>

#include "context.h"
#include "cq.h"
#include "device.h"
#include "fabric/fabric.h"
#include "gid.h"
#include "mr.h"
#include "mw.h"
#include "pd.h"
#include "qp.h"
#include "srq.h"
#include "transport/copy_bytes.h"
#include "transport/engine.h"
#include "transport/response_stream.h"

namespace simverbs {
namespace {

unsigned RemoteAccessFor(ibv_wr_opcode op) {
  switch (op) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM: return IBV_ACCESS_REMOTE_WRITE;
    case IBV_WR_RDMA_READ: return IBV_ACCESS_REMOTE_READ;
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD: return IBV_ACCESS_REMOTE_ATOMIC;
    default: return 0;
  }
}

// IBTA 9.4.x: the length of a UD receive counts the 40-byte GRH area.
constexpr uint32_t kGrhBytes = 40;

// What follows the GRH or IP header of a UD datagram: BTH, DETH, the payload
// and the ICRC (and, on RoCE v2, a UDP header first).
uint16_t TransportBytes(size_t payload, bool udp) {
  return static_cast<uint16_t>((udp ? 8 : 0) + 12 + 8 + payload + 4);
}

}  // namespace

bool Qp::RespondsLocked() const {
  const ibv_qp_state s = state();
  return s == IBV_QPS_RTR || s == IBV_QPS_RTS || s == IBV_QPS_SQD || s == IBV_QPS_SQE;
}

void Qp::Receive(const Packet& pkt) {
  if (destroying_) return;
  if (pkt.kind != Packet::Kind::kRequest) {
    ReceiveResponse(pkt);
    return;
  }
  // A different transport is dropped; an XRC_RECV QP takes what XRC_SEND QPs send.
  if (type() != pkt.transport && !(type() == IBV_QPT_XRC_RECV && pkt.transport == IBV_QPT_XRC_SEND)) return;
  // Requests reach only a QP that is ready to receive (rxe_recv.c check_type_state).
  if (!RespondsLocked()) return;
  const ibv_qp_state s = state();
  // IBTA 11.6.3: the first packet that reaches a QP in RTR raises
  // Communication Established (the QP may then still be moved to RTS).
  if (s == IBV_QPS_RTR && !comm_established_ && type() != IBV_QPT_UD) {
    comm_established_ = true;
    if (device()->behaviour().comm_est_event) RaiseAsyncLocked(IBV_EVENT_COMM_EST);
  }
  if (type() == IBV_QPT_UD) {
    ReceiveUd(pkt);
  } else if (type() != IBV_QPT_XRC_RECV || BindXrcSrqLocked(pkt)) {
    ReceiveRequest(pkt);
  }
}

bool Qp::TakeRecvWqe(RecvWqe* out) {
  if (srq_) {
    Srq::Wqe w;
    if (!srq_->TakeLocked(&w)) return false;
    out->wr_id = w.wr_id;
    out->sges = std::move(w.sges);
    out->length = 0;
    for (const ibv_sge& sge : out->sges) out->length += sge.length;
    return true;
  }
  if (rq_.empty()) return false;
  // Swapped, not moved: the slot keeps *out's old SGE buffer for a later post.
  // (Field by field: the vector's three pointers, without a moved-from temporary.)
  static_assert(sizeof(RecvWqe) == sizeof(uint64_t) * 2 + sizeof(std::vector<ibv_sge>), "a field not swapped here");
  RecvWqe& front = rq_.front();
  std::swap(out->wr_id, front.wr_id);
  out->sges.swap(front.sges);
  std::swap(out->length, front.length);
  rq_.pop_front();
  return true;
}

// rxe's responder keeps the WQE of a dropped UC message for the next one.
// Onto rq_ this takes no memory: PostRecv keeps a slot spare for it.
void Qp::PutBackRecvLocked() {
  if (!recv_in_progress_) return;
  recv_in_progress_ = false;
  if (srq_) {
    srq_->PutBackLocked(Srq::Wqe{recv_wqe_.wr_id, std::move(recv_wqe_.sges)});
  } else {
    std::swap(rq_.push_front_slot(), recv_wqe_);
  }
}

// Writes `bytes` at `offset` of a receive WQE's scatter list (memmove: a
// SEND within one process may be read straight from a buffer that overlaps
// the receive's). Returns the
// status: success, LOC_LEN_ERR (does not fit) or LOC_PROT_ERR (bad lkey).
static ibv_wc_status Scatter(Device* dev, const Pd* pd, const RecvWqe& wqe, uint64_t offset, const uint8_t* bytes,
                             uint64_t len) {
  if (offset + len > wqe.length) return IBV_WC_LOC_LEN_ERR;
  uint64_t pos = 0;
  for (const ibv_sge& sge : wqe.sges) {
    const uint64_t start = std::max(offset, pos);
    const uint64_t end = std::min(offset + len, pos + sge.length);
    if (start < end) {
      Mr* mr = Mr::Check(dev, sge.lkey, false, pd, sge.addr, sge.length, IBV_ACCESS_LOCAL_WRITE);
      if (!mr) return IBV_WC_LOC_PROT_ERR;
      MoveBytes(mr->Translate(sge.addr + (start - pos), end - start), bytes + (start - offset), end - start);
    }
    pos += sge.length;
  }
  return IBV_WC_SUCCESS;
}

void Qp::ReceiveRequest(const Packet& pkt) {
  const bool rc = Reliable();
  if (rc) {
    const uint32_t diff = (pkt.psn - epsn_) & 0xffffff;
    if (diff != 0) {
      if (diff > 0x800000) {
        // A duplicate (the requester retried): acknowledge it again. A READ
        // is answered again, an atomic with the result it had.
        if (IsAtomic(pkt.op)) {
          ReplayAtomicLocked(pkt);
          return;
        }
        if (pkt.op != IBV_WR_RDMA_READ) {
          Respond(pkt, Packet::Kind::kAck);
          return;
        }
      } else {
        if (sent_sequence_nak_) return;  // NAKed already: wait for the expected PSN
        sent_sequence_nak_ = true;
        Respond(pkt, Packet::Kind::kNak, Packet::Nak::kSequence);
        return;
      }
    }
    sent_sequence_nak_ = false;
  } else {
    // UC: a middle or last packet continues the message whose packets so far
    // were taken; the flag is set again only when this one is.
    const bool continues = uc_message_;
    uc_message_ = false;
    if (pkt.first) {
      PutBackRecvLocked();  // the rest of the previous message was lost
      epsn_ = pkt.psn;      // UC resynchronises on every first packet
    } else if (pkt.psn != epsn_ || !continues || (ConsumesRecv(pkt.op) && !recv_in_progress_)) {
      PutBackRecvLocked();  // a lost or refused packet: UC drops the rest of the message
      return;
    }
  }

  // An answered WRITE was checked and completed by its requester when it
  // placed the data (Packet::answered), against this QP's and the MR's state
  // of that moment: it may reach us after an ibv_dereg_mr or ibv_modify_qp
  // that came later, and must not be refused for them. Only its PSNs are taken.
  if (pkt.answered) {
    epsn_ = (pkt.psn + pkt.psn_count) & 0xffffff;
    return;
  }

  // Is the QP enabled for this operation (qp_access_flags)? Class C invalid request.
  const unsigned need = RemoteAccessFor(pkt.op);
  if (need && !(attr_.qp_access_flags & need)) {
    if (!rc) {
      PutBackRecvLocked();
      return;
    }
    ResponderFatal(pkt, IBV_WC_SUCCESS, Packet::Nak::kInvalidRequest, IBV_EVENT_QP_REQ_ERR);
    return;
  }
  // A READ or an atomic needs a responder resource: with max_dest_rd_atomic 0
  // the QP has none, an invalid request (rxe_resp.c check_resource:
  // RESPST_ERR_TOO_MANY_RDMA_ATM_REQ, AETH_NAK_INVALID_REQ).
  if (rc && (pkt.op == IBV_WR_RDMA_READ || IsAtomic(pkt.op)) && attr_.max_dest_rd_atomic == 0) {
    ResponderFatal(pkt, IBV_WC_SUCCESS, Packet::Nak::kInvalidRequest, IBV_EVENT_QP_REQ_ERR);
    return;
  }

  // RC: a middle or last packet of a SEND with no message in progress (its
  // first packet was never accepted) is an invalid request, not data for the
  // receive WQE of an older message (IBTA 9.7.5.2.4: out-of-sequence opcode).
  if (rc && !pkt.first && ConsumesRecv(pkt.op) && !recv_in_progress_) {
    ResponderFatal(pkt, IBV_WC_SUCCESS, Packet::Nak::kInvalidRequest, IBV_EVENT_QP_REQ_ERR);
    return;
  }
  if (pkt.first && ConsumesRecv(pkt.op)) {
    if (!TakeRecvWqe(&recv_wqe_)) {
      // No receive posted: RNR NAK (RC), or the message is lost (UC).
      if (rc) Respond(pkt, Packet::Kind::kNak, Packet::Nak::kRnr);
      return;
    }
    recv_in_progress_ = true;
    recv_offset_ = 0;
  }
  const bool has_recv = ConsumesRecv(pkt.op) && recv_in_progress_;

  switch (pkt.op) {
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
    case IBV_WR_SEND_WITH_INV: {
      if (pkt.placed) {
        if (!rc || pkt.op == IBV_WR_SEND_WITH_INV) {
          PutBackRecvLocked();  // no requester pulls such a SEND: dropped
          return;
        }
        if (!PullSendLocked(pkt)) return;
        recv_offset_ = pkt.dma_length;
        break;
      }
      const ibv_wc_status st =
          Scatter(device(), RecvPd(), recv_wqe_, recv_offset_, pkt.payload.data(), pkt.payload.size());
      if (st != IBV_WC_SUCCESS) {
        if (!rc) {
          recv_in_progress_ = false;
          CompleteRecvLocked(recv_wqe_, st, IBV_WC_RECV);
          return;
        }
        ResponderFatal(pkt, st,
                       st == IBV_WC_LOC_LEN_ERR ? Packet::Nak::kInvalidRequest : Packet::Nak::kRemoteOperational, -1);
        return;
      }
      recv_offset_ += pkt.payload.size();
      break;
    }
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM: {
      if (pkt.first) {
        // C9-88: a zero-length WRITE carries no memory access to check.
        write_mr_ = nullptr;
        write_va_ = pkt.remote_addr;
        if (pkt.dma_length > 0) {
          write_mr_ = Mr::Check(device(), pkt.rkey, true, pd_, pkt.remote_addr, pkt.dma_length,
                                IBV_ACCESS_REMOTE_WRITE, qp_num());
          if (!write_mr_) {
            if (!rc) {
              PutBackRecvLocked();  // IBTA class E: silently dropped
              return;
            }
            ResponderFatal(pkt, has_recv ? IBV_WC_REM_ACCESS_ERR : IBV_WC_SUCCESS, Packet::Nak::kRemoteAccess,
                           has_recv ? -1 : AccessErrorEvent());
            return;
          }
        }
      }
      // A placed WRITE is the whole message, its data already in place.
      const uint64_t len = pkt.placed ? pkt.dma_length : pkt.payload.size();
      if (len) {
        // Checked again per packet: the MR may have been deregistered meanwhile.
        Mr* mr = Mr::Check(device(), pkt.rkey, true, pd_, write_va_, len, IBV_ACCESS_REMOTE_WRITE, qp_num());
        if (!mr) {
          if (!rc) {
            PutBackRecvLocked();
            return;
          }
          ResponderFatal(pkt, has_recv ? IBV_WC_REM_ACCESS_ERR : IBV_WC_SUCCESS, Packet::Nak::kRemoteAccess,
                         has_recv ? -1 : AccessErrorEvent());
          return;
        }
        if (!pkt.placed) {
          MoveBytes(mr->Translate(write_va_, len), pkt.payload.data(), len);
        } else if (pkt.op == IBV_WR_RDMA_WRITE_WITH_IMM && !PullWriteLocked(pkt, mr->Translate(write_va_, len))) {
          return;
        }
        write_va_ += len;
      }
      recv_offset_ = pkt.dma_length;
      break;
    }
    case IBV_WR_RDMA_READ: {
      Mr* mr = pkt.dma_length ? Mr::Check(device(), pkt.rkey, true, pd_, pkt.remote_addr, pkt.dma_length,
                                          IBV_ACCESS_REMOTE_READ, qp_num())
                              : nullptr;
      if (pkt.dma_length && !mr) {
        ResponderFatal(pkt, IBV_WC_SUCCESS, Packet::Nak::kRemoteAccess,
                       AccessErrorEvent());
        return;
      }
      // The response, segmented by the path MTU, one PSN per packet.
      const uint32_t mtu = PathMtuBytes();
      if (pkt.dma_length <= mtu) {
        // One packet, with the bytes of the memory checked just now.
        SendDeferredAckLocked();
        const uint8_t* bytes = mr ? mr->Translate(pkt.remote_addr, pkt.dma_length) : nullptr;
        SendOneReadResponseLocked(pkt.psn, bytes, static_cast<uint32_t>(pkt.dma_length));
        if (((pkt.psn - epsn_) & 0xffffff) == 0) epsn_ = (pkt.psn + 1) & 0xffffff;
        return;
      }
      Packet r = NewPacket(AddressVector::From(attr_.ah_attr), attr_.dest_qp_num);
      r.kind = Packet::Kind::kReadResponse;
      r.op = pkt.op;
      r.psn = pkt.psn;
      r.remote_addr = pkt.remote_addr;
      r.dma_length = pkt.dma_length;
      // One Packet for the whole answer, cut as the wire takes it
      // (transport/response_stream.h). The stream of the previous answer
      // once nothing holds it any more (the engine lock guards every
      // copy): no allocation per READ.
      if (!spare_stream_ || spare_stream_.use_count() != 1) spare_stream_ = std::make_shared<ResponseStream>();
      r.stream = spare_stream_;
      *r.stream = ResponseStream{};
      r.stream->mtu = mtu;
      r.stream->device = device();
      r.stream->qpn = qp_num();
      r.stream->qp = this;
      r.stream->rkey = pkt.rkey;
      r.stream->locate = [](const ResponseStream& s, uint64_t va, uint64_t length) -> const uint8_t* {
        // The QP answers only while it is this one and in a state that responds.
        Qp* qp = s.device->FindQp(s.qpn);
        if (qp != s.qp || qp->destroying_ || !qp->RespondsLocked()) return nullptr;
        Mr* mr = Mr::Check(s.device, s.rkey, true, qp->pd_, va, length, IBV_ACCESS_REMOTE_READ, s.qpn);
        return mr ? mr->Translate(va, length) : nullptr;
      };
      const uint32_t packets = static_cast<uint32_t>((pkt.dma_length + mtu - 1) / mtu);
      const uint32_t psn = (pkt.psn + packets) & 0xffffff;
      SendDeferredAckLocked();
      TransmitToPeerLocked(std::move(r));
      if (((pkt.psn - epsn_) & 0xffffff) == 0) epsn_ = psn;
      return;
    }
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD: {
      // IBTA (atomic operations): the virtual address must be 8-byte aligned;
      // a misaligned one is an invalid request, NAKed (rxe_resp.c as well:
      // RESPST_ERR_MISALIGNED_ATOMIC answers AETH_NAK_INVALID_REQ).
      if (pkt.remote_addr % 8 != 0) {
        ResponderFatal(pkt, IBV_WC_SUCCESS, Packet::Nak::kInvalidRequest, IBV_EVENT_QP_REQ_ERR);
        return;
      }
      Mr* mr = Mr::Check(device(), pkt.rkey, true, pd_, pkt.remote_addr, 8, IBV_ACCESS_REMOTE_ATOMIC, qp_num());
      if (!mr) {
        ResponderFatal(pkt, IBV_WC_SUCCESS, Packet::Nak::kRemoteAccess,
                       AccessErrorEvent());
        return;
      }
      auto* target = reinterpret_cast<uint64_t*>(mr->Translate(pkt.remote_addr, 8));
      // One read-modify-write (IBV_ATOMIC_HCA): another process may update
      // the same word through its own QP (a shared file) meanwhile.
      uint64_t orig = pkt.compare_add;
      if (pkt.op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
        orig = __atomic_fetch_add(target, pkt.compare_add, __ATOMIC_SEQ_CST);
      } else {
        __atomic_compare_exchange_n(target, &orig, pkt.swap, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
      }
      atomic_results_[atomic_results_next_] = AtomicResult{pkt.psn, orig, true};
      atomic_results_next_ = (atomic_results_next_ + 1) % atomic_results_.size();
      epsn_ = (pkt.psn + 1) & 0xffffff;
      SendAtomicAckLocked(pkt, orig);
      return;
    }
    default:
      return;
  }
  epsn_ = (pkt.psn + pkt.psn_count) & 0xffffff;
  if (!rc) uc_message_ = !pkt.last;

  if (pkt.last && pkt.op == IBV_WR_SEND_WITH_INV) {
    // The IETH names one of this QP's type 2 windows; anything else is an
    // invalid request (IBTA class J).
    Mw* mw = device()->FindWindow(pkt.imm_data);
    if (!mw || !mw->InvalidateLocked(pkt.imm_data, qp_num())) {
      ResponderFatal(pkt, IBV_WC_REM_INV_REQ_ERR, Packet::Nak::kInvalidRequest, -1);
      return;
    }
  }
  if (pkt.last && has_recv) {
    recv_in_progress_ = false;
    const ibv_wc_opcode op = pkt.op == IBV_WR_RDMA_WRITE_WITH_IMM ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV;
    CompleteRecvLocked(recv_wqe_, IBV_WC_SUCCESS, op, recv_offset_, Arrival::Of(pkt));
  }
  // A receive completion that did not fit in its CQ can take the QP to ERR (rxe 6.1:
  // rxe_resp.c do_complete -> RESPST_ERR_CQ_OVERFLOW, no ACK): a QP in ERR acknowledges nothing.
  // An answered WRITE was completed by its requester (Packet::answered).
  if (rc && pkt.last && state() != IBV_QPS_ERR && !pkt.answered) {
    AcknowledgeLocked(pkt.op, (pkt.psn + pkt.psn_count - 1) & 0xffffff);
  }
}

bool Qp::FromOurRequesterLocked(const Packet& pkt) const {
  // Only from the QP we are connected to: a packet that names another (a
  // stale one from before ibv_modify_qp, or a forged one) is dropped.
  const int src_device = pkt.src_device ? pkt.src_device->index() : -1;
  return pkt.src_qpn == attr_.dest_qp_num && src_device >= 0 && src_device == RemoteDeviceIndex();
}

bool Qp::PullWriteLocked(const Packet& pkt, uint8_t* to) {
  if (!FromOurRequesterLocked(pkt)) {
    PutBackRecvLocked();
    return false;
  }
  const iovec into{to, pkt.dma_length};
  return PullLocked(pkt, pkt.compare_add, static_cast<uint32_t>(pkt.swap), &into, 1, true);
}

bool Qp::PullSendLocked(const Packet& pkt) {
  if (!FromOurRequesterLocked(pkt)) {
    PutBackRecvLocked();
    return false;
  }
  // The receive's SGEs that the message fills, checked as Scatter checks them.
  if (pkt.dma_length > recv_wqe_.length) {
    ResponderFatal(pkt, IBV_WC_LOC_LEN_ERR, Packet::Nak::kInvalidRequest, -1);
    return false;
  }
  place_iov_.clear();
  try {
    place_iov_.reserve(recv_wqe_.sges.size());
  } catch (const std::bad_alloc&) {
    PutBackRecvLocked();  // no memory for the list: as a packet lost, sent again
    return false;
  }
  uint64_t left = pkt.dma_length;
  for (const ibv_sge& sge : recv_wqe_.sges) {
    if (left == 0) break;
    if (sge.length == 0) continue;
    Mr* mr = Mr::Check(device(), sge.lkey, false, RecvPd(), sge.addr, sge.length, IBV_ACCESS_LOCAL_WRITE);
    if (!mr) {
      ResponderFatal(pkt, IBV_WC_LOC_PROT_ERR, Packet::Nak::kRemoteOperational, -1);
      return false;
    }
    const uint64_t n = std::min<uint64_t>(left, sge.length);
    place_iov_.push_back(iovec{mr->Translate(sge.addr, n), n});
    left -= n;
  }
  return PullLocked(pkt, pkt.remote_addr, pkt.rkey, place_iov_.data(), place_iov_.size(), false);
}

bool Qp::PullLocked(const Packet& pkt, uint64_t addr, uint32_t epoch, const iovec* local, size_t local_count,
                    bool staged) {
  const Fabric::PullResult result = Fabric::Get().PullSend(pkt.src_device->index(), pkt.src_qpn, epoch, addr,
                                                           pkt.dma_length, local, local_count, staged);
  if (result == Fabric::PullResult::kPulled) return true;
  // Not read: the receive goes back. Withdrawn (the requester flushed it, or
  // is gone), or failed otherwise (its buffer unmapped): as a packet lost on
  // the wire, which the requester's retries end.
  PutBackRecvLocked();
  if (result != Fabric::PullResult::kRefused) return false;
  // The kernel did not let us read the requester's memory: we take no more
  // pulls, and the NAK has the SEND sent again through the rings (the
  // requester sees that we stopped taking them: Qp::ReceiveResponse).
  pulls_refused_ = true;
  PublishAcceptsLocked();
  sent_sequence_nak_ = true;
  Respond(pkt, Packet::Kind::kNak, Packet::Nak::kSequence);
  return false;
}

// Receive and ReceiveRequest for the packet they would take this way, the
// checks in the same order; anything else goes to them (a SEND with
// invalidate, a QP on an SRQ, a PSN out of order, no receive posted...).
bool Qp::ReceiveWholeSendLocked(const WholeSend& send) {
  if (destroying_ || type() != IBV_QPT_RC || send.transport != IBV_QPT_RC) return false;
  const ibv_qp_state s = state();
  // (In RTR only after Communication Established was raised.)
  if (!RespondsLocked() || (s == IBV_QPS_RTR && !comm_established_)) return false;
  if (send.psn != epsn_ || (send.op != IBV_WR_SEND && send.op != IBV_WR_SEND_WITH_IMM)) return false;
  if (srq_ || recv_in_progress_ || rq_.empty()) return false;
  // Placed before the WQE is taken: one that does not take them goes the
  // other way, which writes the same bytes and fails the same way.
  if (Scatter(device(), pd_, rq_.front(), 0, send.bytes, send.length) != IBV_WC_SUCCESS) return false;
  sent_sequence_nak_ = false;
  TakeRecvWqe(&recv_wqe_);
  recv_offset_ = send.length;
  epsn_ = (send.psn + 1) & 0xffffff;
  const Arrival arrival{send.op, send.imm_data, send.solicited, 0, 0, 0, false};
  CompleteRecvLocked(recv_wqe_, IBV_WC_SUCCESS, IBV_WC_RECV, send.length, arrival);
  if (state() != IBV_QPS_ERR) AcknowledgeLocked(send.op, send.psn);
  return true;
}

bool Qp::ReceiveWholeReadLocked(const WholeRead& read) {
  // Receive's and ReceiveRequest's checks for this case; anything else (a
  // duplicate, an error to answer, COMM_EST to raise) goes the other way.
  if (destroying_ || type() != IBV_QPT_RC || read.transport != IBV_QPT_RC) return false;
  if (!RespondsLocked() || (state() == IBV_QPS_RTR && !comm_established_)) return false;
  if (read.psn != epsn_ || !(attr_.qp_access_flags & IBV_ACCESS_REMOTE_READ) || attr_.max_dest_rd_atomic == 0 ||
      read.dma_length > PathMtuBytes()) {
    return false;
  }
  Mr* mr = read.dma_length ? Mr::Check(device(), read.rkey, true, pd_, read.remote_addr, read.dma_length,
                                       IBV_ACCESS_REMOTE_READ, qp_num())
                           : nullptr;
  if (read.dma_length && !mr) return false;
  sent_sequence_nak_ = false;
  SendDeferredAckLocked();
  SendOneReadResponseLocked(read.psn, mr ? mr->Translate(read.remote_addr, read.dma_length) : nullptr,
                            static_cast<uint32_t>(read.dma_length));
  epsn_ = (read.psn + 1) & 0xffffff;
  return true;
}

void Qp::SendAtomicAckLocked(const Packet& req, uint64_t orig) {
  Packet r = NewPacket(AddressVector::From(attr_.ah_attr), attr_.dest_qp_num);
  r.kind = Packet::Kind::kAtomicAck;
  r.op = req.op;
  r.psn = req.psn;
  r.atomic_orig = orig;
  SendDeferredAckLocked();  // answers leave in the order they were made
  TransmitToPeerLocked(std::move(r));
}

void Qp::ReplayAtomicLocked(const Packet& pkt) {
  for (const AtomicResult& done : atomic_results_) {
    if (!done.valid || done.psn != pkt.psn) continue;
    SendAtomicAckLocked(pkt, done.orig);
    return;
  }
  // Older than the results kept: acknowledged only (its requester's
  // retries end it if it still waits for the result).
  Respond(pkt, Packet::Kind::kAck);
}

void Qp::AcknowledgeLocked(ibv_wr_opcode op, uint32_t last_psn) {
  if (!Engine::Get().DeferAck(this, ack_deferred_)) {
    SendDeferredAckLocked();  // answers leave in the order they were made
    SendAckLocked(op, last_psn);
    return;
  }
  // A later ACK replaces the one held: it covers every message up to its PSN.
  ack_deferred_ = true;
  deferred_ack_psn_ = last_psn;
  deferred_ack_op_ = op;
}

void Qp::SendDeferredAckLocked() {
  if (!ack_deferred_) return;
  ack_deferred_ = false;
  SendAckLocked(deferred_ack_op_, deferred_ack_psn_);
}

void Qp::SendAckLocked(ibv_wr_opcode op, uint32_t psn) {
  if (const WirePacket::Line* line = wire_answer_.Usable(); line && wire_answer_.Send(line->ForAck(op), psn)) return;
  Packet r = NewPacket(AddressVector::From(attr_.ah_attr), attr_.dest_qp_num);
  r.kind = Packet::Kind::kAck;
  r.op = op;
  r.psn = psn;
  if (!wire_answer_.Known()) wire_answer_.Learn(r);
  TransmitToPeerLocked(std::move(r));
}

void Qp::SendOneReadResponseLocked(uint32_t psn, const uint8_t* bytes, uint32_t length) {
  if (const WirePacket::Line* line = wire_answer_.Usable();
      line && wire_answer_.Send(line->ForReadResponse(static_cast<uint16_t>(length)), psn, bytes)) {
    return;
  }
  // (No RETH: the requester knows its READ by the PSN. A response of more
  // than one packet keeps it, for the cutting: transport/response_stream.h.)
  Packet r = NewPacket(AddressVector::From(attr_.ah_attr), attr_.dest_qp_num);
  r.kind = Packet::Kind::kReadResponse;
  r.op = IBV_WR_RDMA_READ;
  r.psn = psn;
  r.payload.Borrow(bytes, length);
  if (!wire_answer_.Known()) wire_answer_.Learn(r);
  TransmitToPeerLocked(std::move(r));
}

void Qp::ReceiveUd(const Packet& pkt) {
  if (pkt.qkey != attr_.qkey) return;  // Q_Key violation: silently dropped (IBTA 10.2.4)
  RecvWqe wqe;
  if (!TakeRecvWqe(&wqe)) return;  // no receive posted: the datagram is dropped
  // The first 40 bytes of the buffer take the GRH when the packet has one.
  if (pkt.has_grh) {
    // Sent to a RoCE v2 GID of ours: UDP follows the IP header (what
    // ibv_init_ah_from_wc reads to know the kind of GID to answer from).
    const bool roce_v2 = device()->GidIndex(attr_.port_num, pkt.dst.dgid, GidKind::kRoceV2) >= 0;
    // (A GRH also when the GIDs are IPv4 addresses: rxe and mlx5 put 20 bytes
    // of zero and the IPv4 header there instead, but UCX then reads which of
    // the two it got from wc.sl, mlx5's RoCE packet type, which this
    // simulator reports as 0.)
    ibv_grh grh{};
    grh.version_tclass_flow = htonl(6u << 28);
    grh.paylen = htons(TransportBytes(pkt.payload.size(), roce_v2));
    grh.next_hdr = roce_v2 ? IPPROTO_UDP : 0x1b;
    grh.hop_limit = 64;
    grh.sgid = pkt.sgid;
    grh.dgid = pkt.dst.dgid;
    const ibv_wc_status st = Scatter(device(), RecvPd(), wqe, 0, reinterpret_cast<const uint8_t*>(&grh), kGrhBytes);
    if (st != IBV_WC_SUCCESS) {
      CompleteRecvLocked(wqe, st, IBV_WC_RECV);
      return;
    }
  }
  const ibv_wc_status st = Scatter(device(), RecvPd(), wqe, kGrhBytes, pkt.payload.data(), pkt.payload.size());
  CompleteRecvLocked(wqe, st, IBV_WC_RECV, st == IBV_WC_SUCCESS ? pkt.payload.size() + kGrhBytes : 0, Arrival::Of(pkt));
}

const Pd* Qp::RecvPd() const {
  return srq_ && !device()->behaviour().srq_recv_checked_against_qp_pd ? srq_->pd() : pd_;
}

// The event of an R_Key violation not tied to a receive (IBTA C9-222.1.1),
// unless the profile's device does not raise it: -1.
int Qp::AccessErrorEvent() const {
  return device()->behaviour().qp_access_err_event ? IBV_EVENT_QP_ACCESS_ERR : -1;
}

void Qp::Respond(const Packet& req, Packet::Kind kind, Packet::Nak nak) {
  SendDeferredAckLocked();  // answers leave in the order they were made
  // An ACK names the last PSN of what it acknowledges.
  const uint32_t last_psn = (req.psn + req.psn_count - 1) & 0xffffff;
  if (kind == Packet::Kind::kAck && nak == Packet::Nak::kNone) {
    SendAckLocked(req.op, last_psn);
    return;
  }
  // A NAK (no caller gives an ACK a NAK code) names the PSN it refuses.
  Packet r = NewPacket(AddressVector::From(attr_.ah_attr), attr_.dest_qp_num);
  r.kind = kind;
  r.op = req.op;
  r.psn = req.psn;
  r.nak = nak;
  if (nak == Packet::Nak::kRnr) r.imm_data = attr_.min_rnr_timer;
  if (nak == Packet::Nak::kSequence) r.psn = epsn_;
  TransmitToPeerLocked(std::move(r));
}

// A responder error that ends the connection: the receive in progress (if
// any) completes with `recv_status`, the requester gets the NAK, the QP goes
// to ERR, and `event` (when >= 0) is raised.
void Qp::ResponderFatal(const Packet& req, ibv_wc_status recv_status, Packet::Nak nak, int event) {
  if (recv_in_progress_ && recv_status != IBV_WC_SUCCESS) {
    recv_in_progress_ = false;
    CompleteRecvLocked(recv_wqe_, recv_status, IBV_WC_RECV);
  }
  Respond(req, Packet::Kind::kNak, nak);
  EnterErrorLocked(event);
}

void Qp::CompleteRecvLocked(const RecvWqe& wqe, ibv_wc_status status, ibv_wc_opcode opcode, uint64_t byte_len,
                            const Arrival& arrival) {
  ibv_wc wc{};
  wc.wr_id = wqe.wr_id;
  wc.status = status;
  wc.qp_num = qp_num();
  wc.opcode = opcode;  // kept on errors too: the overrun rules tell receive CQEs apart by it
  bool solicited = false;
  if (status == IBV_WC_SUCCESS) {
    wc.byte_len = static_cast<uint32_t>(byte_len);
    if (arrival.op == IBV_WR_SEND_WITH_IMM || arrival.op == IBV_WR_RDMA_WRITE_WITH_IMM) {
      wc.imm_data = arrival.imm_data;
      wc.wc_flags |= IBV_WC_WITH_IMM;
    }
    if (arrival.op == IBV_WR_SEND_WITH_INV) {
      wc.invalidated_rkey = arrival.imm_data;
      wc.wc_flags |= IBV_WC_WITH_INV;
    }
    if (type() == IBV_QPT_UD) {
      wc.src_qp = arrival.src_qpn;
      wc.slid = arrival.slid;
      // RoCE carries no SL (an untagged frame has no priority bits): rxe leaves
      // it 0 (rxe_resp.c do_complete), mlx5 reports the VLAN priority, 0 untagged.
      const bool roce = device()->StaticPortAttr(attr_.port_num).link_layer == IBV_LINK_LAYER_ETHERNET;
      wc.sl = roce ? 0 : arrival.sl;
      wc.pkey_index = 0;
      if (arrival.has_grh) wc.wc_flags |= IBV_WC_GRH;
    } else if (device()->behaviour().recv_wc_grh_always) {
      wc.wc_flags |= IBV_WC_GRH;
    }
    solicited = arrival.solicited;
  }
  // A WQE of our receive queue, or of an SRQ that is not XRC, holds its slot until polled.
  CqSlotRelease release;
  if (device()->behaviour().recv_slots_freed_at_poll && !IsXrc()) {
    release = CqSlotRelease{this, 0, true};
    if (srq_) srq_->HoldSlot();
  }
  PushCompletion(recv_cq_, wc, solicited, release);
}

void Qp::FreeSlots(const CqSlotRelease& release) {
  if (release.recv) {
    // (A non-XRC QP's SRQ is the one it was made with: no engine lock needed.)
    if (srq_) {
      srq_->FreeSlots(1);
    } else {
      rq_freed_.fetch_add(1, std::memory_order_release);
    }
    return;
  }
  uint64_t freed = sq_freed_.load(std::memory_order_relaxed);
  while (freed < release.through &&
         !sq_freed_.compare_exchange_weak(freed, release.through, std::memory_order_release)) {
  }
}

size_t Qp::RecvSlotsInUseLocked() const {
  if (!device()->behaviour().recv_slots_freed_at_poll) return rq_.size();
  const uint64_t unfreed = rq_posted_ - std::min(rq_posted_, rq_freed_.load(std::memory_order_acquire));
  return std::max<size_t>(rq_.size(), static_cast<size_t>(unfreed));
}

bool Qp::PushCompletion(Cq* cq, const ibv_wc& wc, bool solicited, CqSlotRelease release) {
  const Cq::PushResult result = cq->Push(wc, solicited, release);
  if (result == Cq::PushResult::kOk) return true;
  CompletionLostLocked(cq, result == Cq::PushResult::kOverrun, wc.opcode & IBV_WC_RECV);
  return false;
}

void Qp::CompletionLostLocked(Cq* cq, bool overrun, bool recv) {
  const Behaviour::CqOverrun mode = device()->behaviour().cq_overrun;
  if (overrun) {
    switch (mode) {
      case Behaviour::CqOverrun::kCascade:
        // Every QP on the CQ, and this one, which may not be (an XRC
        // target QP completes into its SRQ's CQ: IBTA, "Local Work Queue
        // Catastrophic Error" for each work queue associated with the CQ).
        if (cq) cq->CascadeOverrunLocked();
        if (state() != IBV_QPS_ERR && state() != IBV_QPS_RESET) EnterErrorLocked(IBV_EVENT_QP_FATAL);
        break;
      case Behaviour::CqOverrun::kLazy:
        EnterErrorLocked(IBV_EVENT_QP_FATAL);
        break;
      case Behaviour::CqOverrun::kRxe61:
        // rxe 6.1: a lost receive completion takes the QP to ERR (no event);
        // a lost send completion is just lost.
        if (recv) EnterErrorLocked(-1);
        break;
    }
    return;
  }
  // IBTA: a QP that tries to complete into an errored CQ is in error too (under
  // cascade, one that was not on the CQ when it failed; rxe's CQs have no error state).
  if (mode != Behaviour::CqOverrun::kRxe61) EnterErrorLocked(IBV_EVENT_QP_FATAL);
}

int Qp::PostRecv(ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  std::lock_guard<DataPathMutex> lock(Engine::Get().mu());
  for (; wr; wr = wr->next) {
    int err = 0;
    // C10-97.2.1: no receives in RESET; a QP on an SRQ has no receive queue.
    // XRC QPs have no receive queue either (an XRC_RECV QP's receives are in XRC SRQs).
    if (destroying_ || state() == IBV_QPS_RESET || srq_ || IsXrc()) {
      err = EINVAL;
    } else if (wr->num_sge < 0 || static_cast<uint32_t>(wr->num_sge) > attr_.cap.max_recv_sge ||
               (wr->num_sge > 0 && !wr->sg_list)) {
      err = EINVAL;
    } else if (RecvSlotsInUseLocked() >= attr_.cap.max_recv_wr) {
      err = ENOMEM;
    }
    if (err) {
      if (bad_wr) *bad_wr = wr;
      return err;
    }
    try {
      if (state() == IBV_QPS_ERR) {
        RecvWqe wqe;
        wqe.wr_id = wr->wr_id;
        wqe.sges.assign(wr->sg_list, wr->sg_list + wr->num_sge);
        for (const ibv_sge& sge : wqe.sges) wqe.length += sge.length;
        ++rq_posted_;
        CompleteRecvLocked(wqe, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV);
        continue;
      }
      // One slot more than the entries: the receive the responder holds can
      // go back to the front (PutBackRecvLocked) without memory.
      rq_.reserve(rq_.size() + 2);
      // Filled in place: the slot keeps the SGE buffer of its last entry.
      rq_.push_back_filled([&](RecvWqe& slot) {
        slot.wr_id = wr->wr_id;
        const auto n = static_cast<size_t>(wr->num_sge);
        if (slot.sges.size() == n) {
          // As many SGEs as the slot's last entry (a receive loop's case):
          // copied over them, without assign's general path.
          std::copy_n(wr->sg_list, n, slot.sges.begin());
        } else {
          slot.sges.assign(wr->sg_list, wr->sg_list + n);
        }
        slot.length = 0;
        for (const ibv_sge& sge : slot.sges) slot.length += sge.length;
      });
      ++rq_posted_;
    } catch (const std::bad_alloc&) {
      // No memory to hold the WR: refused as by a full queue.
      if (bad_wr) *bad_wr = wr;
      return ENOMEM;
    }
  }
  return 0;
}

int Qp::PostRecvOp(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  Qp* q = From(qp);
  if (!q) {
    if (bad_wr) *bad_wr = wr;
    return EINVAL;
  }
  Fabric::Get().PostedWork();
  return q->PostRecv(wr, bad_wr);
}

}  // namespace simverbs
