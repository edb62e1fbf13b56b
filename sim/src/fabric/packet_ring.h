#pragma once

// A bounded multi-producer, single-consumer ring of WirePackets in shared
// memory: any process pushes, the owning process pops. Each slot carries a
// sequence number (Vyukov's bounded queue), so producers never take a lock.
//
// Waking the owner costs a system call, so a producer wakes it only when its
// progress thread sleeps and the owner is not in a poll loop. The owner counts
// its polls and posts (MarkPolled: no clock, no system call) and says when it
// leaves its poll loop or is about to block. An owner about to block (or that
// never polled) is woken at once. One that polls, or just found work there, is
// likely to drain the ring itself in a moment (a bandwidth loop posts and
// polls again), or may be spinning on memory: the producer that can wait
// (Owed::wake) is told so, looks again at its own next polls, and wakes the
// owner only if the packet is still there and the owner has stopped polling
// (fabric/fabric.h). The producer reads nothing of the owner's progress per
// packet: the lines the owner writes on every poll and pop would each cost a
// cache miss. (One that stops polling without saying so is found by its
// progress thread's next nap.)
//
// Publishing. A packet to an owner that polls is published with a plain
// (release) store: a compare-and-swap (or a fence) would wait until the
// packet's lines, which the owner read last, are the producer's again, once
// per packet, instead of overlapping that wait with the next packet's work
// (the next message of a bandwidth loop, or a wait for the answer). The look
// whether the owner sleeps (Dekker with Sleep(), which needs a fence between
// the publish and the look) is then owed (Owed::look) and taken behind one
// fence (FenceUnfencedPublishes) under the lock that every push is made
// under: after a backlog flush, and at the producer's next settling of owed
// wakes (every few of its polls, before it blocks, its progress thread). The
// owner meanwhile polls and finds the packet itself; if it stops polling
// without blocking, its progress thread's next nap finds it. A packet to an
// owner about to block is published with a compare-and-swap and looks at
// once.
//
// A producer killed between claiming a slot and publishing it would leave a
// hole that every later packet waits behind. So a producer announces the
// position it is about to claim in its own entry of `claims_` (by its fabric
// slot, with its generation); the owner, finding the oldest slot claimed but
// unpublished, asks whether that producer is dead (SkipDeadClaim; its
// progress thread asks only once the claim has waited a millisecond: most are
// a live producer between claim and publish, and asking is a system call)
// and only then skips the slot. A live producer, even a stopped one, is waited for. A
// producer publishes only into a slot still its own (by a compare-and-swap,
// or a plain store right after a look: see above), so one taken for dead
// meanwhile does not publish into a later lap.
//
// Flow control. A producer whose packets find the ring full keeps them, in
// order, in a backlog of its own (fabric/fabric.h) and says so here: its
// generation in `waiting_` while it holds packets for this ring (the owner's
// retry timers then know that a live peer still has answers for it), and a
// bit in `room_wanted_` when its progress thread goes to sleep with them. The
// owner, once it has drained the ring to half full, wakes the producers whose
// bit is set (one system call per producer and sleep, not per packet).
//
// Why one ring per owner, not one per producer and owner: a ring per pair
// would need no claim (no announcement, no compare-and-swap on head_), but
// the claim is not what a stream waits for. Measured with both taken out
// (a single producer, as in two-process perftest), ib_send_bw 64 B, 12
// interleaved rounds each: 5.2-8.2 Mpps (median 7.4, mean 7.2) with the
// claim, 5.6-8.4 (median 7.7, mean 7.2) without, on an AMD EPYC VM. What
// a stream waits for is its stores into lines the owner read last
// (PrefetchSlotAfterNext).
//
// Every field here can be written by any process of the same user: nothing
// read from it is trusted (Push gives up after a bounded number of tries).

#include <atomic>
#include <cstdint>

#include "fabric/fabric_limits.h"
#include "fabric/wire_packet.h"

namespace simverbs {

uint64_t MonotonicNs();
// CLOCK_MONOTONIC_COARSE (the last timer tick: no system call, whatever the
// clock source).
uint64_t CoarseMonotonicNs();

class PacketRing {
 public:
  static constexpr uint32_t kSlots = 256;
#if defined(__SANITIZE_THREAD__)
  // ThreadSanitizer does not understand fences: there every publish is a
  // compare-and-swap.
  static constexpr bool kUnfencedPublish = false;
#else
  static constexpr bool kUnfencedPublish = true;
#endif

  // What a producer owes the owner after a push (see the top).
  struct Owed {
    bool wake = false;  // the owner may need waking: look again at our next polls
    bool look = false;  // published unfenced: look whether the owner sleeps, behind a fence
  };

  // Lays out an empty ring in `memory` (of at least sizeof(PacketRing) bytes).
  static PacketRing* Init(void* memory);

  // False when the ring is full (or its shared state is not believable). On
  // success *pos is the packet's position, for Consumed(). `producer` says
  // who pushes (its slot and generation for SkipDeadClaim; all of it goes
  // out with the packet: WireSender).
  // `owed`: see the top; nullptr: wake the owner now if it needs it.
  bool Push(const Packet& pkt, int src_device_index, uint64_t* pos = nullptr, const WireSender& producer = {},
            Owed* owed = nullptr);
  // Push of a plain ACK, READ response or SEND whose line is `line`, with
  // line.payload_len bytes of `bytes` (WirePacket::FromLine); or, with
  // `read_addressing`, of a READ request (WirePacket::FromReadLine).
  bool PushLine(const WirePacket::Line& line, uint32_t psn, const uint8_t* bytes, uint64_t* pos, const WireSender& producer,
               Owed* owed, const WirePacket::Addressing* read_addressing = nullptr);
  // Push in its two steps: claims a slot (false: full), then writes and
  // publishes the packet there (false: the owner skipped the slot meanwhile,
  // taking the producer for dead).
  bool Claim(uint64_t* pos, const WireSender& producer);
  bool Publish(uint64_t pos, const Packet& pkt, int src_device_index, const WireSender& producer,
               Owed* owed = nullptr);
  // True once the owner has taken the packet at `pos` out of the ring.
  bool Consumed(uint64_t pos) const { return tail_.load(std::memory_order_acquire) > pos; }
  // The position of the oldest packet (the next to pop).
  uint64_t tail() const { return tail_.load(std::memory_order_relaxed); }
  // Hands the oldest packet to `take` (in place: no copy of its own), then
  // frees its slot. False when the ring is empty (or after a ring's worth of
  // garbage: the next call goes on). Another process wrote the packet: one
  // whose payload length exceeds the payload area is corrupt and is dropped
  // (WirePacket::ToPacket reads the length once more, clamped).
  template <typename Take>
  bool Pop(Take&& take) {
    // Slots skipped as garbage: at most a ring's worth per call (another
    // process could publish garbage as fast as we skip it).
    for (uint32_t skipped = 0; skipped < kSlots; ++skipped) {
      const uint64_t pos = tail_.load(std::memory_order_relaxed);
      Slot* slot = &slots_[pos % kSlots];
      if (slot->seq.load(std::memory_order_acquire) != pos + 1) return false;
      // The next slot's first line (sequence word and header), asked for now:
      // when packets wait in the ring (a stream), its miss overlaps this
      // packet's delivery. (An owner that keeps up reads that line next anyway.)
      __builtin_prefetch(&slots_[(pos + 1) % kSlots], 0, 3);
      const bool sane = slot->pkt.payload_len <= WirePacket::kMaxPayload;
      if (sane) take(static_cast<const WirePacket&>(slot->pkt));
      slot->seq.store(pos + kSlots, std::memory_order_release);
      tail_.store(pos + 1, std::memory_order_relaxed);
      if (sane) return true;
    }
    return false;
  }
  bool Empty() const;
  // Asks the CPU for the lines of the next packet past its first, once
  // Empty() said it is there: the first payload lines, and the addressing
  // (a READ's or WRITE's RETH) and extended (atomics, XRC) lines when its
  // flags say they are in use. They are another process's writes, and
  // fetching them while the engine lock is taken and the header read hides
  // a cross-core miss of the delivery. (A hint: nothing is read from the slot
  // itself but its length, clamped, and its flags.)
  void PrefetchNextPacket() const;
  // A producer that streams small packets into this ring (fabric/fabric.h
  // says when) asks, after its packet at `pos` of `payload_len` bytes, for
  // the lines that a packet of the same size would write in the slot two
  // past it (the header line and the payload's) to be its own to write: the
  // owner read them when it last went round, and that later packet's stores
  // then do not wait for the owner's CPU to give them up. On CPUs far from
  // each other that wait bounded a stream of small packets (ib_send_bw 64 B
  // at about 4.3 Mpps). Two ahead: one ahead is as good, and four or more
  // ahead gained less. Not in a ping-pong (the owner spins on the slot after
  // the last one published: lines taken from under it are only fetched
  // back), nor for packets over kMaxStreamPrefetch bytes (their copy is long
  // enough, and asking for every line of a 4 KiB slot made 64 KiB SENDs and
  // 1 MiB READs 30-45% slower). A hint: nothing is read or written.
  static constexpr uint32_t kMaxStreamPrefetch = 1024;
  void PrefetchSlotAfterNext(uint64_t pos, uint32_t payload_len) const;
  // A Push would find a free slot now.
  bool HasRoom() const;

  // Flow control (see above); `producer_slot` is the producer's fabric slot.
  void SetWaiting(int producer_slot, uint32_t producer_generation);  // generation 0: holds nothing
  bool Waiting(int producer_slot, uint32_t producer_generation) const;
  // Asks to be woken once the owner has made room; returns whether there is
  // room already (then the request may never be answered: push now).
  bool WantRoom(int producer_slot);
  // The owner, after draining: calls wake(slot) for each producer that asked
  // for room, once the ring is at most half full.
  template <typename Wake>
  void WakeRoomWanted(Wake&& wake) {
    // More than half full when the slot half a ring ahead is published. (Not
    // head_: producers claim slots by compare-and-swap on its line, and a
    // read of it per drain would make each of their claims miss it.)
    const uint64_t half = tail_.load(std::memory_order_relaxed) + kSlots / 2;
    if (slots_[half % kSlots].seq.load(std::memory_order_relaxed) == half + 1) return;
    // One read-modify-write per drain (it reads the latest value): either it
    // sees a producer's request, or that producer's own read-modify-write
    // comes after it and the producer sees the slots we freed (WantRoom).
    if (room_asked_.exchange(0, std::memory_order_acq_rel) == 0) return;
    for (int word = 0; word < kRoomWords; ++word) {
      if (room_wanted_[word].load(std::memory_order_relaxed) == 0) continue;
      uint64_t bits = room_wanted_[word].exchange(0, std::memory_order_acq_rel);
      while (bits) {
        const int bit = __builtin_ctzll(bits);
        bits &= bits - 1;
        wake(word * 64 + bit);
      }
    }
  }

  // The oldest slot was claimed but is not published: if `dead(slot,
  // generation)` says its producer is gone, frees it and returns true (the
  // packet is lost, as on a wire whose sender died mid-packet).
  template <typename Dead>
  bool SkipDeadClaim(Dead&& dead) {
    const uint64_t pos = tail_.load(std::memory_order_relaxed);
    Slot* slot = &slots_[pos % kSlots];
    if (slot->seq.load(std::memory_order_acquire) != pos || head_.load(std::memory_order_acquire) <= pos) return false;
    // Every producer that announces this position must be dead: a live one
    // may be the one that won it (a dead one may have lost it and died).
    bool claimed = false;
    for (int i = 0; i < kMaxFabricProcesses; ++i) {
      if (claims_[i].pos_plus_1.load(std::memory_order_acquire) != pos + 1) continue;
      if (!dead(i, claims_[i].generation.load(std::memory_order_acquire))) return false;
      claimed = true;
    }
    if (!claimed) return false;
    uint64_t expected = pos;
    if (!slot->seq.compare_exchange_strong(expected, pos + kSlots, std::memory_order_acq_rel)) return false;
    tail_.store(pos + 1, std::memory_order_relaxed);
    return true;
  }

  // The progress thread's sleep: until a producer wakes it (or Interrupt is
  // called) after WakeSeq() returned `seq`, or `timeout_ms` passes (< 0: no
  // limit). Read WakeSeq before checking for work, so no wake-up is missed.
  uint32_t WakeSeq() const { return wake_seq_.load(std::memory_order_acquire); }
  void Sleep(uint32_t seq, int timeout_ms);
  // The same while the ring holds packets that the application drains: no
  // producer wakes it (Interrupt still does).
  void Nap(uint32_t seq, int timeout_ms);
  void NapMicros(uint32_t seq, int timeout_us);
  // Ends a Sleep at once (used to stop the consumer).
  void Interrupt();
  // A wake a producer owed: if the owner's progress thread sleeps, wakes it.
  void WakeIfSleeping();
  // An owed look (Owed::look), after FenceUnfencedPublishes: whether the
  // owner sleeps; what it finds is added to `owed` (its wake owed, or given now).
  void LookAfterPublish(Owed* owed);
  // The fence that owed looks are taken behind: the calling thread's earlier
  // publishes, and those made under a lock it now holds, are seen from here on
  // by an owner that goes to sleep.
  static void FenceUnfencedPublishes();

  // The owner polled (or posted) just now; it found work and may leave its
  // poll loop; it is about to block (wake it for anything from now on).
  void MarkPolled() {
    polls_.store(polls_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    if (poll_state_.load(std::memory_order_relaxed) != kPolling) poll_state_.store(kPolling, std::memory_order_relaxed);
    if (blocking_.load(std::memory_order_relaxed)) blocking_.store(0, std::memory_order_relaxed);
  }
  void MarkLeftPollLoop() { poll_state_.store(kFoundWork, std::memory_order_relaxed); }
  void MarkBlocking() {
    poll_state_.store(kNotPolling, std::memory_order_relaxed);
    blocking_.store(1, std::memory_order_relaxed);
  }
  uint64_t polls() const { return polls_.load(std::memory_order_relaxed); }
  // The owner's progress thread spins on the ring, taking packets as they
  // come, for an application that does not poll: a packet pushed now is
  // delivered by the owner's CPU without a wake-up. Set only on a change (a
  // line producers read per packet), and a hint: a stopped owner keeps it.
  void MarkLooking(bool looking) {
    if (looking_.load(std::memory_order_relaxed) != looking) looking_.store(looking, std::memory_order_relaxed);
  }
  bool owner_looking() const { return looking_.load(std::memory_order_relaxed) != 0; }
  bool in_poll_loop() const { return poll_state_.load(std::memory_order_relaxed) == kPolling; }
  // In its poll loop, or just found work there (not blocking).
  bool app_may_poll() const { return poll_state_.load(std::memory_order_relaxed) != kNotPolling; }

 private:
  // Claim and Publish without the writing, for Push and PushLine (inlined:
  // they are on every packet's path). PublishWritten publishes the packet
  // written into the slot at `pos`: of an answered WRITE (Packet::answered),
  // the last of its message (Packet::last).
  [[gnu::always_inline]] inline bool ClaimSlot(uint64_t* pos, const WireSender& producer);
  [[gnu::always_inline]] inline bool PublishWritten(uint64_t pos, bool answered, bool last,
                                                    const WireSender& producer, Owed* owed);
  // Line-aligned, the sequence word right before the packet (wire_packet.h:
  // what every packet needs shares its line).
  struct alignas(64) Slot {
    std::atomic<uint64_t> seq;
    WirePacket pkt;
  };
  static_assert(sizeof(std::atomic<uint64_t>) == 8 && sizeof(Slot) % 64 == 0);
  struct Announcement {
    std::atomic<uint64_t> pos_plus_1;  // the position being claimed + 1; 0: none
    std::atomic<uint32_t> generation;  // of the producer's fabric slot
  };
  std::atomic<uint64_t> head_;  // next slot to write (producers)
  alignas(64) std::atomic<uint64_t> tail_;  // next slot to read (consumer)
  alignas(64) std::atomic<uint32_t> sleeping_;
  std::atomic<uint32_t> wake_seq_;
  alignas(64) std::atomic<uint64_t> polls_;  // written by the owner on every poll: a line of its own
  // What the owner's application thread does (see the top).
  static constexpr uint32_t kNotPolling = 0, kPolling = 1, kFoundWork = 2;
  std::atomic<uint32_t> poll_state_;
  // 1 while poll_state_ is kNotPolling: what a producer reads per packet, on
  // a line the owner writes only when it starts or stops blocking (poll_state_
  // changes with every poll that finds work).
  alignas(64) std::atomic<uint32_t> blocking_;
  std::atomic<uint32_t> looking_;  // 1 while the progress thread spins on the ring for an application that does not poll
  static constexpr int kRoomWords = kMaxFabricProcesses / 64;
  alignas(64) Announcement claims_[kMaxFabricProcesses];  // by producer slot
  alignas(64) std::atomic<uint32_t> waiting_[kMaxFabricProcesses];  // by producer slot: its generation, or 0
  alignas(64) std::atomic<uint64_t> room_wanted_[kRoomWords];
  std::atomic<uint64_t> room_asked_;  // requests since the owner last looked
  alignas(64) Slot slots_[kSlots];
};

}  // namespace simverbs
