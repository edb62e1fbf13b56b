// The shared-memory packet ring: any process of the fabric writes it, so what
// the owner pops must be checked, never trusted.

#include "fabric/packet_ring.h"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include "gtest/gtest.h"

namespace simverbs {
namespace {

constexpr uint32_t kMarkerPsn = 0x00abcdef;
constexpr uint32_t kMarkerQpn = 0x00fedcba;

struct RingMemory {
  RingMemory() : bytes(new (std::align_val_t{64}) unsigned char[sizeof(PacketRing)]) {}
  ~RingMemory() { operator delete[](bytes, std::align_val_t{64}); }
  unsigned char* bytes;
};

Packet MarkedPacket(size_t payload) {
  Packet p;
  p.psn = kMarkerPsn;
  p.dst_qpn = kMarkerQpn;
  p.payload.assign(payload, 0x5a);
  return p;
}

// The ring's slots are private: find the pushed packet by its fields, as a
// peer that writes the shared memory would.
WirePacket* FindMarked(RingMemory& memory) {
  for (size_t off = 0; off + sizeof(WirePacket) <= sizeof(PacketRing); off += alignof(WirePacket)) {
    auto* wp = reinterpret_cast<WirePacket*>(memory.bytes + off);
    if (wp->psn == kMarkerPsn && wp->dst_qpn == kMarkerQpn) return wp;
  }
  return nullptr;
}

TEST(PacketRingTest, PopReturnsWhatWasPushed) {
  RingMemory memory;
  PacketRing* ring = PacketRing::Init(memory.bytes);
  ASSERT_TRUE(ring->Push(MarkedPacket(100), 0));
  uint32_t len = 0;
  uint8_t last = 0;
  const auto take = [&](const WirePacket& wp) {
    len = wp.payload_len;
    last = wp.payload[99];
  };
  ASSERT_TRUE(ring->Pop(take));
  EXPECT_EQ(len, 100u);
  EXPECT_EQ(last, 0x5a);
  EXPECT_FALSE(ring->Pop(take));
}

TEST(PacketRingTest, PayloadLengthBeyondThePayloadAreaIsDropped) {
  RingMemory memory;
  PacketRing* ring = PacketRing::Init(memory.bytes);
  ASSERT_TRUE(ring->Push(MarkedPacket(16), 0));
  WirePacket* in_ring = FindMarked(memory);
  ASSERT_NE(in_ring, nullptr);
  in_ring->payload_len = 0xffff;  // a corrupt (or malicious) peer
  ASSERT_TRUE(ring->Push(MarkedPacket(8), 0));
  // The corrupt packet is skipped; the good one behind it still arrives.
  uint32_t len = 0;
  const auto take = [&](const WirePacket& wp) { len = wp.payload_len; };
  ASSERT_TRUE(ring->Pop(take));
  EXPECT_EQ(len, 8u);
  EXPECT_FALSE(ring->Pop(take));
  EXPECT_TRUE(ring->Empty());
}


// A producer killed between claiming a slot and publishing it: the packets
// behind the hole wait until the owner learns the producer is dead, then flow.
TEST(PacketRingTest, HoleOfADeadProducerIsSkipped) {
  RingMemory memory;
  PacketRing* ring = PacketRing::Init(memory.bytes);
  constexpr int kDead = 3;
  constexpr int kLive = 4;
  uint64_t hole = 0;
  ASSERT_TRUE(ring->Claim(&hole, {kDead, 7}));  // ... and never publishes
  ASSERT_TRUE(ring->Push(MarkedPacket(8), 0, nullptr, {kLive, 1}));
  uint32_t len = 0;
  const auto take = [&](const WirePacket& wp) { len = wp.payload_len; };
  EXPECT_FALSE(ring->Pop(take)) << "the hole is in front";
  // Not while the claimant is alive (a stopped producer finishes later).
  EXPECT_FALSE(ring->SkipDeadClaim([](int, uint32_t) { return false; }));
  EXPECT_FALSE(ring->Pop(take));
  int asked = -1;
  uint32_t asked_generation = 0;
  EXPECT_TRUE(ring->SkipDeadClaim([&](int slot, uint32_t generation) {
    asked = slot;
    asked_generation = generation;
    return true;
  }));
  EXPECT_EQ(asked, kDead);
  EXPECT_EQ(asked_generation, 7u);
  ASSERT_TRUE(ring->Pop(take)) << "the packet behind the hole";
  EXPECT_EQ(len, 8u);
  EXPECT_TRUE(ring->Empty());
}

// A producer taken for dead that was only slow cannot publish into the slot
// once it was skipped (it may already belong to the next lap).
TEST(PacketRingTest, PublishIntoASkippedSlotFails) {
  RingMemory memory;
  PacketRing* ring = PacketRing::Init(memory.bytes);
  uint64_t pos = 0;
  ASSERT_TRUE(ring->Claim(&pos, {2, 1}));
  ASSERT_TRUE(ring->SkipDeadClaim([](int, uint32_t) { return true; }));
  EXPECT_FALSE(ring->Publish(pos, MarkedPacket(8), 0, {2, 1}));
  EXPECT_FALSE(ring->Pop([](const WirePacket&) {}));
}

// The same for a packet published with a plain store (a message's first
// packets, to an owner that polls).
TEST(PacketRingTest, UnfencedPublishIntoASkippedSlotFails) {
  RingMemory memory;
  PacketRing* ring = PacketRing::Init(memory.bytes);
  ring->MarkPolled();
  uint64_t pos = 0;
  ASSERT_TRUE(ring->Claim(&pos, {2, 1}));
  ASSERT_TRUE(ring->SkipDeadClaim([](int, uint32_t) { return true; }));
  Packet first = MarkedPacket(8);
  first.last = false;
  PacketRing::Owed owed;
  EXPECT_FALSE(ring->Publish(pos, first, 0, {2, 1}, &owed));
  EXPECT_FALSE(owed.look);
  EXPECT_FALSE(ring->Pop([](const WirePacket&) {}));
  // The ring goes on: the next lap's producer gets the slot.
  ASSERT_TRUE(ring->Push(MarkedPacket(8), 0, nullptr, {3, 1}));
  EXPECT_TRUE(ring->Pop([](const WirePacket&) {}));
}

// To an owner that polls, every packet is published without a fence and owes
// the producer a look whether the owner sleeps (taken behind one fence
// later); a packet to an owner about to block is published with one and owes
// no look.
TEST(PacketRingTest, PacketsToAPollingOwnerOweALook) {
  if (!PacketRing::kUnfencedPublish) GTEST_SKIP() << "every publish is fenced in this build";
  RingMemory memory;
  PacketRing* ring = PacketRing::Init(memory.bytes);
  ring->MarkPolled();
  Packet first = MarkedPacket(8);
  first.last = false;
  PacketRing::Owed owed;
  ASSERT_TRUE(ring->Push(first, 0, nullptr, {1, 1}, &owed));
  EXPECT_TRUE(owed.look);
  EXPECT_FALSE(owed.wake) << "no progress thread sleeps";
  PacketRing::Owed after_last;
  ASSERT_TRUE(ring->Push(MarkedPacket(8), 0, nullptr, {1, 1}, &after_last));
  EXPECT_TRUE(after_last.look);
  ring->MarkBlocking();
  PacketRing::Owed to_blocking;
  ASSERT_TRUE(ring->Push(first, 0, nullptr, {1, 1}, &to_blocking));
  EXPECT_FALSE(to_blocking.look);
  int popped = 0;
  while (ring->Pop([](const WirePacket&) {})) ++popped;
  EXPECT_EQ(popped, 3);
}

// An empty ring, or one whose oldest slot is published, has no hole to skip.
TEST(PacketRingTest, NothingToSkipWithoutAHole) {
  RingMemory memory;
  PacketRing* ring = PacketRing::Init(memory.bytes);
  const auto dead = [](int, uint32_t) { return true; };
  EXPECT_FALSE(ring->SkipDeadClaim(dead));
  ASSERT_TRUE(ring->Push(MarkedPacket(8), 0, nullptr, {1, 1}));
  EXPECT_FALSE(ring->SkipDeadClaim(dead));
  EXPECT_TRUE(ring->Pop([](const WirePacket&) {}));
}

// A producer that asked for room is woken once the owner has drained the ring
// to half full, not before, and once per request.
TEST(PacketRingTest, RoomIsAnsweredAtHalfFull) {
  RingMemory memory;
  PacketRing* ring = PacketRing::Init(memory.bytes);
  constexpr int kProducer = 3;
  for (uint32_t i = 0; i < PacketRing::kSlots; ++i) ASSERT_TRUE(ring->Push(MarkedPacket(8), 0));
  EXPECT_FALSE(ring->WantRoom(kProducer)) << "the ring is full";
  int woken = 0;
  const auto wake = [&](int slot) {
    EXPECT_EQ(slot, kProducer);
    ++woken;
  };
  const auto pop = [&](uint32_t n) {
    for (uint32_t i = 0; i < n; ++i) ASSERT_TRUE(ring->Pop([](const WirePacket&) {}));
  };
  pop(PacketRing::kSlots / 2 - 1);  // one more than half full
  ring->WakeRoomWanted(wake);
  EXPECT_EQ(woken, 0);
  pop(1);
  ring->WakeRoomWanted(wake);
  EXPECT_EQ(woken, 1);
  pop(1);
  ring->WakeRoomWanted(wake);
  EXPECT_EQ(woken, 1) << "asked once, woken once";
}

// Another process may write anything into the ring: a head that every slot
// contradicts makes Push give up (the packet waits in the sender's backlog)
// instead of spinning for ever.
TEST(PacketRingTest, PushGivesUpOnGarbage) {
  RingMemory memory;
  PacketRing* ring = PacketRing::Init(memory.bytes);
  // A head moved back behind a published slot: that slot's sequence is ahead
  // of the head for good ("another producer got there first", every time).
  ASSERT_TRUE(ring->Push(MarkedPacket(8), 0));
  std::memset(memory.bytes, 0, 8);  // head_ is the first field
  EXPECT_FALSE(ring->Push(MarkedPacket(8), 0));
}

}  // namespace
}  // namespace simverbs
