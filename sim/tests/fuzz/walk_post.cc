// Posting work requests: every send opcode, inline data, several SGEs, good
// and bad keys and lengths; receives to QPs and SRQs.

#include <algorithm>
#include <cinttypes>

#include "format.h"
#include "walk.h"

namespace verbs_fuzz {
namespace {

constexpr ibv_wr_opcode kOpcodes[] = {
    IBV_WR_RDMA_WRITE,
    IBV_WR_RDMA_WRITE_WITH_IMM,
    IBV_WR_SEND,
    IBV_WR_SEND_WITH_IMM,
    IBV_WR_RDMA_READ,
    IBV_WR_ATOMIC_CMP_AND_SWP,
    IBV_WR_ATOMIC_FETCH_AND_ADD,
    IBV_WR_LOCAL_INV,
    IBV_WR_BIND_MW,
    IBV_WR_SEND_WITH_INV,
    IBV_WR_TSO,
    IBV_WR_DRIVER1,
};

// ibv_post_send(3), "opcode": what each transport carries for sure.
bool Carries(ibv_qp_type type, ibv_wr_opcode op) {
  switch (op) {
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
      return true;
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      return type != IBV_QPT_UD;
    case IBV_WR_RDMA_READ:
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
    case IBV_WR_SEND_WITH_INV:
    case IBV_WR_LOCAL_INV:
    case IBV_WR_BIND_MW:
      return type == IBV_QPT_RC;
    default:
      return false;
  }
}

// What a transport can never do: if posted, it cannot succeed.
bool NeverCarries(ibv_qp_type type, ibv_wr_opcode op) {
  switch (op) {
    case IBV_WR_RDMA_READ:
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
    case IBV_WR_SEND_WITH_INV:
      return type != IBV_QPT_RC;
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
    case IBV_WR_LOCAL_INV:
    case IBV_WR_BIND_MW:
      return type == IBV_QPT_UD;
    default:
      return false;
  }
}

bool IsAtomic(ibv_wr_opcode op) { return op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD; }
bool IsRdma(ibv_wr_opcode op) {
  return op == IBV_WR_RDMA_WRITE || op == IBV_WR_RDMA_WRITE_WITH_IMM || op == IBV_WR_RDMA_READ;
}
bool MayInline(ibv_wr_opcode op) {
  return op == IBV_WR_SEND || op == IBV_WR_SEND_WITH_IMM || op == IBV_WR_RDMA_WRITE ||
         op == IBV_WR_RDMA_WRITE_WITH_IMM || op == IBV_WR_SEND_WITH_INV;
}
unsigned RemoteAccess(ibv_wr_opcode op) {
  if (op == IBV_WR_RDMA_READ) return IBV_ACCESS_REMOTE_READ;
  if (IsAtomic(op)) return IBV_ACCESS_REMOTE_ATOMIC;
  return IBV_ACCESS_REMOTE_WRITE;
}

// How the walk expects the post of one work request to go.
struct WrPlan {
  const char* refuse = nullptr;  // ibv_post_send must refuse it
  bool may_refuse = false;       // it may refuse it
  PendingWr pending;             // if posted
  Id bind_mw = 0;                // IBV_WR_BIND_MW: the window, its new key and MR
  uint32_t bind_rkey = 0;
  Id bind_mr = 0;
};

}  // namespace

void Walk::AddPending(Id qp, uint64_t wr_id, const PendingWr& p) {
  if (cqs_[p.cq].errored) {
    graveyard_[wr_id] = p;
    return;
  }
  pending_[wr_id] = p;
  (p.recv ? qps_[qp].rq : qps_[qp].sq).push_back(wr_id);
}

bool Walk::PostSend() {
  // Mostly to QPs that send, so that traffic flows.
  Id id = rng_.Percent(80) ? PickWhere(qps_, [](const QpModel& q) { return q.state == IBV_QPS_RTS; }) : 0;
  if (!id) id = Pick(qps_);
  if (!id) return false;
  QpModel& q = qps_[id];
  const CtxModel& c = ctxs_[q.ctx];
  const int count = static_cast<int>(rng_.Between(1, 3));
  ibv_send_wr wrs[3];
  ibv_sge sges[3][kMaxSge];
  WrPlan plans[3];
  const Id peer = (q.set_mask & IBV_QP_DEST_QPN) ? QpByNum(q.set.dest_qp_num) : 0;
  for (int i = 0; i < count; ++i) {
    ibv_send_wr& wr = wrs[i];
    WrPlan& plan = plans[i];
    wr = {};
    wr.wr_id = NewWrId();
    wr.next = i + 1 < count ? &wrs[i + 1] : nullptr;
    wr.sg_list = sges[i];
    ibv_wr_opcode op = kOpcodes[rng_.Below(std::size(kOpcodes))];
    if (rng_.Percent(92)) {
      do {
        op = kOpcodes[rng_.Below(std::size(kOpcodes))];
      } while (!Carries(q.type, op));
    }
    wr.opcode = op;
    if (!Carries(q.type, op)) plan.may_refuse = true;
    if (NeverCarries(q.type, op)) plan.pending.must_fail = "an opcode its transport does not carry";
    if (rng_.Percent(70)) wr.send_flags |= IBV_SEND_SIGNALED;
    if (rng_.Percent(10)) wr.send_flags |= IBV_SEND_SOLICITED;
    if (rng_.Percent(10)) wr.send_flags |= IBV_SEND_FENCE;
    wr.imm_data = static_cast<uint32_t>(rng_.Next());
    const bool inline_data = MayInline(op) && rng_.Percent(20);
    const unsigned local_access = (op == IBV_WR_RDMA_READ || IsAtomic(op)) ? IBV_ACCESS_LOCAL_WRITE : 0;
    uint64_t length = 0;
    if (op == IBV_WR_BIND_MW || op == IBV_WR_LOCAL_INV) {
      wr.num_sge = 0;
    } else if (inline_data) {
      wr.send_flags |= IBV_SEND_INLINE;
      const uint32_t room = q.cap.max_inline_data;
      wr.num_sge = static_cast<int>(rng_.Between(0, std::min<uint32_t>(q.cap.max_send_sge, 3)));
      const bool too_long = rng_.OneIn(10);
      for (int s = 0; s < wr.num_sge; ++s) {
        uint32_t len = static_cast<uint32_t>(rng_.Below(room / static_cast<uint32_t>(wr.num_sge) + 1));
        if (too_long && s == 0) len = room + 1;
        // The lkey of inline data is not looked at: a random one.
        sges[i][s] = ibv_sge{reinterpret_cast<uintptr_t>(buffer_) + rng_.Below(buffer_size_ - len), len, RandomKey()};
        length += len;
      }
      if (length > room) plan.refuse = "more inline data than max_inline_data";
    } else {
      wr.num_sge = IsAtomic(op) ? 1 : static_cast<int>(rng_.Between(0, std::min<uint32_t>(q.cap.max_send_sge, 3)));
      if (rng_.OneIn(20) && q.cap.max_send_sge < static_cast<uint32_t>(kMaxSge)) {
        wr.num_sge = static_cast<int>(q.cap.max_send_sge) + 1;
        plan.refuse = "more SGEs than max_send_sge";
      }
      for (int s = 0; s < wr.num_sge; ++s) {
        ibv_sge& sge = sges[i][s];
        const char* bad = MakeSge(q.pd, local_access, rng_.Percent(3), 512, &sge);
        if (IsAtomic(op)) {
          // An atomic operand is 8 bytes; anything else may be refused or fail.
          if (rng_.Percent(90)) sge.length = 8;
          if (sge.length != 8) plan.may_refuse = true;
          if (LkeyCovers(q.pd, sge.lkey, sge.addr, 8, local_access)) {
            bad = nullptr;
          } else if (!bad) {
            bad = "an operand beyond its MR";
          }
        }
        if (bad && !plan.pending.must_fail) plan.pending.must_fail = bad;
        length += sge.length;
      }
    }
    if (IsRdma(op) || IsAtomic(op)) {
      // The remote buffer: mostly in an MR of the peer's PD that allows it.
      const unsigned access = RemoteAccess(op);
      const uint64_t need = IsAtomic(op) ? 8 : length;
      const Id mr = peer && rng_.Percent(85) ? PickWhere(mrs_,
                                                         [&](const MrModel& m) {
                                                           return m.known && m.pd == qps_[peer].pd &&
                                                                  (m.access & access) == access && m.length >= need + 8;
                                                         })
                                             : 0;
      uint64_t addr;
      uint32_t rkey;
      if (mr) {
        const MrModel& m = mrs_[mr];
        addr = reinterpret_cast<uintptr_t>(m.addr) + rng_.Below(m.length - need - 8 + 1);
        if (IsAtomic(op)) addr = (addr + 7) & ~uint64_t{7};
        rkey = m.rkey;
      } else {
        addr = reinterpret_cast<uintptr_t>(buffer_) + rng_.Below(buffer_size_);
        rkey = rng_.OneIn(2) && !stale_keys_.empty() ? stale_keys_[rng_.Below(stale_keys_.size())] : RandomKey();
        for (const auto& [wid, w] : mws_) {
          if (rng_.OneIn(4)) rkey = w.rkey;  // through a window (not modelled)
        }
      }
      if (IsAtomic(op)) {
        wr.wr.atomic.remote_addr = addr;
        wr.wr.atomic.rkey = rkey;
        wr.wr.atomic.compare_add = rng_.Next();
        wr.wr.atomic.swap = rng_.Next();
      } else {
        wr.wr.rdma.remote_addr = addr;
        wr.wr.rdma.rkey = rkey;
      }
      // IBTA 9.7.5.2.3: a zero-length RDMA operation does not check the R_Key.
      if (q.type == IBV_QPT_RC && peer && q.psn_fresh && need > 0 && !plan.pending.must_fail) {
        plan.pending.must_fail = RemoteKeyFault(qps_[peer].pd, rkey, addr, need, access);
        plan.pending.remote_fault = plan.pending.must_fail != nullptr;
      }
      if (trace_) {
        std::fprintf(stderr, "  wr_id 0x%" PRIx64 " %s from %s rkey 0x%x len %" PRIu64 " to %s fresh %d: %s\n",
                     wr.wr_id, WrOpcodeName(op), Describe(id).c_str(), rkey, need, Describe(peer).c_str(), q.psn_fresh,
                     plan.pending.must_fail ? plan.pending.must_fail : "ok");
      }
    }
    if (q.type == IBV_QPT_UD) {
      Id ah = PickWhere(ahs_, [&](const AhModel& a) { return a.ctx == q.ctx; });
      if (!ah || rng_.OneIn(20)) {
        ah = Pick(ahs_);
        if (ah && ahs_[ah].ctx != q.ctx) plan.may_refuse = true;  // an AH of another context
      }
      if (!ah) return false;
      wr.wr.ud.ah = ahs_[ah].ah;
      const Id dest = rng_.Percent(90) ? PickWhere(qps_, [](const QpModel& p) { return p.type == IBV_QPT_UD; }) : 0;
      wr.wr.ud.remote_qpn = dest ? qps_[dest].qp->qp_num : static_cast<uint32_t>(rng_.Below(1 << 24));
      wr.wr.ud.remote_qkey = dest && rng_.Percent(90) ? qps_[dest].qkey : static_cast<uint32_t>(rng_.Next());
      // IBTA 9.6.1: a UD message is at most one packet.
      if (length > (128u << c.port.active_mtu) && !plan.pending.must_fail) {
        plan.pending.must_fail = "a UD message longer than the MTU";
      }
    }
    if (op == IBV_WR_BIND_MW) {
      const Id mw = PickWhere(mws_, [&](const MwModel& w) { return w.ctx == q.ctx; });
      if (!mw) return false;
      MwModel& w = mws_[mw];
      wr.bind_mw.mw = w.mw;
      wr.bind_mw.rkey = ibv_inc_rkey(w.rkey);
      // ibv_post_send(3): IBV_WR_BIND_MW binds type 2 windows (type 1: ibv_bind_mw).
      if (w.type != IBV_MW_TYPE_2) plan.may_refuse = true;
      if (w.pd != q.pd && !plan.pending.must_fail) plan.pending.must_fail = "a window of another PD than the QP's";
      plan.bind_mw = mw;
      plan.bind_rkey = wr.bind_mw.rkey;
      if (const Id mr = PickWhere(mrs_, [&](const MrModel& m) { return m.known && m.pd == w.pd; })) {
        const MrModel& m = mrs_[mr];
        plan.bind_mr = mr;
        wr.bind_mw.bind_info.mr = m.mr;
        wr.bind_mw.bind_info.addr = reinterpret_cast<uintptr_t>(m.addr);
        wr.bind_mw.bind_info.length = rng_.Below(m.length + 1);
        wr.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_READ;
        if (!(m.access & IBV_ACCESS_MW_BIND) && wr.bind_mw.bind_info.length > 0 && !plan.pending.must_fail) {
          plan.pending.must_fail = "an MR registered without IBV_ACCESS_MW_BIND";
        }
      }
    }
    if (op == IBV_WR_LOCAL_INV || op == IBV_WR_SEND_WITH_INV) {
      const Id mw = Pick(mws_);
      wr.invalidate_rkey = mw && rng_.Percent(80) ? mws_[mw].rkey : RandomKey();
    }
    PendingWr& p = plan.pending;
    p.qp = id;
    p.cq = q.send_cq;
    p.signaled = q.sig_all || (wr.send_flags & IBV_SEND_SIGNALED);
    p.opcode = op;
    p.length = length;
    p.step = step_;
  }

  const ibv_qp_state state = q.state;
  const bool lossy = cqs_[q.send_cq].errored;
  ibv_send_wr* bad = nullptr;
  Enter(Verb::kPostSend);
  const int rc = ibv_post_send(q.qp, wrs, &bad);
  int posted = count;
  if (trace_) Count(Format("post_send in %s: %s", StateName(state).c_str(), rc ? ErrnoName(rc).c_str() : "ok"));
  if (rc != 0) {
    CheckErrno(Verb::kPostSend, rc);
    if (bad < wrs || bad >= wrs + count)
      Fail(Verb::kPostSend, Describe(id) + ": failed without pointing bad_wr at a WR");
    posted = static_cast<int>(bad - wrs);
    const WrPlan& plan = plans[posted];
    const bool ready = state == IBV_QPS_RTS || state == IBV_QPS_SQD || state == IBV_QPS_SQE || state == IBV_QPS_ERR;
    if (!plan.refuse && !plan.may_refuse && !lossy) {
      const size_t outstanding = q.sq.size() + static_cast<size_t>(posted);
      if (rc == ENOMEM && outstanding < q.cap.max_send_wr) {
        Fail(Verb::kPostSend, Format("%s: ENOMEM with %zu WRs outstanding, max_send_wr %u", Describe(id).c_str(),
                                     outstanding, q.cap.max_send_wr));
      }
      if (rc != ENOMEM && ready) {
        Fail(Verb::kPostSend, Format("%s: refused a valid %s with %s", Describe(id).c_str(),
                                     WrOpcodeName(wrs[posted].opcode), ErrnoName(rc).c_str()));
      }
    }
  }
  if (posted > 0 && q.type == IBV_QPT_RC && peer) {
    // The peer's expected PSN moves with these; any other sender to it is now behind or ahead.
    qps_[peer].received = true;
    for (auto& [other, o] : qps_) {
      if (other != id && (o.set_mask & IBV_QP_DEST_QPN) && o.set.dest_qp_num == qps_[peer].qp->qp_num) {
        LosePsnFreshness(other);
      }
    }
  }
  for (int i = 0; i < posted; ++i) {
    if (plans[i].refuse) {
      Fail(Verb::kPostSend, Format("%s: posted a WR that must be refused: %s", Describe(id).c_str(), plans[i].refuse));
    }
    if (plans[i].bind_mw) {
      mws_[plans[i].bind_mw].rkey = plans[i].bind_rkey;
      if (plans[i].bind_mr) mrs_[plans[i].bind_mr].windows.insert(plans[i].bind_mw);
    }
    AddPending(id, wrs[i].wr_id, plans[i].pending);
  }
  UpdateOverrunBounds();
  return true;
}

bool Walk::PostRecv() {
  const Id id =
      PickWhere(qps_, [this](const QpModel& q) { return (!q.srq && q.state != IBV_QPS_RESET) || rng_.OneIn(10); });
  if (!id) return false;
  QpModel& q = qps_[id];
  const int count = static_cast<int>(rng_.Between(1, 3));
  ibv_recv_wr wrs[3];
  ibv_sge sges[3][kMaxSge];
  WrPlan plans[3];
  for (int i = 0; i < count; ++i) {
    ibv_recv_wr& wr = wrs[i];
    WrPlan& plan = plans[i];
    wr = {};
    wr.wr_id = NewWrId();
    wr.next = i + 1 < count ? &wrs[i + 1] : nullptr;
    wr.sg_list = sges[i];
    wr.num_sge = static_cast<int>(rng_.Between(0, std::min<uint32_t>(q.cap.max_recv_sge, 3)));
    if (rng_.OneIn(20) && q.cap.max_recv_sge < static_cast<uint32_t>(kMaxSge)) {
      wr.num_sge = static_cast<int>(q.cap.max_recv_sge) + 1;
      plan.refuse = "more SGEs than max_recv_sge";
    }
    if (q.srq) plan.refuse = "a receive to a QP on an SRQ";
    uint64_t length = 0;
    for (int s = 0; s < wr.num_sge; ++s) {
      // A bad entry fails only if a message lands in it: not a must.
      MakeSge(q.pd, IBV_ACCESS_LOCAL_WRITE, rng_.Percent(3), 2048, &sges[i][s]);
      length += sges[i][s].length;
    }
    PendingWr& p = plan.pending;
    p.qp = id;
    p.cq = q.recv_cq;
    p.recv = true;
    p.signaled = true;
    p.length = length;
    p.step = step_;
  }
  const ibv_qp_state state = q.state;
  ibv_recv_wr* bad = nullptr;
  Enter(Verb::kPostRecv);
  const int rc = ibv_post_recv(q.qp, wrs, &bad);
  int posted = count;
  if (trace_) Count(Format("post_recv in %s: %s", StateName(state).c_str(), rc ? ErrnoName(rc).c_str() : "ok"));
  if (rc != 0) {
    CheckErrno(Verb::kPostRecv, rc);
    if (bad < wrs || bad >= wrs + count)
      Fail(Verb::kPostRecv, Describe(id) + ": failed without pointing bad_wr at a WR");
    posted = static_cast<int>(bad - wrs);
    const WrPlan& plan = plans[posted];
    // IBTA C10-97.2.1: a receive queue takes receives in every state but RESET.
    if (!plan.refuse && state != IBV_QPS_RESET && !cqs_[q.recv_cq].errored) {
      const size_t outstanding = q.rq.size() + static_cast<size_t>(posted);
      if (rc != ENOMEM || outstanding < q.cap.max_recv_wr) {
        Fail(Verb::kPostRecv, Format("%s: refused a valid receive with %s, %zu outstanding of max_recv_wr %u",
                                     Describe(id).c_str(), ErrnoName(rc).c_str(), outstanding, q.cap.max_recv_wr));
      }
    }
  }
  for (int i = 0; i < posted; ++i) {
    if (plans[i].refuse) {
      Fail(Verb::kPostRecv,
           Format("%s: posted a receive that must be refused: %s", Describe(id).c_str(), plans[i].refuse));
    }
    AddPending(id, wrs[i].wr_id, plans[i].pending);
  }
  UpdateOverrunBounds();
  return true;
}

bool Walk::PostSrqRecv() {
  const Id id = Pick(srqs_);
  if (!id) return false;
  SrqModel& s = srqs_[id];
  const int count = static_cast<int>(rng_.Between(1, 3));
  ibv_recv_wr wrs[3];
  ibv_sge sges[3][kMaxSge];
  WrPlan plans[3];
  for (int i = 0; i < count; ++i) {
    ibv_recv_wr& wr = wrs[i];
    wr = {};
    wr.wr_id = NewWrId();
    wr.next = i + 1 < count ? &wrs[i + 1] : nullptr;
    wr.sg_list = sges[i];
    wr.num_sge = static_cast<int>(rng_.Between(0, std::min<uint32_t>(s.max_sge, 3)));
    if (rng_.OneIn(20) && s.max_sge < static_cast<uint32_t>(kMaxSge)) {
      wr.num_sge = static_cast<int>(s.max_sge) + 1;
      plans[i].refuse = "more SGEs than the SRQ's max_sge";
    }
    uint64_t length = 0;
    for (int g = 0; g < wr.num_sge; ++g) {
      MakeSge(s.pd, IBV_ACCESS_LOCAL_WRITE, rng_.Percent(3), 2048, &sges[i][g]);
      length += sges[i][g].length;
    }
    PendingWr& p = plans[i].pending;
    p.srq = id;
    p.recv = true;
    p.signaled = true;
    p.length = length;
    p.step = step_;
  }
  ibv_recv_wr* bad = nullptr;
  Enter(Verb::kPostSrqRecv);
  const int rc = ibv_post_srq_recv(s.srq, wrs, &bad);
  int posted = count;
  if (rc != 0) {
    CheckErrno(Verb::kPostSrqRecv, rc);
    if (bad < wrs || bad >= wrs + count) Fail(Verb::kPostSrqRecv, "failed without pointing bad_wr at a WR");
    posted = static_cast<int>(bad - wrs);
    const size_t outstanding = s.posted.size() + static_cast<size_t>(posted);
    if (!plans[posted].refuse && (rc != ENOMEM || outstanding < s.max_wr)) {
      Fail(Verb::kPostSrqRecv, Format("SRQ %u: refused a valid receive with %s, %zu outstanding of max_wr %u", id,
                                      ErrnoName(rc).c_str(), outstanding, s.max_wr));
    }
  }
  for (int i = 0; i < posted; ++i) {
    if (plans[i].refuse)
      Fail(Verb::kPostSrqRecv, std::string("posted a receive that must be refused: ") + plans[i].refuse);
    pending_[wrs[i].wr_id] = plans[i].pending;
    s.posted.insert(wrs[i].wr_id);
  }
  UpdateOverrunBounds();
  return true;
}

}  // namespace verbs_fuzz
