// The requester and completer of a QP: ibv_post_send, packets out, and the
// ACKs, NAKs and responses that complete (or fail) work requests.

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>
#include <new>

#include "ah.h"
#include "context.h"
#include "fabric/fabric.h"
#include "cq.h"
#include "device.h"
#include "mr.h"
#include "mw.h"
#include "pd.h"
#include "qp.h"
#include "srq.h"
#include "trace/trace.h"
#include "transport/copy_bytes.h"
#include "transport/engine.h"

namespace simverbs {
namespace {

constexpr uint32_t kPsnMask = 0xffffff;

// IBTA transport timeout: 4.096 µs × 2^timeout; 0 means no timer at all.
std::chrono::nanoseconds TransportTimeout(uint8_t timeout) {
  return std::chrono::nanoseconds(uint64_t{4096} << std::min<uint8_t>(timeout, 31));
}

// IBTA RNR NAK timer field (9.7.5.2.8), in microseconds; index 0 is 655.36 ms.
constexpr uint32_t kRnrTimerUs[32] = {655360, 10,  20,  30,  40,  60,   80,   120,  160,  240,  320,
                                      480,    640, 960, 1280, 1920, 2560, 3840, 5120, 7680, 10240, 15360,
                                      20480,  30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680,
                                      491520};

ibv_wc_opcode WcOpcode(ibv_wr_opcode op) {
  switch (op) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM: return IBV_WC_RDMA_WRITE;
    case IBV_WR_RDMA_READ: return IBV_WC_RDMA_READ;
    case IBV_WR_ATOMIC_CMP_AND_SWP: return IBV_WC_COMP_SWAP;
    case IBV_WR_ATOMIC_FETCH_AND_ADD: return IBV_WC_FETCH_ADD;
    case IBV_WR_BIND_MW: return IBV_WC_BIND_MW;
    case IBV_WR_LOCAL_INV: return IBV_WC_LOCAL_INV;
    default: return IBV_WC_SEND;
  }
}

// Which work request opcodes each transport carries (ibv_post_send(3)).
bool OpcodeAllowed(ibv_qp_type type, ibv_wr_opcode op) {
  if (type == IBV_QPT_XRC_RECV) return false;  // no send queue
  // XRC_SEND carries what RC carries (IBTA A14: XRC is RC with the SRQ named per message).
  if (type == IBV_QPT_XRC_SEND) type = IBV_QPT_RC;
  switch (op) {
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM: return true;
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM: return type != IBV_QPT_UD;
    case IBV_WR_RDMA_READ:
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
    case IBV_WR_SEND_WITH_INV: return type == IBV_QPT_RC;
    case IBV_WR_BIND_MW:
    case IBV_WR_LOCAL_INV: return type == IBV_QPT_RC || type == IBV_QPT_UC;
    default: return false;
  }
}

}  // namespace

uint32_t Qp::PathMtuBytes() const {
  const ibv_mtu mtu = type() == IBV_QPT_UD ? device()->StaticPortAttr(attr_.port_num).active_mtu : attr_.path_mtu;
  return 128u << mtu;
}

int Qp::RemoteDeviceIndex() const {
  const Device* dev = Engine::Get().Route(AddressVector::From(attr_.ah_attr));
  return dev ? dev->index() : -1;
}

int Qp::CheckSendWr(const ibv_send_wr& wr) const {
  if (!OpcodeAllowed(type(), wr.opcode)) return EINVAL;
  if (wr.num_sge < 0 || static_cast<uint32_t>(wr.num_sge) > attr_.cap.max_send_sge) return EINVAL;
  if (wr.num_sge > 0 && !wr.sg_list) return EINVAL;
  uint64_t length = 0;
  for (int i = 0; i < wr.num_sge; ++i) length += wr.sg_list[i].length;
  if ((wr.send_flags & IBV_SEND_INLINE) && length > attr_.cap.max_inline_data) return EINVAL;
  // ibv_post_send(3): IBV_SEND_INLINE is "valid only for Send and RDMA Write";
  // a READ's or an atomic's SGE is where its answer lands, not data to send.
  if ((wr.send_flags & IBV_SEND_INLINE) && (wr.opcode == IBV_WR_RDMA_READ || IsAtomic(wr.opcode))) return EINVAL;
  if (IsAtomic(wr.opcode) && length != 8) return EINVAL;
  // Misaligned atomics are the responder's to refuse (NAK invalid request),
  // unless the profile's provider checks them at post time as rxe does
  // (rdma-core 44 providers/rxe/rxe.c validate_send_wr: remote_addr & 0x7
  // gives EINVAL; the kernel's rxe_verbs.c validate_send_wr does the same
  // for kernel QPs).
  if (IsAtomic(wr.opcode) && (wr.wr.atomic.remote_addr & 7) && device()->behaviour().misaligned_atomic_post_error) {
    return EINVAL;
  }
  if (wr.opcode == IBV_WR_BIND_MW) {
    const Mw* mw = Mw::From(wr.bind_mw.mw);
    if (!mw || mw->context() != ctx_) return EINVAL;
  }
  if (type() == IBV_QPT_UD) {
    const Ah* ah = Ah::From(wr.wr.ud.ah);
    if (!ah || ah->context() != ctx_) return EINVAL;
  }
  return 0;
}

void Qp::MakeSendWqe(const ibv_send_wr& wr, SendWqe* out) const {
  // A fresh entry that keeps the buffers of the slot's previous one (cleared,
  // their capacity kept): posting allocates nothing in steady state.
  static const SendWqeValues kFresh;  // (copied: one made anew here is stored field by field)
  SendWqe& wqe = *out;
  static_cast<SendWqeValues&>(wqe) = kFresh;
  wqe.sges.clear();
  wqe.inline_data.clear();
  wqe.wr_id = wr.wr_id;
  wqe.opcode = wr.opcode;
  wqe.signaled = init_.sq_sig_all || (wr.send_flags & IBV_SEND_SIGNALED);
  wqe.solicited = wr.send_flags & IBV_SEND_SOLICITED;
  wqe.fence = wr.send_flags & IBV_SEND_FENCE;
  wqe.is_inline = wr.send_flags & IBV_SEND_INLINE;
  for (int i = 0; i < wr.num_sge; ++i) {
    const ibv_sge& sge = wr.sg_list[i];
    wqe.length += sge.length;
    if (wqe.is_inline) {
      // Inline data is copied now: the caller may reuse the buffer at once.
      const auto* p = reinterpret_cast<const uint8_t*>(static_cast<uintptr_t>(sge.addr));
      wqe.inline_data.insert(wqe.inline_data.end(), p, p + sge.length);
    } else {
      wqe.sges.push_back(sge);
    }
  }
  wqe.imm_data = wr.imm_data;  // or invalidate_rkey (same union)
  if (wr.opcode == IBV_WR_BIND_MW) {
    wqe.mw = wr.bind_mw.mw;
    wqe.rkey = wr.bind_mw.rkey;
    wqe.bind_info = wr.bind_mw.bind_info;
    // The MR it names now: one that takes its handle after it is gone is another.
    const Mr* mr = wr.bind_mw.bind_info.mr ? device()->FindMrHandle(wr.bind_mw.bind_info.mr) : nullptr;
    wqe.bind_mr_serial = mr ? mr->serial() : 0;
  } else if (IsAtomic(wr.opcode)) {
    wqe.remote_addr = wr.wr.atomic.remote_addr;
    wqe.rkey = wr.wr.atomic.rkey;
    wqe.compare_add = wr.wr.atomic.compare_add;
    wqe.swap = wr.wr.atomic.swap;
  } else if (type() == IBV_QPT_UD) {
    const Ah* ah = Ah::From(wr.wr.ud.ah);
    wqe.av = ah->av();
    wqe.ah_of_other_pd = ah->pd() != pd_;
    wqe.remote_qpn = wr.wr.ud.remote_qpn;
    wqe.remote_qkey = wr.wr.ud.remote_qkey;
  } else {
    wqe.remote_addr = wr.wr.rdma.remote_addr;
    wqe.rkey = wr.wr.rdma.rkey;
  }
  if (type() == IBV_QPT_XRC_SEND) wqe.xrc_srqn = wr.qp_type.xrc.remote_srqn;
}

bool Qp::PushSendCompletion(const SendWqe& wqe, const ibv_wc& wc) {
  if (!device()->behaviour().send_slots_freed_at_poll) return PushCompletion(send_cq_, wc, false);
  return PushCompletion(send_cq_, wc, false, CqSlotRelease{this, wqe.seq});
}

size_t Qp::SendSlotsInUseLocked() const {
  if (!device()->behaviour().send_slots_freed_at_poll) return sq_.size();
  const uint64_t unfreed = sq_posted_ - std::min(sq_posted_, sq_freed_.load(std::memory_order_acquire));
  return std::max<size_t>(sq_.size(), static_cast<size_t>(unfreed));
}

void Qp::ForgetQueueSlotsLocked() {
  uint32_t receives = send_cq_ ? send_cq_->ForgetSlotReleases(this) : 0;
  if (recv_cq_ && recv_cq_ != send_cq_) receives += recv_cq_->ForgetSlotReleases(this);
  if (srq_ && receives > 0) srq_->FreeSlots(receives);  // (the SRQ goes on: its slots are free now)
  sq_posted_ = 0;
  sq_freed_.store(0, std::memory_order_relaxed);
  rq_posted_ = 0;
  rq_freed_.store(0, std::memory_order_relaxed);
}

int Qp::SendRefusalLocked(const ibv_send_wr& wr, size_t queued) const {
  const ibv_qp_state s = state();
  const bool queue_early = device()->behaviour().queue_send_before_rts && (s == IBV_QPS_INIT || s == IBV_QPS_RTR);
  if (destroying_ || ((s == IBV_QPS_RESET || s == IBV_QPS_INIT || s == IBV_QPS_RTR) && !queue_early)) return EINVAL;
  if (queued >= attr_.cap.max_send_wr) return ENOMEM;
  return CheckSendWr(wr);
}

int Qp::PostSend(ibv_send_wr* wr, ibv_send_wr** bad_wr, PostMode mode) {
  std::lock_guard<DataPathMutex> lock(Engine::Get().mu());
  if (wr && PostOneSendLocked(*wr)) return 0;
  const ibv_qp_state s = state();
  if (mode == PostMode::kAllOrNothing) {
    size_t queued = SendSlotsInUseLocked();
    for (const ibv_send_wr* w = wr; w; w = w->next, ++queued) {
      if (int err = SendRefusalLocked(*w, queued)) {
        if (bad_wr) *bad_wr = const_cast<ibv_send_wr*>(w);
        return err;
      }
    }
  }
  const size_t size_before = sq_.size();
  const uint64_t posted_before = sq_posted_;
  const int countdown_before = fail_countdown_;
  int err = 0;
  for (; wr; wr = wr->next) {
    // (All or nothing: every WR was checked above, under the same lock.)
    err = mode == PostMode::kAllOrNothing ? 0 : SendRefusalLocked(*wr, SendSlotsInUseLocked());
    if (err) {
      // ibv_post_send(3): the WRs before the bad one are posted (and run).
      if (bad_wr) *bad_wr = wr;
      break;
    }
    try {
      sq_.push_back_filled([&](SendWqe& slot) { MakeSendWqe(*wr, &slot); });
      sq_.back().seq = ++sq_posted_;
    } catch (const std::bad_alloc&) {
      // No memory to hold the WR: refused as by a full queue (ENOMEM), the
      // WRs before it posted, or none of them.
      err = ENOMEM;
      if (bad_wr) *bad_wr = wr;
      if (mode == PostMode::kAllOrNothing) {
        // None was posted: an armed failure (simverbs_fail_send_wr) waits for the next WRs.
        while (sq_.size() > size_before) sq_.pop_back();
        sq_posted_ = posted_before;
        fail_countdown_ = countdown_before;
        return err;
      }
      break;
    }
    if (fail_countdown_ > 0 && --fail_countdown_ == 0) sq_.back().injected = fail_status_;
  }
  if (s == IBV_QPS_ERR || s == IBV_QPS_SQE) {
    // A QP in error completes every new WR with a flush error. A flush that
    // overruns the CQ may take the QP to ERR: nothing retires under the loop.
    executing_ = true;
    for (SendWqe& w : sq_) FailSendLocked(w, IBV_WC_WR_FLUSH_ERR);
    executing_ = false;
    RetireLocked();
    return err;
  }
  ProgressLocked();
  return err;
}

bool Qp::PostOneSendLocked(const ibv_send_wr& wr) {
  // The WR: what CheckSendWr accepts and ExecuteLocked sends from the line,
  // a SEND (inline or not) or a READ (no fence: that takes the general path).
  const bool read = wr.opcode == IBV_WR_RDMA_READ;
  const unsigned flags_taken =
      read ? static_cast<unsigned>(IBV_SEND_SIGNALED)
           : static_cast<unsigned>(IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | IBV_SEND_INLINE);
  if (wr.next || (!read && wr.opcode != IBV_WR_SEND && wr.opcode != IBV_WR_SEND_WITH_IMM) || wr.num_sge != 1 ||
      !wr.sg_list || (wr.send_flags & ~flags_taken)) {
    return false;
  }
  const bool is_inline = wr.send_flags & IBV_SEND_INLINE;
  // The QP: one that PostSend takes it for, and ProgressLocked would execute
  // it at once (nothing unsent before it, no RNR wait, no injected failure).
  if (destroying_ || type() != IBV_QPT_RC || state() != IBV_QPS_RTS || executing_ || rnr_wait_ ||
      fail_countdown_ > 0 || next_to_send_ != sq_.size() || SendSlotsInUseLocked() >= attr_.cap.max_send_wr ||
      attr_.cap.max_send_sge < 1) {
    return false;
  }
  // ProgressLocked's tail would complete and retire nothing: CompleteAckedLocked
  // stops at an unanswered head without a deferred error, and what is not
  // answered is not completed.
  if (!sq_.empty() && (sq_.front().acked || sq_.front().deferred != IBV_WC_SUCCESS)) return false;
  const ibv_sge& sge = *wr.sg_list;
  const uint32_t mtu = PathMtuBytes();
  // A SEND in one packet; a READ the requester does not read itself
  // (PlaceReadLocked; its answer is cut by the responder).
  if (sge.length == 0 || (!read && sge.length > mtu) || (read && sge.length >= kMinPlacedReadBytes) ||
      sge.length > device()->StaticPortAttr(attr_.port_num).max_msg_sz ||
      (is_inline && sge.length > attr_.cap.max_inline_data)) {  // (EINVAL, from CheckSendWr)
    return false;
  }
  const WirePacket::Line* line = wire_send_.Usable();
  if (!line) return false;
  // Inline data is not checked against an MR (ibv_post_send(3): "The L_Key
  // will not be checked"); MakeSendWqe copies it into the WQE. A READ's SGE
  // is written into, with the access ExecuteLocked asks for it.
  const uint8_t* bytes = nullptr;
  if (!is_inline) {
    const Mr* mr = Mr::Check(device(), sge.lkey, false, pd_, sge.addr, sge.length, read ? IBV_ACCESS_LOCAL_WRITE : 0);
    if (!mr) return false;  // (LOC_PROT_ERR, from ExecuteLocked)
    bytes = mr->Translate(sge.addr, sge.length);
  }
  try {
    sq_.push_back_filled([&](SendWqe& slot) { MakeSendWqe(wr, &slot); });
  } catch (const std::bad_alloc&) {
    return false;  // (ENOMEM, from PostSend)
  }
  sq_.back().seq = ++sq_posted_;
  SendWqe& wqe = sq_[next_to_send_];
  if (is_inline) bytes = wqe.inline_data.data();
  const uint32_t first_psn = next_psn_;
  if (read ? !SendReadFromLineLocked(wqe, mtu) : !SendFromLineLocked(*line, wqe, bytes)) {
    // No room in the peer's ring now: the WQE is queued, unsent, and goes
    // the general way (ExecuteLocked makes it into a Packet).
    ProgressLocked();
    return true;
  }
  ++next_to_send_;
  Trace::Get().Wqe(qp_num(), wqe.opcode, wqe.wr_id, wqe.length, wqe.signaled);
  wqe.first_psn = first_psn;
  wqe.started = true;
  wqe.transmitted = true;
  ArmTransportTimerLocked(false);
  return true;
}

int Qp::PostSendOp(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  Qp* q = From(qp);
  if (!q) {
    if (bad_wr) *bad_wr = wr;
    return EINVAL;
  }
  Fabric::Get().PostedWork();
  return q->PostSend(wr, bad_wr);
}

Packet Qp::NewPacket(const AddressVector& av, uint32_t dst_qpn) const {
  Packet p;
  p.transport = type();
  p.src_device = device();
  p.src_port = attr_.port_num;
  p.slid = device()->StaticPortAttr(attr_.port_num).lid;
  p.src_qpn = qp_num();
  p.dst = av;
  p.dst_qpn = dst_qpn;
  p.has_grh = av.is_global;
  if (av.is_global) {
    const auto& gids = device()->profile().ports[attr_.port_num - 1].gids;
    if (av.sgid_index < gids.size()) p.sgid = gids[av.sgid_index].gid;
  }
  return p;
}

size_t Qp::OldestUnansweredLocked() const {
  size_t i = 0;
  while (i < next_to_send_ && sq_[i].acked) ++i;
  return i;
}

bool Qp::AwaitingAckLocked() const {
  // (Started WQEs come first: the queue executes in order.)
  for (size_t i = 0; i < sq_.size() && sq_[i].started; ++i) {
    if (!sq_[i].acked) return true;
  }
  return false;
}

void Qp::ProgressLocked() {
  // Re-entered from ExecuteLocked (a NAK answered within it): only the
  // outermost call retires WQEs, while none is being executed.
  const bool outer = !executing_;
  executing_ = true;
  // In SQD only what was sent before the drain began may be sent again.
  // A WQE whose local error waits for its turn holds back the ones after it.
  while ((state() == IBV_QPS_RTS || (state() == IBV_QPS_SQD && next_to_send_ < sq_.size() &&
                                     sq_[next_to_send_].before_sqd)) &&
         !rnr_wait_ && next_to_send_ < sq_.size() && sq_[next_to_send_].deferred == IBV_WC_SUCCESS &&
         !LinkHoldsLocked(sq_[next_to_send_]) && !FenceWaitsLocked(next_to_send_)) {
    const size_t index = next_to_send_++;
    try {
      ExecuteLocked(index);
    } catch (const std::bad_alloc&) {
      // No memory to make its packets: the WR fails as a local QP operation
      // error would (RC to ERR), instead of unwinding out of the progress
      // loop with the queue half updated.
      FailSendLocked(sq_[index], IBV_WC_LOC_QP_OP_ERR);
    }
  }
  executing_ = !outer;
  CompleteAckedLocked();
  if (outer) RetireLocked();
  ArmTransportTimerLocked(false);
}

bool Qp::FenceWaitsLocked(size_t index) const {
  if (!sq_[index].fence) return false;
  for (size_t i = 0; i < index; ++i) {
    if (!sq_[i].acked && (sq_[i].opcode == IBV_WR_RDMA_READ || IsAtomic(sq_[i].opcode))) return true;
  }
  return false;
}

bool Qp::LinkHoldsLocked(const SendWqe& wqe) {
  // Every transport waits (a lossless link): RC too, whose retransmission
  // would recover what a full backlog drops, but resending a window of
  // messages for each one dropped made a stream of WRITEs with immediate
  // crawl (qperf rc_rdma_write_bw).
  if (!Fabric::Get().Backlogged()) return false;
  const bool ud = type() == IBV_QPT_UD;
  const AddressVector& av = ud ? wqe.av : AddressVector::From(attr_.ah_attr);
  const uint32_t dst_qpn = ud ? wqe.remote_qpn : attr_.dest_qp_num;
  // (A multicast datagram goes to every process: Fabric::SendToAllPeers.)
  if (ud && IsMulticastDestination(av)) return !Fabric::Get().MulticastMayGo(device()->index(), qp_num());
  Device* dst = Engine::Get().Route(av);
  if (!dst || dst->FindQp(dst_qpn)) return false;  // unreachable (lost), or a QP of ours
  return !Fabric::Get().RequestMayGo(dst->index(), dst_qpn, device()->index(), qp_num());
}

void Qp::ResumeSendLocked() {
  if (!destroying_) ProgressLocked();
}

void Qp::ArmTransportTimerLocked(bool restart) {
  // RC: what was sent but not acknowledged waits for the transport timer,
  // which runs from the oldest unanswered transmission: posting more leaves
  // it running; an answer that makes progress restarts it. (Armed already,
  // by either timer: nothing to do, as ArmTimerUnlessArmed would find.)
  if (!restart && timer_entry_.index != TimerEntry::kNotArmed) return;
  if (!Reliable() || (state() != IBV_QPS_RTS && state() != IBV_QPS_SQD) || rnr_wait_ || attr_.timeout == 0 ||
      !AwaitingAckLocked()) {
    return;
  }
  const auto timeout = TransportTimeout(attr_.timeout);
  const uint32_t scale = device()->behaviour().time_scale;
  if (restart) {
    Engine::Get().ArmTimer(this, timeout, scale);
  } else {
    Engine::Get().ArmTimerUnlessArmed(this, timeout, scale);
  }
}

void Qp::ExecuteLocked(size_t index) {
  const ibv_qp_state sending_state = state();
  SendWqe& wqe = sq_[index];
  // A local operation (no packet, no PSN) that a resend went back over was
  // done once: done again, a bind fails on the window it bound, and its error
  // would hold back every WQE after it.
  if (wqe.acked && (wqe.opcode == IBV_WR_BIND_MW || wqe.opcode == IBV_WR_LOCAL_INV)) return;
  wqe.started = true;
  Trace::Get().Wqe(qp_num(), wqe.opcode, wqe.wr_id, wqe.length, wqe.signaled);
  if (wqe.injected != IBV_WC_SUCCESS) {
    FailLocalLocked(index, wqe.injected);
    return;
  }
  // Local operations: no packets.
  if (wqe.opcode == IBV_WR_BIND_MW) {
    // The window may have been deallocated since the bind was posted.
    Mw* mw = device()->FindWindowHandle(wqe.mw);
    const ibv_wc_status st =
        mw ? mw->BindLocked(pd_, qp_num(), wqe.rkey, wqe.bind_info, wqe.bind_mr_serial) : IBV_WC_MW_BIND_ERR;
    if (st != IBV_WC_SUCCESS) {
      FailLocalLocked(index, st);
    } else {
      wqe.acked = true;
    }
    return;
  }
  if (wqe.opcode == IBV_WR_LOCAL_INV) {
    Mw* mw = device()->FindWindow(wqe.imm_data);
    if (mw && mw->InvalidateLocked(wqe.imm_data, qp_num())) {
      wqe.acked = true;
    } else {
      FailLocalLocked(index, IBV_WC_MW_BIND_ERR);
    }
    return;
  }
  // Check every SGE against its MR (IBV_WC_LOC_PROT_ERR). A message in one
  // SGE: where its bytes are in our memory, found by the same check.
  const bool reads_into_local = wqe.opcode == IBV_WR_RDMA_READ || IsAtomic(wqe.opcode);
  const uint8_t* one_sge = nullptr;
  if (!wqe.is_inline) {
    for (const ibv_sge& sge : wqe.sges) {
      const Mr* mr = Mr::Check(device(), sge.lkey, false, pd_, sge.addr, sge.length,
                               reads_into_local ? IBV_ACCESS_LOCAL_WRITE : 0);
      if (!mr) {
        FailLocalLocked(index, IBV_WC_LOC_PROT_ERR);
        return;
      }
      if (wqe.sges.size() == 1 && sge.length > 0) one_sge = mr->Translate(sge.addr, sge.length);
    }
  }
  // IBTA C10-10: a UD WR's address handle is in the QP's PD, or the WR fails
  // as a local QP operation error and sends nothing (rxe 6.1: rxe_get_av).
  if (wqe.ah_of_other_pd) {
    FailLocalLocked(index, IBV_WC_LOC_QP_OP_ERR);
    return;
  }
  const uint32_t mtu = PathMtuBytes();
  // A message longer than the port's max_msg_sz completes with a Local Length
  // Error (IBTA, completion status "Local Length Error"), before any of it is
  // read. rxe 6.1 does not check it for user QPs (rdma-core 44
  // providers/rxe/rxe.c: post_one_send sums the SGEs into an unsigned int with
  // no limit; kernel drivers/infiniband/sw/rxe/rxe_req.c: rxe_requester sends
  // what the WQE says), a deviation of fixtures/backends/rxe-6.1.json.
  if (wqe.length > device()->StaticPortAttr(attr_.port_num).max_msg_sz) {
    FailLocalLocked(index, IBV_WC_LOC_LEN_ERR);
    return;
  }
  // IBTA C10-93.1.1: a UD message longer than the port's MTU emits no packet
  // and is no error: it completes with success, and nothing arrives (rxe 6.1:
  // rxe_req.c "fake a successful UD send").
  if (type() == IBV_QPT_UD && wqe.length > mtu) {
    wqe.transmitted = true;
    wqe.acked = true;
    return;
  }
  wqe.first_psn = next_psn_;
  wqe.transmitted = true;
  wqe.placed = false;
  wqe.pulled = false;
  // (Not a WRITE with immediate: it needs a receive, and a responder that has
  // none refuses it with an RNR NAK before any of its data may land, which
  // the requester cannot know before placing it.)
  if (wqe.opcode == IBV_WR_RDMA_WRITE && MayPlaceLocked(index) &&
      PlaceWriteLocked(wqe, DestinationOf(wqe), DestinationQpnOf(wqe), mtu)) {
    return;
  }
  if (wqe.opcode == IBV_WR_RDMA_READ && wqe.read_offset == 0 && wqe.length >= kMinPlacedReadBytes &&
      MayPlaceLocked(index) && PlaceReadLocked(wqe, DestinationOf(wqe), DestinationQpnOf(wqe), mtu)) {
    return;
  }
  if (type() == IBV_QPT_UC) copy_unsettled_ = true;
  if (wqe.opcode == IBV_WR_RDMA_READ || IsAtomic(wqe.opcode)) {
    SendReadOrAtomicLocked(wqe, mtu);
    return;
  }
  // SEND and WRITE. A message in one piece of our memory (one SGE, or
  // inline data): found once, and each packet borrows its bytes from there.
  const uint64_t total = wqe.length;
  const uint8_t* whole = one_sge ? one_sge : ContiguousLocked(wqe, 0, total);
  if (total >= kMinPulledSendBytes && SendPulledLocked(wqe, whole, mtu)) return;
  wqe.sent_in_packets = true;
  // A one-packet SEND to a QP of another process, while the line of an
  // earlier one holds: written from that line (fabric/wire_line.h).
  const bool one_packet_send = (wqe.opcode == IBV_WR_SEND || wqe.opcode == IBV_WR_SEND_WITH_IMM ||
                                wqe.opcode == IBV_WR_SEND_WITH_INV) &&
                               total <= mtu && (type() == IBV_QPT_RC || type() == IBV_QPT_UC);
  if (one_packet_send && (whole || total == 0)) {
    if (const WirePacket::Line* line = wire_send_.Usable(); line && SendFromLineLocked(*line, wqe, whole)) return;
  }
  SendMessageLocked(wqe, mtu, whole, one_packet_send, sending_state);
}

bool Qp::SendFromLineLocked(const WirePacket::Line& line, SendWqe& wqe, const uint8_t* bytes) {
  if (!wire_send_.Send(line.ForSend(wqe.opcode, wqe.solicited, wqe.imm_data, static_cast<uint16_t>(wqe.length)),
                       next_psn_, bytes)) {
    return false;
  }
  wqe.last_psn = next_psn_;
  next_psn_ = (next_psn_ + 1) & kPsnMask;
  if (!Reliable()) wqe.acked = true;
  return true;
}

AddressVector Qp::DestinationOf(const SendWqe& wqe) const {
  return type() == IBV_QPT_UD ? wqe.av : AddressVector::From(attr_.ah_attr);
}

uint32_t Qp::DestinationQpnOf(const SendWqe& wqe) const {
  return type() == IBV_QPT_UD ? wqe.remote_qpn : attr_.dest_qp_num;
}

namespace {

// A READ takes one PSN per response packet; an atomic one.
uint32_t RequestPsns(const SendWqe& wqe, uint32_t mtu) {
  return wqe.opcode == IBV_WR_RDMA_READ ? std::max<uint32_t>(1, static_cast<uint32_t>((wqe.length + mtu - 1) / mtu))
                                        : 1;
}

}  // namespace

// An RC READ to a QP of another process, while the line of an earlier
// one-packet SEND or READ holds, is written from that line
// (fabric/wire_line.h). A READ sent again asks only for what has not come
// back yet: the response from that PSN on (IBTA 9.4.3: a resent READ may
// start at any PSN of the original, its address and length moved along).
bool Qp::SendReadFromLineLocked(SendWqe& wqe, uint32_t mtu) {
  if (wqe.opcode != IBV_WR_RDMA_READ || type() != IBV_QPT_RC || !wire_send_.Usable() ||
      !wire_send_.SendRead((next_psn_ + wqe.read_packets) & kPsnMask, wqe.remote_addr + wqe.read_offset, wqe.rkey,
                           wqe.length - wqe.read_offset)) {
    return false;
  }
  next_psn_ = (next_psn_ + RequestPsns(wqe, mtu)) & kPsnMask;
  wqe.last_psn = (next_psn_ - 1) & kPsnMask;
  return true;
}

void Qp::SendReadOrAtomicLocked(SendWqe& wqe, uint32_t mtu) {
  if (SendReadFromLineLocked(wqe, mtu)) return;
  Packet p = NewPacket(DestinationOf(wqe), DestinationQpnOf(wqe));
  p.op = wqe.opcode;
  p.psn = (next_psn_ + wqe.read_packets) & kPsnMask;
  p.remote_addr = wqe.remote_addr + wqe.read_offset;
  p.rkey = wqe.rkey;
  p.dma_length = wqe.length - wqe.read_offset;
  p.compare_add = wqe.compare_add;
  p.swap = wqe.swap;
  p.xrc_srqn = wqe.xrc_srqn;
  next_psn_ = (next_psn_ + RequestPsns(wqe, mtu)) & kPsnMask;
  wqe.last_psn = (next_psn_ - 1) & kPsnMask;
  // The line of later READs (and one-packet SENDs) to a QP of another process.
  if (wqe.opcode == IBV_WR_RDMA_READ && type() == IBV_QPT_RC && !wire_send_.Known()) wire_send_.Learn(p);
  TransmitToPeerLocked(std::move(p));
}

void Qp::SendMessageLocked(SendWqe& wqe, uint32_t mtu, const uint8_t* whole, bool one_packet_send,
                           ibv_qp_state sending_state) {
  // Segmented by the path MTU; a zero-length message is one packet. Each
  // packet gathers its own bytes: the message is never copied whole (it may
  // be as long as max_msg_sz).
  const uint64_t total = wqe.length;
  // What every packet of the message carries, made once. Transmit may move
  // from it, which takes only its payload (the header is plain values, and a
  // SEND or WRITE has no response stream): each packet sets its own again.
  Packet p = NewPacket(DestinationOf(wqe), DestinationQpnOf(wqe));
  p.op = wqe.opcode;
  if (wqe.opcode == IBV_WR_RDMA_WRITE || wqe.opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
    // RETH: a SEND carries none (and crosses to another process in fewer cache lines).
    p.remote_addr = wqe.remote_addr;
    p.rkey = wqe.rkey;
    p.dma_length = total;
  }
  p.imm_data = wqe.imm_data;
  p.xrc_srqn = wqe.xrc_srqn;
  if (type() == IBV_QPT_UD) {
    // IBTA: a Q_Key with the high bit set means "use the QP's own Q_Key".
    const bool controlled = (wqe.remote_qkey & 0x80000000u) && !device()->behaviour().wr_qkey_high_bit_literal;
    p.qkey = controlled ? attr_.qkey : wqe.remote_qkey;
  }
  uint64_t offset = 0;
  do {
    const uint64_t chunk = std::min<uint64_t>(mtu, total - offset);
    p.first = offset == 0;
    p.last = offset + chunk == total;
    p.psn = next_psn_;
    next_psn_ = (next_psn_ + 1) & kPsnMask;
    p.solicited = wqe.solicited && p.last;
    // Bytes that lie in one piece in our memory are read from there when the
    // packet is delivered or copied into a ring slot, before Transmit returns
    // (unless the engine is delivering already: then the packet waits in its
    // queue and gathers its own copy).
    const uint8_t* in_place = Engine::Get().delivering() ? nullptr
                              : whole                      ? whole + offset
                                                           : ContiguousLocked(wqe, offset, chunk);
    if (in_place) {
      p.payload.Borrow(in_place, chunk);
    } else {
      p.payload = Engine::Get().PayloadBuffer();
      p.payload.resize(chunk);
      GatherLocked(wqe, offset, chunk, p.payload.data());
    }
    wqe.last_psn = p.psn;
    offset += chunk;
    if (one_packet_send && !wire_send_.Known()) wire_send_.Learn(p);
    TransmitToPeerLocked(std::move(p));
    // Answered or failed meanwhile; or an RNR or sequence NAK rewound the
    // send queue, which sends the message again from its first packet.
    if (state() != sending_state || wqe.acked || next_psn_ != ((wqe.last_psn + 1) & kPsnMask)) return;
  } while (offset < total);

  // Unreliable transports complete a WR once it is on the wire.
  if (!Reliable()) wqe.acked = true;
}

// A placed WRITE's data lands when the requester executes it, before the
// responder has seen the PSNs in front of it; the responder would only have
// accepted it after every earlier message (IBTA ch. 9: a responder executes
// requests in PSN order). So the
// requester places it only when nothing in front of it can still be refused
// or is still unprocessed: every earlier WQE of the send queue is acked (RC:
// answered by the responder), or was itself placed whole (its data is in for
// the same reason; only a WRITE without immediate is placed, which needs no
// receive, so no RNR NAK refuses it). Otherwise the WRITE takes the copying path, behind the
// rest, where the responder checks it in order: after a NAK or an RNR NAK it
// is dropped or resent with the messages before it, and never lands ahead of
// them.
// UC has no ACKs: its WQEs are acked once on the wire and leave the queue. A
// UC responder drops a bad message and goes on (no error state), so a later
// WRITE may land whatever happened to earlier ones; only the order must hold,
// so a message sent on the copying path holds back placement until the
// peer's ring has taken it.
bool Qp::MayPlaceLocked(size_t index) {
  for (size_t i = 0; i < index; ++i) {
    if (!sq_[i].acked && !sq_[i].placed) return false;
  }
  if (copy_unsettled_) {
    if (Fabric::Get().DeliveryPending(RemoteDeviceIndex(), attr_.dest_qp_num)) return false;
    copy_unsettled_ = false;
  }
  return true;
}

// The requester reads the whole answer itself, in one process_vm_readv (or a
// memcpy from its mapping of the owner's file), once the owner's QP and MR
// allow it (fabric/fabric.h), and sends one packet, answered, that takes the
// READ's PSNs at the responder. Only when nothing before it on the send queue
// is still to be answered (MayPlaceLocked): an earlier WRITE's data is in the
// owner's memory by then, as the responder would have placed it before
// reading. And only when the owner's ring takes that packet now: one that
// waited in a backlog could be dropped, and the READ would be complete at
// this end only.
bool Qp::PlaceReadLocked(SendWqe& wqe, const AddressVector& av, uint32_t dst_qpn, uint32_t mtu) {
  // (From a port that is down the READ goes as a packet, which is lost.)
  if (type() != IBV_QPT_RC || !Fabric::Get().attached() || !PortUpLocked()) return false;
  Device* dst = Engine::Get().Route(av);
  if (!dst || dst->FindQp(dst_qpn) || !Fabric::Get().PushesNow(dst->index(), dst_qpn)) return false;
  if (!PlaceIovLocked(wqe, IBV_ACCESS_LOCAL_WRITE)) return false;
  // (Who we are and the PSN we began with: the responder must be taking ours.)
  const Fabric::Connection us{Fabric::ConnectionTag(device()->index(), qp_num()), attr_.sq_psn};
  if (!Fabric::Get().PlaceRead(us, dst->index(), dst_qpn, wqe.rkey, wqe.remote_addr, wqe.length, place_iov_.data(),
                               place_iov_.size())) {
    return false;
  }
  Packet p = PlacedPacketLocked(wqe, av, dst_qpn, RequestPsns(wqe, mtu));
  p.answered = true;
  wqe.placed = true;
  wqe.acked = true;
  TransmitToPeerLocked(std::move(p));
  return true;
}

bool Qp::PlaceIovLocked(const SendWqe& wqe, unsigned access) {
  place_iov_.clear();
  try {
    place_iov_.reserve(wqe.is_inline ? 1 : wqe.sges.size());
  } catch (const std::bad_alloc&) {
    return false;  // no room for the list: the copying path
  }
  if (wqe.is_inline) {
    place_iov_.push_back(iovec{const_cast<uint8_t*>(wqe.inline_data.data()), wqe.inline_data.size()});
    return true;
  }
  for (const ibv_sge& sge : wqe.sges) {
    if (sge.length == 0) continue;
    const Mr* mr = Mr::Check(device(), sge.lkey, false, pd_, sge.addr, sge.length, access);
    place_iov_.push_back(iovec{mr->Translate(sge.addr, sge.length), sge.length});
  }
  return true;
}

Packet Qp::PlacedPacketLocked(SendWqe& wqe, const AddressVector& av, uint32_t dst_qpn, uint32_t psn_count) {
  Packet p = NewPacket(av, dst_qpn);
  p.op = wqe.opcode;
  p.psn = next_psn_;
  p.placed = true;
  p.psn_count = psn_count;
  next_psn_ = (next_psn_ + psn_count) & kPsnMask;
  wqe.last_psn = (next_psn_ - 1) & kPsnMask;
  p.remote_addr = wqe.remote_addr;
  p.rkey = wqe.rkey;
  p.dma_length = wqe.length;
  return p;
}

bool Qp::PlaceWriteLocked(SendWqe& wqe, const AddressVector& av, uint32_t dst_qpn, uint32_t mtu) {
  if (wqe.length == 0 || (type() != IBV_QPT_RC && type() != IBV_QPT_UC) || !Fabric::Get().attached() ||
      !PortUpLocked()) {
    return false;
  }
  Device* dst = Engine::Get().Route(av);
  if (!dst || dst->FindQp(dst_qpn)) return false;  // unreachable, or in this process
  if (!PlaceIovLocked(wqe, 0)) return false;
  // (Who we are and the PSN we began with: an RC responder must be taking ours.)
  const Fabric::Connection us{Fabric::ConnectionTag(device()->index(), qp_num()), attr_.sq_psn};
  if (!Fabric::Get().PlaceWrite(us, dst->index(), dst_qpn, type(), wqe.rkey, wqe.remote_addr, wqe.length,
                                place_iov_.data(), place_iov_.size(), wqe.length <= mtu)) {
    return false;
  }
  Packet p = PlacedPacketLocked(wqe, av, dst_qpn, static_cast<uint32_t>((wqe.length + mtu - 1) / mtu));
  wqe.placed = true;
  // A WRITE that the peer can take now (no backlog to wait in, where it
  // could be dropped) has nothing left to be answered: complete it here, and
  // spare the peer's CPU the ACK (Packet::answered).
  const bool answered = Fabric::Get().PushesNow(dst->index(), dst_qpn);
  p.answered = answered;
  TransmitToPeerLocked(std::move(p));
  // Unreliable transports complete a WR once it is on the wire.
  if (!Reliable() || answered) wqe.acked = true;
  return true;
}

// The responder reads the SEND's (or WRITE with immediate's) bytes itself, in
// PSN order, when it takes the packet (Qp::PullSendLocked, PullWriteLocked;
// fabric/fabric.h), so nothing in front of it needs to be answered first. Our buffer must stay as it is until then: the
// program may not touch it before the SEND completes (ibv_post_send(3)), and
// a flush withdraws the epoch the packet carries first (SetStateLocked). Not
// a SEND that went out in packets before: its responder may hold part of it.
bool Qp::SendPulledLocked(SendWqe& wqe, const uint8_t* whole, uint32_t mtu) {
  const bool write = wqe.opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
  if ((wqe.opcode != IBV_WR_SEND && wqe.opcode != IBV_WR_SEND_WITH_IMM && !write) || type() != IBV_QPT_RC ||
      wqe.is_inline ||
      !whole || wqe.length > kMaxPulledSendBytes || pull_epoch_ == 0 || wqe.sent_in_packets ||
      !PeerPullsSendsLocked()) {
    return false;
  }
  const AddressVector av = DestinationOf(wqe);
  // Not placed (MayPlaceLocked): its bytes are still ours to read.
  Packet p = PlacedPacketLocked(wqe, av, attr_.dest_qp_num, static_cast<uint32_t>((wqe.length + mtu - 1) / mtu));
  wqe.pulled = true;
  // Where to read it, and under which epoch (Packet::placed).
  if (write) {
    p.compare_add = reinterpret_cast<uintptr_t>(whole);
    p.swap = pull_epoch_;
  } else {
    p.remote_addr = reinterpret_cast<uintptr_t>(whole);
    p.rkey = pull_epoch_;
  }
  p.solicited = wqe.solicited;
  p.imm_data = wqe.imm_data;
  TransmitToPeerLocked(std::move(p));
  return true;
}

bool Qp::PeerPullsSendsLocked() const {
  if (!Fabric::Get().attached()) return false;
  Device* dst = Engine::Get().Route(AddressVector::From(attr_.ah_attr));
  return dst && !dst->FindQp(attr_.dest_qp_num) && Fabric::Get().PullsSends(dst->index(), attr_.dest_qp_num);
}

void Qp::GatherLocked(const SendWqe& wqe, uint64_t offset, uint64_t length, uint8_t* out) const {
  if (length == 0) return;
  if (wqe.is_inline) {
    CopyBytes(out, wqe.inline_data.data() + offset, length);
    return;
  }
  uint64_t pos = 0;  // where the current SGE starts in the message
  for (const ibv_sge& sge : wqe.sges) {
    const uint64_t start = std::max(offset, pos);
    const uint64_t end = std::min(offset + length, pos + sge.length);
    if (start < end) {
      // Checked by ExecuteLocked, under the same lock.
      const Mr* mr = Mr::Check(device(), sge.lkey, false, pd_, sge.addr, sge.length, 0);
      CopyBytes(out + (start - offset), mr->Translate(sge.addr + (start - pos), end - start), end - start);
    }
    pos += sge.length;
    if (pos >= offset + length) break;
  }
}

const uint8_t* Qp::ContiguousLocked(const SendWqe& wqe, uint64_t offset, uint64_t length) const {
  if (length == 0) return nullptr;
  if (wqe.is_inline) return wqe.inline_data.data() + offset;
  uint64_t pos = 0;  // where the current SGE starts in the message
  for (const ibv_sge& sge : wqe.sges) {
    if (offset >= pos && offset + length <= pos + sge.length) {
      // Checked by ExecuteLocked, under the same lock.
      const Mr* mr = Mr::Check(device(), sge.lkey, false, pd_, sge.addr, sge.length, 0);
      return mr->Translate(sge.addr + (offset - pos), length);
    }
    pos += sge.length;
    if (pos > offset) return nullptr;  // the range spans SGEs
  }
  return nullptr;
}

bool Qp::ScatterLocked(const SendWqe& wqe, uint64_t offset, const uint8_t* bytes, uint64_t length) {
  uint64_t pos = 0;  // where the current SGE starts in the message
  for (const ibv_sge& sge : wqe.sges) {
    const uint64_t start = std::max(offset, pos);
    const uint64_t end = std::min(offset + length, pos + sge.length);
    if (start < end) {
      Mr* mr = Mr::Check(device(), sge.lkey, false, pd_, sge.addr, sge.length, IBV_ACCESS_LOCAL_WRITE);
      if (!mr) return false;
      // memmove: a READ's answer within one process comes straight from the
      // responder's memory, which may overlap these buffers.
      MoveBytes(mr->Translate(sge.addr + (start - pos), end - start), bytes + (start - offset), end - start);
    }
    pos += sge.length;
    if (pos >= offset + length) break;
  }
  return true;
}

void Qp::ReceiveResponse(const Packet& pkt) {
  if (state() != IBV_QPS_RTS && state() != IBV_QPS_SQD) return;
  // The oldest transmitted WQE not yet acknowledged is the one being answered.
  size_t i = OldestUnansweredLocked();
  if (i >= next_to_send_) return;  // a duplicate answer
  const size_t oldest = i;
  if (pkt.kind == Packet::Kind::kReadResponse || pkt.kind == Packet::Kind::kAtomicAck ||
      pkt.kind == Packet::Kind::kNak) {
    // A response, or a NAK, acknowledges implicitly the requests before its
    // PSN whose ACK has not come (IBTA 9.7.5.1.3; a NAK names the first PSN
    // the responder did not take): they are done. The NAK is for the message
    // of its PSN, not for one whose ACK was lost.
    while (i < next_to_send_ && sq_[i].opcode != IBV_WR_RDMA_READ && !IsAtomic(sq_[i].opcode) &&
           ((pkt.psn - sq_[i].last_psn - 1) & kPsnMask) < kPsnMask / 2) {
      sq_[i].acked = true;
      while (i < next_to_send_ && sq_[i].acked) ++i;
    }
    if (i >= next_to_send_) {
      if (i > oldest) AnsweredLocked(true);
      return;
    }
  }
  SendWqe& wqe = sq_[i];
  // A NAK for a message completed already is stale: an answered WRITE
  // (Packet::answered) that its responder refused after all, because the
  // responder QP changed between our checks and its turn.
  if (pkt.kind == Packet::Kind::kNak && pkt.nak != Packet::Nak::kSequence &&
      ((pkt.psn - wqe.first_psn) & kPsnMask) > kPsnMask / 2) {
    return;
  }
  // An atomic ACK answers the atomic of its PSN only: a late duplicate of an
  // earlier one's (its result replayed after a resend) completes nothing.
  if (pkt.kind == Packet::Kind::kAtomicAck && (!IsAtomic(wqe.opcode) || pkt.psn != wqe.first_psn)) return;
  // An answer shows the path works, but a sequence NAK is itself a retry,
  // and an ACK that acknowledges nothing new (a duplicate's) is no progress:
  // a message it cannot complete (an atomic whose result was lost) would
  // otherwise be resent for ever.
  const bool sequence_nak = pkt.kind == Packet::Kind::kNak && pkt.nak == Packet::Nak::kSequence;
  if (!sequence_nak && pkt.kind != Packet::Kind::kAck) retries_left_ = attr_.retry_cnt;
  switch (pkt.kind) {
    case Packet::Kind::kAck: {
      // A positive ACK covers every message up to its PSN (but not READs and
      // atomics, which complete with their own responses).
      const uint32_t psn = pkt.psn;
      for (; i < next_to_send_; ++i) {
        SendWqe& w = sq_[i];
        if (w.acked) continue;
        if (w.opcode == IBV_WR_RDMA_READ || IsAtomic(w.opcode)) break;
        if (((psn - w.last_psn) & kPsnMask) > kPsnMask / 2) break;  // w.last_psn is after psn
        w.acked = true;
        retries_left_ = attr_.retry_cnt;
      }
      rnr_retries_left_ = attr_.rnr_retry;
      break;
    }
    case Packet::Kind::kReadResponse: {
      // Only the next response packet of this READ is taken: a duplicate
      // (the answer to a resent READ) or one after a lost packet is dropped,
      // and the retry timer asks again for what is missing.
      if (pkt.psn != ((wqe.first_psn + wqe.read_packets) & kPsnMask)) return;
      const uint64_t length = pkt.payload.size();
      if (length > wqe.length - wqe.read_offset || (pkt.last && wqe.read_offset + length != wqe.length)) {
        return;  // not this READ's response (no such packet comes from a responder of this message)
      }
      if (!ScatterLocked(wqe, wqe.read_offset, pkt.payload.data(), length)) {
        FailSendLocked(wqe, IBV_WC_LOC_PROT_ERR);
        return;
      }
      wqe.read_offset += length;
      ++wqe.read_packets;
      // Progress resets the RNR count too, as a positive ACK does (rxe:
      // reset_retry_counters on every good ACK, read response or atomic ACK).
      rnr_retries_left_ = attr_.rnr_retry;
      if (!pkt.last) return;
      wqe.acked = true;
      break;
    }
    case Packet::Kind::kAtomicAck: {
      if (!ScatterLocked(wqe, 0, reinterpret_cast<const uint8_t*>(&pkt.atomic_orig), sizeof pkt.atomic_orig)) {
        FailSendLocked(wqe, IBV_WC_LOC_PROT_ERR);
        return;
      }
      rnr_retries_left_ = attr_.rnr_retry;
      wqe.acked = true;
      break;
    }
    case Packet::Kind::kNak:
      switch (pkt.nak) {
        case Packet::Nak::kRnr:
          if (rnr_retries_left_ > 0) {
            if (rnr_retries_left_ != 7) --rnr_retries_left_;  // 7 means retry forever
            RewindLocked(i);
            rnr_wait_ = true;
            Engine::Get().ArmTimer(this, std::chrono::microseconds(kRnrTimerUs[pkt.imm_data & 31]),
                                   device()->behaviour().time_scale);
            return;
          }
          FailSendLocked(wqe, IBV_WC_RNR_RETRY_EXC_ERR);
          return;
        case Packet::Nak::kSequence:
          // IBTA ch. 9: the requester resends from the NAKed PSN, counting a
          // retry (as rxe's completer does): PSNs the responder never expects
          // end in RETRY_EXC_ERR instead of being resent forever. Not a pulled
          // SEND whose responder could not read it (the kernel refused:
          // fabric/fabric.h), which it stopped taking pulls for before it
          // NAKed: that one is sent again through the rings.
          if (!wqe.pulled || PeerPullsSendsLocked()) {
            if (retries_left_ <= 0) {
              FailSendLocked(wqe, IBV_WC_RETRY_EXC_ERR);
              return;
            }
            --retries_left_;
          }
          RewindLocked(i);
          Engine::Get().CancelTimer(this);  // the resend starts the timer afresh
          ProgressLocked();
          return;
        case Packet::Nak::kInvalidRequest:
          FailSendLocked(wqe, IBV_WC_REM_INV_REQ_ERR);
          return;
        case Packet::Nak::kRemoteAccess:
          FailSendLocked(wqe, IBV_WC_REM_ACCESS_ERR);
          return;
        case Packet::Nak::kRemoteOperational:
        case Packet::Nak::kNone:
        case Packet::Nak::kCqOverrun:  // (not sent to a requester)
        case Packet::Nak::kCqErrored:
          FailSendLocked(wqe, IBV_WC_REM_OP_ERR);
          return;
      }
      return;
    case Packet::Kind::kRequest:
    case Packet::Kind::kXrcForward:
    case Packet::Kind::kXrcResult:
      return;
  }
  AnsweredLocked(sq_[oldest].acked);
}

void Qp::AnsweredLocked(bool progressed) {
  // The oldest message it answered is done (`progressed`): the timer starts
  // again for the rest.
  CompleteAckedLocked();
  if (!executing_) RetireLocked();
  if (!AwaitingAckLocked()) {
    Engine::Get().CancelTimer(this);
    CheckDrainedLocked();
  } else if (progressed) {
    ArmTransportTimerLocked(true);
  }
  // A fenced WQE may have waited for this answer (FenceWaitsLocked).
  if (!executing_ && !destroying_ && next_to_send_ < sq_.size() && sq_[next_to_send_].fence) ProgressLocked();
}

bool Qp::ReceiveWholeReadResponseLocked(ibv_qp_type transport, uint32_t psn, const uint8_t* bytes, uint32_t length) {
  // ReceiveResponse's case of a response that is the whole answer to the
  // oldest unanswered WQE, a READ, the next packet it waits for: nothing
  // before it is acknowledged on the way.
  if (destroying_ || type() != IBV_QPT_RC || transport != IBV_QPT_RC) return false;
  if (state() != IBV_QPS_RTS && state() != IBV_QPS_SQD) return false;
  const size_t i = OldestUnansweredLocked();
  if (i >= next_to_send_) return false;
  SendWqe& wqe = sq_[i];
  if (wqe.opcode != IBV_WR_RDMA_READ || wqe.read_packets != 0 || psn != wqe.first_psn ||
      length != wqe.length - wqe.read_offset) {
    return false;
  }
  // Written before anything else changes: one that does not take the bytes
  // goes the other way, which writes the same bytes and fails the same way.
  if (!ScatterLocked(wqe, wqe.read_offset, bytes, length)) return false;
  retries_left_ = attr_.retry_cnt;
  rnr_retries_left_ = attr_.rnr_retry;
  wqe.read_offset += length;
  ++wqe.read_packets;
  wqe.acked = true;
  AnsweredLocked(true);
  return true;
}

// SQD: once nothing sent is still unanswered, the send queue has drained.
void Qp::CheckDrainedLocked() {
  if (state() != IBV_QPS_SQD || !attr_.sq_draining || AwaitingAckLocked()) return;
  attr_.sq_draining = 0;
  if (attr_.en_sqd_async_notify || device()->behaviour().sq_drained_always) RaiseAsyncLocked(IBV_EVENT_SQ_DRAINED);
}

// Resend from sq_[index]: go-back-N from the first unacknowledged message.
void Qp::RewindLocked(size_t index) {
  next_to_send_ = index;
  next_psn_ = sq_[index].first_psn;
  for (size_t i = index; i < sq_.size(); ++i) {
    sq_[i].transmitted = false;
    sq_[i].placed = false;
  }
}

bool Qp::TimerStillDue() const {
  return (state() == IBV_QPS_RTS || state() == IBV_QPS_SQD) && (rnr_wait_ || AwaitingAckLocked());
}

void Qp::OnTimer() {
  if (state() != IBV_QPS_RTS && state() != IBV_QPS_SQD) return;
  size_t i = 0;
  while (i < sq_.size() && sq_[i].acked) ++i;
  if (i >= sq_.size()) return;
  if (rnr_wait_) {
    rnr_wait_ = false;  // the RNR timer: send again from the NAKed message
  } else if (i < next_to_send_) {
    // Still in a live peer's ring: the wire is slow, nothing was lost yet.
    if (Fabric::Get().DeliveryPending(RemoteDeviceIndex(), attr_.dest_qp_num)) {
      Engine::Get().ArmTimer(this, TransportTimeout(attr_.timeout), device()->behaviour().time_scale);
      return;
    }
    // Transport timeout: nothing answered the oldest outstanding message.
    if (retries_left_ <= 0) {
      FailSendLocked(sq_[i], IBV_WC_RETRY_EXC_ERR);
      return;
    }
    --retries_left_;
  }
  RewindLocked(i);
  ProgressLocked();
}

void Qp::CompleteAckedLocked() {
  for (SendWqe& wqe : sq_) {
    if (!wqe.acked) {
      // Every WQE before it has completed: a deferred local error's turn.
      if (wqe.deferred != IBV_WC_SUCCESS) {
        const ibv_wc_status status = wqe.deferred;
        wqe.deferred = IBV_WC_SUCCESS;
        FailSendLocked(wqe, status);
      }
      return;
    }
    if (wqe.completed) continue;
    wqe.completed = true;
    if (!wqe.signaled) continue;
    ibv_wc wc{};
    wc.wr_id = wqe.wr_id;
    wc.status = IBV_WC_SUCCESS;
    wc.opcode = WcOpcode(wqe.opcode);
    // The sender's completion says it carried an immediate too (rxe_comp.c
    // make_send_cqe, mlx5 handle_good_req); imm_data stays 0 there.
    if (wqe.opcode == IBV_WR_SEND_WITH_IMM || wqe.opcode == IBV_WR_RDMA_WRITE_WITH_IMM) wc.wc_flags = IBV_WC_WITH_IMM;
    wc.byte_len = static_cast<uint32_t>(wqe.length);
    wc.qp_num = qp_num();
    if (!PushSendCompletion(wqe, wc)) return;
  }
}

// A local error is found when the WQE executes, but a WQE before it may
// still wait for its ACK or response: completions of a send queue come in
// posting order, so the error then waits until the ones before it complete
// (as rxe's completer does), and nothing after it is sent meanwhile.
void Qp::FailLocalLocked(size_t index, ibv_wc_status status) {
  for (size_t i = 0; i < index; ++i) {
    if (!sq_[i].acked) {
      sq_[index].deferred = status;
      sq_[index].started = false;
      next_to_send_ = index;  // not sent: ProgressLocked stops here
      return;
    }
  }
  FailSendLocked(sq_[index], status);
}

// The WQE fails with `status`: its error completion is always generated (IBA
// 10.7.3.1, even if unsignaled); RC moves to ERR and flushes the rest, UC/UD
// move to SQE, whose later WRs are flushed too (or to ERR: the profile's
// unreliable_send_error).
void Qp::FailSendLocked(SendWqe& wqe, ibv_wc_status status) {
  if (wqe.completed) return;
  // A completion that overruns the CQ may take the QP to ERR, which retires
  // WQEs: `wqe` (and the caller's loop over sq_) must outlive that.
  const bool outer = !executing_;
  executing_ = true;
  FailSendHeldLocked(wqe, status);
  executing_ = !outer;
  if (outer) RetireLocked();
}

// Requires: engine lock, executing_ set (sq_ does not shrink).
void Qp::FailSendHeldLocked(SendWqe& wqe, ibv_wc_status status) {
  CompleteAckedLocked();  // earlier successes complete first
  if (wqe.completed) return;  // flushed meanwhile
  wqe.acked = true;
  wqe.completed = true;
  wqe.status = status;
  ibv_wc wc{};
  wc.wr_id = wqe.wr_id;
  wc.status = status;
  wc.qp_num = qp_num();
  // The program may reuse the buffers of every SEND once it polls this
  // error (the QP goes to ERR next): none may be pulled from then on.
  WithdrawPullsLocked();
  if (!PushSendCompletion(wqe, wc)) return;
  Engine::Get().CancelTimer(this);
  if (status == IBV_WC_WR_FLUSH_ERR) return;
  if (Reliable() || device()->behaviour().unreliable_send_error_to_err) {
    EnterErrorLocked(-1);
  } else {
    EnterSqeLocked();
  }
}

void Qp::EnterSqeLocked() {
  SetStateLocked(IBV_QPS_SQE);
  const bool outer = !executing_;
  executing_ = true;  // nothing retires under the loop
  for (SendWqe& w : sq_) {
    if (!w.acked) FailSendLocked(w, IBV_WC_WR_FLUSH_ERR);
  }
  executing_ = !outer;
}

// Drops finished WQEs from the head of the send queue (they no longer count
// against max_send_wr).
void Qp::RetireLocked() {
  while (!sq_.empty() && sq_.front().completed) {
    sq_.pop_front();
    if (next_to_send_ > 0) --next_to_send_;
  }
}

}  // namespace simverbs
