#pragma once

// The fabric shared by every process that opens a simulated device.
//
// Design. Each process keeps its own QPs, CQs and MRs (sim/src); what the
// processes share is a POSIX shared-memory segment per fabric and user
// ("/simverbs-<uid>-<SIMVERBS_FABRIC>") that holds the process table, the QP
// number directory (device, QPN → owning process) and the per-device QP
// number and key counters, plus one inbound packet ring per process
// ("/simverbs-<uid>-<fabric>-p<slot>"). A packet for a QP of another process
// is pushed into that process's ring; the owner runs the responder (or
// completer) logic itself, so remote memory is only ever touched by the
// process that registered it, against its own registrations. The owner
// drains its ring whenever it polls a CQ (no system call), and a per-process
// progress thread drains it otherwise: it sleeps on a futex, and producers
// wake it (one system call) only when the owner has stopped polling — so
// perftest's sleeping bandwidth servers still answer, and busy-polling
// programs make no system calls. This costs a copy into the ring and one out
// of it; a WRITE straight into a peer's registered memory would save one.
//
// No daemon: the first process creates the segment and fixes the profile;
// the last one to leave removes it. A process that died (SIGKILL) is found by
// the next one to attach, which removes its ring and its directory entries;
// its peers' packets are lost and their retry timers report
// IBV_WC_RETRY_EXC_ERR. The table's mutex is robust, so a process killed while
// holding it does not wedge the fabric.

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "transport/packet.h"

namespace simverbs {

class PacketRing;
struct FabricSegment;
struct FaultRequest;

// What `simverbs inject` learnt from posting a fault (Fabric::PostFault).
struct FaultPost {
  std::string error;         // the fabric could not be reached, or `fill` refused
  int processes = 0;         // attached when the request was posted and still there
  int answered = 0;          // of those, how many handled it in time
  uint32_t delivered = 0;    // async events raised, over all processes
  std::string silent;        // the pids that did not answer, "123 456"
};

class Fabric {
 public:
  static Fabric& Get();

  // Joins the fabric named by SIMVERBS_FABRIC (default "default") with the
  // current profile. Returns an empty string or an error for the user.
  std::string Attach();
  bool attached() const { return segment_ != nullptr; }
  void Detach();

  // Shared counters: QP numbers (registered as ours) and memory keys.
  uint32_t AllocQpn(int device_index);
  void ReleaseQpn(int device_index, uint32_t qpn);
  // Takes a specific free QP number for this process; false if it is in use.
  bool ClaimQpn(int device_index, uint32_t qpn);
  uint32_t AllocKeyIndex(int device_index);

  // Sends a packet to the process that owns (device, dst_qpn). False when no
  // process owns it (the packet is lost). Like an IB link, the fabric does
  // not drop for congestion: when the peer's ring is full the packet waits
  // in a backlog, in order, until there is room. Requires: engine lock.
  bool SendRemote(int device_index, const Packet& pkt);
  // Pushes what waits in the backlogs. Requires: engine lock.
  void FlushBacklogLocked();

  // Delivers the packets in our ring. Called by ibv_poll_cq (cheap when the
  // ring is empty) and by the progress thread. Takes the engine lock.
  void PollInbound();
  // ibv_poll_cq found completions: the program may now leave its poll loop
  // (to spin on memory, say), so producers should wake us from now on.
  void PollFoundWork();
  // The same, for a thread that already holds the engine lock (timers).
  void DrainInboundLocked();

  // True while a packet we sent to the owner of (device, qpn) still waits in
  // its ring and that process is alive: the wire is slow, nothing is lost.
  // Retransmit timers do not count such a timeout. Requires: engine lock.
  bool DeliveryPending(int device_index, uint32_t qpn);
  // The application is about to block (ibv_get_cq_event, ...): drain, and
  // have producers wake the progress thread for whatever comes next.
  void BeforeBlocking();

  // Faults from outside (fault/mailbox.h), for `simverbs inject`, which does
  // not join: opens the running fabric `fabric`, lets `fill` write the
  // request's event and target (it gets the fabric's profile path, to name
  // devices; a non-empty return is an error and nothing is posted), posts it,
  // wakes every process and waits up to `timeout_ms` for their answers.
  static FaultPost PostFault(const std::string& fabric,
                             const std::function<std::string(const std::string& profile_path, FaultRequest*)>& fill,
                             int timeout_ms);

 private:
  // Handles the mailbox requests this process has not seen (progress thread).
  void HandleFaults();
  // On joining: skip older requests, take the port states injected so far.
  void TakeFaultStateLocked();
  Fabric() = default;
  void ProgressThread();
  void DrainInbound();
  void CleanDeadLocked();
  void ForgetQpnsLocked(int slot);
  std::string JoinLocked(FabricSegment* seg, const std::string& fabric, const std::string& profile_path,
                         uint64_t profile_hash);
  int slot_ = -1;

  FabricSegment* segment_ = nullptr;
  std::string segment_name_;
  PacketRing* ring_ = nullptr;
  std::string ring_name_;
  PacketRing* peer_rings_[64] = {};  // mapped on first use
  uint32_t peer_generation_[64] = {};
  uint64_t last_pushed_[64] = {};    // position of our last packet in each peer's ring
  bool pushed_[64] = {};
  std::deque<Packet> backlog_[64];   // engine lock
  // Written under the engine lock; read without it by pollers and the progress
  // thread to skip taking the lock when there is nothing to flush.
  std::atomic<bool> backlog_empty_{true};
  std::thread progress_;
  std::atomic<bool> stop_{false};
  int attach_pid_ = 0;
  std::mutex attach_mu_;  // ibv_open_device may run on several threads at once
  uint64_t faults_seen_ = 0;  // the last mailbox request handled
};

}  // namespace simverbs
