#pragma once

// A queue pair: its state machine (qp.cc, the transition table is in
// qp_state_table.cc), its requester and completer (qp_requester.cc) and its
// responder (qp_responder.cc).
//
// Every QP state change and every work queue operation happens under the
// engine lock (transport/engine.h), which orders the data path. Lock order:
// Engine::mu_ → Cq::mu_ → EventQueue::mu_.
//
// Entering ERR (EnterErrorLocked) flushes: every outstanding send WR (signaled
// or not) and every posted receive completes with IBV_WC_WR_FLUSH_ERR, in
// posting order, and so does every WR posted afterwards.
//
// XRC (qp_xrc.cc): an XRC_SEND QP is an RC requester whose messages name
// the remote XRC SRQ; an XRC_RECV QP is an RC responder with no queues of its
// own that delivers each message into the XRC SRQ its packets name, with
// that SRQ's PD and CQ.
//
// Destroy follows libibverbs: it returns when every async event that was
// read for this QP has been acked (affiliated_events.h).

#include <sys/uio.h>

#include <infiniband/verbs.h>

#include <array>
#include <atomic>
#include <vector>

#include "affiliated_events.h"
#include "cq_slot_release.h"
#include "fabric/peer_route.h"
#include "fabric/wire_line.h"
#include "fork_generation.h"
#include "handle.h"
#include "qp_wr_builder.h"
#include "result.h"
#include "ring_queue.h"
#include "transport/packet.h"
#include "transport/timer_entry.h"
#include "wqe.h"

namespace simverbs {

class Context;
class Cq;
class Device;
class Mr;
class Pd;
class Srq;
class Xrcd;

class Qp {
 public:
  static constexpr uint64_t kMagic = 0x53494d5150000001;  // "SIMQP"
  // A READ this long from a QP of another process is read by the requester
  // itself when it can (PlaceReadLocked): one system call (or a memcpy from a
  // mapped file) instead of two copies through the ring per path-MTU packet.
  // Not a shorter one: a READ of 64 KiB (ib_read_bw's default) was no faster
  // so, by what could be measured here, and would cost a system call, which
  // the ring does not; from 256 KiB on it was 1.6-2x as fast, and the call is
  // under 1% of its copy.
  static constexpr uint64_t kMinPlacedReadBytes = 256 * 1024;
  // An RC SEND (or WRITE with immediate) this long to a QP of another
  // process is pulled by the responder when it can (SendPulledLocked,
  // PullSendLocked): one system call that copies the bytes from our buffer
  // into the receive (or the MR), instead of two copies through the ring per
  // path-MTU packet.
  static constexpr uint64_t kMinPulledSendBytes = 16 * 1024;
  // The most one process_vm_readv reads (Linux's MAX_RW_COUNT): a longer
  // SEND goes through the ring.
  static constexpr uint64_t kMaxPulledSendBytes = 0x7ffff000;

  static Result<Qp*> Create(Pd* pd, const ibv_qp_init_attr_ex& attr);
  int Destroy();
  int Modify(const ibv_qp_attr& attr, int mask);
  int Query(ibv_qp_attr* attr, int mask, ibv_qp_init_attr* init) const;
  // What ibv_create_qp(_ex) writes back into the cap the program asked for:
  // the actual capabilities, but the WR counts as asked where the queues are
  // rounded up (qp_size pow2-1, as rxe 6.1).
  ibv_qp_cap CreatedCaps(const ibv_qp_cap& asked) const;
  // ibv_post_send posts the WRs before a refused one (kUpToTheBadWr);
  // ibv_wr_complete posts every WR or none (kAllOrNothing, ibv_wr_post(3)).
  enum class PostMode { kUpToTheBadWr, kAllOrNothing };
  int PostSend(ibv_send_wr* wr, ibv_send_wr** bad_wr, PostMode mode = PostMode::kUpToTheBadWr);
  int PostRecv(ibv_recv_wr* wr, ibv_recv_wr** bad_wr);
  int AttachMulticast(const ibv_gid& gid, uint16_t lid);
  int DetachMulticast(const ibv_gid& gid, uint16_t lid);

  static Qp* From(const ibv_qp* qp) { return Handle<ibv_qp_ex, Qp>::From(qp); }
  ibv_qp* ibv() { return &handle_.pub.qp_base; }
  ibv_qp_ex* ibv_ex() { return &handle_.pub; }
  bool has_qp_ex() const { return has_qp_ex_; }
  QpWrBuilder& wr_builder() { return wr_builder_; }
  Context* context() const { return ctx_; }
  Device* device() const;
  uint32_t qp_num() const { return handle_.pub.qp_base.qp_num; }
  // Made before a fork() by the parent: this process's copy answers for nothing (fork_generation.h).
  bool Inherited() const { return fork_generation_ != ForkGeneration(); }
  // The QP's port is up (one not set yet counts as up). Requires: engine lock.
  bool PortUpLocked() const;
  // Its unpolled completions leave its CQs where the profile says so
  // (reset_completions: at RESET and at ibv_destroy_qp). Requires: engine lock.
  void DiscardCompletionsLocked();
  // The QP is on an InfiniBand port: its own once it has one (INIT and
  // after), else every port of the device is (is_valid_mcast_lid). Requires: engine lock.
  bool OnInfinibandLocked() const;
  ibv_qp_type type() const { return handle_.pub.qp_base.qp_type; }
  // RC and both XRC halves: acknowledged, retried, in order.
  bool Reliable() const { return type() == IBV_QPT_RC || IsXrc(); }
  bool IsXrc() const { return type() == IBV_QPT_XRC_SEND || type() == IBV_QPT_XRC_RECV; }
  // The state on the HCA. Requires: engine lock. (ibv_qp::state is what the
  // program last set or queried, as libibverbs keeps it.)
  ibv_qp_state state() const { return attr_.qp_state; }
  Cq* send_cq() const { return send_cq_; }
  Cq* recv_cq() const { return recv_cq_; }
  Srq* srq() const { return srq_; }

  // A completion of this QP, polled (or lost): a send completion frees the
  // send queue slots of the WQEs up to the one with seq `through`
  // (SendWqe::seq), a receive completion its slot of the receive queue or
  // SRQ (the profile's send_queue_release and receive_queue_release, poll).
  // Any thread that polls, under the CQ's lock.
  void FreeSlots(const CqSlotRelease& release);

  // Raises an async event affiliated with this QP (counted for destroy).
  void RaiseAsync(ibv_event_type type);
  // Requires: engine lock held.
  void RaiseAsyncLocked(ibv_event_type type);

  // Control API. The nth send WR posted from now on (1 = the next) completes
  // with `status` instead of executing, with the consequences of a real error
  // of that kind (RC to ERR, UC/UD to SQE). EINVAL for nth 0 or SUCCESS.
  int FailNthSend(uint32_t nth, ibv_wc_status status);
  // Control API: the HCA moves the QP to ERR (with IBV_EVENT_QP_FATAL) or, for
  // UC and UD in RTS, to SQE (flushing the send queue). EINVAL otherwise.
  int InjectState(ibv_qp_state state);
  int FailNthSendLocked(uint32_t nth, ibv_wc_status status);  // Requires: engine lock
  int InjectStateLocked(ibv_qp_state state);                   // Requires: engine lock

  // Takes the QP off the wire: packets to it are lost, its timer and its
  // multicast groups are gone (a fatal device, a closed context). Requires:
  // engine lock.
  void LeaveWireLocked();
  // Its context was closed with the QP alive: ibv_close_device(3) leaves its
  // memory to the program, but the kernel destroys the QP, so it leaves the
  // wire for good, frees its number and raises nothing more. Requires: engine lock.
  void OrphanLocked();
  // The QP is going (destroyed, or its context closed): its number is free
  // again, and its type 2 windows are told. Requires: engine lock.
  void ReleaseQpNumberLocked();

  // Requires: engine lock held. Moves the QP to ERR and flushes it; raises
  // `event` (e.g. IBV_EVENT_QP_FATAL) unless it is negative.
  void EnterErrorLocked(int event);

  // The transport. Requires: engine lock held.
  void Receive(const Packet& pkt);  // a packet addressed to this QP
  // A one-packet SEND from another process's ring (Fabric::DrainInboundLocked),
  // taken as Receive takes its Packet when it is the in-order request of a
  // connected RC QP with a receive of its own posted: true. False, with
  // nothing done, for anything else: Receive takes the Packet then.
  // Requires: engine lock, inside a burst (Engine::BeginBurst).
  bool ReceiveWholeSendLocked(const WholeSend& send);
  // The same for a READ request (Fabric::DrainInboundLocked) that is the
  // in-order request of an RC QP that may be read, whose answer fits in one
  // packet and whose memory passes the check: answered as Receive answers
  // its Packet.
  bool ReceiveWholeReadLocked(const WholeRead& read);
  // The same for a one-packet READ response (`length` bytes of `bytes`) of
  // an RC QP, when it answers the oldest unanswered WQE, a READ of that
  // length with `psn` its first PSN: taken as ReceiveResponse takes its
  // Packet.
  bool ReceiveWholeReadResponseLocked(ibv_qp_type transport, uint32_t psn, const uint8_t* bytes, uint32_t length);
  void OnTimer();                   // its retransmit or RNR timer fired
  // The link to a process it holds requests for takes packets again
  // (Fabric::RequestMayGo): sends what waits.
  void ResumeSendLocked();
  // False if, after draining answers, the QP no longer waits for anything.
  bool TimerStillDue() const;
  // Sends the ACK held back during a burst (Engine::DeferAck), if any.
  void SendDeferredAckLocked();
  // Sends a positive ACK of `psn` for a request of `op`. Requires: engine lock.
  void SendAckLocked(ibv_wr_opcode op, uint32_t psn);
  // Sends the whole answer to a READ of `psn` that fits in one packet:
  // `length` bytes of `bytes` (checked by the caller). Requires: engine lock.
  void SendOneReadResponseLocked(uint32_t psn, const uint8_t* bytes, uint32_t length);
  // This QP's place among the engine's armed timers (Engine::ArmTimer).
  TimerEntry& timer_entry() { return timer_entry_; }

  // An XRC SRQ is being destroyed: an XRC_RECV QP that delivered into it
  // forgets it. Requires: engine lock.
  void ForgetXrcSrqLocked(Srq* srq);
  // XRC_RECV: the process that owns the XRC SRQ of a forwarded message has
  // delivered it, or not (xrc_remote.h). Requires: engine lock.
  void XrcResultLocked(const Packet& result);

  static ibv_qp* CreateExOp(ibv_context* ctx, ibv_qp_init_attr_ex* attr);
  static int PostSendOp(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr);
  // Why `wr` cannot be posted behind `queued` WRs (EINVAL, ENOMEM), or 0.
  int SendRefusalLocked(const ibv_send_wr& wr, size_t queued) const;
  static int PostRecvOp(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr);

 private:
  Qp(Context* ctx, Pd* pd, Cq* send_cq, Cq* recv_cq, Srq* srq, const ibv_qp_init_attr_ex& attr, uint32_t qp_num);
  ~Qp();
  int CheckValues(const ibv_qp_attr& attr, int mask) const;
  // 0 when an address (primary or alternate path) is usable from port
  // `port_num` (attributes `port`), else the errno: EINVAL, or ENODATA for a
  // source GID entry that is empty.
  int AddressError(const ibv_ah_attr& ah, int port_num, const ibv_port_attr& port) const;
  // Every state change goes through here (traced). Requires: engine lock.
  void SetStateLocked(ibv_qp_state next);
  // Publishes what peers check of this QP in its state (Fabric::PublishQpLocked).
  void PublishAcceptsLocked();
  // Our responder may pull no more of our SENDs (Fabric::RevokePullsLocked):
  // before the program may see any of them fail or flush. Requires: engine lock.
  void WithdrawPullsLocked();

  // qp_requester.cc
  int CheckSendWr(const ibv_send_wr& wr) const;
  // The WQE of a checked WR. May throw std::bad_alloc (PostSend: ENOMEM).
  // Fills *out (a reused queue slot) from `wr`.
  void MakeSendWqe(const ibv_send_wr& wr, SendWqe* out) const;
  void ProgressLocked();                    // executes queued WQEs while in RTS
  // PostSend of one WR that is a one-packet SEND (or SEND with immediate) or
  // a READ, of one SGE, of an RC QP in RTS with nothing left to send before
  // it, to a peer in another process: checked, queued and sent in one pass,
  // as PostSend, ProgressLocked and ExecuteLocked would. False: nothing was
  // done; the general path goes on.
  bool PostOneSendLocked(const ibv_send_wr& wr);
  // A send WQE whose packets must wait: the link to the destination's
  // process holds packets back (Fabric::RequestMayGo, which resumes us).
  bool LinkHoldsLocked(const SendWqe& wqe);
  // The send WQE at `index` has IBV_SEND_FENCE and an RDMA READ or atomic
  // before it is not answered yet: it waits (ibv_post_send(3)).
  bool FenceWaitsLocked(size_t index) const;
  // RC with messages awaiting their answer: arms the transport timer if it
  // is not running, or (`restart`) from now. Otherwise does nothing.
  void ArmTransportTimerLocked(bool restart);
  void ExecuteLocked(size_t index);         // makes and transmits the packets of sq_[index]
  // ExecuteLocked's less common cases, out of line: the frame they need is
  // not paid by every one-packet SEND. A READ or atomic request; a SEND or
  // WRITE made into Packets (`whole`: its bytes in one piece, or nullptr).
  [[gnu::noinline]] void SendReadOrAtomicLocked(SendWqe& wqe, uint32_t mtu);
  [[gnu::noinline]] void SendMessageLocked(SendWqe& wqe, uint32_t mtu, const uint8_t* whole, bool one_packet_send,
                                           ibv_qp_state sending_state);
  // A one-packet SEND written from the QP's line (fabric/wire_line.h): true
  // once it is in the peer's ring, with its PSN taken; false: nothing was sent.
  bool SendFromLineLocked(const WirePacket::Line& line, SendWqe& wqe, const uint8_t* bytes);
  // The same for a READ request (of an RC QP; false for any other WQE).
  bool SendReadFromLineLocked(SendWqe& wqe, uint32_t mtu);
  // Where a WQE's packets go: the AH of a UD WR, the QP's own path otherwise.
  AddressVector DestinationOf(const SendWqe& wqe) const;
  uint32_t DestinationQpnOf(const SendWqe& wqe) const;
  // Sends a packet of the QP's connection (a request, or an answer to the
  // peer's): straight to the peer's ring when the connection leads to another
  // process (peer_route_), else Engine::Transmit.
  void TransmitToPeerLocked(Packet&& p);
  bool AwaitingAckLocked() const;
  // In a state whose responder takes and answers requests (RTR, RTS, SQD, SQE).
  bool RespondsLocked() const;
  void CheckDrainedLocked();
  // ReceiveResponse's end: completes and retires what is answered, and stops
  // the transport timer or (`progressed`: the oldest unanswered message was
  // answered) starts it again for the rest.
  // The index of the oldest transmitted WQE not yet answered (acked), or
  // next_to_send_ when there is none: the one a response answers.
  size_t OldestUnansweredLocked() const;
  void AnsweredLocked(bool progressed);
  void ReceiveResponse(const Packet& pkt);  // ACK, NAK, READ response, atomic ACK
  void CompleteAckedLocked();               // CQEs for acked WQEs, in order
  void FailSendLocked(SendWqe& wqe, ibv_wc_status status);
  void FailSendHeldLocked(SendWqe& wqe, ibv_wc_status status);
  // sq_[index] failed locally when it was executed (bad lkey, bind error...).
  void FailLocalLocked(size_t index, ibv_wc_status status);
  void EnterSqeLocked();  // UC/UD send error: SQE, the rest of the send queue flushed
  void RetireLocked();
  void RewindLocked(size_t index);
  uint32_t PathMtuBytes() const;
  int RemoteDeviceIndex() const;  // the device the connected peer is on, or -1
  Packet NewPacket(const AddressVector& av, uint32_t dst_qpn) const;
  // A WRITE to a QP of another process, its data put straight into the
  // peer's memory and sent as one placed packet (fabric/fabric.h). False:
  // nothing was sent, take the copying path. Requires: engine lock.
  bool PlaceWriteLocked(SendWqe& wqe, const AddressVector& av, uint32_t dst_qpn, uint32_t mtu);
  // A READ of at least kMinPlacedReadBytes from a QP of another process, read
  // by the requester itself: true when it was (then it is complete).
  bool PlaceReadLocked(SendWqe& wqe, const AddressVector& av, uint32_t dst_qpn, uint32_t mtu);
  // An RC SEND or WRITE with immediate of at least kMinPulledSendBytes in
  // one piece of our memory (`whole`), to a QP of another process that pulls
  // SENDs: sent as one packet that tells the responder where to read it. False: nothing was
  // sent, take the copying path. Requires: engine lock.
  bool SendPulledLocked(SendWqe& wqe, const uint8_t* whole, uint32_t mtu);
  // The QP we send to pulls SENDs now.
  bool PeerPullsSendsLocked() const;
  // What PlaceWriteLocked and PlaceReadLocked share: where the message's
  // bytes are in our memory (the inline copy, or each SGE, which
  // ExecuteLocked checked for `access` under the same lock), into place_iov_;
  // and the placed packet that stands for the whole message, taking its
  // `psn_count` PSNs (SendPulledLocked's too; the caller marks the WQE placed
  // or pulled). PlaceIovLocked is false when there was no memory for the list
  // (nothing placed: the copying path).
  bool PlaceIovLocked(const SendWqe& wqe, unsigned access);
  Packet PlacedPacketLocked(SendWqe& wqe, const AddressVector& av, uint32_t dst_qpn, uint32_t psn_count);
  // Whether sq_[index] may be placed now: only when no earlier message can
  // still be refused or is still to be processed by the responder (see
  // qp_requester.cc). Requires: engine lock.
  bool MayPlaceLocked(size_t index);
  // Copies bytes [offset, offset + length) of the WQE's message (inline, or
  // its SGEs, already checked) to `out`. Requires: engine lock.
  void GatherLocked(const SendWqe& wqe, uint64_t offset, uint64_t length, uint8_t* out) const;
  // Where those bytes are when they lie in one piece (inline, or within one
  // SGE), or nullptr. Requires: engine lock.
  const uint8_t* ContiguousLocked(const SendWqe& wqe, uint64_t offset, uint64_t length) const;
  // Writes `length` bytes at `offset` of a READ's or atomic's local buffers;
  // false when an SGE's MR no longer allows it (local protection error).
  bool ScatterLocked(const SendWqe& wqe, uint64_t offset, const uint8_t* bytes, uint64_t length);

  // qp_xrc.cc
  static Result<Qp*> CreateXrcTarget(Context* ctx, const ibv_qp_init_attr_ex& attr);
  // CREATE_FLAGS is taken with no flag set: no create flag is supported (as rxe_create_qp).
  static bool AsksForCreateFlags(const ibv_qp_init_attr_ex& a) {
    return (a.comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && a.create_flags != 0;
  }
  // XRC_RECV: makes the SRQ named by the request (and its PD and CQ) the
  // receive side of this QP; false (after the NAK) if it is not in our domain.
  bool BindXrcSrqLocked(const Packet& pkt);
  void ForwardXrcLocked(const Packet& pkt);
  void HoldWhileForwardedLocked(const Packet& pkt);

  // qp_responder.cc
  void ReceiveRequest(const Packet& pkt);
  void ReceiveUd(const Packet& pkt);
  bool TakeRecvWqe(RecvWqe* out);
  // The message being received is dropped (UC: a lost packet, an R_Key
  // violation; RC: a pulled SEND that was withdrawn or could not be read):
  // its receive WQE was not consumed and goes back. Requires: engine lock.
  void PutBackRecvLocked();
  // A pulled SEND (Packet::placed on a SEND) that is the next in order, its
  // receive WQE taken: reads its bytes from the requester's buffer into that
  // receive (fabric/fabric.h). False: it was dropped, NAKed or failed here.
  bool PullSendLocked(const Packet& pkt);
  // The same for a pulled WRITE with immediate, its receive WQE taken and
  // its RETH checked: reads its bytes into `to` (the MR's, at the RETH).
  bool PullWriteLocked(const Packet& pkt, uint8_t* to);
  // What the two share: reads the message at `addr` (of `epoch`) into
  // `local` (`staged` into memory the program sees: Fabric::PullSend); on a
  // failure puts the receive back, and NAKs a pull the kernel refused so
  // that it is sent again through the rings.
  bool PullLocked(const Packet& pkt, uint64_t addr, uint32_t epoch, const iovec* local, size_t local_count,
                  bool staged);
  // The pulled message comes from the QP we are connected to.
  bool FromOurRequesterLocked(const Packet& pkt) const;
  void Respond(const Packet& req, Packet::Kind kind, Packet::Nak nak = Packet::Nak::kNone);
  // The positive ACK of an accepted message: held back while the engine
  // delivers a burst (Engine::DeferAck), sent at once otherwise.
  // `last_psn`: the PSN of its last packet.
  void AcknowledgeLocked(ibv_wr_opcode op, uint32_t last_psn);
  // The answer to the atomic request `req`: `orig`, the value before it.
  void SendAtomicAckLocked(const Packet& req, uint64_t orig);
  // A duplicate atomic request: answered with the result of its execution,
  // if it is among atomic_results_.
  void ReplayAtomicLocked(const Packet& pkt);
  // What a receive completion says of the message that took the WQE.
  struct Arrival {
    ibv_wr_opcode op;
    uint32_t imm_data;
    bool solicited;
    // UD only
    uint32_t src_qpn;
    uint16_t slid;
    uint8_t sl;
    bool has_grh;
    static Arrival Of(const Packet& pkt) {
      return {pkt.op, pkt.imm_data, pkt.solicited, pkt.src_qpn, pkt.slid, pkt.dst.sl, pkt.has_grh};
    }
  };
  // `byte_len` and `arrival` count only for a successful one.
  void CompleteRecvLocked(const RecvWqe& wqe, ibv_wc_status status, ibv_wc_opcode opcode, uint64_t byte_len = 0,
                          const Arrival& arrival = {});
  int AccessErrorEvent() const;
  // The PD a receive's memory is checked against: an SRQ's receives the SRQ's
  // (or, under the profile's srq_receive_pd qp, the QP's).
  const Pd* RecvPd() const;
  void ResponderFatal(const Packet& req, ibv_wc_status recv_status, Packet::Nak nak, int event);

  // Completion into a CQ with the profile's overrun rules. Returns false if
  // the completion was lost (the QP may have gone to ERR because of it).
  // Polling the completion frees what `release` says of our queues (a lost
  // one at once: Cq::Push).
  bool PushCompletion(Cq* cq, const ibv_wc& wc, bool solicited, CqSlotRelease release = {});
  // A completion of `wqe` into the send CQ (PushCompletion, freeing the slots
  // up to it when polled under send_queue_release poll).
  bool PushSendCompletion(const SendWqe& wqe, const ibv_wc& wc);
  // The send queue slots that count against max_send_wr: WQEs not retired,
  // and under send_queue_release poll also those whose completion (or a later
  // one's) is not polled yet. Requires: engine lock.
  size_t SendSlotsInUseLocked() const;
  // The receive queue slots that count against max_recv_wr: WQEs not
  // consumed, and under receive_queue_release poll also those whose
  // completion is not polled yet. Requires: engine lock.
  size_t RecvSlotsInUseLocked() const;
  // RESET and destroy: the WQEs' completions still in the CQs free nothing of
  // the queues from now on, which start over. Requires: engine lock.
  void ForgetQueueSlotsLocked();
  // The profile's overrun rules for a completion of ours (`recv`: a receive
  // completion) that `cq` did not take: it overran `cq` with it (`overrun`),
  // or `cq` was in error already. `cq` is null when it is another process's
  // (an XRC SRQ's CQ: XrcResultLocked).
  void CompletionLostLocked(Cq* cq, bool overrun, bool recv);

  Handle<ibv_qp_ex, Qp> handle_;
  Context* ctx_;
  Pd* pd_;
  Cq* send_cq_;
  Cq* recv_cq_;
  Srq* srq_;  // XRC_RECV: the XRC SRQ of the last request (engine lock)
  Xrcd* xrcd_ = nullptr;  // XRC_RECV only
  // XRC_RECV, engine lock: a message handed to an SRQ of another process.
  bool xrc_awaiting_ = false;    // its result has not come back
  bool xrc_forwarding_ = false;  // its later packets follow it
  uint32_t xrc_first_psn_ = 0;
  uint32_t xrc_awaiting_srqn_ = 0;  // the SRQ the message went to
  const bool has_qp_ex_;
  QpWrBuilder wr_builder_;
  AffiliatedEvents events_;

  // Everything below: engine lock.
  ibv_qp_attr attr_{};  // the attributes as ibv_query_qp reports them
  ibv_qp_init_attr init_{};
  bool destroying_ = false;
  const uint32_t fork_generation_ = ForkGeneration();

  TimerEntry timer_entry_;
  std::shared_ptr<ResponseStream> spare_stream_;  // for the next READ's answer, once free
  uint32_t fail_countdown_ = 0;  // FailNthSend: posts until the failing one; 0 = none
  ibv_wc_status fail_status_ = IBV_WC_SUCCESS;

  std::vector<iovec> place_iov_;  // PlaceIovLocked's and PullSendLocked's, kept for their capacity
  // The epoch under which our responder may pull our SENDs' bytes while we
  // send (Fabric::GrantPullsLocked); 0: none.
  uint32_t pull_epoch_ = 0;
  // Responder: a pull from our requester failed (the kernel refused it):
  // its SENDs come through the rings from then on.
  bool pulls_refused_ = false;
  RingQueue<SendWqe> sq_;  // posted, not yet retired
  uint64_t sq_posted_ = 0;  // WQEs posted since creation or RESET (SendWqe::seq of the latest)
  std::atomic<uint64_t> sq_freed_{0};  // FreeSlots
  size_t next_to_send_ = 0;   // index in sq_ of the first WQE not transmitted
  uint32_t next_psn_ = 0;     // requester PSN
  int retries_left_ = 0;
  // sq_ must not shrink (inside ProgressLocked, or a loop over sq_ whose
  // completions may take the QP to ERR): RetireLocked waits for the outermost.
  bool executing_ = false;
  bool rnr_wait_ = false;   // an RNR NAK holds the SQ until the RNR timer fires
  // UC: a message went out on the copying path and may still wait in the
  // peer's ring (its WQE completed when it was sent): until that ring has
  // taken it, WRITEs are not placed.
  bool copy_unsettled_ = false;
  int rnr_retries_left_ = 0;
  PeerRoute peer_route_;  // where our packets go, when that is another process

  RingQueue<RecvWqe> rq_;
  uint64_t rq_posted_ = 0;  // receive WQEs posted since creation or RESET
  std::atomic<uint64_t> rq_freed_{0};  // their polled (or lost) completions: FreeSlots
  // Responder state of the message being received.
  uint32_t epsn_ = 0;
  // RC responder: a sequence NAK went out and the expected PSN has not come
  // since; later out-of-sequence packets are dropped without another NAK
  // (rxe_resp.c check_psn: sent_psn_nak), so one gap costs the requester one
  // retry, not one per packet behind it.
  bool sent_sequence_nak_ = false;
  // The results of the latest atomics executed (IBTA 9.7.5.1.4: a responder
  // answers a duplicate atomic with the result it sent, without executing it
  // again; the requester resends one whose answer was lost). More than any
  // max_dest_rd_atomic a profile gives.
  struct AtomicResult {
    uint32_t psn = 0;
    uint64_t orig = 0;
    bool valid = false;
  };
  std::array<AtomicResult, 16> atomic_results_{};
  size_t atomic_results_next_ = 0;
  bool ack_deferred_ = false;  // an ACK for deferred_ack_psn_ waits for the burst's end
  uint32_t deferred_ack_psn_ = 0;
  ibv_wr_opcode deferred_ack_op_ = IBV_WR_SEND;
  WireLine wire_answer_;  // our ACKs' and one-packet READ responses' line, when they go to another process
  WireLine wire_send_;  // our one-packet SENDs' and READ requests' line, likewise
  bool recv_in_progress_ = false;
  bool uc_message_ = false;  // UC: the packets of the message at epsn_ so far were taken
  bool comm_established_ = false;
  RecvWqe recv_wqe_;
  uint64_t recv_offset_ = 0;
  ibv_wr_opcode recv_op_ = IBV_WR_SEND;
  Mr* write_mr_ = nullptr;  // RDMA WRITE being received
  uint64_t write_va_ = 0;
};

}  // namespace simverbs
