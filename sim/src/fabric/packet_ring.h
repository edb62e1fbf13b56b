#pragma once

// A bounded multi-producer, single-consumer ring of WirePackets in shared
// memory: any process pushes, the owning process pops. Each slot carries a
// sequence number (Vyukov's bounded queue), so producers never take a lock.
//
// Waking the owner costs a system call, so a producer wakes it only when its
// progress thread sleeps and the owner is not in a poll loop: it polled an
// empty CQ in the last 2 µs. Such an owner drains the ring itself.

#include <atomic>
#include <cstdint>

#include "fabric/wire_packet.h"

namespace simverbs {

uint64_t MonotonicNs();

class PacketRing {
 public:
  static constexpr uint32_t kSlots = 256;

  // Lays out an empty ring in `memory` (of at least sizeof(PacketRing) bytes).
  static PacketRing* Init(void* memory);

  // False when the ring is full (the packet is lost, as on a congested wire).
  // On success *pos is the packet's position, for Consumed().
  bool Push(const Packet& pkt, int src_device_index, uint64_t* pos = nullptr);
  // True once the owner has taken the packet at `pos` out of the ring.
  bool Consumed(uint64_t pos) const { return tail_.load(std::memory_order_acquire) > pos; }
  // Hands the oldest packet to `take` (in place: no copy of its own), then
  // frees its slot. False when the ring is empty. Another process wrote the
  // packet: one whose payload length exceeds the payload area is corrupt and
  // is dropped (WirePacket::ToPacket reads the length once more, clamped).
  template <typename Take>
  bool Pop(Take&& take) {
    for (;;) {
      const uint64_t pos = tail_.load(std::memory_order_relaxed);
      Slot* slot = &slots_[pos % kSlots];
      if (slot->seq.load(std::memory_order_acquire) != pos + 1) return false;
      const bool sane = slot->pkt.payload_len <= WirePacket::kMaxPayload;
      if (sane) take(static_cast<const WirePacket&>(slot->pkt));
      slot->seq.store(pos + kSlots, std::memory_order_release);
      tail_.store(pos + 1, std::memory_order_relaxed);
      if (sane) return true;
    }
  }
  bool Empty() const;

  // The progress thread's sleep: until a producer wakes it (or Interrupt is
  // called) after WakeSeq() returned `seq`, or `timeout_ms` passes (< 0: no
  // limit). Read WakeSeq before checking for work, so no wake-up is missed.
  uint32_t WakeSeq() const { return wake_seq_.load(std::memory_order_acquire); }
  void Sleep(uint32_t seq, int timeout_ms);
  // Ends a Sleep at once (used to stop the consumer).
  void Interrupt();

  // The owner polled just now (0: it is about to block, wake it for anything).
  void MarkPolled(uint64_t now_ns) { last_poll_ns_.store(now_ns, std::memory_order_relaxed); }
  uint64_t last_poll_ns() const { return last_poll_ns_.load(std::memory_order_relaxed); }

 private:
  struct Slot {
    std::atomic<uint64_t> seq;
    WirePacket pkt;
  };
  std::atomic<uint64_t> head_;  // next slot to write (producers)
  alignas(64) std::atomic<uint64_t> tail_;  // next slot to read (consumer)
  alignas(64) std::atomic<uint32_t> sleeping_;
  std::atomic<uint32_t> wake_seq_;
  std::atomic<uint64_t> last_poll_ns_;
  alignas(64) Slot slots_[kSlots];
};

}  // namespace simverbs
