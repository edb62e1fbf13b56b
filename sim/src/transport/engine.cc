#include "transport/engine.h"

#include <pthread.h>

#include <algorithm>
#include <new>

#include "device.h"
#include "device_list.h"
#include "fabric/fabric.h"
#include "fault/fault_points.h"
#include "gid.h"
#include "qp.h"
#include "quiet_thread.h"
#include "transport/lock_spinning.h"
#include "transport/response_stream.h"
#include "xrc_remote.h"

namespace simverbs {
namespace {

// A retry loop never runs faster than this, whatever the scaled timeout.
constexpr std::chrono::microseconds kTimerFloor{2000};

}  // namespace

Device* Engine::Route(const AddressVector& dst) {
  const uint64_t port_changes = Device::PortChanges();
  LastRoute& last = last_route_;
  if (last.valid && last.port_changes == port_changes && last.is_global == dst.is_global &&
      (dst.is_global ? SameGid(last.dgid, dst.dgid) : last.dlid == dst.dlid)) {
    return last.device;
  }
  Device* device = FindRoute(dst);
  last = {true, port_changes, dst.is_global, dst.dlid, dst.dgid, device};
  return device;
}

bool Engine::SourcePortUp(const Packet& pkt) {
  // (A packet that names no sender, such as the CM's or a forged one, is judged by its destination.)
  return !pkt.src_device || pkt.src_device->PassesTraffic(pkt.src_port);
}

Device* Engine::FindRoute(const AddressVector& dst, bool any_state) {
  for (const auto& dev : DeviceList::Get().devices()) {
    for (int port = 1; port <= dev->port_count(); ++port) {
      const PortProfile& p = dev->profile().ports[port - 1];
      if (!any_state && dev->PortState(port) != IBV_PORT_ACTIVE) continue;
      if (dst.is_global) {
        for (const GidProfile& g : p.gids) {
          if (SameGid(g.gid, dst.dgid)) return dev.get();
        }
      } else if (p.attr.link_layer == IBV_LINK_LAYER_INFINIBAND && dst.dlid != 0 && p.attr.lid == dst.dlid) {
        return dev.get();
      }
    }
  }
  return nullptr;
}

Engine& Engine::Make() {
  // Leaked: the timer thread may still be parked when the process exits.
  static Engine* engine = [] {
    auto* e = new Engine();
    // (Its lock is held across fork: fork_locks.h.)
    pthread_atfork(nullptr, nullptr, [] { Get().ForkedChild(); });
    return e;
  }();
  instance_.store(engine, std::memory_order_release);
  return *engine;
}

void Engine::ForkedChild() {
  // The timer thread is the parent's: forget it (and its timers, whose QPs
  // are the parent's business) without joining.
  new (&timer_thread_) std::thread();
  new (&timer_mu_) std::mutex();
  new (&timer_cv_) std::condition_variable();
  timer_kicked_ = false;
  for (Qp* qp : armed_) qp->timer_entry().index = TimerEntry::kNotArmed;
  armed_.clear();
  timer_wakeup_.store(Clock::time_point::max().time_since_epoch().count(), std::memory_order_relaxed);
  timer_looks_soon_.store(false, std::memory_order_relaxed);
}

void Engine::Transmit(Packet&& pkt) {
  if (draining_) {
    // Nothing waits in front of it, and it leaves this process (a READ's
    // answer, an ACK to a peer): into the peer's ring now, instead of a move
    // into the queue and out again. Pushing it reaches no QP of ours, so it
    // cannot re-enter a delivery; packets to one peer still leave in order.
    if (queue_head_ == queue_.size()) {
      if (Device* remote = RemoteRoute(pkt)) {
        DeliverOrDropLocked(pkt, remote);
        RecyclePayload(pkt.payload.TakeBuffer());
        return;
      }
    }
    try {
      if (pkt.payload.borrowed()) pkt.payload.Own(PayloadBuffer());  // it waits: its bytes as they are now
      queue_.push_back(std::move(pkt));
    } catch (const std::bad_alloc&) {
      // No room to queue it: lost, as on a wire (the sender's timers decide).
    }
    return;
  }
  // Nothing queued: delivered where it is (no move into the queue and out
  // again), then whatever its delivery queued.
  draining_ = true;
  DeliverOrDropLocked(pkt);
  RecyclePayload(pkt.payload.TakeBuffer());
  DrainLocked();
}

void Engine::DeliverOrDropLocked(const Packet& pkt, Device* remote) noexcept {
  // A port of ours that is down sends nothing: the packet is lost, and the
  // sender's timers decide. (Not one from another process, which judged its
  // own port, nor one nothing would send again: Packet::Lossless.)
  if (!pkt.from_peer && !pkt.Lossless() && !SourcePortUp(pkt)) return;
  try {
    // (Not one that nothing would send again: Packet::Lossless.)
    if (!pkt.Lossless() && FaultPoints::Get().Hit(FaultPoint::kDeliverPacket)) throw std::bad_alloc();
    if (remote) {
      Fabric::Get().SendRemote(remote->index(), pkt);  // as DeliverLocked would, without routing it again
    } else {
      DeliverLocked(pkt);
    }
  } catch (...) {
    // Out of memory while it was delivered (or a bug): the packet is lost,
    // as one a receiver had no buffer for, and the sender's transport
    // recovers it. Nothing may leave Transmit: the engine would stay
    // "delivering" and queue every later packet of the process for ever.
  }
}

bool Engine::DeferAck(Qp* qp, bool already) {
  if (!in_burst_) return false;
  if (already) return true;
  try {
    deferred_acks_.push_back(qp);
  } catch (const std::bad_alloc&) {
    return false;  // sent at once instead
  }
  return true;
}

void Engine::ForgetDeferredAck(Qp* qp) {
  deferred_acks_.erase(std::remove(deferred_acks_.begin(), deferred_acks_.end(), qp), deferred_acks_.end());
}

void Engine::EndBurst() {
  in_burst_ = false;
  // (What sending delivers defers nothing: the burst is over.)
  for (size_t i = 0; i < deferred_acks_.size(); ++i) deferred_acks_[i]->SendDeferredAckLocked();
  deferred_acks_.clear();
}

std::vector<uint8_t> Engine::PayloadBuffer() {
  if (spare_payloads_.empty()) return {};
  std::vector<uint8_t> buffer = std::move(spare_payloads_.back());
  spare_payloads_.pop_back();
  return buffer;
}

void Engine::RecyclePayload(std::vector<uint8_t>&& buffer) {
  constexpr size_t kSparePayloads = 64;
  if (buffer.capacity() == 0 || spare_payloads_.size() >= kSparePayloads) return;
  buffer.clear();
  try {
    spare_payloads_.push_back(std::move(buffer));
  } catch (const std::bad_alloc&) {
    // Not kept: a later packet allocates its own.
  }
}

void Engine::DrainLocked() {
  draining_ = true;
  while (queue_head_ < queue_.size()) {
    Packet pkt = std::move(queue_[queue_head_++]);  // moved out: delivery may queue more
    DeliverOrDropLocked(pkt);
    RecyclePayload(pkt.payload.TakeBuffer());
  }
  queue_.clear();
  queue_head_ = 0;
  draining_ = false;
}

Device* Engine::RemoteRoute(const Packet& pkt) {
  if (pkt.kind == Packet::Kind::kXrcForward || pkt.kind == Packet::Kind::kXrcResult) return nullptr;
  if (!SourcePortUp(pkt)) return nullptr;
  if (pkt.transport == IBV_QPT_UD && IsMulticastDestination(pkt.dst)) return nullptr;
  Device* dev = Route(pkt.dst);
  return dev && !dev->FindQp(pkt.dst_qpn) ? dev : nullptr;
}

void Engine::DeliverLocked(const Packet& pkt) {
  if (pkt.kind == Packet::Kind::kXrcForward || pkt.kind == Packet::Kind::kXrcResult) {
    XrcRemoteLocked(pkt);  // between processes only: not addressed to a QP by its AV
    return;
  }
  if (pkt.transport == IBV_QPT_UD && IsMulticastDestination(pkt.dst)) {
    // IBTA: a multicast datagram names DestQP 0xFFFFFF; one that names any
    // other QP reaches no member (rxe_rcv looks for groups only then).
    if (pkt.dst_qpn == kMulticastQpn) DeliverMulticastLocked(pkt);
    return;
  }
  Device* dev = Route(pkt.dst);
  // A packet whose data is in place already (an answered WRITE) takes its
  // PSNs even if the port went down meanwhile: nothing would send it again.
  if (!dev && pkt.Lossless()) dev = FindRoute(pkt.dst, /*any_state=*/true);
  if (!dev) return;  // an unreachable address: lost; the sender's timers decide
  if (Qp* qp = dev->FindQp(pkt.dst_qpn)) {
    if (pkt.stream) {
      DeliverStreamLocked(dev, pkt);
    } else {
      qp->Receive(pkt);
    }
  } else {
    // Another process's QP, or none at all (lost as well).
    Fabric::Get().SendRemote(dev->index(), pkt);
  }
}

void Engine::DeliverMulticastLocked(const Packet& pkt) {
  if (Group* group = FindGroup(pkt.dst)) {
    // A copy for each member here whose port is up, the sending QP too if it
    // is a member (rxe_rcv_mcast_pkt; mlx5 unless the QP was made with
    // IBV_QP_CREATE_BLOCK_SELF_MCAST_LB, which the simulator does not take).
    const std::set<Qp*> members = group->members;
    for (Qp* member : members) {
      if (member->PortUpLocked() && !member->Inherited()) member->Receive(pkt);
    }
  }
  // And one for every other process, which gives it to the members it has.
  if (!pkt.from_peer) Fabric::Get().SendToAllPeers(pkt);
}

// A READ answer for a QP of ours: every packet at once.
void Engine::DeliverStreamLocked(Device* dev, const Packet& pkt) {
  Packet part;
  while (CutResponse(pkt, &part)) {
    Qp* qp = dev->FindQp(pkt.dst_qpn);
    if (qp) qp->Receive(part);
    RecyclePayload(part.payload.TakeBuffer());
    if (!qp) break;
  }
}

// IBTA: LIDs 0xC000-0xFFFE are multicast (0xFFFF is the permissive LID).
bool IsMulticastLid(uint16_t lid) { return lid >= 0xc000 && lid != 0xffff; }

bool IsMulticastDestination(const AddressVector& dst) {
  return dst.is_global ? IsMulticastGid(dst.dgid) : IsMulticastLid(dst.dlid);
}

Engine::Group* Engine::FindGroup(const AddressVector& dst) {
  if (!IsMulticastDestination(dst)) return nullptr;
  for (Group& g : groups_) {
    if (dst.is_global ? SameGid(g.mgid, dst.dgid) : g.mlid == dst.dlid) return &g;
  }
  return nullptr;
}

// A group is its MGID (rxe's rxe_attach_mcast and HCAs key it so): the LID
// of its first attachment is the one a datagram without a GRH is sent to.
int Engine::AttachMulticast(Qp* qp, const ibv_gid& mgid, uint16_t mlid) {
  // The kernel's ib_attach_mcast: a multicast GID, and on InfiniBand a
  // multicast LID (is_valid_mcast_lid: 0xC000-0xFFFE; RoCE ignores the LID).
  if (!IsMulticastGid(mgid)) return EINVAL;
  if (qp->OnInfinibandLocked() && !IsMulticastLid(mlid)) return EINVAL;
  const ibv_device_attr& limits = qp->device()->profile().attr_ex.orig_attr;
  for (Group& g : groups_) {
    if (SameGid(g.mgid, mgid)) {
      // Attaching twice still delivers one copy.
      if (!g.members.count(qp) && g.members.size() >= static_cast<size_t>(std::max(limits.max_mcast_qp_attach, 0))) {
        return ENOMEM;
      }
      g.attachments.insert({qp, mlid});
      g.members.insert(qp);
      return 0;
    }
  }
  if (groups_.size() >= static_cast<size_t>(std::max(limits.max_mcast_grp, 0))) return ENOMEM;
  groups_.push_back(Group{mgid, mlid, {qp}, {{qp, mlid}}});
  return 0;
}

int Engine::DetachMulticast(Qp* qp, const ibv_gid& mgid, uint16_t mlid) {
  for (auto it = groups_.begin(); it != groups_.end(); ++it) {
    if (!SameGid(it->mgid, mgid)) continue;
    if (!it->attachments.erase({qp, mlid})) return EINVAL;  // not attached with this MLID
    // The QP leaves the group, whatever else it attached with (rxe_detach_mcast, mlx5).
    it->members.erase(qp);
    if (it->members.empty()) groups_.erase(it);
    return 0;
  }
  return EINVAL;
}

bool Engine::IsAttached(const Qp* qp) const {
  for (const Group& g : groups_) {
    if (g.members.count(const_cast<Qp*>(qp))) return true;
  }
  return false;
}

void Engine::DetachAllLocked(const Qp* qp) {
  for (Group& g : groups_) {
    g.members.erase(const_cast<Qp*>(qp));
    std::erase_if(g.attachments, [qp](const auto& a) { return a.first == qp; });
  }
  groups_.erase(std::remove_if(groups_.begin(), groups_.end(), [](const Group& g) { return g.members.empty(); }),
                groups_.end());
}

void Engine::ArmTimer(Qp* qp, std::chrono::nanoseconds ibta_duration, uint32_t time_scale) {
  auto scaled = ibta_duration / time_scale;
  if (scaled < kTimerFloor) scaled = kTimerFloor;
  TimerEntry& entry = qp->timer_entry();
  if (entry.index == TimerEntry::kNotArmed) {
    armed_.push_back(qp);
    entry.index = armed_.size() - 1;
  }
  entry.duration = scaled;
  if (!timer_thread_.joinable()) {
    entry.deadline = Clock::now() + scaled;
    entry.stamped = true;
    timer_thread_ = QuietThread([this] { TimerThread(); });
    return;
  }
  // The timer thread looks again within a floor: the deadline is taken from
  // its clock then (late by that at most, never early), and posting reads no
  // clock (a system call where the clock source has no vDSO).
  if (timer_looks_soon_.load(std::memory_order_relaxed)) {
    entry.stamped = false;
    return;
  }
  const Clock::rep wakeup = timer_wakeup_.load(std::memory_order_relaxed);
  if (wakeup == Clock::time_point::max().time_since_epoch().count()) {
    // The timer thread sleeps until it is woken (no timer was armed at its
    // last looks): it takes the deadline from its clock as it wakes,
    // microseconds late at most, and posting reads no clock for it (a second
    // system call, where the clock source has no vDSO).
    entry.stamped = false;
  } else {
    entry.deadline = Clock::now() + scaled;
    entry.stamped = true;
    // Only an earlier deadline needs a wake-up; a later one is seen when the
    // thread wakes for the earlier one (re-arming per message costs nothing).
    if (entry.deadline.time_since_epoch().count() >= wakeup) return;
  }
  std::lock_guard<std::mutex> lock(timer_mu_);
  timer_kicked_ = true;
  timer_cv_.notify_one();
}

void Engine::ArmTimerUnlessArmed(Qp* qp, std::chrono::nanoseconds ibta_duration, uint32_t time_scale) {
  if (qp->timer_entry().index == TimerEntry::kNotArmed) ArmTimer(qp, ibta_duration, time_scale);
}

void Engine::CancelTimer(Qp* qp) {
  TimerEntry& entry = qp->timer_entry();
  if (entry.index == TimerEntry::kNotArmed) return;
  // The last one takes its place.
  Qp* last = armed_.back();
  armed_[entry.index] = last;
  last->timer_entry().index = entry.index;
  armed_.pop_back();
  entry.index = TimerEntry::kNotArmed;
}

Engine::Clock::time_point Engine::RunDueTimersLocked(bool* lingered) {
  Clock::time_point now;
  const Clock::time_point wake_at = NextTimerLocked(lingered, &now);
  // Whether we look again within a floor: then ArmTimer leaves the deadline to
  // us (a long sleep, or none, must be told of an earlier deadline instead).
  timer_looks_soon_.store(wake_at != Clock::time_point::max() && wake_at - now <= kTimerFloor,
                          std::memory_order_relaxed);
  return wake_at;
}

Engine::Clock::time_point Engine::NextTimerLocked(bool* lingered, Clock::time_point* looked_at) {
  for (;;) {
    const Clock::time_point now = Clock::now();
    *looked_at = now;
    for (Qp* armed : armed_) {
      TimerEntry& entry = armed->timer_entry();
      if (!entry.stamped) {
        entry.deadline = now + entry.duration;
        entry.stamped = true;
      }
    }
    if (armed_.empty()) {
      // A QP whose messages were all answered re-arms with its next post:
      // stay due for one more floor first, so that re-arming (never earlier
      // than now + floor) finds us due before its deadline and costs the
      // poster no wake-up system call. Then sleep until a timer is armed.
      if (*lingered) return Clock::time_point::max();
      *lingered = true;
      return now + kTimerFloor;
    }
    *lingered = false;
    Qp* qp = armed_.front();
    for (Qp* armed : armed_) {
      if (armed->timer_entry().deadline < qp->timer_entry().deadline) qp = armed;
    }
    if (now < qp->timer_entry().deadline) return qp->timer_entry().deadline;
    CancelTimer(qp);
    // An answer may be waiting in our own ring while nobody polls: take it
    // first, so it is not mistaken for a loss.
    Fabric::Get().DrainInboundLocked();
    if (qp->timer_entry().index != TimerEntry::kNotArmed || !qp->TimerStillDue()) continue;
    qp->OnTimer();
  }
}

void Engine::TimerThread() {
  // How long to wait before looking again when the application holds the
  // engine lock (a timer fires at most this late: far below any timeout).
  constexpr std::chrono::microseconds kBusyRetry{1000};
  // A program that posts and polls in a loop takes the lock back within
  // nanoseconds of each unlock: spinning for a gap costs its CPU (on a small
  // machine, the very CPU the program's peer needs) and mostly fails anyway;
  // the timers are looked at again after kBusyRetry.
  constexpr int kLockSpins = 64;
  bool lingered = false;
  for (;;) {
    Clock::time_point wake_at;
    {
      auto lock = TryLockSpinning(mu_, kLockSpins);
      if (lock.owns_lock()) {
        wake_at = RunDueTimersLocked(&lingered);
      } else {
        wake_at = Clock::now() + kBusyRetry;
        timer_looks_soon_.store(true, std::memory_order_relaxed);
      }
      timer_wakeup_.store(wake_at.time_since_epoch().count(), std::memory_order_relaxed);
    }
    std::unique_lock<std::mutex> lock(timer_mu_);
    if (wake_at == Clock::time_point::max()) {
      timer_cv_.wait(lock, [this] { return timer_kicked_; });
    } else {
      timer_cv_.wait_until(lock, wake_at, [this] { return timer_kicked_; });
    }
    timer_kicked_ = false;
  }
}

}  // namespace simverbs
