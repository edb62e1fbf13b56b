// The packet as it crosses between processes: every field arrives, and the
// lines a packet does not use carry nothing of the packet before it.

#include "fabric/wire_packet.h"

#include "fabric/profile_gids.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace simverbs {
namespace {

// A packet with every field set to a value of its own (none is its default).
Packet EveryField() {
  Packet p;
  p.kind = Packet::Kind::kAtomicAck;
  p.transport = IBV_QPT_UC;
  p.op = IBV_WR_ATOMIC_CMP_AND_SWP;
  p.first = false;
  p.last = true;
  p.solicited = true;
  p.psn = 0x123456;
  p.src_port = 2;
  p.slid = 0x1234;
  p.src_qpn = 0x11;
  p.dst.dlid = 0x4321;
  p.dst.is_global = true;
  p.dst.dgid.global.subnet_prefix = 0xfe80;
  p.dst.dgid.global.interface_id = 0x77;
  p.dst.sgid_index = 3;
  p.dst.sl = 5;
  p.dst.port_num = 2;
  p.dst_qpn = 0x22;
  p.has_grh = true;
  p.sgid.global.subnet_prefix = 0xfe81;
  p.sgid.global.interface_id = 0x88;
  p.qkey = 0x11111111;
  p.xrc_srqn = 0x33;
  p.xrc_domain_dev = 0x44;
  p.xrc_domain_ino = 0x55;
  p.pkey = 0x8001;
  p.remote_addr = 0x1000;
  p.rkey = 0x66;
  p.dma_length = 0x2000;
  p.compare_add = 0x77;
  p.swap = 0x88;
  p.imm_data = 0x99;
  p.nak = Packet::Nak::kRemoteAccess;
  p.atomic_orig = 0xaa;
  p.placed = true;
  p.answered = true;
  p.psn_count = 7;
  p.payload.assign(100, 0x5a);
  return p;
}

void ExpectSameFields(const Packet& a, const Packet& b) {
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.transport, b.transport);
  EXPECT_EQ(a.op, b.op);
  EXPECT_EQ(a.first, b.first);
  EXPECT_EQ(a.last, b.last);
  EXPECT_EQ(a.solicited, b.solicited);
  EXPECT_EQ(a.psn, b.psn);
  EXPECT_EQ(a.src_port, b.src_port);
  EXPECT_EQ(a.slid, b.slid);
  EXPECT_EQ(a.src_qpn, b.src_qpn);
  EXPECT_EQ(a.dst.dlid, b.dst.dlid);
  EXPECT_EQ(a.dst.is_global, b.dst.is_global);
  EXPECT_EQ(0, std::memcmp(&a.dst.dgid, &b.dst.dgid, sizeof(ibv_gid)));
  EXPECT_EQ(a.dst.sgid_index, b.dst.sgid_index);
  EXPECT_EQ(a.dst.sl, b.dst.sl);
  EXPECT_EQ(a.dst.port_num, b.dst.port_num);
  EXPECT_EQ(a.dst_qpn, b.dst_qpn);
  EXPECT_EQ(a.has_grh, b.has_grh);
  EXPECT_EQ(0, std::memcmp(&a.sgid, &b.sgid, sizeof(ibv_gid)));
  EXPECT_EQ(a.qkey, b.qkey);
  EXPECT_EQ(a.xrc_srqn, b.xrc_srqn);
  EXPECT_EQ(a.xrc_domain_dev, b.xrc_domain_dev);
  EXPECT_EQ(a.xrc_domain_ino, b.xrc_domain_ino);
  EXPECT_EQ(a.pkey, b.pkey);
  EXPECT_EQ(a.remote_addr, b.remote_addr);
  EXPECT_EQ(a.rkey, b.rkey);
  EXPECT_EQ(a.dma_length, b.dma_length);
  EXPECT_EQ(a.compare_add, b.compare_add);
  EXPECT_EQ(a.swap, b.swap);
  EXPECT_EQ(a.imm_data, b.imm_data);
  EXPECT_EQ(a.nak, b.nak);
  EXPECT_EQ(a.atomic_orig, b.atomic_orig);
  EXPECT_EQ(a.placed, b.placed);
  EXPECT_EQ(a.answered, b.answered);
  EXPECT_EQ(a.psn_count, b.psn_count);
  ASSERT_EQ(a.payload.size(), b.payload.size());
  if (a.payload.size() > 0) {  // (an empty payload's data() may be null)
    EXPECT_EQ(0, std::memcmp(a.payload.data(), b.payload.data(), a.payload.size()));
  }
}

TEST(WirePacketTest, EveryFieldArrives) {
  auto wire = std::make_unique<WirePacket>();
  const Packet sent = EveryField();
  wire->From(sent, 1, WireSender{3, 7, (uint64_t{5} << 32) + 9});
  EXPECT_EQ(wire->src_device, 1);
  EXPECT_EQ(wire->sender_slot, 3);
  EXPECT_EQ(wire->sender_generation, 7u);
  EXPECT_EQ(wire->sender_consumed, 9u) << "the low 32 bits";
  Packet received;
  wire->ToPacket(nullptr, &received);
  ExpectSameFields(sent, received);
}

TEST(WirePacketTest, UnusedLinesCarryNothingOfAnEarlierPacket) {
  auto wire = std::make_unique<WirePacket>();
  wire->From(EveryField(), 0, {});
  Packet ack;  // no GRH, RETH, atomic or XRC field: its defaults
  ack.kind = Packet::Kind::kAck;
  ack.psn = 5;
  wire->From(ack, 0, {});
  EXPECT_EQ(wire->flags & (WirePacket::kAddressing | WirePacket::kExtended), 0);
  Packet received = EveryField();  // ToPacket must overwrite every field
  wire->ToPacket(nullptr, &received);
  ExpectSameFields(ack, received);
}

// A plain ACK between two QPs, without a GRH.
Packet PlainAck(uint32_t psn) {
  Packet p;
  p.kind = Packet::Kind::kAck;
  p.op = IBV_WR_SEND;
  p.src_qpn = 0x11;
  p.dst_qpn = 0x22;
  p.dst.dlid = 0x4321;
  p.psn = psn;
  return p;
}

// `p` as a RoCE packet between two GIDs of the profile (which go by number).
// Requires: the profile has GIDs.
Packet Roce(Packet p) {
  const ProfileGids& gids = ProfileGids::Get();
  p.has_grh = true;
  p.dst.is_global = true;
  p.dst.dgid = gids.At(1);
  p.sgid = gids.At(static_cast<uint8_t>(gids.size()));
  p.dst.sgid_index = 1;
  return p;
}

WirePacket::Line LineOf(const WirePacket& wire) {
  uint32_t psn = 0;
  return wire.ReadLine(&psn);
}

// The addressing line's fields (its padding aside) are the same in both.
void ExpectSameAddressing(const WirePacket& expected, const WirePacket& written, const std::string& what) {
  EXPECT_EQ(0, std::memcmp(&expected.addressing.dgid, &written.addressing.dgid, sizeof(ibv_gid))) << what;
  EXPECT_EQ(0, std::memcmp(&expected.addressing.sgid, &written.addressing.sgid, sizeof(ibv_gid))) << what;
  EXPECT_EQ(expected.addressing.remote_addr, written.addressing.remote_addr) << what;
  EXPECT_EQ(expected.addressing.dma_length, written.addressing.dma_length) << what;
  EXPECT_EQ(expected.addressing.rkey, written.addressing.rkey) << what;
}

// `write` writes `p` from a line, with the sender hint it is given: what it
// writes must be byte for byte what From writes for `p` (the first line, the
// payload, and the addressing line's fields when that is in use), and read
// back as `p`. Returns the first line written.
WirePacket::Line ExpectWrittenAsFromWould(const Packet& p, const std::function<void(WirePacket*, const WireSender&)>& write,
                                          const std::string& what) {
  const WireSender sender{5, 9, (uint64_t{1} << 32) + 77};
  auto expected = std::make_unique<WirePacket>();
  auto written = std::make_unique<WirePacket>();
  std::memset(static_cast<void*>(expected.get()), 0x5a, sizeof(WirePacket));
  std::memset(static_cast<void*>(written.get()), 0xa5, sizeof(WirePacket));  // every byte in use must be written
  expected->From(p, 2, sender);
  write(written.get(), sender);
  EXPECT_EQ(0, std::memcmp(expected.get(), written.get(), offsetof(WirePacket, payload) + p.payload.size())) << what;
  if (expected->flags & WirePacket::kAddressing) ExpectSameAddressing(*expected, *written, what);
  Packet received;
  written->ToPacket(nullptr, &received);
  ExpectSameFields(p, received);
  return LineOf(*written);
}

// Fabric::DrainInboundLocked takes a plain ACK whose Line is the held
// one's by its PSN alone: that must be what the whole packet would differ in.
TEST(WirePacketTest, TwoLinesAreTheSameOnlyWhenThePacketsDifferInThePsnAlone) {
  auto held = std::make_unique<WirePacket>();
  auto next = std::make_unique<WirePacket>();
  held->From(PlainAck(100), 0, WireSender{3, 7, 40});
  next->From(PlainAck(101), 0, WireSender{3, 7, 41});
  uint32_t psn = 0;
  const WirePacket::Line line = next->ReadLine(&psn);
  EXPECT_EQ(psn, 101u);
  EXPECT_TRUE(line.PlainAck());
  EXPECT_TRUE(line == LineOf(*held)) << "the PSN and the sender hint are not part of it";
  Packet from_next;
  next->ToPacket(nullptr, &from_next);
  Packet from_held;
  held->ToPacket(nullptr, &from_held);
  from_held.psn = psn;
  ExpectSameFields(from_held, from_next);

  // Anything else that differs makes the lines differ, or the ACK not plain.
  const auto differs = [&](Packet p, const char* what) {
    next->From(p, 0, {});
    const WirePacket::Line other = LineOf(*next);
    EXPECT_FALSE(other.PlainAck() && other == LineOf(*held)) << what;
  };
  Packet p = PlainAck(101);
  p.src_qpn = 0x12;
  differs(p, "another sender");
  p = PlainAck(101);
  p.dst_qpn = 0x23;
  differs(p, "another destination QP");
  p = PlainAck(101);
  p.dst.dlid = 0x4322;
  differs(p, "another destination LID");
  p = PlainAck(101);
  p.dst.port_num = 2;
  differs(p, "another port");
  p = PlainAck(101);
  p.transport = IBV_QPT_XRC_SEND;
  differs(p, "another transport");
  p = PlainAck(101);
  p.op = IBV_WR_RDMA_WRITE;
  differs(p, "an ACK of another operation");
  p = PlainAck(101);
  p.nak = Packet::Nak::kRnr;
  differs(p, "a NAK");
  p = PlainAck(101);
  p.kind = Packet::Kind::kAtomicAck;
  differs(p, "an atomic's answer");
  p = PlainAck(101);
  p.payload.assign(8, 1);
  differs(p, "an ACK with bytes");
  p = PlainAck(101);
  p.has_grh = true;
  p.dst.is_global = true;
  p.dst.dgid.global.interface_id = 0x77;  // no GID of the profile: on the addressing line
  differs(p, "a GID that is not the held ACK's");
  next->From(PlainAck(101), 1, {});
  EXPECT_FALSE(LineOf(*next) == LineOf(*held)) << "another device";
}

// Fabric::PushLine writes a QP's later ACKs from the line of an earlier one
// (fabric/wire_line.h): byte for byte what From writes for the ACK itself.
TEST(WirePacketTest, AnAckWrittenFromItsLineIsTheOneFromWouldWrite) {
  ASSERT_GE(ProfileGids::Get().size(), 1u) << "the default profile has GIDs";
  for (const Packet& earlier : {PlainAck(100), Roce(PlainAck(100))}) {
    auto learned = std::make_unique<WirePacket>();
    learned->From(earlier, 2, WireSender{3, 7, 40});
    const WirePacket::Line line = LineOf(*learned);
    ASSERT_TRUE(line.PlainAck());
    Packet later = earlier;
    later.psn = 0xabcdef;
    ExpectWrittenAsFromWould(
        later, [&](WirePacket* written, const WireSender& sender) { written->FromLine(line, later.psn, nullptr, sender); },
        std::string(earlier.has_grh ? "RoCE" : "IB") + " ACK");
  }
}

// A one-packet SEND of a connected QP, as Qp::ExecuteLocked makes it.
Packet PlainSend(ibv_wr_opcode op, bool solicited, uint32_t imm_data, uint32_t psn, size_t length) {
  Packet p = PlainAck(psn);
  p.kind = Packet::Kind::kRequest;
  p.transport = IBV_QPT_UC;
  p.op = op;
  p.solicited = solicited;
  p.imm_data = imm_data;
  p.payload.assign(length, static_cast<uint8_t>(length));
  return p;
}

// Fabric::PushLine writes a QP's later one-packet SENDs from the line of an
// earlier one (fabric/wire_line.h), with their own operation, solicited bit,
// immediate data, PSN and payload: byte for byte what From writes for them.
TEST(WirePacketTest, ASendWrittenFromAnEarlierOnesLineIsTheOneFromWouldWrite) {
  ASSERT_GE(ProfileGids::Get().size(), 1u) << "the default profile has GIDs";
  for (const Packet& earlier :
       {PlainSend(IBV_WR_SEND_WITH_IMM, true, 0x1234, 100, 64), Roce(PlainSend(IBV_WR_SEND, false, 0, 100, 64))}) {
    auto learned = std::make_unique<WirePacket>();
    learned->From(earlier, 2, WireSender{3, 7, 40});
    const WirePacket::Line line = LineOf(*learned);
    ASSERT_TRUE(line.PlainSend());
    ASSERT_FALSE(line.PlainAck());
    for (const ibv_wr_opcode op : {IBV_WR_SEND, IBV_WR_SEND_WITH_IMM, IBV_WR_SEND_WITH_INV}) {
      for (const bool solicited : {false, true}) {
        for (const size_t length : {size_t{0}, size_t{1}, size_t{4096}}) {
          Packet later = earlier;
          later.op = op;
          later.solicited = solicited;
          later.imm_data = 0xfeedbeef;
          later.psn = 0xabcdef;
          later.payload.assign(length, 0x3c);
          ExpectWrittenAsFromWould(
              later,
              [&](WirePacket* written, const WireSender& sender) {
                written->FromLine(line.ForSend(op, solicited, later.imm_data, static_cast<uint16_t>(length)),
                                  later.psn, later.payload.data(), sender);
              },
              std::string(earlier.has_grh ? "RoCE" : "IB") + " SEND, op " + std::to_string(op) + ", solicited " +
                  std::to_string(solicited) + ", " + std::to_string(length) + " bytes");
        }
      }
    }
  }
}

// The lines a QP writes packets from are those of one-packet messages without
// the rare lines: no other request passes for a plain SEND.
TEST(WirePacketTest, OnlyAOnePacketRequestWithoutRareLinesIsAPlainSend) {
  auto wire = std::make_unique<WirePacket>();
  const auto plain_send = [&](const Packet& p) {
    wire->From(p, 0, {});
    return LineOf(*wire).PlainSend();
  };
  const Packet send = PlainSend(IBV_WR_SEND, false, 0, 1, 8);
  EXPECT_TRUE(plain_send(send));
  const std::pair<const char*, void (*)(Packet&)> others[] = {
      {"a middle or last packet", [](Packet& p) { p.first = false; }},
      {"a first packet of several", [](Packet& p) { p.last = false; }},
      {"a WRITE (RETH)",
       [](Packet& p) {
         p.op = IBV_WR_RDMA_WRITE;
         p.remote_addr = 0x1000;
         p.rkey = 5;
         p.dma_length = 8;
       }},
      {"an XRC SEND", [](Packet& p) { p.xrc_srqn = 9; }},
      {"a placed packet", [](Packet& p) { p.placed = true; }},
      {"one packet standing for two PSNs", [](Packet& p) { p.psn_count = 2; }},
      {"an ACK", [](Packet& p) { p = PlainAck(1); }},
  };
  for (const auto& [what, change] : others) {
    Packet p = send;
    change(p);
    EXPECT_FALSE(plain_send(p)) << what;
  }
}

// A one-packet READ response, as Qp::SendOneReadResponseLocked makes it.
Packet PlainReadResponse(uint32_t psn, size_t length) {
  Packet p = PlainAck(psn);
  p.kind = Packet::Kind::kReadResponse;
  p.op = IBV_WR_RDMA_READ;
  p.payload.assign(length, static_cast<uint8_t>(length + 1));
  return p;
}

// Fabric::PushLine writes a QP's ACKs and one-packet READ responses from the
// line of an earlier one of either (fabric/wire_line.h): byte for byte what
// From writes for them.
TEST(WirePacketTest, AnAnswerWrittenFromTheLineOfAnEarlierAnswerIsTheOneFromWouldWrite) {
  ASSERT_GE(ProfileGids::Get().size(), 1u) << "the default profile has GIDs";
  for (const Packet& earlier :
       {PlainAck(100), Roce(PlainAck(100)), PlainReadResponse(100, 64), Roce(PlainReadResponse(100, 0))}) {
    const std::string learned_from = std::string(earlier.has_grh ? "RoCE " : "IB ") +
                                     (earlier.kind == Packet::Kind::kAck ? "ACK" : "READ response");
    auto learned = std::make_unique<WirePacket>();
    learned->From(earlier, 2, WireSender{3, 7, 40});
    const WirePacket::Line line = LineOf(*learned);
    ASSERT_TRUE(line.PlainAck() || line.PlainReadResponse()) << learned_from;
    std::vector<Packet> later;
    for (const ibv_wr_opcode op : {IBV_WR_SEND, IBV_WR_RDMA_WRITE_WITH_IMM}) {
      Packet ack = earlier.has_grh ? Roce(PlainAck(0xabcdef)) : PlainAck(0xabcdef);
      ack.op = op;
      later.push_back(ack);
    }
    for (const size_t length : {size_t{0}, size_t{1}, size_t{4096}}) {
      later.push_back(earlier.has_grh ? Roce(PlainReadResponse(0xabcdef, length)) : PlainReadResponse(0xabcdef, length));
    }
    for (const Packet& p : later) {
      const bool ack = p.kind == Packet::Kind::kAck;
      const std::string what = learned_from + " -> " + (ack ? "ACK" : "READ response") + " of " +
                               std::to_string(p.payload.size()) + " bytes, op " + std::to_string(p.op);
      const WirePacket::Line answer =
          ack ? line.ForAck(p.op) : line.ForReadResponse(static_cast<uint16_t>(p.payload.size()));
      ExpectWrittenAsFromWould(
          p,
          [&](WirePacket* written, const WireSender& sender) {
            written->FromLine(answer, p.psn, p.payload.data(), sender);
          },
          what);
      EXPECT_EQ(answer.PlainAck(), ack) << what;
      EXPECT_EQ(answer.PlainReadResponse(), !ack) << what;
    }
  }
}

// The answer lines a QP writes READ responses from are those of whole answers
// without the rare lines: no other packet passes for a plain READ response.
TEST(WirePacketTest, OnlyAWholeReadResponseWithoutRareLinesIsAPlainReadResponse) {
  auto wire = std::make_unique<WirePacket>();
  const auto plain = [&](const Packet& p) {
    wire->From(p, 0, {});
    return LineOf(*wire).PlainReadResponse();
  };
  const Packet response = PlainReadResponse(1, 8);
  EXPECT_TRUE(plain(response));
  const std::pair<const char*, void (*)(Packet&)> others[] = {
      {"a middle or last packet", [](Packet& p) { p.first = false; }},
      {"a first packet of several", [](Packet& p) { p.last = false; }},
      {"one with the READ's RETH",
       [](Packet& p) {
         p.remote_addr = 0x1000;
         p.dma_length = 8;
       }},
      {"an atomic ACK", [](Packet& p) { p.kind = Packet::Kind::kAtomicAck; }},
      {"a NAK", [](Packet& p) { p.nak = Packet::Nak::kRemoteAccess; }},
      {"one with immediate data", [](Packet& p) { p.imm_data = 3; }},
      {"one standing for two PSNs", [](Packet& p) { p.psn_count = 2; }},
      {"an ACK", [](Packet& p) { p = PlainAck(1); }},
      {"a SEND", [](Packet& p) { p = PlainSend(IBV_WR_SEND, false, 0, 1, 8); }},
  };
  for (const auto& [what, change] : others) {
    Packet p = response;
    change(p);
    EXPECT_FALSE(plain(p)) << what;
  }
}

// A READ request of a connected QP, as Qp::SendReadOrAtomicLocked makes it.
Packet PlainRead(uint32_t psn, uint64_t remote_addr, uint32_t rkey, uint64_t dma_length) {
  Packet p = PlainSend(IBV_WR_RDMA_READ, false, 0, psn, 0);
  p.transport = IBV_QPT_RC;
  p.remote_addr = remote_addr;
  p.rkey = rkey;
  p.dma_length = dma_length;
  return p;
}

// Fabric::PushLine writes a QP's READ requests, and its one-packet SENDs, from
// the line of an earlier one of either (fabric/wire_line.h): byte for byte
// what From writes for them, the addressing line included when used.
TEST(WirePacketTest, AReadOrSendWrittenFromTheLineOfAnEarlierOneIsTheOneFromWouldWrite) {
  ASSERT_GE(ProfileGids::Get().size(), 1u) << "the default profile has GIDs";
  const auto rc_send = [](ibv_wr_opcode op, bool solicited, uint32_t imm_data, uint32_t psn, size_t length) {
    Packet p = PlainSend(op, solicited, imm_data, psn, length);
    p.transport = IBV_QPT_RC;  // (READs are RC's)
    return p;
  };
  for (const Packet& earlier : {rc_send(IBV_WR_SEND, false, 0, 100, 64), Roce(rc_send(IBV_WR_SEND, true, 0, 100, 8)),
                                PlainRead(100, 0x1000, 7, 64), Roce(PlainRead(100, 0, 0, 0))}) {
    const std::string learned_from = std::string(earlier.has_grh ? "RoCE " : "IB ") +
                                     (earlier.op == IBV_WR_RDMA_READ ? "READ" : "SEND");
    auto learned = std::make_unique<WirePacket>();
    learned->From(earlier, 2, WireSender{3, 7, 40});
    const WirePacket::Line line = LineOf(*learned);
    ASSERT_TRUE(line.PlainSend() || line.PlainRead()) << learned_from;
    const auto like_earlier = [&](Packet p) { return earlier.has_grh ? Roce(std::move(p)) : p; };
    const std::vector<Packet> later = {like_earlier(PlainRead(0xabcdef, 0x7fff0000ull << 8, 0x1234, 1u << 20)),
                                       like_earlier(PlainRead(0xabcdef, 0, 0, 0)),
                                       like_earlier(PlainRead(0xabcdef, 0, 0, 1)),
                                       like_earlier(rc_send(IBV_WR_SEND_WITH_IMM, true, 0x55, 0xabcdef, 16))};
    for (const Packet& p : later) {
      const bool read = p.op == IBV_WR_RDMA_READ;
      const std::string what = learned_from + " -> " + (read ? "READ of " + std::to_string(p.dma_length) : "SEND");
      const WirePacket::Line written_line = ExpectWrittenAsFromWould(
          p,
          [&](WirePacket* written, const WireSender& sender) {
            if (!read) {
              written->FromLine(line.ForSend(p.op, p.solicited, p.imm_data, static_cast<uint16_t>(p.payload.size())),
                                p.psn, p.payload.data(), sender);
              return;
            }
            WirePacket::Addressing a;
            a.dgid = earlier.dst.dgid;
            a.sgid = earlier.sgid;
            a.remote_addr = p.remote_addr;
            a.dma_length = p.dma_length;
            a.rkey = p.rkey;
            written->FromReadLine(line.ForRead(p.remote_addr || p.dma_length || p.rkey), p.psn, a, sender);
          },
          what);
      EXPECT_EQ(written_line.PlainRead(), read) << what;
      EXPECT_TRUE(read || written_line.PlainSend()) << what;
    }
  }
}

// The lines a QP writes READ requests from: no other request passes for a
// plain READ.
TEST(WirePacketTest, OnlyAOnePacketReadWithoutTheExtendedLineIsAPlainRead) {
  auto wire = std::make_unique<WirePacket>();
  const auto plain = [&](const Packet& p) {
    wire->From(p, 0, {});
    return LineOf(*wire).PlainRead();
  };
  const Packet read = PlainRead(1, 0x1000, 5, 64);
  EXPECT_TRUE(plain(read));
  EXPECT_TRUE(plain(PlainRead(1, 0, 0, 0))) << "a READ of nothing at 0 with key 0";
  const std::pair<const char*, void (*)(Packet&)> others[] = {
      {"a middle or last packet", [](Packet& p) { p.first = false; }},
      {"a first packet of several", [](Packet& p) { p.last = false; }},
      {"an XRC READ", [](Packet& p) { p.xrc_srqn = 9; }},
      {"an atomic", [](Packet& p) { p.op = IBV_WR_ATOMIC_FETCH_AND_ADD; }},
      {"a WRITE", [](Packet& p) { p.op = IBV_WR_RDMA_WRITE; }},
      {"one with a payload", [](Packet& p) { p.payload.assign(4, 1); }},
      {"one with immediate data", [](Packet& p) { p.imm_data = 3; }},
      {"a solicited one", [](Packet& p) { p.solicited = true; }},
      {"one standing for two PSNs", [](Packet& p) { p.psn_count = 2; }},
      {"a READ response", [](Packet& p) { p.kind = Packet::Kind::kReadResponse; }},
  };
  for (const auto& [what, change] : others) {
    Packet p = read;
    change(p);
    EXPECT_FALSE(plain(p)) << what;
  }
}

// A packet with a GRH between two GIDs.
Packet Global(const ibv_gid& dgid, const ibv_gid& sgid) {
  Packet p;
  p.has_grh = true;
  p.dst.is_global = true;
  p.dst.dgid = dgid;
  p.sgid = sgid;
  return p;
}

// A RoCE packet's GIDs are the profile's: they go by number in the first
// line, and the addressing line stays unused.
TEST(WirePacketTest, GidsOfTheProfileGoByNumber) {
  const ProfileGids& gids = ProfileGids::Get();
  ASSERT_GE(gids.size(), 1u) << "the default profile has GIDs";
  Packet sent = Global(gids.At(static_cast<uint8_t>(gids.size())), gids.At(1));
  sent.payload.assign(64, 0x11);
  auto wire = std::make_unique<WirePacket>();
  wire->From(EveryField(), 0, {});  // the addressing line holds other GIDs
  wire->From(sent, 0, {});
  EXPECT_EQ(wire->flags & WirePacket::kAddressing, 0) << "no RETH, and the GIDs go by number";
  EXPECT_EQ(wire->dgid_number, gids.size());
  EXPECT_EQ(wire->sgid_number, 1u);
  Packet received = EveryField();
  wire->ToPacket(nullptr, &received);
  ExpectSameFields(sent, received);
}

// With a RETH the addressing line is in use, and the GIDs still come by number.
TEST(WirePacketTest, GidsByNumberBesideARdmaAddress) {
  const ProfileGids& gids = ProfileGids::Get();
  ASSERT_GE(gids.size(), 1u) << "the default profile has GIDs";
  Packet sent = Global(gids.At(1), gids.At(1));
  sent.remote_addr = 0x1000;
  sent.rkey = 0x66;
  sent.dma_length = 0x40;
  auto wire = std::make_unique<WirePacket>();
  wire->From(sent, 0, {});
  EXPECT_NE(wire->flags & WirePacket::kAddressing, 0);
  EXPECT_EQ(wire->dgid_number, 1u);
  Packet received;
  wire->ToPacket(nullptr, &received);
  ExpectSameFields(sent, received);
}

// A number the profile has not (another process wrote the slot) reads as the
// zero GID, which routes nowhere.
TEST(WirePacketTest, AGidNumberThatIsNotThereReadsAsZero) {
  const ProfileGids& gids = ProfileGids::Get();
  ASSERT_LT(gids.size(), ProfileGids::kMaxNumbers);
  auto wire = std::make_unique<WirePacket>();
  wire->From(Global(gids.At(1), gids.At(1)), 0, {});
  wire->dgid_number = static_cast<uint8_t>(gids.size() + 1);
  wire->sgid_number = 0xff;
  Packet received = EveryField();
  wire->ToPacket(nullptr, &received);
  EXPECT_EQ(received.dst.dgid.global.subnet_prefix, 0u);
  EXPECT_EQ(received.dst.dgid.global.interface_id, 0u);
  EXPECT_EQ(received.sgid.global.subnet_prefix, 0u);
  EXPECT_EQ(received.sgid.global.interface_id, 0u);
}

ibv_gid Gid(uint64_t prefix, uint64_t id) {
  ibv_gid g{};
  g.global.subnet_prefix = prefix;
  g.global.interface_id = id;
  return g;
}

// Numbers follow the profile's order, each GID once; zero entries (empty
// slots of a table) get none, nor does a GID the profile has not.
TEST(ProfileGidsTest, NumbersEachGidOfTheProfileOnce) {
  Profile profile;
  profile.devices.resize(2);
  profile.devices[0].ports.resize(2);
  profile.devices[0].ports[0].gids = {{Gid(1, 1)}, {Gid(0, 0)}, {Gid(1, 2)}};
  profile.devices[0].ports[1].gids = {{Gid(1, 1)}};
  profile.devices[1].ports.resize(1);
  profile.devices[1].ports[0].gids = {{Gid(2, 1)}};
  const ProfileGids gids(profile);
  ASSERT_EQ(gids.size(), 3u);
  EXPECT_EQ(gids.NumberOf(Gid(1, 1)), 1u);
  EXPECT_EQ(gids.NumberOf(Gid(1, 2)), 2u);
  EXPECT_EQ(gids.NumberOf(Gid(2, 1)), 3u);
  EXPECT_EQ(gids.NumberOf(Gid(0, 0)), ProfileGids::kUnnamed);
  EXPECT_EQ(gids.NumberOf(Gid(9, 9)), ProfileGids::kUnnamed);
  EXPECT_EQ(gids.At(3).global.subnet_prefix, 2u);
  EXPECT_EQ(gids.At(4).global.subnet_prefix, 0u);
}

// Past kMaxNumbers GIDs the rest go unnamed (they travel on the addressing line).
TEST(ProfileGidsTest, AtMostOneByteOfNumbers) {
  Profile profile;
  profile.devices.resize(1);
  profile.devices[0].ports.resize(1);
  for (uint64_t i = 1; i <= ProfileGids::kMaxNumbers + 5; ++i) profile.devices[0].ports[0].gids.push_back({Gid(7, i)});
  const ProfileGids gids(profile);
  EXPECT_EQ(gids.size(), ProfileGids::kMaxNumbers);
  EXPECT_EQ(gids.NumberOf(Gid(7, ProfileGids::kMaxNumbers)), ProfileGids::kMaxNumbers);
  EXPECT_EQ(gids.NumberOf(Gid(7, ProfileGids::kMaxNumbers + 1)), ProfileGids::kUnnamed);
}

// A length past the payload area (another process wrote the slot) is cut to
// the area, copied or borrowed: nothing past the slot is read.
TEST(WirePacketTest, ALengthPastThePayloadAreaIsCutToIt) {
  auto wire = std::make_unique<WirePacket>();
  wire->From(EveryField(), 0, {});
  wire->payload_len = 0xffff;
  for (const bool borrow : {false, true}) {
    Packet received;
    wire->ToPacket(nullptr, &received, borrow);
    EXPECT_EQ(received.payload.size(), WirePacket::kMaxPayload) << (borrow ? "borrowed" : "copied");
    const Payload& got = received.payload;
    EXPECT_TRUE(std::equal(got.data(), got.data() + got.size(), wire->payload)) << (borrow ? "borrowed" : "copied");
  }
}

// An operation no verb has (another process wrote the slot) arrives as one
// the responder drops, never as a value outside ibv_wr_opcode.
TEST(WirePacketTest, AnOperationNoVerbHasArrivesAsOneTheResponderDrops) {
  auto wire = std::make_unique<WirePacket>();
  wire->From(EveryField(), 0, {});
  for (const uint8_t op : {uint8_t{IBV_WR_ATOMIC_WRITE + 1}, uint8_t{0xff}}) {
    wire->op = op;
    Packet received;
    wire->ToPacket(nullptr, &received);
    EXPECT_EQ(received.op, IBV_WR_DRIVER1) << "op " << int{op};
  }
  wire->op = IBV_WR_ATOMIC_WRITE;
  Packet received;
  wire->ToPacket(nullptr, &received);
  EXPECT_EQ(received.op, IBV_WR_ATOMIC_WRITE);
}

}  // namespace
}  // namespace simverbs
