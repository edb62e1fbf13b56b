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
  in_ring->payload_len = 0x7fffffff;  // a corrupt (or malicious) peer
  ASSERT_TRUE(ring->Push(MarkedPacket(8), 0));
  // The corrupt packet is skipped; the good one behind it still arrives.
  uint32_t len = 0;
  const auto take = [&](const WirePacket& wp) { len = wp.payload_len; };
  ASSERT_TRUE(ring->Pop(take));
  EXPECT_EQ(len, 8u);
  EXPECT_FALSE(ring->Pop(take));
  EXPECT_TRUE(ring->Empty());
}

}  // namespace
}  // namespace simverbs
