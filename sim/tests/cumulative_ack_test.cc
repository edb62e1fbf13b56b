// Which ACK may stand for an earlier one (transport/cumulative_ack.h): only
// a later positive ACK between the same two QPs at the same address.

#include "transport/cumulative_ack.h"

#include <cstdint>

#include "gtest/gtest.h"

namespace simverbs {
namespace {

Packet Ack(uint32_t psn) {
  Packet p;
  p.kind = Packet::Kind::kAck;
  p.src_qpn = 0x11;
  p.dst_qpn = 0x22;
  p.psn = psn;
  p.dst.is_global = true;
  p.dst.dgid.raw[15] = 7;
  return p;
}

TEST(CumulativeAck, ALaterAckOfTheSameQpsReplacesAnEarlierOne) {
  EXPECT_TRUE(ReplacesAck(Ack(100), Ack(101)));
  EXPECT_TRUE(ReplacesAck(Ack(100), Ack(100 + 0x7ffffe)));
  EXPECT_TRUE(ReplacesAck(Ack(0xfffffe), Ack(1))) << "across the PSN wrap";
}

TEST(CumulativeAck, AnEarlierOrEqualPsnDoesNot) {
  EXPECT_FALSE(ReplacesAck(Ack(101), Ack(100))) << "a duplicate ACK";
  EXPECT_FALSE(ReplacesAck(Ack(1), Ack(0xfffffe)));
  EXPECT_FALSE(ReplacesAck(Ack(100), Ack(100 + 0x800000))) << "half the PSN space ahead is behind";
}

TEST(CumulativeAck, AnAckBetweenOtherQpsOrAddressesDoesNot) {
  const Packet held = Ack(100);
  Packet next = Ack(101);
  next.src_qpn = 0x12;
  EXPECT_FALSE(ReplacesAck(held, next)) << "another sender";
  next = Ack(101);
  next.dst_qpn = 0x23;
  EXPECT_FALSE(ReplacesAck(held, next)) << "another destination QP";
  next = Ack(101);
  next.dst.dgid.raw[15] = 8;
  EXPECT_FALSE(ReplacesAck(held, next)) << "another destination GID";
  next = Ack(101);
  next.dst.port_num = 2;
  EXPECT_FALSE(ReplacesAck(held, next)) << "another port";
  next = Ack(101);
  next.transport = IBV_QPT_XRC_SEND;
  EXPECT_FALSE(ReplacesAck(held, next)) << "another transport";
}

TEST(CumulativeAck, ANakAnAnswerOrAnAckWithBytesIsNotAPlainAck) {
  Packet next = Ack(101);
  next.kind = Packet::Kind::kNak;
  next.nak = Packet::Nak::kSequence;
  EXPECT_FALSE(IsPlainAck(next));
  EXPECT_FALSE(ReplacesAck(Ack(100), next));
  next = Ack(101);
  next.nak = Packet::Nak::kRnr;
  EXPECT_FALSE(IsPlainAck(next));
  next = Ack(101);
  next.kind = Packet::Kind::kAtomicAck;
  EXPECT_FALSE(ReplacesAck(Ack(100), next)) << "an atomic's answer carries its value";
  next = Ack(101);
  const uint8_t byte = 1;
  next.payload.Borrow(&byte, 1);
  EXPECT_FALSE(IsPlainAck(next));
  EXPECT_TRUE(IsPlainAck(Ack(101)));
}

}  // namespace
}  // namespace simverbs
