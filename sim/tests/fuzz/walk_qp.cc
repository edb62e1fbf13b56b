// QPs and their state machine, SRQs and address handles.

#include <algorithm>
#include <cinttypes>
#include <cstring>
#include <vector>

#include "format.h"
#include "walk.h"

namespace verbs_fuzz {
namespace {

// The IBTA QP state table (IBTA 10.3.1, as the kernel's ib_modify_qp_is_ok
// has it): whether cur -> next is a transition, and the attributes it
// requires and allows besides IBV_QP_STATE.
bool Transition(ibv_qp_state cur, ibv_qp_state next, ibv_qp_type type, int* req, int* opt) {
  const bool ud = type == IBV_QPT_UD;
  const bool rc = type == IBV_QPT_RC;
  *req = *opt = 0;
  if (next == IBV_QPS_RESET) return true;
  if (next == IBV_QPS_ERR) return cur != IBV_QPS_RESET;
  const int init_attrs = IBV_QP_PKEY_INDEX | IBV_QP_PORT | (ud ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS);
  const int to_rts_opt = ud ? IBV_QP_CUR_STATE | IBV_QP_QKEY
                            : IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PATH_MIG_STATE |
                                  (rc ? IBV_QP_MIN_RNR_TIMER : 0);
  switch (cur) {
    case IBV_QPS_RESET:
      if (next != IBV_QPS_INIT) return false;
      *req = init_attrs;
      return true;
    case IBV_QPS_INIT:
      if (next == IBV_QPS_INIT) {
        *opt = init_attrs;
        return true;
      }
      if (next != IBV_QPS_RTR) return false;
      if (ud) {
        *opt = IBV_QP_PKEY_INDEX | IBV_QP_QKEY;
      } else {
        *req = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
               (rc ? IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER : 0);
        *opt = IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX;
      }
      return true;
    case IBV_QPS_RTR:
      if (next != IBV_QPS_RTS) return false;
      *req = IBV_QP_SQ_PSN | (rc ? IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC : 0);
      *opt = to_rts_opt;
      return true;
    case IBV_QPS_RTS:
      if (next == IBV_QPS_RTS) {
        *opt = to_rts_opt;
        return true;
      }
      if (next != IBV_QPS_SQD) return false;
      *opt = IBV_QP_EN_SQD_ASYNC_NOTIFY;
      return true;
    case IBV_QPS_SQD:
      if (next == IBV_QPS_RTS) {
        *opt = to_rts_opt;
        return true;
      }
      if (next != IBV_QPS_SQD) return false;
      if (ud) {
        *opt = IBV_QP_PKEY_INDEX | IBV_QP_QKEY;
      } else if (!rc) {
        *opt = IBV_QP_AV | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_PATH_MIG_STATE;
      } else {
        *opt = IBV_QP_PORT | IBV_QP_AV | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
               IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS |
               IBV_QP_PKEY_INDEX | IBV_QP_MIN_RNR_TIMER | IBV_QP_PATH_MIG_STATE;
      }
      return true;
    case IBV_QPS_SQE:
      if (next != IBV_QPS_RTS || rc) return false;
      *opt = ud ? IBV_QP_CUR_STATE | IBV_QP_QKEY : IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS;
      return true;
    default:
      return false;
  }
}

// The attributes the walk can give a valid value to (alternate paths and
// migration need APM, which devices need not support).
constexpr int kFillable = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY | IBV_QP_ACCESS_FLAGS | IBV_QP_AV |
                          IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_SQ_PSN |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                          IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_CUR_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY;

constexpr int kAllAttrs = kFillable | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE | IBV_QP_CAP;

void* QpContext(Id id) { return reinterpret_cast<void*>(uintptr_t{id}); }

}  // namespace

void Walk::FillAv(Id ctx, ibv_ah_attr* av) {
  const CtxModel& c = ctxs_[ctx];
  *av = {};
  av->port_num = 1;
  av->dlid = c.port.lid;
  // RoCE addresses are GIDs; InfiniBand may route through a GRH as well.
  if (c.roce || rng_.OneIn(5)) {
    av->is_global = 1;
    av->grh.dgid = c.gid;
    av->grh.sgid_index = 0;
    av->grh.hop_limit = 64;
  }
}

// ---- QP

bool Walk::CreateQp() {
  const Id pd = Pick(pds_);
  if (!pd || qps_.size() >= kMaxQps) return false;
  const Id ctx = pds_[pd].ctx;
  const CtxModel& c = ctxs_[ctx];
  auto same_ctx = [ctx](const auto& m) { return m.ctx == ctx; };
  Id send_cq = PickWhere(cqs_, same_ctx);
  Id recv_cq = rng_.OneIn(2) ? send_cq : PickWhere(cqs_, same_ctx);
  if (!send_cq) return false;
  const uint64_t r = rng_.Below(100);
  ibv_qp_init_attr init{};
  init.qp_type = r < 40 ? IBV_QPT_RC : r < 65 ? IBV_QPT_UC : IBV_QPT_UD;
  init.sq_sig_all = rng_.OneIn(5);
  init.cap.max_send_wr = static_cast<uint32_t>(rng_.Between(1, 32));
  init.cap.max_recv_wr = static_cast<uint32_t>(rng_.Between(1, 32));
  init.cap.max_send_sge = static_cast<uint32_t>(rng_.Between(1, 4));
  init.cap.max_recv_sge = static_cast<uint32_t>(rng_.Between(1, 4));
  init.cap.max_inline_data = rng_.OneIn(2) ? static_cast<uint32_t>(rng_.Between(0, 128)) : 0;
  Id srq = 0;
  if (init.qp_type != IBV_QPT_UC && rng_.Percent(30)) srq = PickWhere(srqs_, same_ctx);
  const char* must_fail = nullptr;
  switch (rng_.Below(20)) {
    case 0:
      if (const Id other = PickWhere(cqs_, [ctx](const CqModel& m) { return m.ctx != ctx; })) {
        send_cq = other;
        must_fail = "a send CQ of another context";
      }
      break;
    case 1:
      if (const Id other = PickWhere(cqs_, [ctx](const CqModel& m) { return m.ctx != ctx; })) {
        recv_cq = other;
        must_fail = "a receive CQ of another context";
      }
      break;
    case 2:
      if (init.qp_type == IBV_QPT_UC) break;
      if (const Id other = PickWhere(srqs_, [ctx](const SrqModel& m) { return m.ctx != ctx; })) {
        srq = other;
        must_fail = "an SRQ of another context";
      }
      break;
    case 3:
      init.cap.max_send_wr = static_cast<uint32_t>(c.attr.max_qp_wr) + 1;
      must_fail = "max_send_wr above max_qp_wr";
      break;
    case 4:
      init.cap.max_send_sge = static_cast<uint32_t>(c.attr.max_sge) + 1;
      must_fail = "max_send_sge above max_sge";
      break;
    case 5:
      if (srq) break;
      init.cap.max_recv_wr = static_cast<uint32_t>(c.attr.max_qp_wr) + 1;
      must_fail = "max_recv_wr above max_qp_wr";
      break;
    case 6:
      init.qp_type = static_cast<ibv_qp_type>(0x77);
      must_fail = "an unknown QP type";
      break;
    case 7:
      init.cap.max_inline_data = 1u << 20;
      must_fail = "1 MiB of inline data";
      break;
    default:
      break;
  }
  if (!recv_cq) recv_cq = send_cq;
  const Id id = next_id_++;
  init.qp_context = QpContext(id);
  init.send_cq = cqs_[send_cq].cq;
  init.recv_cq = cqs_[recv_cq].cq;
  init.srq = srq ? srqs_[srq].srq : nullptr;
  const ibv_qp_cap asked = init.cap;
  Enter(Verb::kCreateQp);
  errno = 0;
  ibv_qp* qp = ibv_create_qp(pds_[pd].pd, &init);
  if (!qp) {
    CheckErrno(Verb::kCreateQp, errno);
    if (!must_fail && errno != ENOMEM) Fail(Verb::kCreateQp, "a valid QP failed with " + ErrnoName(errno));
    return true;
  }
  if (must_fail) Fail(Verb::kCreateQp, std::string("succeeded, but must fail: ") + must_fail);
  if (qp->qp_type != init.qp_type || qp->state != IBV_QPS_RESET || qp->pd != pds_[pd].pd ||
      qp->send_cq != init.send_cq || qp->recv_cq != init.recv_cq || qp->srq != init.srq || qp->context != c.ctx ||
      qp->qp_context != QpContext(id)) {
    Fail(Verb::kCreateQp, "the ibv_qp does not describe the QP");
  }
  // ibv_create_qp(3): the actual capabilities are at least those asked for.
  if (init.cap.max_send_wr < asked.max_send_wr || init.cap.max_send_sge < asked.max_send_sge ||
      init.cap.max_inline_data < asked.max_inline_data ||
      (!srq && (init.cap.max_recv_wr < asked.max_recv_wr || init.cap.max_recv_sge < asked.max_recv_sge))) {
    Fail(Verb::kCreateQp, "returned smaller capabilities than asked for");
  }
  QpModel q;
  q.qp = qp;
  q.ctx = ctx;
  q.pd = pd;
  q.send_cq = send_cq;
  q.recv_cq = recv_cq;
  q.srq = srq;
  q.type = init.qp_type;
  q.cap = init.cap;
  q.sig_all = init.sq_sig_all;
  q.psn = static_cast<uint32_t>(rng_.Below(1 << 24));
  q.qkey = rng_.OneIn(2) ? 0x11111111 : static_cast<uint32_t>(rng_.Below(0x80000000));
  if (srq) srqs_[srq].recv_cqs.insert(recv_cq);
  qps_[id] = q;
  return true;
}

bool Walk::DestroyQp() {
  const Id id = Pick(qps_);
  if (!id) return false;
  Enter(Verb::kDestroyQp);
  if (int rc = ibv_destroy_qp(qps_[id].qp)) Fail(Verb::kDestroyQp, Describe(id) + ": failed with " + ErrnoName(rc));
  RetireQueues(id);
  qps_.erase(id);
  return true;
}

bool Walk::StrayResponder(Id id) const {
  const QpModel& q = qps_.at(id);
  const uint32_t dest = (q.set_mask & IBV_QP_DEST_QPN) ? q.set.dest_qp_num : 0;
  for (const auto& [other, o] : qps_) {
    if (other == id || !(o.set_mask & IBV_QP_DEST_QPN) || o.set.dest_qp_num != q.qp->qp_num) continue;
    if (o.qp->qp_num != dest) return true;
  }
  return false;
}

void Walk::LosePsnFreshness(Id id) {
  QpModel& q = qps_[id];
  q.psn_fresh = false;
  for (uint64_t wr : q.sq) {
    PendingWr& p = pending_[wr];
    if (p.remote_fault) {
      p.must_fail = nullptr;
      p.remote_fault = false;
    }
  }
}

void Walk::RetireQueues(Id id) {
  QpModel& q = qps_[id];
  for (std::deque<uint64_t>* queue : {&q.sq, &q.rq}) {
    for (uint64_t wr : *queue) graveyard_.insert(pending_.extract(wr));
    queue->clear();
  }
}

ibv_qp_state Walk::CheckState(Id id, const char* when) {
  QpModel& q = qps_[id];
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  Enter(Verb::kQueryQp);
  if (int rc = ibv_query_qp(q.qp, &attr, IBV_QP_STATE, &init)) {
    Fail(Verb::kQueryQp, Describe(id) + ": failed with " + ErrnoName(rc));
  }
  const ibv_qp_state s = attr.qp_state;
  if (s == q.state) return s;
  // The HCA moves a QP to ERR (any state but RESET) or, a UC or UD QP whose
  // send failed, from RTS to SQE (IBTA 10.3.1).
  const bool hca = (s == IBV_QPS_ERR && q.state != IBV_QPS_RESET) ||
                   (s == IBV_QPS_SQE && q.state == IBV_QPS_RTS && q.type != IBV_QPT_RC);
  if (!hca) Fail(Verb::kQueryQp, Format("%s: state %s %s", Describe(id).c_str(), StateName(s).c_str(), when));
  q.state = s;
  return s;
}

void Walk::CheckQueryAttrs(Id id) {
  QpModel& q = qps_[id];
  ibv_qp_attr a{};
  ibv_qp_init_attr init{};
  const int mask = IBV_QP_STATE | q.set_mask;
  Enter(Verb::kQueryQp);
  if (int rc = ibv_query_qp(q.qp, &a, mask, &init))
    Fail(Verb::kQueryQp, Describe(id) + ": failed with " + ErrnoName(rc));
  if (init.qp_type != q.type || init.send_cq != cqs_[q.send_cq].cq || init.recv_cq != cqs_[q.recv_cq].cq ||
      init.srq != (q.srq ? srqs_[q.srq].srq : nullptr) || (init.sq_sig_all != 0) != q.sig_all ||
      init.qp_context != QpContext(id)) {
    Fail(Verb::kQueryQp, Describe(id) + ": the init attributes are not those of its creation");
  }
  const ibv_qp_attr& s = q.set;
  auto check = [&](int bit, bool equal, const char* name) {
    if ((q.set_mask & bit) && !equal) {
      Fail(Verb::kQueryQp, Format("%s: %s is not the value the walk set", Describe(id).c_str(), name));
    }
  };
  check(IBV_QP_DEST_QPN, a.dest_qp_num == s.dest_qp_num, "dest_qp_num");
  check(IBV_QP_QKEY, a.qkey == s.qkey, "qkey");
  check(IBV_QP_PORT, a.port_num == s.port_num, "port_num");
  check(IBV_QP_PKEY_INDEX, a.pkey_index == s.pkey_index, "pkey_index");
  check(IBV_QP_PATH_MTU, a.path_mtu == s.path_mtu, "path_mtu");
  check(IBV_QP_ACCESS_FLAGS, a.qp_access_flags == s.qp_access_flags, "qp_access_flags");
  check(IBV_QP_TIMEOUT, a.timeout == s.timeout, "timeout");
  check(IBV_QP_RETRY_CNT, a.retry_cnt == s.retry_cnt, "retry_cnt");
  check(IBV_QP_RNR_RETRY, a.rnr_retry == s.rnr_retry, "rnr_retry");
  check(IBV_QP_MIN_RNR_TIMER, a.min_rnr_timer == s.min_rnr_timer, "min_rnr_timer");
  // Devices may round the read/atomic depths up.
  check(IBV_QP_MAX_QP_RD_ATOMIC, a.max_rd_atomic >= s.max_rd_atomic, "max_rd_atomic");
  check(IBV_QP_MAX_DEST_RD_ATOMIC, a.max_dest_rd_atomic >= s.max_dest_rd_atomic, "max_dest_rd_atomic");
}

void Walk::FillAttrs(Id id, ibv_qp_attr* attr) {
  QpModel& q = qps_[id];
  const CtxModel& c = ctxs_[q.ctx];
  *attr = {};
  attr->cur_qp_state = q.state;
  attr->pkey_index = 0;
  attr->port_num = 1;
  attr->qkey = q.qkey;
  if (q.type == IBV_QPT_RC) {
    attr->qp_access_flags = static_cast<unsigned>(rng_.Next()) & (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                                                  IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
  } else {
    attr->qp_access_flags = static_cast<unsigned>(rng_.Next()) & (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  }
  FillAv(q.ctx, &attr->ah_attr);
  const int max_mtu = std::min<int>(c.port.active_mtu, IBV_MTU_4096);
  attr->path_mtu = static_cast<ibv_mtu>(rng_.Between(IBV_MTU_256, static_cast<uint64_t>(max_mtu)));
  // The peer: mostly a QP of the same type, often one that points back.
  Id peer = forced_peer_;
  const uint64_t r = rng_.Below(100);
  if (!peer && r < 40) {
    peer = PickWhere(qps_, [&](const QpModel& p) {
      return p.type == q.type && (p.set_mask & IBV_QP_DEST_QPN) && p.set.dest_qp_num == q.qp->qp_num;
    });
  }
  if (!peer && r < 80) peer = PickWhere(qps_, [&](const QpModel& p) { return p.type == q.type; });
  if (!peer && r < 90) peer = id;
  if (!peer) peer = Pick(qps_);
  attr->dest_qp_num = rng_.OneIn(30) ? static_cast<uint32_t>(rng_.Below(1 << 24)) : qps_[peer].qp->qp_num;
  // The PSN a QP expects is its own; its peer starts sending there.
  attr->rq_psn = rng_.OneIn(30) ? static_cast<uint32_t>(rng_.Below(1 << 24)) : q.psn;
  const Id dest = (q.set_mask & IBV_QP_DEST_QPN) ? QpByNum(q.set.dest_qp_num) : 0;
  attr->sq_psn = rng_.OneIn(30) || !dest ? static_cast<uint32_t>(rng_.Below(1 << 24)) : qps_[dest].psn;
  attr->max_dest_rd_atomic =
      static_cast<uint8_t>(rng_.Between(std::min(1, c.attr.max_qp_rd_atom), std::min(4, c.attr.max_qp_rd_atom)));
  attr->max_rd_atomic = static_cast<uint8_t>(
      rng_.Between(std::min(1, c.attr.max_qp_init_rd_atom), std::min(4, c.attr.max_qp_init_rd_atom)));
  attr->min_rnr_timer = static_cast<uint8_t>(rng_.Between(1, 6));  // 10 to 60 µs
  attr->timeout = static_cast<uint8_t>(rng_.Between(8, 14));       // 1 to 67 ms
  attr->retry_cnt = static_cast<uint8_t>(rng_.Below(8));
  attr->rnr_retry = static_cast<uint8_t>(rng_.Below(8));
  attr->en_sqd_async_notify = static_cast<uint8_t>(rng_.Below(2));
}

int Walk::ValidTransition(Id id, ibv_qp_state next, ibv_qp_attr* attr) {
  QpModel& q = qps_[id];
  int req, opt;
  if (!Transition(q.state, next, q.type, &req, &opt)) return -1;
  int mask = IBV_QP_STATE | req | (opt & kFillable & static_cast<int>(rng_.Next()));
  FillAttrs(id, attr);
  attr->qp_state = next;
  // No state change at all (cur -> cur without IBV_QP_STATE) is a transition too.
  if (next == q.state && rng_.OneIn(3)) mask &= ~IBV_QP_STATE;
  return mask;
}

bool Walk::DoModify(Id id, ibv_qp_attr& attr, int mask, int must, const std::string& what) {
  QpModel& q = qps_[id];
  const ibv_qp_state before = q.state;
  const ibv_qp_state next = (mask & IBV_QP_STATE) ? attr.qp_state : before;
  const std::string text = Format("%s, %s -> %s, mask 0x%x (%s)", Describe(id).c_str(), StateName(before).c_str(),
                                  StateName(next).c_str(), mask, what.c_str());
  Enter(Verb::kModifyQp);
  const int rc = ibv_modify_qp(q.qp, &attr, mask);
  if (rc == 0) {
    if (must == 0) Fail(Verb::kModifyQp, text + ": succeeded, but must fail");
    if ((mask & IBV_QP_STATE) && q.qp->state != next) {
      Fail(Verb::kModifyQp, text + ": succeeded and left qp->state at " + StateName(q.qp->state));
    }
    q.state = next;
    if (next == IBV_QPS_RTR && before != IBV_QPS_RTR) {
      q.received = false;
      q.rtr_psn = attr.rq_psn;
      // Those already sending to it started elsewhere, and what they still
      // have outstanding may be sent again into its new PSN space.
      for (auto& [other, o] : qps_) {
        if (other == id || !(o.set_mask & IBV_QP_DEST_QPN) || o.set.dest_qp_num != q.qp->qp_num) continue;
        LosePsnFreshness(other);
        if (!o.sq.empty()) q.received = true;
      }
    }
    if (next == IBV_QPS_RTS && before == IBV_QPS_RTR) {
      const Id dest = QpByNum(q.set.dest_qp_num);
      const bool ready = dest && qps_[dest].state != IBV_QPS_RESET && qps_[dest].state != IBV_QPS_INIT;
      q.psn_fresh = ready && attr.sq_psn == qps_[dest].rtr_psn && !qps_[dest].received && !StrayResponder(id);
    }
    if (next == IBV_QPS_RTR && (mask & IBV_QP_DEST_QPN)) {
      // A responder answers the QP it is connected to, whoever asked: if
      // that QP is not its requester, the answers are stray there.
      const Id target = QpByNum(attr.dest_qp_num);
      if (target && target != id && StrayResponder(target)) LosePsnFreshness(target);
    }
    if (next == IBV_QPS_RESET) {
      q.received = q.psn_fresh = false;
      // Outstanding work requests are dropped without completions; the
      // attributes are forgotten.
      RetireQueues(id);
      q.set_mask = 0;
      q.set = {};
      return true;
    }
    const int attrs =
        mask & kFillable &
        ~(IBV_QP_CUR_STATE | IBV_QP_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY | IBV_QP_SQ_PSN | IBV_QP_RQ_PSN | IBV_QP_AV);
    q.set_mask |= attrs;
    if (attrs & IBV_QP_DEST_QPN) q.set.dest_qp_num = attr.dest_qp_num;
    if (attrs & IBV_QP_QKEY) q.set.qkey = attr.qkey;
    if (attrs & IBV_QP_PORT) q.set.port_num = attr.port_num;
    if (attrs & IBV_QP_PKEY_INDEX) q.set.pkey_index = attr.pkey_index;
    if (attrs & IBV_QP_PATH_MTU) q.set.path_mtu = attr.path_mtu;
    if (attrs & IBV_QP_ACCESS_FLAGS) q.set.qp_access_flags = attr.qp_access_flags;
    if (attrs & IBV_QP_TIMEOUT) q.set.timeout = attr.timeout;
    if (attrs & IBV_QP_RETRY_CNT) q.set.retry_cnt = attr.retry_cnt;
    if (attrs & IBV_QP_RNR_RETRY) q.set.rnr_retry = attr.rnr_retry;
    if (attrs & IBV_QP_MIN_RNR_TIMER) q.set.min_rnr_timer = attr.min_rnr_timer;
    if (attrs & IBV_QP_MAX_QP_RD_ATOMIC) q.set.max_rd_atomic = attr.max_rd_atomic;
    if (attrs & IBV_QP_MAX_DEST_RD_ATOMIC) q.set.max_dest_rd_atomic = attr.max_dest_rd_atomic;
    return true;
  }
  CheckErrno(Verb::kModifyQp, rc);
  if (must == 1) {
    // A valid modify fails only if the HCA moved the QP meanwhile.
    if (CheckState(id, "after a refused modify") == before) {
      Fail(Verb::kModifyQp, text + ": a valid modify failed with " + ErrnoName(rc));
    }
    return false;
  }
  // A refused modify changes nothing.
  CheckState(id, ("after a refused modify: " + text).c_str());
  return false;
}

bool Walk::ModifyQp() {
  const Id id = Pick(qps_);
  if (!id) return false;
  QpModel& q = qps_[id];
  const ibv_qp_state cur = CheckState(id, "before ibv_modify_qp");
  const CtxModel& c = ctxs_[q.ctx];
  // A draining SQD QP refuses to leave for RTS or SQD (IBTA 10.3.1): either answer.
  const int valid_must = cur == IBV_QPS_SQD ? -1 : 1;
  ibv_qp_attr attr;
  int req, opt;
  const uint64_t kind = rng_.Below(10);
  if (kind < 5) {
    // A valid transition.
    std::vector<ibv_qp_state> nexts;
    for (int s = IBV_QPS_RESET; s <= IBV_QPS_ERR; ++s) {
      if (Transition(cur, static_cast<ibv_qp_state>(s), q.type, &req, &opt))
        nexts.push_back(static_cast<ibv_qp_state>(s));
    }
    // RESET and ERR end the QP's traffic: less often.
    ibv_qp_state next = nexts[rng_.Below(nexts.size())];
    if ((next == IBV_QPS_RESET || next == IBV_QPS_ERR) && rng_.Percent(60)) next = nexts[rng_.Below(nexts.size())];
    const int mask = ValidTransition(id, next, &attr);
    DoModify(id, attr, mask, next == IBV_QPS_RESET || next == IBV_QPS_ERR ? 1 : valid_must, "a valid transition");
    return true;
  }
  if (kind == 5) {
    // A transition the state table does not have.
    std::vector<ibv_qp_state> nexts;
    for (int s = IBV_QPS_RESET; s <= IBV_QPS_ERR; ++s) {
      if (!Transition(cur, static_cast<ibv_qp_state>(s), q.type, &req, &opt))
        nexts.push_back(static_cast<ibv_qp_state>(s));
    }
    if (nexts.empty()) return false;
    const ibv_qp_state next = nexts[rng_.Below(nexts.size())];
    // Every attribute valid: only the transition is wrong.
    FillAttrs(id, &attr);
    attr.qp_state = next;
    const int mask = IBV_QP_STATE | (static_cast<int>(rng_.Next()) & kFillable & ~IBV_QP_CUR_STATE);
    DoModify(id, attr, mask, 0, "no such transition");
    return true;
  }
  // A valid transition with one thing wrong.
  std::vector<ibv_qp_state> nexts;
  for (int s = IBV_QPS_RESET; s <= IBV_QPS_ERR; ++s) {
    if (Transition(cur, static_cast<ibv_qp_state>(s), q.type, &req, &opt))
      nexts.push_back(static_cast<ibv_qp_state>(s));
  }
  const ibv_qp_state next = nexts[rng_.Below(nexts.size())];
  int mask = ValidTransition(id, next, &attr) | IBV_QP_STATE;
  Transition(cur, next, q.type, &req, &opt);
  if (kind == 6) {
    if (!req) return false;
    int bit;
    do {
      bit = 1 << rng_.Below(31);
    } while (!(req & bit));
    mask &= ~bit;
    DoModify(id, attr, mask, 0, Format("required attribute 0x%x left out", bit));
    return true;
  }
  if (kind == 7) {
    const int extra = kAllAttrs & ~(req | opt | IBV_QP_STATE);
    if (!extra) return false;
    int bit;
    do {
      bit = 1 << rng_.Below(31);
    } while (!(extra & bit));
    DoModify(id, attr, mask | bit, 0, Format("attribute 0x%x not allowed in this transition", bit));
    return true;
  }
  // A value out of range: some the kernel checks for every device, some only
  // some devices check (either answer then).
  const int present = mask & ~IBV_QP_STATE;
  if (!present) return false;
  std::vector<int> bits;
  for (int b = 1; b > 0 && b <= present; b <<= 1) {
    if (present & b) bits.push_back(b);
  }
  const int bit = bits[rng_.Below(bits.size())];
  int must = -1;
  const char* what = "a value out of range";
  switch (bit) {
    case IBV_QP_PORT:
      attr.port_num = static_cast<uint8_t>(c.attr.phys_port_cnt + 1);
      must = 0;
      what = "a port the device does not have";
      break;
    case IBV_QP_PKEY_INDEX:
      attr.pkey_index = static_cast<uint16_t>(c.port.pkey_tbl_len);
      must = 0;
      what = "a P_Key index beyond the table";
      break;
    case IBV_QP_MAX_DEST_RD_ATOMIC:
      attr.max_dest_rd_atomic = static_cast<uint8_t>(c.attr.max_qp_rd_atom + 1);
      must = 0;
      what = "max_dest_rd_atomic above max_qp_rd_atom";
      break;
    case IBV_QP_MAX_QP_RD_ATOMIC:
      attr.max_rd_atomic = static_cast<uint8_t>(c.attr.max_qp_init_rd_atom + 1);
      must = 0;
      what = "max_rd_atomic above max_qp_init_rd_atom";
      break;
    case IBV_QP_TIMEOUT:
      attr.timeout = 32;
      break;
    case IBV_QP_RETRY_CNT:
      attr.retry_cnt = 8;
      break;
    case IBV_QP_RNR_RETRY:
      attr.rnr_retry = 8;
      break;
    case IBV_QP_MIN_RNR_TIMER:
      attr.min_rnr_timer = 32;
      break;
    case IBV_QP_PATH_MTU:
      attr.path_mtu = static_cast<ibv_mtu>(IBV_MTU_4096 + 1);
      break;
    case IBV_QP_ACCESS_FLAGS:
      attr.qp_access_flags |= 1u << 20;
      break;
    case IBV_QP_CUR_STATE:
      attr.cur_qp_state = static_cast<ibv_qp_state>((cur + 1) % (IBV_QPS_ERR + 1));
      what = "a cur_qp_state that is not the state";
      break;
    case IBV_QP_AV:
      attr.ah_attr.port_num = static_cast<uint8_t>(c.attr.phys_port_cnt + 1);
      what = "an address on a port the device does not have";
      break;
    default:
      return false;
  }
  DoModify(id, attr, mask, must, what);
  return true;
}

bool Walk::BringUpQp() {
  const Id id = PickWhere(qps_, [](const QpModel& q) { return q.state != IBV_QPS_RTS; });
  if (!id) return false;
  if (!BringUp(id, 0)) return true;
  // Its peer, if down, comes up pointing back: a connection that carries traffic.
  const QpModel& q = qps_[id];
  const Id peer = (q.set_mask & IBV_QP_DEST_QPN) ? QpByNum(q.set.dest_qp_num) : 0;
  if (peer && peer != id && qps_[peer].state != IBV_QPS_RTS && rng_.Percent(80)) BringUp(peer, id);
  return true;
}

bool Walk::BringUp(Id id, Id peer) {
  for (int i = 0; i < 5; ++i) {
    const ibv_qp_state cur = CheckState(id, "while bringing it up");
    ibv_qp_state next;
    switch (cur) {
      case IBV_QPS_RESET:
        next = IBV_QPS_INIT;
        break;
      case IBV_QPS_INIT:
        next = IBV_QPS_RTR;
        break;
      case IBV_QPS_RTR:
      case IBV_QPS_SQD:
      case IBV_QPS_SQE:
        next = IBV_QPS_RTS;
        break;
      case IBV_QPS_ERR:
        next = IBV_QPS_RESET;
        break;
      default:
        return true;
    }
    ibv_qp_attr attr;
    forced_peer_ = peer;
    const int mask = ValidTransition(id, next, &attr);
    forced_peer_ = 0;
    if (mask < 0 || !DoModify(id, attr, mask | IBV_QP_STATE, cur == IBV_QPS_SQD ? -1 : 1, "bringing it up")) {
      return false;
    }
  }
  return true;
}

bool Walk::QueryQp() {
  const Id id = Pick(qps_);
  if (!id) return false;
  CheckState(id, "when queried");
  CheckQueryAttrs(id);
  return true;
}

// ---- SRQ

bool Walk::CreateSrq() {
  const Id pd = Pick(pds_);
  if (!pd || srqs_.size() >= kMaxSrqs) return false;
  const Id ctx = pds_[pd].ctx;
  const CtxModel& c = ctxs_[ctx];
  ibv_srq_init_attr init{};
  init.attr.max_wr = static_cast<uint32_t>(rng_.Between(1, 64));
  init.attr.max_sge = static_cast<uint32_t>(rng_.Between(1, 4));
  init.attr.srq_limit = static_cast<uint32_t>(rng_.Below(8));  // ignored at creation
  const char* must_fail = nullptr;
  switch (rng_.Below(12)) {
    case 0:
      init.attr.max_wr = static_cast<uint32_t>(c.attr.max_srq_wr) + 1;
      must_fail = "max_wr above max_srq_wr";
      break;
    case 1:
      init.attr.max_sge = static_cast<uint32_t>(c.attr.max_srq_sge) + 1;
      must_fail = "max_sge above max_srq_sge";
      break;
    default:
      break;
  }
  const Id id = next_id_++;
  init.srq_context = QpContext(id);
  const ibv_srq_attr asked = init.attr;
  Enter(Verb::kCreateSrq);
  errno = 0;
  ibv_srq* srq = ibv_create_srq(pds_[pd].pd, &init);
  if (!srq) {
    CheckErrno(Verb::kCreateSrq, errno);
    if (!must_fail && errno != ENOMEM) Fail(Verb::kCreateSrq, "a valid SRQ failed with " + ErrnoName(errno));
    return true;
  }
  if (must_fail) Fail(Verb::kCreateSrq, std::string("succeeded, but must fail: ") + must_fail);
  if (srq->pd != pds_[pd].pd || srq->context != c.ctx || srq->srq_context != QpContext(id)) {
    Fail(Verb::kCreateSrq, "the ibv_srq does not describe the SRQ");
  }
  if (init.attr.max_wr < asked.max_wr || init.attr.max_sge < asked.max_sge) {
    Fail(Verb::kCreateSrq, "returned smaller sizes than asked for");
  }
  SrqModel s;
  s.srq = srq;
  s.ctx = ctx;
  s.pd = pd;
  s.max_wr = init.attr.max_wr;
  s.max_sge = init.attr.max_sge;
  srqs_[id] = s;
  return true;
}

bool Walk::ModifySrq() {
  const Id id = Pick(srqs_);
  if (!id) return false;
  SrqModel& s = srqs_[id];
  ibv_srq_attr attr{};
  int mask = 0;
  int must = 1;
  const char* what = "a valid modify";
  switch (rng_.Below(10)) {
    case 0:
      mask = IBV_SRQ_LIMIT;
      attr.srq_limit = s.max_wr + 1 + static_cast<uint32_t>(rng_.Below(8));
      must = 0;
      what = "srq_limit above max_wr";
      break;
    case 1:
      // Resizing is optional (IBV_DEVICE_SRQ_RESIZE): either answer.
      mask = IBV_SRQ_MAX_WR;
      attr.max_wr = static_cast<uint32_t>(s.posted.size() + rng_.Between(1, 32));
      must = -1;
      what = "a resize";
      break;
    case 2:
      mask = IBV_SRQ_LIMIT | (1 << 5);
      must = -1;
      what = "an unknown attribute";
      break;
    default:
      mask = IBV_SRQ_LIMIT;
      attr.srq_limit = static_cast<uint32_t>(rng_.Below(s.max_wr + 1));
      break;
  }
  Enter(Verb::kModifySrq);
  const int rc = ibv_modify_srq(s.srq, &attr, mask);
  if (rc != 0) {
    CheckErrno(Verb::kModifySrq, rc);
    if (must == 1) Fail(Verb::kModifySrq, Format("SRQ %u, %s: failed with %s", id, what, ErrnoName(rc).c_str()));
    return true;
  }
  if (must == 0) Fail(Verb::kModifySrq, Format("SRQ %u: succeeded, but must fail: %s", id, what));
  if (mask & IBV_SRQ_MAX_WR) s.max_wr = attr.max_wr;
  if (mask & IBV_SRQ_LIMIT) {
    s.limit = attr.srq_limit;
    if (s.limit) ++s.limit_arms;
  }
  return true;
}

bool Walk::QuerySrq() {
  const Id id = Pick(srqs_);
  if (!id) return false;
  SrqModel& s = srqs_[id];
  ibv_srq_attr attr{};
  Enter(Verb::kQuerySrq);
  if (int rc = ibv_query_srq(s.srq, &attr)) Fail(Verb::kQuerySrq, "failed with " + ErrnoName(rc));
  if (attr.max_wr < s.max_wr || attr.max_sge < s.max_sge)
    Fail(Verb::kQuerySrq, Format("SRQ %u: smaller than created", id));
  // ibv_modify_srq(3): the limit reads 0 once the event disarmed it.
  if (attr.srq_limit != s.limit && attr.srq_limit != 0) {
    Fail(Verb::kQuerySrq, Format("SRQ %u: srq_limit %u, the walk set %u", id, attr.srq_limit, s.limit));
  }
  return true;
}

bool Walk::DestroySrq() {
  const Id id = Pick(srqs_);
  if (!id) return false;
  const auto users = std::count_if(qps_.begin(), qps_.end(), [id](const auto& e) { return e.second.srq == id; });
  Enter(Verb::kDestroySrq);
  const int rc = ibv_destroy_srq(srqs_[id].srq);
  if (users > 0) {
    if (rc == 0) Fail(Verb::kDestroySrq, Format("succeeded with %zd QPs on the SRQ", users));
    CheckErrno(Verb::kDestroySrq, rc);
    return true;
  }
  if (rc != 0) Fail(Verb::kDestroySrq, "with no QP on it: failed with " + ErrnoName(rc));
  for (uint64_t wr : srqs_[id].posted) graveyard_.insert(pending_.extract(wr));
  srqs_.erase(id);
  return true;
}

// ---- AH

bool Walk::CreateAh() {
  const Id pd = Pick(pds_);
  if (!pd || ahs_.size() >= kMaxAhs) return false;
  const Id ctx = pds_[pd].ctx;
  const CtxModel& c = ctxs_[ctx];
  ibv_ah_attr attr;
  FillAv(ctx, &attr);
  if (!c.roce && rng_.OneIn(3)) attr.dlid = static_cast<uint16_t>(rng_.Between(1, 0xbfff));
  const char* must_fail = nullptr;
  switch (rng_.Below(10)) {
    case 0:
      attr.port_num = rng_.OneIn(2) ? 0 : static_cast<uint8_t>(c.attr.phys_port_cnt + 1);
      must_fail = "a port the device does not have";
      break;
    case 1:
      if (c.port.gid_tbl_len > 255) break;  // every sgid_index names an entry
      attr.is_global = 1;
      attr.grh.dgid = c.gid;
      attr.grh.sgid_index = static_cast<uint8_t>(c.port.gid_tbl_len);
      must_fail = "a source GID index beyond the table";
      break;
    case 2:
      if (!c.roce) break;
      attr.is_global = 0;
      must_fail = "no GRH on RoCE";
      break;
    default:
      break;
  }
  Enter(Verb::kCreateAh);
  errno = 0;
  ibv_ah* ah = ibv_create_ah(pds_[pd].pd, &attr);
  if (!ah) {
    CheckErrno(Verb::kCreateAh, errno);
    if (!must_fail && errno != ENOMEM) Fail(Verb::kCreateAh, "a valid AH failed with " + ErrnoName(errno));
    return true;
  }
  if (must_fail) Fail(Verb::kCreateAh, std::string("succeeded, but must fail: ") + must_fail);
  if (ah->pd != pds_[pd].pd || ah->context != c.ctx) Fail(Verb::kCreateAh, "the ibv_ah does not describe the AH");
  ahs_[next_id_++] = AhModel{ah, ctx, pd};
  return true;
}

bool Walk::DestroyAh() {
  const Id id = Pick(ahs_);
  if (!id) return false;
  Enter(Verb::kDestroyAh);
  if (int rc = ibv_destroy_ah(ahs_[id].ah)) Fail(Verb::kDestroyAh, "failed with " + ErrnoName(rc));
  ahs_.erase(id);
  return true;
}

}  // namespace verbs_fuzz
