#pragma once

// The fabric shared by every process that opens a simulated device.
//
// Design. Each process keeps its own QPs, CQs and MRs (sim/src); what the
// processes share is a POSIX shared-memory segment per fabric and user
// ("/simverbs-<uid>-<SIMVERBS_FABRIC>") that holds the process table, the QP
// number directory (device, QPN → owning process) and the per-device QP
// number and key counters, plus one inbound packet ring per process
// ("/simverbs-<uid>-<fabric>+p<slot>": a fabric's name has no '+'). A
// packet for a QP of another process is pushed into that process's ring; the
// owner runs the responder (or completer) logic itself, so remote memory is only ever touched by the
// process that registered it, against its own registrations. The owner
// drains its ring whenever it polls a CQ (no system call; a poll delivers at
// most kPollDrainReceives messages into receive WQEs), and a per-process
// progress thread drains it otherwise: it sleeps on a futex, and producers
// wake it (one system call) only when the owner has stopped polling — so
// perftest's sleeping bandwidth servers still answer, and busy-polling
// programs make no system calls. Posting counts as polling. An owner that
// polls, or has just found work (and may be back polling in a moment, or
// spinning on memory), is not woken at once: the producer looks again at
// each of its own next polls and wakes it only if its packet is still in the
// ring after kOwedHearPolls of them, and then kOwedWakePolls in which the
// owner neither polled nor posted, or when the producer itself is about to
// sleep or block (an owed wake). It reads nothing the owner writes per poll
// while it pushes, nor while it waits, unless the owner is slow to answer:
// every packet says how far its sender has drained its own ring
// (WireSender), so the ACK or reply to a packet settles the wake owed for
// it. A packet's payload is copied once into the ring, straight from the sender's
// registered memory (the packet borrows those bytes until then:
// transport/payload.h), and the owner delivers it from the slot (borrowing
// the slot's bytes while it holds the slot): a SEND's bytes are copied twice
// in all, into the slot and out of it into the receive buffer (a SEND of 16
// KiB or more once: one-copy SEND, below). A slot's
// cache lines are laid out so that a packet moves as few of them between
// CPUs as it can: an ACK one, a small SEND two (fabric/wire_packet.h). The
// packets an owner drains at once are acknowledged once per QP
// (Engine::BeginBurst). A connected QP's plain ACKs and one-packet SENDs to
// another process are written from the first line of an earlier one, with
// their own PSN, operation and payload (fabric/wire_line.h, PushLine): no
// Packet is made for them on the sending side. On the receiving side, such a
// SEND of an RC QP that is the next in order, with a receive posted, goes
// from the slot straight into the receive WQE and the CQE
// (TakeWholeSendLocked, Qp::ReceiveWholeSendLocked); a READ request that is
// the next in order and fits in one response is answered from the slot
// (TakeWholeReadLocked, Qp::ReceiveWholeReadLocked); and a one-packet READ
// response that answers the oldest unanswered WQE, a READ, goes straight
// into its SGEs (TakeWholeReadResponseLocked,
// Qp::ReceiveWholeReadResponseLocked); anything else is made a Packet and
// delivered.
//
// More pollers than CPUs. Each progress thread publishes whether its
// application polls in a loop (ProcSlot::app_spinning), and the CPUs it may
// run on, and counts those that poll against the CPUs they may run on
// together (two pollers pinned to one CPU each, two different ones, are not
// too many); while they outnumber them, an application's empty CQ
// polls yield the CPU every kEmptyPollsBeforeYield (PollFoundNothing), or a
// poller whose peer waits for its CPU would hold it for a whole time slice.
//
// One-copy WRITE (and READ). An MR that allows REMOTE_WRITE or REMOTE_READ
// is published in the segment's key table (indexed by the key index): owner
// slot and generation, the owner's address of its first byte, iova range,
// access and PD. Neither
// the memory's content nor its mappings change at registration (an earlier
// design re-backed the pages with shared memory, and stores that other
// threads made while the content moved were lost). The QP directory publishes what a writer needs of
// the destination QP: its PD, and whether it takes WRITEs now (RC/UC, RTR or
// later, REMOTE_WRITE). A requester whose WRITE (without immediate: one with
// immediate needs a receive, and a responder without one refuses it with an
// RNR NAK before any of its data lands, so it takes the copying path) passes
// those checks copies the
// data from its own SGEs straight into the owner's pages with one
// process_vm_writev (one copy, by the kernel, with no help from the owner's
// CPU) — or, when the program mapped the MR's pages shared from a file (a
// memfd, a tmpfs file: fabric/shared_file.h), with a memcpy into its own
// mapping of that file (fabric/file_window.h; no system call once mapped) —
// and sends one packet without payload, marked placed, that stands for
// the whole message (all its PSNs); the owner's responder runs every check
// and answer as before, minus the copy. (A WRITE that fits in one packet, to
// an owner whose progress thread spins on its ring at that moment, a stream
// to a program that does not poll (PacketRing::owner_looking), goes through
// the ring instead: no system call on either side.) A placed RDMA WRITE
// that goes straight into the owner's ring is also completed by
// the requester (Packet::answered): it consumes no receive, and the requester
// has made the responder's checks, so the responder takes its PSNs but sends
// no ACK, and the owner is not woken for it — ib_write_lat's peers spin on
// memory, not on a CQ, and need no help from each other's CPU. (If the
// responder QP changes between those checks and its turn, the WRITE has
// still completed: its data is in, as on a wire where the ACK was in flight.) The requester places only when
// nothing in front of the WRITE on its send queue can still be refused
// (Qp::PlaceWriteLocked), so no data lands for a PSN the responder did not
// accept in order. Anything that does not pass, or a peer the kernel does not
// let us write into (ptrace rules: another user, Yama, a seccomp policy) or
// that lives in another PID namespace (its pid means nothing here), takes the
// copying path, where the responder NAKs as it always did. Deregistration
// withdraws the key and waits until no writer is inside it (each process
// announces the key it is writing through: Dekker against the withdrawal), so
// nothing lands after ibv_dereg_mr returns; it waits without the engine lock,
// and for a live writer at most kRevokeWaitNs (a stopped process). The
// writer announces the QP with the key, and reads what the QP accepts only
// after that, so a QP that stops taking WRITEs (ERR, RESET, its access
// withdrawn, ibv_destroy_qp) waits in the same way (PublishQpLocked,
// ReleaseQpn): nothing lands through it once that verb returns. Memory
// windows keep the copying path.
//
// A READ of Qp::kMinPlacedReadBytes or more goes the other way: the
// requester copies the bytes from the owner's MR into its own SGEs, with one
// process_vm_readv (or a memcpy from its mapping of the owner's file), once
// the directory says the RC QP takes READs now (REMOTE_READ) and the key
// allows REMOTE_READ, and sends one packet, placed and answered, that takes
// the READ's PSNs at the responder; the READ is then complete. It announces
// the key as a writer does, so nothing is read through a key after its
// ibv_dereg_mr returns. Only when nothing before it on the send queue is
// still to be answered (Qp::PlaceReadLocked): the responder would have read
// after executing those (an atomic, a WRITE through the ring) in PSN order. It replaces two copies
// per path-MTU packet through the rings (ib_read_bw 1 MiB: 4.9 GB/s through
// the rings, 9.6 GB/s placed, here) with one; a shorter READ keeps the rings,
// which cost no system call.
//
// Why one kernel copy, by one thread. A message placed in private memory
// goes no faster than one process_vm_writev (or _readv), about a quarter of
// memcpy here. Two threads copying at once gain only into pages of
// different page tables: the kernel pins each page of the other process
// under the lock of its page table, which covers 2 MiB. Two threads writing
// 64 KiB pieces into the same 64 KiB of another process (ib_write_bw's
// pattern) made 6.1-6.9 GB/s together against 9.3-9.8 for one; halves of one
// 1 MiB READ copied by a helper thread and the poster spent a third of their
// time spinning on that lock, and gained 0-17% (WRITEs lost). Memory the
// program maps shared from a file has no such limit (a plain memcpy).
//
// One-copy SEND. An RC SEND of Qp::kMinPulledSendBytes or more, in one piece
// of the requester's memory, to a QP of another process whose directory
// entry says it pulls SENDs (kAcceptsPulls: RC, RTR or later), goes as one
// packet, marked placed, that takes all the message's PSNs and says where
// its bytes are in the requester's memory. The responder, when that packet
// is the next in order and has taken a receive WQE for it, reads the bytes
// straight into the receive with one process_vm_readv (PullSend), then
// completes the receive and ACKs as for any SEND; the requester's SEND
// completes with that ACK, so its buffer is read while the program may not
// touch it (ibv_post_send(3)). A flush must not let a SEND be read after
// the program saw it complete: the requester's QP publishes an epoch in its
// directory entry while it sends (RTS, SQD: GrantPullsLocked), the packet
// carries it, and the puller announces the QP (as a writer announces a key)
// and reads only while the epoch is still there. Entering ERR or RESET, or
// ibv_destroy_qp, withdraws the epoch and waits for a pull under way
// (RevokePullsLocked, ReleaseQpn) before the flush completions are made; a
// packet of an older epoch is dropped as lost; so is one from another QP
// than the one the responder is connected to, and one whose read fails
// otherwise (the requester's retries end it). A SEND that fails at the
// requester withdraws the epoch before its error completion is made. A
// responder the kernel does not let read the requester (ptrace rules, as for
// a WRITE) stops taking pulls and NAKs the SEND's PSN; the requester, seeing
// that, sends it again through the rings without counting a retry. A SEND
// longer than one process_vm_readv reads (Qp::kMaxPulledSendBytes) takes the
// rings. A SEND that went out in
// packets once is never pulled afterwards (its responder may hold part of
// it). It replaces two copies per path-MTU packet with one (ib_send_bw 64 KiB:
// 4.7-5.0 GB/s through the rings, 10.2-11.7 GB/s pulled, here), at the cost
// of one system call per message on the receiving side.
//
// Known limit of every one-copy path: the copy runs under the copying
// process's engine lock, so memory of the other process whose access blocks
// (pages held by userfaultfd, a file on a hung mount) holds that process's
// verbs until the fault is resolved. A stopped or slow process does not: its
// memory stays readable. (A copy outside the lock would need the QP, its
// receive and its MR held for the copy's time instead.)
//
// No daemon: the first process creates the segment and fixes the profile;
// the last one to leave removes it.
//
// Liveness. Each process holds, while attached, a lock the kernel keeps on
// one byte of the segment file (an open-file-description lock, F_OFD_SETLK:
// fabric/file_lock.h); the fabric's own lock is another byte of it. The kernel
// releases such a lock when the process exits or is killed, before it becomes
// a zombie; it names no pid, so it works across PID namespaces, and no write
// into shared memory can forge or corrupt it. Asking (F_OFD_GETLK) costs a
// system call: it is done on slow paths only. The locks are taken through a
// descriptor of the file that is never mapped (a mapping keeps the
// description it was made from, and a child of fork() inherits mappings); a
// child of fork() closes that descriptor, so it does not keep its parent
// alive. (A program
// that closes every descriptor it does not know, while attached, drops its
// lock and is taken for dead.) A dead process's slot is cleaned by
// the next process to join or leave: its ring, its directory entries, its keys
// and its shared-memory objects ("<ring>-mr+<n>") go; its peers' packets are
// lost and their retry timers report IBV_WC_RETRY_EXC_ERR. A fabric whose
// last process died is removed by the next process of the same user that
// opens a device on any fabric, or by `simverbs clean`: that nobody holds a
// lock on its file is all it asks, so garbage in the segment cannot keep it.
//
// Hostile input. Every object is created O_EXCL with mode 0600 and opened only
// after fstat shows our uid, no group/other bits and the expected size
// (fabric/shm_object.h). Another process of the same user can still write
// anything into them: every value read from shared memory is read once into a
// local, checked, then used, and every wait on another process is bounded.
//
// Backlogs are bounded: a packet that finds the peer's ring full waits in
// order in a backlog of at most kMaxBacklog packets per peer, beyond which a
// reliable one is dropped and the requester's retransmission recovers it.
// Links are lossless, so a requester does not fill the backlog: its QP (of
// any transport) holds its send queue while a backlog waits for that peer
// (RequestMayGo), as an HCA without link credits does; a UD or UC QP's send
// completions come as its packets leave. Answers (ACKs, READ responses) are
// not held. Only a peer that keeps its ring full for a switch's head-of-queue
// lifetime (a stopped process) has unreliable packets to it discarded.

#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "fabric/fabric_limits.h"
#include "fabric/file_window.h"
#include "fabric/packet_ring.h"
#include "transport/packet.h"

namespace simverbs {

struct FabricSegment;
class Qp;

// What a peer needs to write into (or read from) an MR of ours (Fabric::PublishKey).
struct PublishedKey {
  uint64_t addr = 0;  // where the MR's first byte is in our address space
  uint64_t iova = 0;
  uint64_t length = 0;
  uint32_t access = 0;
  uint64_t pd = 0;             // the PD's identity in this process
  // The file the MR's pages belong to, when the program mapped it shared
  // (fabric/shared_file.h): our descriptor of it (-1: none), its st_dev and
  // st_ino, and the file offset of the MR's first byte.
  int32_t file_fd = -1;
  uint64_t file_dev = 0;
  uint64_t file_ino = 0;
  uint64_t file_offset = 0;
};
struct FaultRequest;

// What `simverbs clean` removed (Fabric::Sweep).
struct SweepReport {
  std::vector<std::string> removed;  // /dev/shm paths
  uint64_t bytes = 0;
  std::vector<std::string> kept;     // fabrics in use: "name (N processes)", or "name (its lock is held)"
  std::vector<std::string> refused;  // objects not ours, with why
};

// What `simverbs inject` learnt from posting a fault (Fabric::PostFault).
struct FaultPost {
  std::string error;         // the fabric could not be reached, or `fill` refused
  int processes = 0;         // attached when the request was posted and still there
  int answered = 0;          // of those, how many handled it in time
  uint32_t delivered = 0;    // async events raised, over all processes
  uint32_t not_raised = 0;   // processes that own the object, whose state takes no such event
  std::string silent;        // the pids that did not answer, "123 456"
  // Attached when it was posted and gone before they answered: one that ends
  // on the event itself (rping on DEVICE_REMOVAL) may not get to count it.
  int exited = 0;
};

// The port counters of a running fabric (Fabric::ReadCounters).
struct FabricCounters {
  std::string error;         // the fabric could not be read
  std::string profile_path;  // the profile it runs, to name devices
  // [device index][port - 1]: packets dropped at transmit because the peer
  // had no room (IBTA PortXmitDiscards counts congestion discards).
  std::vector<std::vector<uint64_t>> port_xmit_discards;
};

class Fabric {
 public:
  // Every post and poll asks for it: after the first call, one load.
  static Fabric& Get() {
    Fabric* fabric = instance_.load(std::memory_order_acquire);
    return fabric ? *fabric : Make();
  }
  // The fabric, or nullptr before anything asked for it (fork_locks.cc).
  static Fabric* IfMade() { return instance_.load(std::memory_order_acquire); }
  // Held across fork() in its place in the library's lock order (fork_locks.h).
  std::mutex& attach_mutex() { return attach_mu_; }
  // `given` if not empty, else SIMVERBS_FABRIC, else "default".
  static std::string NameFromEnvironment(const std::string& given);

  // Joins the fabric named by SIMVERBS_FABRIC (default "default") with the
  // current profile. Returns an empty string, or an error for the user with
  // the errno for the verb in *err.
  std::string Attach(int* err);
  bool attached() const { return segment_ != nullptr; }
  void Detach();

  // Shared counters: QP numbers (registered as ours) and memory keys.
  uint32_t AllocQpn(int device_index);
  void ReleaseQpn(int device_index, uint32_t qpn);
  // Takes a specific free QP number for this process; false if it is in use.
  bool ClaimQpn(int device_index, uint32_t qpn);
  uint32_t AllocKeyIndex(int device_index);

  // One-copy WRITE (see the design above). Lets peers write into an MR through `rkey`; false when the key table has
  // no room at its index (the MR keeps the copying path).
  bool PublishKey(int device_index, uint32_t rkey, const PublishedKey& key);
  // Withdraws the key: no peer starts writing through it from now on.
  // Returns whether it was published.
  bool RevokeKey(int device_index, uint32_t rkey);
  // Returns once no peer is still writing through a revoked key (without the
  // engine lock: a peer that is slow to finish holds up only this caller),
  // or a live peer has been at it for kRevokeWaitNs (a stopped process).
  void WaitKeyUnused(int device_index, uint32_t rkey);
  // What a peer that places a WRITE or a READ checks of our QP: its PD, and
  // what it accepts now (0: nothing; otherwise its ibv_qp_type + 1, with
  // kAcceptsWrites and kAcceptsReads when it takes those). Requires: engine lock.
  // kAcceptsPulls: an RC QP that pulls the bytes of its requester's large
  // SENDs (one-copy SEND, above).
  static constexpr uint32_t kAcceptsTypeMask = 0xff, kAcceptsWrites = 1u << 8, kAcceptsReads = 1u << 9,
                            kAcceptsPulls = 1u << 10;
  // `peer`: the requester it takes requests from (ConnectionTag), or 0;
  // `rq_psn`: the PSN it expected first from it.
  void PublishQpLocked(int device_index, uint32_t qpn, uint64_t pd, uint32_t accepts, uint32_t peer, uint32_t rq_psn);
  // A requester QP as its responder's directory entry names it.
  static uint32_t ConnectionTag(int device_index, uint32_t qpn) {
    return (static_cast<uint32_t>(device_index + 1) << 24) | (qpn & 0xffffff);
  }
  // Who places (PlaceWrite, PlaceRead): its ConnectionTag and its first PSN
  // (sq_psn), checked against the responder's (RC only).
  struct Connection {
    uint32_t peer = 0;
    uint32_t first_psn = 0;
  };
  // A WRITE to the QP `dst_qpn` of another process: when the peer published
  // `rkey` and the QP and every check passes, copies the `length` bytes of
  // `local` (our memory) to `va` in the peer's memory and returns true (the
  // data is in place). False: nothing was written, or it must be written again
  // by the copying path, or goes better that way: `one_packet` (the WRITE
  // fits in one packet) to an owner whose progress thread takes packets as
  // they come (PacketRing::owner_looking). Requires: engine lock.
  bool PlaceWrite(const Connection& from, int device_index, uint32_t dst_qpn, ibv_qp_type type, uint32_t rkey,
                  uint64_t va, uint64_t length, const iovec* local, size_t local_count, bool one_packet);
  // An RDMA READ from the RC QP `dst_qpn` of another process: when the peer
  // published `rkey` for remote read and the QP takes READs now, copies the
  // `length` bytes at `va` in the peer's memory to `local` (our memory) and
  // returns true. False: nothing was read, or it must be read again by the
  // copying path. Requires: engine lock.
  bool PlaceRead(const Connection& from, int device_index, uint32_t dst_qpn, uint32_t rkey, uint64_t va,
                 uint64_t length, const iovec* local, size_t local_count);

  // One-copy SEND (see the design above). Our RC QP (device, qpn) lets its
  // responder pull the bytes of its SENDs under `epoch` (not 0), from now
  // until RevokePullsLocked, which returns once no process is pulling from
  // it any more (as WaitKeyUnused; so does ReleaseQpn). Requires: engine lock.
  void GrantPullsLocked(int device_index, uint32_t qpn, uint32_t epoch);
  void RevokePullsLocked(int device_index, uint32_t qpn);
  // The RC QP `dst_qpn` of another process pulls SENDs now (kAcceptsPulls).
  // Requires: engine lock.
  bool PullsSends(int device_index, uint32_t dst_qpn);
  // The responder's pull: copies the `length` bytes at `addr` in the memory
  // of the process that owns the QP (device, src_qpn) to `local` (our
  // memory), if that QP still grants `epoch`, before and after the read.
  // kWithdrawn: it does not (the SEND was flushed, or the QP is gone): the
  // message is not to be taken. The requester waits for a read under way
  // before it reports the flush, but only so long (kRevokeWaitNs): a read it
  // stopped waiting for may have read what the program wrote after the
  // flush. Into a receive that is not completed that is no harm; into the
  // memory of an MR it is (a WRITE with immediate), so `staged` reads
  // kPullChunkBytes at a time into a buffer of ours and copies a piece to
  // `local` (then one piece of our memory) only once the epoch is seen to
  // hold after its read. kRefused: the
  // kernel does not let us read that process (ptrace rules); the message must
  // go through the rings. kFailed: the read failed or fell short otherwise
  // (the requester unmapped the buffer, or is gone; no memory for the
  // staging buffer): as a packet lost.
  // Requires: engine lock.
  enum class PullResult { kPulled, kWithdrawn, kRefused, kFailed };
  PullResult PullSend(int device_index, uint32_t src_qpn, uint32_t epoch, uint64_t addr, uint64_t length,
                      const iovec* local, size_t local_count, bool staged);

  // Sends a packet to the process that owns (device, dst_qpn). False when no
  // process owns it (the packet is lost). When the peer's ring is full, a
  // reliable packet waits in a backlog, in order, until there is room (up to
  // kMaxBacklog; a UD or UC packet while the peer is discarding,
  // RequestMayGo); a packet beyond that bound is dropped and counted
  // (CountXmitDiscard).
  // Requires: engine lock.
  bool SendRemote(int device_index, const Packet& pkt);
  // Whether a request for the owner of (device, qpn) may leave now. Links
  // are lossless (InfiniBand's credits; RoCE's PFC, as deployed for RDMA):
  // a packet waits for room like any other, and while a backlog waits for
  // that process the QP (src_device, src_qpn) holds its send queue (false).
  // It is resumed (Qp::ResumeSendLocked) once the backlog has gone, or once
  // the peer has kept its ring full for a head-of-queue lifetime: from then
  // until its ring takes packets again, UD and UC packets to it are
  // discarded and counted, as a switch discards a packet stuck at the head of
  // its queue (RC ones wait in the backlog, up to its bound).
  // Requires: engine lock.
  bool RequestMayGo(int device_index, uint32_t qpn, int src_device, uint32_t src_qpn);
  // The same for a multicast datagram of the UD QP (src_device, src_qpn),
  // whose copies go to every process: false while any of them has a backlog
  // (the QP is resumed when it has gone).
  // Requires: engine lock.
  bool MulticastMayGo(int src_device, uint32_t src_qpn);
  // Packets wait in a backlog for some peer: without one, every request may
  // go (RequestMayGo), and its route need not be looked up.
  bool Backlogged() const { return !backlog_empty_.load(std::memory_order_relaxed); }
  // A multicast datagram: a copy to every other process of the fabric, which
  // hands it to the group's members it has. A full ring backlogs that copy
  // (as SendRemote does).
  void SendToAllPeers(const Packet& pkt);
  // A packet from (device, port) was dropped at transmit: counted in the
  // port's port_xmit_discards, shared by the device's processes.
  void CountXmitDiscard(int device_index, int port);
  uint64_t XmitDiscards(int device_index, int port) const;
  // The counters of the running fabric `fabric`, read without joining it.
  static FabricCounters ReadCounters(const std::string& fabric);
  // Pushes what waits in the backlogs; true if anything moved. Requires: engine lock.
  bool FlushBacklogLocked();

  // Delivers the packets in our ring. Called by ibv_poll_cq (cheap when the
  // ring is empty) and by the progress thread. Takes the engine lock.
  void PollInbound();
  // ibv_poll_cq found completions: the program may now leave its poll loop
  // (to spin on memory, say), so producers should wake us from now on.
  void PollFoundWork();
  // ibv_poll_cq found nothing. While more processes of the fabric poll in a
  // loop than there are CPUs they may run on, every kEmptyPollsBeforeYield-th empty
  // poll yields the CPU (sched_yield): the only system call on the poll path,
  // and only then.
  void PollFoundNothing();
  // The program posted work requests: it is busy with its queues and will
  // poll again (a bandwidth loop posts between polls), so producers need not
  // wake us. One that posts and then spins on memory without polling is
  // found by the progress thread's next nap (at most a millisecond late).
  void PostedWork();
  // The same, for a thread that already holds the engine lock (timers).
  // `flush_backlog`: push what waits for room in peers' rings first.
  // `max_receives`: it stops once it has delivered that many messages that
  // take a receive WQE (the rest stays in the ring).
  void DrainInboundLocked(bool flush_backlog = true, uint32_t max_receives = UINT32_MAX);

  // A packet for the owner of (device, qpn) would go into its ring now (no
  // backlog, room). Requires: engine lock.
  bool PushesNow(int device_index, uint32_t qpn);
  // Puts a plain ACK, READ response or SEND (WirePacket::FromLine), with
  // line.payload_len bytes of `bytes`, or with `read_addressing` a READ
  // request (WirePacket::FromReadLine), into the ring of the owner of
  // (device, qpn) now, as SendRemote would put the Packet it stands for;
  // false when it cannot go now (it is ours or nobody's, a backlog waits,
  // the ring is full): nothing is sent then. Requires: engine lock.
  bool PushLine(int device_index, uint32_t dst_qpn, const WirePacket::Line& line, uint32_t psn,
                const uint8_t* bytes = nullptr, const WirePacket::Addressing* read_addressing = nullptr);
  // True while a packet we sent to the owner of (device, qpn) still waits in
  // its ring and that process is alive: the wire is slow, nothing is lost.
  // Retransmit timers do not count such a timeout. Requires: engine lock.
  bool DeliveryPending(int device_index, uint32_t qpn);
  // False when no live process owns (device, qpn) any more: it exited or was
  // killed (a slow system call: for paths that already wait). Requires: engine lock.
  bool OwnerAlive(int device_index, uint32_t qpn);
  // The application is about to block (ibv_get_cq_event, ...): drain, and
  // have producers wake the progress thread for whatever comes next.
  void BeforeBlocking();

  // Removes the fabrics of this user whose processes are all gone (and
  // objects of fabrics that no longer exist), except `keep` (a segment name).
  // A fabric whose lock another process holds is judged once it is free,
  // waiting at most `lock_wait_ms` (0: judged another time; a process that
  // opens a device sweeps too, and takes each fabric's lock for a moment).
  static SweepReport Sweep(const std::string& keep, int lock_wait_ms = 0);

  // Faults from outside (fault/mailbox.h), for `simverbs inject`, which does
  // not join: opens the running fabric `fabric`, lets `fill` write the
  // request's event and target (it gets the fabric's profile path, to name
  // devices; a non-empty return is an error and nothing is posted), posts it,
  // wakes every process and waits up to `timeout_ms` for their answers.
  static FaultPost PostFault(const std::string& fabric,
                             const std::function<std::string(const std::string& profile_path, FaultRequest*)>& fill,
                             int timeout_ms);

 private:
  static Fabric& Make();  // the first Get()
  // fork()'s child handler: what is the parent's (see Make).
  void ForkedChild();
  static inline std::atomic<Fabric*> instance_{nullptr};

  struct HeldSender {
    int device;
    uint32_t qpn;
    bool operator==(const HeldSender&) const = default;
  };
  // What this process keeps of a peer process slot (engine lock).
  struct Peer {
    PacketRing* ring = nullptr;  // mapped on first use
    uint32_t generation = 0;     // of the slot when the ring was mapped
    uint64_t last_pushed = 0;    // position of our last packet in its ring
    bool pushed = false;
    // work_taken_ when we last pushed it a packet other than a bare ACK or
    // NAK (PushNow); none yet: a count work_taken_ never reaches.
    uint64_t work_taken_at_push = ~uint64_t{0};
    bool placement_denied = false;  // the kernel does not let us write into it
    uint64_t alive_asked_ns = 0;    // StillThere: when the kernel last said it is (coarse clock)
    // Its files we mapped to write into its MRs (at most kMaxFileWindows, the
    // oldest goes first; those of withdrawn keys go at our next WRITE to it).
    std::vector<FileWindow> windows;
    uint32_t files_revoked_seen = 0;  // its ProcSlot::files_revoked when we last looked
    bool ring_refused = false;      // its ring is not ours to use (said once per generation)
    uint64_t next_alive_check_ns = 0;  // while a backlog waits: ask at most every millisecond
    bool wake_owed = false;    // OweLocked
    bool look_owed = false;    // OweLocked: a look whether it sleeps, behind a fence
    bool owed_listed = false;  // in owed_ (a wake or a look owed, or both until settled)
    uint64_t owed_pos = 0;     // our latest packet it may need waking for
    uint32_t owed_polls = 0;   // our polls since, while it made no progress
    uint64_t owner_polls_seen = 0;  // its poll and post count when we last looked
    bool owner_polls_known = false;  // owner_polls_seen was read for this wake
    // Its ring's tail as its latest packet to us said (WireSender: the low 32 bits).
    uint32_t consumed_heard = 0;
    bool heard = false;
    bool HeardConsumed(uint64_t pos) const {
      return heard && static_cast<int32_t>(consumed_heard - static_cast<uint32_t>(pos + 1)) >= 0;
    }
    std::deque<Packet> backlog;
    uint64_t held_since_ns = 0;  // the backlog began, or last moved
    bool discarding = false;     // held its ring full for kHeadOfQueueLifetimeNs (RequestMayGo)
    std::vector<HeldSender> held_senders;  // our QPs that hold their sends for it
  };
  std::vector<HeldSender> resume_;  // FlushBacklogLocked: QPs to resume once it has flushed
  // A staged pull's piece (PullSend): large enough that the read's system
  // call is a small part of it, small enough to stay in the cache for the
  // copy that follows.
  static constexpr uint64_t kPullChunkBytes = 256 * 1024;
  std::vector<uint8_t> pull_staging_;
  static constexpr size_t kMaxBacklog = 16384;  // packets per peer
  // How long a peer may keep its ring full before UD and UC packets to it
  // are discarded: OpenSM's default head-of-queue lifetime of a switch port
  // facing an HCA (leaf_head_of_queue_lifetime 0x10: 4.096 us * 2^16).
  static constexpr uint64_t kHeadOfQueueLifetimeNs = 268'000'000;
  // Drops the UD and UC packets of `peer`'s backlog (counted) and discards
  // later ones until its ring takes packets again.
  void DiscardUnreliableLocked(Peer& peer);
  static constexpr size_t kMaxFileWindows = 8;   // per peer
  // The window for `key` of the peer `pid`: found, or opened (and kept).
  const FileWindow& WindowFor(Peer& peer, pid_t pid, const FileWindowKey& key);
  // Once the peer in `slot` has withdrawn a key with a file since we last
  // looked: unmaps our windows whose keys it no longer publishes as they were.
  void DropStaleWindows(int slot, Peer& peer);
  // The same for every peer, and every window onto a peer that left: for the
  // progress thread, every kWindowSweepNs while windows are open (so a writer
  // that stops writing does not keep a file's pages). Requires: engine lock.
  void SweepWindowsLocked();
  static constexpr uint64_t kWindowSweepNs = 100'000'000;
  std::atomic<bool> windows_open_{false};  // some peer has windows (a hint for the progress thread)

  // Handles the mailbox requests this process has not seen (progress thread).
  void HandleFaults();
  // On joining: skip older requests, take the port states injected so far.
  void TakeFaultStateLocked();
  Fabric() = default;
  // Joins `seg` (and takes our slot's liveness lock), reports through
  // `joined`, then runs the progress loop until Detach; leaves the fabric.
  struct JoinResult {
    int err = 0;
    std::string error;  // empty and not joined: the segment was removed, try again
  };
  void ProgressThread(FabricSegment* seg, std::promise<JoinResult>* joined);
  bool DrainInbound(uint32_t max_receives);  // false when the ring was empty
  // The most messages that take a receive WQE one poll of the application
  // delivers from our ring. A poll that took every packet waiting would fill
  // receive WQEs faster than a program that reposts one per completion it
  // polls (perftest: up to 16 a poll) gives them back, and run its receive
  // queue dry: an RNR NAK, and the sender waits out its RNR timer.
  // ib_send_bw 64 B far apart, pinned: 1.5-2.6 Mpps and 243-387 RNR NAKs in
  // 2 s taking all, 3.9 Mpps and 25-34 taking 16, 2.8-3.2 Mpps taking 32.
  // What waits stays in the ring, as behind an IB link whose receiver holds
  // back credits. (READ responses, ACKs and WRITEs are not counted.)
  static constexpr uint32_t kPollDrainReceives = 16;
  void CleanDeadLocked();
  // Our slot's entries, ring and objects go; the last process removes the fabric.
  void LeaveLocked();
  void ForgetQpnsLocked(int slot);
  // Withdraws every key of `slot`.
  void ForgetKeysLocked(int slot);
  // Returns once no process announces `tag` (ProcSlot::placing, the bits of
  // `mask`), or a live one has for kRevokeWaitNs (then says so, naming
  // `verb` and what it was `doing`).
  void WaitUnannounced(uint64_t tag, const char* verb, const char* doing, uint64_t mask = ~uint64_t{0});
  // The slot of the process that owns (device, qpn) by the directory, or -1.
  int OwnerSlot(int device_index, uint32_t qpn) const;
  // The peer in `slot`, its ring mapped and current; nullptr when it cannot be reached.
  Peer* ReachPeer(int slot);
  // The peer that owns (device, qpn) by the directory, reached (ReachPeer),
  // its slot in *slot; nullptr when that is nobody, this process, or a peer
  // that cannot be reached.
  inline Peer* ReachOwner(int device_index, uint32_t qpn, int* slot);
  // PlaceWrite and PlaceRead: `direction` is kAcceptsWrites (copies `local`
  // to the peer) or kAcceptsReads (from the peer to `local`).
  bool Place(const Connection& from, uint32_t direction, int device_index, uint32_t dst_qpn, ibv_qp_type type,
             uint32_t rkey, uint64_t va, uint64_t length, const iovec* local, size_t local_count, bool one_packet);
  // Puts pkt on the peer's ring now, behind nothing it holds back; false when
  // the peer has a backlog or its ring is full (nothing is sent then).
  bool PushNow(int slot, Peer& peer, const Packet& pkt, int src_device);
  // A packet that PushNow could not put on the peer's ring: waits in its
  // backlog, in order, or is discarded and counted (SendRemote says when).
  void QueueForPeerLocked(int slot, Peer& peer, const Packet& pkt, int src_device);
  // What RequestMayGo and MulticastMayGo share: whether `sender` may send to
  // `peer` now; if not, it is listed to be resumed once the backlog has gone.
  bool HoldSenderLocked(Peer& peer, const HeldSender& sender);
  // Our packet at `pos` is in the peer's ring: what PushNow and PushLine note
  // (`work`: not a bare ACK or NAK, IsWork; of `payload_len` bytes).
  inline void PushedLocked(int slot, Peer& peer, const PacketRing::Owed& owed, uint64_t pos, bool work,
                           uint32_t payload_len);
  // What a push left owed to the owner in `slot` (PacketRing::Owed): a wake,
  // when it may need waking for our packet at `pos` (it just found work: look
  // again at our next polls), or a look whether it sleeps.
  void OweLocked(int slot, Peer& peer, const PacketRing::Owed& owed, uint64_t pos);
  // Takes the look owed to the peer now, behind a fence.
  void LookNowLocked(int slot, Peer& peer);
  // Takes each owed look, behind one fence (it may find a wake owed). Then
  // each owed wake whose packet is still in the peer's ring: after
  // kOwedWakePolls of our polls in which the peer neither polled nor posted,
  // or `now`, the peer is woken (one busy copying a large message between its
  // polls drains the ring at its next poll). A wake whose packet the peer has
  // said it took (in a packet of its own: HearSender) is settled by that; the
  // peer's ring, whose tail and poll count it writes at every pop and poll,
  // is read only once it has not said so for kOwedHearPolls of our polls (a
  // read of either line while it works costs it a miss at its next write:
  // in a ping-pong, on every message; its ACK takes two hand-offs and its
  // drain to come back, which far apart on this machine's CPUs is longer
  // than 32 of our empty polls). Called every kPollsPerOwedLook-th
  // poll. Requires: engine lock.
  void SettleOwedWakesLocked(bool now);
  // Who we are, and how far our ring has been drained, for a packet we push.
  WireSender Sender() const;
  // A packet from the process in `slot` said how far its ring was drained
  // (WireSender; read once from shared memory, a hint). Requires: engine lock.
  void HearSender(int slot, uint32_t generation, uint32_t consumed);
  // Delivers a packet taken from our ring (`at_tail`: the one whose slot Pop
  // holds now) and gives the Packet a spare buffer for the next.
  void DeliverTaken(Packet* pkt, bool at_tail);
  // A plain SEND (WirePacket::Line::PlainSend) at our ring's tail, with
  // `line` and `psn` read from its slot, taken straight into its QP's receive
  // (Qp::ReceiveWholeSendLocked) when it can be: true. False: nothing was
  // done; make the Packet. Requires: engine lock, inside a burst.
  bool TakeWholeSendLocked(const WirePacket::Line& line, uint32_t psn, const uint8_t* payload);
  // The same for a plain READ request (WirePacket::Line::PlainRead), with the
  // RETH read from its slot, answered by its QP (Qp::ReceiveWholeReadLocked).
  bool TakeWholeReadLocked(const WirePacket::Line& line, const WholeRead& read);
  // The same for a plain READ response (WirePacket::Line::PlainReadResponse),
  // taken into its READ (Qp::ReceiveWholeReadResponseLocked).
  bool TakeWholeReadResponseLocked(const WirePacket::Line& line, uint32_t psn, const uint8_t* payload);
  // The Take*Locked above: finds the QP of ours that a packet of `line` is
  // for, when it may be taken without a Packet (no fault armed for
  // delivery), and delivers it with take(qp) (true: taken). False: nothing
  // was done.
  template <typename Take>
  bool TakeWholeLocked(const WirePacket::Line& line, Take&& take);
  static constexpr uint32_t kOwedWakePolls = 32;
  static constexpr uint32_t kOwedHearPolls = 256;
  static constexpr uint32_t kPollsPerOwedLook = 8;
  bool PeerAlive(int slot) const;
  // Whether the process of `slot` still holds its liveness lock, asked at
  // most once per kAliveReaskNs of the coarse clock: process_vm_writev and
  // _readv name it by its pid, and a dead process's pid may name another
  // one (its slot is cleaned only when a process joins or leaves), one that
  // exec'd is another program. Those are caught within a few milliseconds
  // (a tick of the coarse clock past kAliveReaskNs); a pid is not reused
  // that soon. Requires: engine lock.
  bool StillThere(int slot, Peer& peer);
  static constexpr uint64_t kAliveReaskNs = 1'000'000;
  // The shared port_xmit_discards of (device, port), or nullptr when not
  // attached or out of range.
  std::atomic<uint64_t>* XmitDiscardsCounter(int device_index, int port) const;
  // Pushes what `peer`'s backlog holds while its ring has room (cutting READ
  // answers as it goes); true if anything moved. Requires: engine lock.
  bool FlushPeerLocked(int slot, Peer& peer);
  // Before the progress thread sleeps with a backlog: asks each peer to wake
  // us when it has made room (PacketRing::WantRoom); true if one has room
  // already. `app_active`: false without waiting when the engine lock is busy.
  bool AskForRoom(bool app_active);
  std::string JoinLocked(FabricSegment* seg, int* err);
  int slot_ = -1;
  uint32_t generation_ = 0;  // of our slot
  uint64_t pid_namespace_ = 0;  // the inode of our PID namespace (0: unknown)

  FabricSegment* segment_ = nullptr;
  int segment_fd_ = -1;  // open while attached: our locks (see Liveness above)
  std::string segment_name_;
  std::string fabric_name_;
  PacketRing* ring_ = nullptr;
  std::string ring_name_;
  std::unique_ptr<Peer> peers_[kMaxFabricProcesses];  // engine lock
  std::vector<int> backlogged_;                       // slots with a backlog (engine lock)
  // Written under the engine lock; read without it by pollers and the progress
  // thread to skip taking the lock when there is nothing to flush.
  std::atomic<bool> backlog_empty_{true};
  std::vector<int> owed_;  // slots we may owe a wake or a look (engine lock)
  // Publishes whether our application polls in a loop, and counts those of
  // the fabric that do against the CPUs they may run on together. Progress thread.
  void LookForOversubscription(bool app_polling);
  // While oversubscribed, an application yields its CPU after this many empty
  // polls. Fewer hand the CPU sooner to the peer it waits for: 2 and 4
  // ib_send_bw 64 B pairs on 2 CPUs made 7.2-8.1 / 7.0-8.1 Mpps with 64,
  // 5.8-6.4 / 6.0-6.3 with 256, 7.6-9.1 / 7.9-8.4 with 16 (4 and 8 no better).
  static constexpr uint32_t kEmptyPollsBeforeYield = 16;
  // How long a claimed, unpublished slot of our ring waits before we ask
  // whether its producer is dead (ProgressThread).
  static constexpr uint64_t kDeadClaimGraceNs = 1'000'000;
  std::atomic<bool> oversubscribed_{false};
  bool draining_inbound_ = false;  // DrainInboundLocked is on the stack (engine lock)
  bool taking_ = false;            // it delivers the packet at our ring's tail (engine lock)
  // Packets taken from our ring that are a peer's own work, not a bare ACK or
  // NAK (engine lock). Two pushes to a peer with none of these in between are
  // a stream (a bandwidth loop, a READ's answer), not a ping-pong: PushNow.
  uint64_t work_taken_ = 0;
  // One-packet WRITEs their requesters placed themselves (Packet::answered)
  // taken from our ring since the progress thread last counted them (engine lock).
  uint32_t placed_one_packet_taken_ = 0;
  // The packet DrainInboundLocked fills from each slot (engine lock): kept,
  // not made afresh per drain (a Packet's default values cost a fill of its
  // 250 bytes, a fifth of a one-packet drain); ToPacket sets every field.
  // The second holds a positive ACK until the next packet shows whether a
  // later ACK of the same QP replaces it.
  Packet inbound_;
  Packet held_ack_;
  std::atomic<bool> wake_owed_{false};  // !owed_.empty(), read without the lock by pollers
  std::thread progress_;
  std::atomic<bool> stop_{false};
  int attach_pid_ = 0;
  std::mutex attach_mu_;  // ibv_open_device may run on several threads at once
  uint64_t faults_seen_ = 0;  // the last mailbox request handled
  // For the join, on the progress thread.
  std::string join_profile_path_;
  uint64_t join_profile_hash_ = 0;
};

}  // namespace simverbs
