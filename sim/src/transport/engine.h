#pragma once

// The engine that executes work requests: the simulated wire, the protocol
// timers, and the one lock that orders everything on the data path.
//
// Execution model. A work request is executed by the thread that posts it:
// ibv_post_send makes the packets, the engine hands each to the destination
// QP's responder logic, whose answers (ACK, NAK, READ responses) go back to
// the requester's completer, all before ibv_post_send returns. The responder
// never has to call a verb for its side to happen (perftest's bandwidth
// servers sleep through the run). Completions land in CQ rings that
// ibv_poll_cq reads without system calls; only an armed CQ writes its
// channel's eventfd. Timers (transport timeout, RNR) are kept in simulated
// time, scaled by the profile's time_scale, and fired by one thread that
// sleeps until the earliest deadline; it is started with the first timer and
// sleeps while none is armed. While it looks again within the timer floor
// anyway, arming (once per message in a ping-pong) reads no clock: the thread
// takes the deadline from its own clock at that look, so a timer fires up to
// a floor late, never early. A peer in another process is reached behind the same Transmit():
// the packet then crosses a shared-memory ring (fabric/fabric.h); a WRITE into another process's
// MR may have its data placed by the requester itself, and then crosses as one placed packet.
//
// Lock order: Device::contexts_mu_ → Cq::poll_mu_ → Engine::mu_ → Cq::mu_ →
// EventQueue::mu_.
// Device::mu_ (port states) is taken under the engine lock and takes no other.

#include <atomic>
#include <chrono>
#include <concepts>
#include <condition_variable>
#include <mutex>
#include <set>
#include <vector>
#include <thread>

#include "transport/data_path_mutex.h"
#include "transport/packet.h"

namespace simverbs {

class Device;
class Qp;

// A multicast address: by its GID with a GRH (ff00::/8, or an IPv4-mapped
// 224.0.0.0/4), by its LID otherwise (0xC000-0xFFFE).
bool IsMulticastDestination(const AddressVector& dst);
// IBTA: the destination QP of a datagram to a multicast group.
inline constexpr uint32_t kMulticastQpn = 0xffffff;

class Engine {
 public:
  using Clock = std::chrono::steady_clock;

  // Every post and poll asks for it a dozen times: after the first call,
  // one load.
  static Engine& Get() {
    Engine* engine = instance_.load(std::memory_order_acquire);
    return engine ? *engine : Make();
  }
  // The engine, or nullptr before anything asked for it (fork_locks.cc).
  static Engine* IfMade() { return instance_.load(std::memory_order_acquire); }

  // The device a packet to `dst` reaches (by GID with a GRH, by LID
  // otherwise), or nullptr when the address is unreachable. Requires: mu() held.
  Device* Route(const AddressVector& dst);
  // The device by whose route `pkt` goes to another process's QP (not a
  // multicast group, not XRC's own traffic), or nullptr. Requires: mu() held.
  Device* RemoteRoute(const Packet& pkt);
  // The port `pkt` leaves by is up (a packet from a port that is down is lost).
  static bool SourcePortUp(const Packet& pkt);

  // The data-path lock; every verb that touches QP state holds it.
  DataPathMutex& mu() { return mu_; }

  // Requires: mu() held. Queues a packet and delivers everything queued,
  // including the answers it causes, before returning.
  void Transmit(Packet&& pkt);
  // Requires: mu() held. Delivers `pkt` where it is, with everything its
  // delivery queues, as Transmit does when nothing is being delivered, and
  // leaves its payload buffer with it (a packet taken from our ring: the
  // next one reuses the buffer). False while a delivery is under way:
  // nothing was done; Transmit it.
  bool DeliverInPlace(const Packet& pkt) {
    return DeliverInPlace([this, &pkt] { DeliverOrDropLocked(pkt); });
  }
  // The same for a delivery that `deliver` makes (one that needs no Packet).
  template <std::invocable Deliver>
  bool DeliverInPlace(Deliver&& deliver) {
    if (draining_) return false;
    draining_ = true;
    deliver();
    // Most deliveries queue nothing (their answers leave for another process
    // at once): no drain to run then.
    if (queue_.empty()) {
      draining_ = false;
    } else {
      DrainLocked();
    }
    return true;
  }
  // Transmit is on the stack already: a packet it is given now is queued,
  // and delivered only after its caller has returned (one that leaves this
  // process, with nothing queued in front of it, goes into the peer's ring at
  // once: that reaches no QP of ours). A packet that waits in the queue owns
  // its bytes: Transmit copies borrowed ones (transport/payload.h) as it
  // queues it, so they are read when the packet is made, as if sent at once.
  bool delivering() const { return draining_; }
  // No packet waits in the queue: one sent now goes out before any other of
  // this process (Transmit keeps the order otherwise).
  bool nothing_queued() const { return queue_head_ == queue_.size(); }

  // ACKs in a burst. While packets that arrived together from another
  // process are delivered (between BeginBurst and EndBurst), a responder's
  // positive ACK is held back and a later one replaces it: an ACK covers every
  // message up to its PSN (IBTA 9.7.5.1: a responder may coalesce ACKs), so a
  // burst costs each QP one ACK, and its requester one answer to take, instead
  // of one per message. The QP sends it before any other answer of its own
  // (Qp::SendDeferredAckLocked), and EndBurst sends what is left.
  // Requires: mu() held.
  void BeginBurst() { in_burst_ = true; }
  void EndBurst();
  // Whether `qp`'s ACK may wait for the end of the burst; `already` (the QP
  // holds one back already) means it is on the list. Requires: mu() held.
  bool DeferAck(Qp* qp, bool already);
  void ForgetDeferredAck(Qp* qp);

  // An empty payload buffer for a new packet, with the capacity of one that
  // was delivered already: the data path allocates nothing per packet.
  // Requires: mu() held.
  std::vector<uint8_t> PayloadBuffer();
  // Gives a buffer back for PayloadBuffer. Requires: mu() held.
  void RecyclePayload(std::vector<uint8_t>&& buffer);

  // Requires: mu() held. Arms (or re-arms) the timer of `qp` to fire after
  // `ibta_duration` of protocol time (scaled by the profile), never sooner
  // than a floor that keeps a retry loop from spinning.
  void ArmTimer(Qp* qp, std::chrono::nanoseconds ibta_duration, uint32_t time_scale);
  void CancelTimer(Qp* qp);
  // ArmTimer, unless `qp`'s timer runs already (a map look-up instead of a
  // clock read: posting does not restart the transport timer, progress does).
  void ArmTimerUnlessArmed(Qp* qp, std::chrono::nanoseconds ibta_duration, uint32_t time_scale);

  // UD multicast groups: a datagram addressed to the group reaches every
  // attached QP once (ibv_attach_mcast(3)). Requires: mu() held.
  int AttachMulticast(Qp* qp, const ibv_gid& mgid, uint16_t mlid);
  int DetachMulticast(Qp* qp, const ibv_gid& mgid, uint16_t mlid);
  bool IsAttached(const Qp* qp) const;
  // Takes `qp` out of every group (the QP leaves the wire). Requires: mu() held.
  void DetachAllLocked(const Qp* qp);

 private:
  static Engine& Make();  // the first Get()
  static inline std::atomic<Engine*> instance_{nullptr};

  Engine() = default;
  void DrainLocked();
  // DeliverLocked, or the packet is lost when delivering it runs out of
  // memory (fault point "deliver_packet" makes the next delivery do so).
  // `remote`: RemoteRoute found it already (the packet is pushed to its peer).
  void DeliverOrDropLocked(const Packet& pkt, Device* remote = nullptr) noexcept;
  void DeliverLocked(const Packet& pkt);
  // DeliverLocked's rare cases, out of line: the frame and saved registers
  // they need are not paid by every packet.
  [[gnu::noinline]] void DeliverMulticastLocked(const Packet& pkt);
  [[gnu::noinline]] void DeliverStreamLocked(Device* dev, const Packet& pkt);
  void TimerThread();
  void ForkedChild();
  // Route without the cache: every active port of every device.
  // (`any_state`: a port that is not ACTIVE counts too.)
  static Device* FindRoute(const AddressVector& dst, bool any_state = false);

  // The last address routed and where it led (mu_): a message's packets,
  // and a connection's messages, all go one way, and a route changes only
  // with a port's state (Device::PortChanges).
  struct alignas(64) LastRoute {  // a line of its own: not beside the lock word
    bool valid = false;
    uint64_t port_changes = 0;
    bool is_global = false;
    uint16_t dlid = 0;
    ibv_gid dgid{};
    Device* device = nullptr;
  };
  LastRoute last_route_;

  DataPathMutex mu_;
  // Packets waiting for delivery, from queue_head_ on: a vector that keeps
  // its capacity, not a deque that allocates as it moves.
  std::vector<Packet> queue_;
  size_t queue_head_ = 0;
  bool draining_ = false;
  std::vector<std::vector<uint8_t>> spare_payloads_;
  bool in_burst_ = false;
  std::vector<Qp*> deferred_acks_;  // QPs that hold an ACK back until EndBurst

  struct Group {
    ibv_gid mgid;
    uint16_t mlid;
    std::set<Qp*> members;
    // What each member attached with: the kernel keeps a QP's attachments by
    // (MGID, MLID) and detaches only a pair it has (ib_uverbs_detach_mcast).
    std::set<std::pair<Qp*, uint16_t>> attachments;
  };
  // The multicast group a packet is addressed to, or nullptr.
  Group* FindGroup(const AddressVector& dst);
  std::vector<Group> groups_;

  // Fires what is due; returns when to look next. Requires: mu() held.
  Clock::time_point RunDueTimersLocked(bool* lingered);
  // RunDueTimersLocked but for timer_looks_soon_; *looked_at: its last clock read.
  Clock::time_point NextTimerLocked(bool* lingered, Clock::time_point* looked_at);

  // The QPs whose timer is armed, each at its TimerEntry::index (mu_).
  std::vector<Qp*> armed_;
  // The timer thread waits on its own mutex, not the engine lock: waking
  // with the engine lock to take back would queue it behind every verb.
  std::mutex timer_mu_;
  std::condition_variable timer_cv_;
  bool timer_kicked_ = false;  // guarded by timer_mu_: an earlier deadline was armed
  std::thread timer_thread_;
  // When the timer thread wakes next (Clock ticks): ArmTimer reads it.
  std::atomic<Clock::rep> timer_wakeup_{Clock::time_point::max().time_since_epoch().count()};
  // The timer thread looks again within kTimerFloor (and stamps the
  // deadlines armed meanwhile): ArmTimer reads it under mu_.
  std::atomic<bool> timer_looks_soon_{false};
};

}  // namespace simverbs
