#include "xrc_remote.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <new>
#include <utility>

#include "cq.h"
#include "device.h"
#include "fabric/fabric.h"
#include "mr.h"
#include "qp.h"
#include "srq.h"
#include "transport/copy_bytes.h"
#include "wqe.h"
#include "xrcd.h"

namespace simverbs {
namespace {

// A message being delivered into one of our SRQs for a target QP elsewhere:
// kept from its first packet until it completes or fails, so that the map
// holds the messages in progress only (each target QP number that ever sent
// one, or that any process names in a packet, would stay otherwise).
struct Delivery {
  const Srq* srq = nullptr;
  RecvWqe wqe;
  uint64_t offset = 0;
  uint32_t next_psn = 0;  // of the message's next packet
  // Who sent it, for an answer that no packet asks for (XrcForgetSrqLocked).
  Device* target_device = nullptr;
  ibv_wr_opcode op = IBV_WR_SEND;
};

// By (device index, target QP number). Engine lock.
using DeliveryMap = std::map<std::pair<int, uint32_t>, Delivery>;
DeliveryMap& Deliveries() {
  static auto* deliveries = new DeliveryMap();
  return *deliveries;
}

// The node of the last message that ended, for the next one to start: a
// message allocates nothing once a first one has ended. Engine lock.
DeliveryMap::node_type& SpareNode() {
  static auto* spare = new DeliveryMap::node_type();
  return *spare;
}

DeliveryMap::iterator StartDelivery(const std::pair<int, uint32_t>& key) {
  DeliveryMap& deliveries = Deliveries();
  DeliveryMap::node_type& spare = SpareNode();
  if (spare.empty()) return deliveries.try_emplace(key).first;  // may throw bad_alloc
  spare.key() = key;
  return deliveries.insert(std::move(spare)).position;
}

void EndDelivery(DeliveryMap::iterator it) {
  DeliveryMap::node_type node = Deliveries().extract(it);
  node.mapped().srq = nullptr;
  SpareNode() = std::move(node);
}

void Answer(const Packet& req, Packet::Nak nak) {
  Packet r;
  r.kind = Packet::Kind::kXrcResult;
  r.transport = IBV_QPT_XRC_RECV;
  r.op = req.op;
  r.psn = req.psn;
  r.nak = nak;
  r.src_device = req.src_device;
  r.dst_qpn = req.src_qpn;  // the target QP
  Fabric::Get().SendRemote(req.src_device->index(), r);
}

// Returns what the SRQ's CQ made of the completion.
Cq::PushResult Complete(Srq* srq, const Delivery& d, const Packet& pkt, ibv_wc_status status) {
  ibv_wc wc{};
  wc.wr_id = d.wqe.wr_id;
  wc.status = status;
  wc.opcode = IBV_WC_RECV;
  wc.qp_num = pkt.src_qpn;
  if (status == IBV_WC_SUCCESS) {
    wc.byte_len = static_cast<uint32_t>(d.offset);
    if (pkt.op == IBV_WR_SEND_WITH_IMM) {
      wc.imm_data = pkt.imm_data;
      wc.wc_flags |= IBV_WC_WITH_IMM;
    }
  }
  Cq* cq = srq->cq();
  // An overrun fails the QPs on the CQ as Qp::PushCompletion does in the
  // default mode. (The QP that completes is the target QP, in another
  // process: its owner applies the rules to it, told by the answer.)
  const Cq::PushResult result = cq->Push(wc, status == IBV_WC_SUCCESS && pkt.solicited);
  if (result == Cq::PushResult::kOverrun && pkt.src_device->behaviour().cq_overrun == Behaviour::CqOverrun::kCascade) {
    cq->CascadeOverrunLocked();
  }
  return result;
}

// The payload into the receive's scatter list, checked against the SRQ's PD.
ibv_wc_status Scatter(Device* dev, const Srq* srq, Delivery& d, const Packet& pkt) {
  if (d.offset + pkt.payload.size() > d.wqe.length) return IBV_WC_LOC_LEN_ERR;
  uint64_t pos = 0;
  const uint64_t begin = d.offset;
  const uint64_t end = d.offset + pkt.payload.size();
  for (const ibv_sge& sge : d.wqe.sges) {
    const uint64_t from = std::max(begin, pos);
    const uint64_t to = std::min(end, pos + sge.length);
    if (from < to) {
      Mr* mr = Mr::Check(dev, sge.lkey, false, srq->pd(), sge.addr, sge.length, IBV_ACCESS_LOCAL_WRITE);
      if (!mr) return IBV_WC_LOC_PROT_ERR;
      MoveBytes(mr->Translate(sge.addr + (from - pos), to - from), pkt.payload.data() + (from - begin), to - from);
    }
    pos += sge.length;
  }
  d.offset = end;
  return IBV_WC_SUCCESS;
}

void Deliver(const Packet& pkt) {
  Device* dev = pkt.src_device;  // the target QP's device: ours too
  auto& deliveries = Deliveries();
  const std::pair<int, uint32_t> key{dev->index(), pkt.src_qpn};
  Srq* srq = Srq::FindXrcLocked(dev, pkt.dst_qpn);
  const XrcDomain* domain = srq ? srq->xrcd()->domain() : nullptr;
  // The same domain: the same file (a private domain never matches another process's).
  const bool same_domain = domain && domain->has_inode &&
                           static_cast<uint64_t>(domain->st_dev) == pkt.xrc_domain_dev &&
                           static_cast<uint64_t>(domain->st_ino) == pkt.xrc_domain_ino;
  auto found = deliveries.find(key);
  if (pkt.first) {
    // (A message in progress from that target QP lost its rest: its receive
    // is dropped, as before.)
    if (found != deliveries.end()) EndDelivery(found);
    if (!same_domain) {
      Answer(pkt, Packet::Nak::kInvalidRequest);
      return;
    }
    try {
      found = StartDelivery(key);
    } catch (const std::bad_alloc&) {
      // No memory to follow the message: as no receive posted, the target
      // QP sends it again.
      Answer(pkt, Packet::Nak::kRnr);
      return;
    }
    Srq::Wqe w;
    if (!srq->TakeLocked(&w)) {
      EndDelivery(found);
      Answer(pkt, Packet::Nak::kRnr);
      return;
    }
    Delivery& fresh = found->second;
    fresh.srq = srq;
    fresh.wqe.wr_id = w.wr_id;
    fresh.wqe.sges = std::move(w.sges);
    fresh.wqe.length = 0;
    for (const ibv_sge& sge : fresh.wqe.sges) fresh.wqe.length += sge.length;
    fresh.offset = 0;
    fresh.next_psn = pkt.psn;
    fresh.target_device = pkt.src_device;
    fresh.op = pkt.op;
  } else if (found == deliveries.end() || found->second.srq != srq) {
    // The rest of a message that already failed, or whose SRQ was destroyed
    // meanwhile: its target QP has its answer (XrcForgetSrqLocked).
    return;
  }
  Delivery& d = found->second;
  if (pkt.psn != d.next_psn) {
    // A packet of the message is missing (forwarded packets are never lost:
    // Packet::Lossless; so only a forged one gets here): it fails, rather
    // than complete with a hole in it.
    Complete(srq, d, pkt, IBV_WC_LOC_QP_OP_ERR);
    EndDelivery(found);
    Answer(pkt, Packet::Nak::kRemoteOperational);
    return;
  }
  d.next_psn = (pkt.psn + 1) & 0xffffff;
  const ibv_wc_status st = Scatter(dev, srq, d, pkt);
  if (st != IBV_WC_SUCCESS) {
    Complete(srq, d, pkt, st);
    EndDelivery(found);
    Answer(pkt, st == IBV_WC_LOC_LEN_ERR ? Packet::Nak::kInvalidRequest : Packet::Nak::kRemoteOperational);
    return;
  }
  if (pkt.last) {
    const Cq::PushResult result = Complete(srq, d, pkt, IBV_WC_SUCCESS);
    EndDelivery(found);
    Answer(pkt, result == Cq::PushResult::kOk        ? Packet::Nak::kNone
                : result == Cq::PushResult::kOverrun ? Packet::Nak::kCqOverrun
                                                     : Packet::Nak::kCqErrored);
  }
}

}  // namespace

void XrcRemoteLocked(const Packet& pkt) {
  if (!pkt.src_device) return;
  if (pkt.kind == Packet::Kind::kXrcForward) {
    Deliver(pkt);
    return;
  }
  Qp* qp = pkt.src_device->FindQp(pkt.dst_qpn);
  if (qp && qp->type() == IBV_QPT_XRC_RECV) qp->XrcResultLocked(pkt);
}

void XrcForgetSrqLocked(const Srq* srq) {
  // A message in progress into it ends: its target QP, waiting for the
  // answer, hears that the SRQ is gone, as a message naming a destroyed
  // SRQ from its start would (an invalid request).
  std::erase_if(Deliveries(), [srq](const auto& entry) {
    const Delivery& d = entry.second;
    if (d.srq != srq) return false;
    Packet last;
    last.op = d.op;
    last.psn = (d.next_psn - 1) & 0xffffff;
    last.src_device = d.target_device;
    last.src_qpn = entry.first.second;
    try {
      Answer(last, Packet::Nak::kInvalidRequest);
    } catch (const std::bad_alloc&) {
      // No room to queue the answer: the target QP goes on asking (RNR NAKs).
    }
    return true;
  });
}

}  // namespace simverbs
