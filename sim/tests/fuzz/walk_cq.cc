// Completion channels and CQs: creation, resize, arming, completion events,
// polling, and what each completion must be.

#include <fcntl.h>

#include <algorithm>
#include <cinttypes>

#include "format.h"
#include "walk.h"

namespace verbs_fuzz {
namespace {

ibv_wc_opcode SendWcOpcode(ibv_wr_opcode op) {
  switch (op) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      return IBV_WC_RDMA_WRITE;
    case IBV_WR_RDMA_READ:
      return IBV_WC_RDMA_READ;
    case IBV_WR_ATOMIC_CMP_AND_SWP:
      return IBV_WC_COMP_SWAP;
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      return IBV_WC_FETCH_ADD;
    case IBV_WR_BIND_MW:
      return IBV_WC_BIND_MW;
    case IBV_WR_LOCAL_INV:
      return IBV_WC_LOCAL_INV;
    default:
      return IBV_WC_SEND;
  }
}

void* CqContext(Id id) { return reinterpret_cast<void*>(uintptr_t{id}); }

}  // namespace

// ---- completion channels

bool Walk::CreateCompChannel() {
  const Id ctx = Pick(ctxs_);
  if (!ctx || channels_.size() >= kMaxChannels) return false;
  Enter(Verb::kCreateCompChannel);
  errno = 0;
  ibv_comp_channel* ch = ibv_create_comp_channel(ctxs_[ctx].ctx);
  if (!ch) {
    CheckErrno(Verb::kCreateCompChannel, errno);
    return true;
  }
  if (ch->context != ctxs_[ctx].ctx) Fail(Verb::kCreateCompChannel, "channel->context is not the context");
  const int flags = fcntl(ch->fd, F_GETFL);
  if (flags < 0 || fcntl(ch->fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    Fail(Verb::kCreateCompChannel, "channel->fd is not a file descriptor");
  }
  channels_[next_id_++] = ChannelModel{ch, ctx};
  return true;
}

bool Walk::DestroyCompChannel() {
  const Id id = Pick(channels_);
  if (!id) return false;
  const auto users = std::count_if(cqs_.begin(), cqs_.end(), [id](const auto& e) { return e.second.channel == id; });
  Enter(Verb::kDestroyCompChannel);
  const int rc = ibv_destroy_comp_channel(channels_[id].channel);
  if (users > 0) {
    if (rc == 0) Fail(Verb::kDestroyCompChannel, Format("succeeded with %zd CQs on the channel", users));
    CheckErrno(Verb::kDestroyCompChannel, rc);
    return true;
  }
  if (rc != 0) Fail(Verb::kDestroyCompChannel, "with no CQ on it: failed with " + ErrnoName(rc));
  channels_.erase(id);
  return true;
}

// ---- CQs

bool Walk::CreateCq() {
  const Id ctx = Pick(ctxs_);
  if (!ctx || cqs_.size() >= kMaxCqs) return false;
  const CtxModel& c = ctxs_[ctx];
  int cqe = static_cast<int>(rng_.Between(1, 64));
  int vector = 0;
  Id channel = rng_.Percent(50) ? PickWhere(channels_, [ctx](const ChannelModel& ch) { return ch.ctx == ctx; }) : 0;
  const char* must_fail = nullptr;
  switch (rng_.Below(16)) {
    case 0:
      cqe = 0;
      must_fail = "cqe 0";
      break;
    case 1:
      cqe = -1;
      must_fail = "cqe -1";
      break;
    case 2:
      cqe = c.attr.max_cqe + 1;
      must_fail = "cqe above max_cqe";
      break;
    case 3:
      vector = c.ctx->num_comp_vectors;
      must_fail = "a completion vector the context does not have";
      break;
    case 4:
      if (const Id other = PickWhere(channels_, [ctx](const ChannelModel& ch) { return ch.ctx != ctx; })) {
        channel = other;
        must_fail = "a completion channel of another context";
      }
      break;
    default:
      break;
  }
  const Id id = next_id_++;
  ibv_comp_channel* ch = channel ? channels_[channel].channel : nullptr;
  Enter(Verb::kCreateCq);
  errno = 0;
  ibv_cq* cq = ibv_create_cq(c.ctx, cqe, CqContext(id), ch, vector);
  if (!cq) {
    CheckErrno(Verb::kCreateCq, errno);
    if (!must_fail && errno != ENOMEM) Fail(Verb::kCreateCq, Format("cqe %d: a valid CQ failed", cqe));
    return true;
  }
  if (must_fail) Fail(Verb::kCreateCq, std::string("succeeded, but must fail: ") + must_fail);
  // ibv_create_cq(3): "the CQ will have at least cqe entries".
  if (cq->cqe < cqe) Fail(Verb::kCreateCq, Format("asked for %d entries, cq->cqe is %d", cqe, cq->cqe));
  if (cq->context != c.ctx || cq->channel != ch || cq->cq_context != CqContext(id)) {
    Fail(Verb::kCreateCq, "the ibv_cq does not describe the CQ");
  }
  CqModel m;
  m.cq = cq;
  m.ctx = ctx;
  m.channel = channel;
  m.capacity = cq->cqe;
  cqs_[id] = m;
  return true;
}

bool Walk::ResizeCq() {
  const Id id = Pick(cqs_);
  if (!id) return false;
  CqModel& m = cqs_[id];
  int cqe = static_cast<int>(rng_.Between(1, 128));
  const char* must_fail = nullptr;
  if (rng_.OneIn(10)) {
    cqe = rng_.OneIn(2) ? 0 : ctxs_[m.ctx].attr.max_cqe + 1;
    must_fail = cqe == 0 ? "cqe 0" : "cqe above max_cqe";
  }
  Enter(Verb::kResizeCq);
  const int rc = ibv_resize_cq(m.cq, cqe);
  if (rc != 0) {
    // Smaller than what it holds, or not supported: the answer may vary.
    CheckErrno(Verb::kResizeCq, rc);
    return true;
  }
  if (must_fail) Fail(Verb::kResizeCq, std::string("succeeded, but must fail: ") + must_fail);
  if (m.cq->cqe < cqe) Fail(Verb::kResizeCq, Format("asked for %d entries, cq->cqe is %d", cqe, m.cq->cqe));
  m.capacity = m.cq->cqe;
  UpdateOverrunBounds();
  return true;
}

bool Walk::DestroyCq() {
  const Id id = Pick(cqs_);
  if (!id) return false;
  const auto users = std::count_if(qps_.begin(), qps_.end(),
                                   [id](const auto& e) { return e.second.send_cq == id || e.second.recv_cq == id; });
  Enter(Verb::kDestroyCq);
  const int rc = ibv_destroy_cq(cqs_[id].cq);
  if (users > 0) {
    if (rc == 0) Fail(Verb::kDestroyCq, Format("succeeded with %zd QPs using the CQ", users));
    CheckErrno(Verb::kDestroyCq, rc);
    if (rc != EBUSY) Fail(Verb::kDestroyCq, "with QPs using the CQ: " + ErrnoName(rc) + ", not EBUSY");
    return true;
  }
  if (rc != 0) Fail(Verb::kDestroyCq, "with no QP using it: failed with " + ErrnoName(rc));
  // What was still in it is gone with it.
  std::erase_if(graveyard_, [id](const auto& e) { return e.second.cq == id; });
  for (auto& [sid, s] : srqs_) s.recv_cqs.erase(id);
  cqs_.erase(id);
  return true;
}

bool Walk::ReqNotifyCq() {
  const Id id = Pick(cqs_);
  if (!id) return false;
  CqModel& m = cqs_[id];
  Enter(Verb::kReqNotifyCq);
  const int rc = ibv_req_notify_cq(m.cq, rng_.OneIn(3) ? 1 : 0);
  if (rc == 0) {
    ++m.arms;
    return true;
  }
  CheckErrno(Verb::kReqNotifyCq, rc);
  // Only a CQ in error refuses to be armed.
  DrainAsyncEvents(m.ctx);
  MarkCqErrored(id, "ibv_req_notify_cq failed");
  return true;
}

bool Walk::PollCq() {
  const Id id = Pick(cqs_);
  if (!id) return false;
  PollOnce(id, static_cast<int>(rng_.Between(1, 16)));
  return true;
}

int Walk::PollOnce(Id id, int max) {
  ibv_wc wcs[16];
  max = std::min(max, 16);
  Enter(Verb::kPollCq);
  const int n = ibv_poll_cq(cqs_[id].cq, max, wcs);
  if (n < 0) {
    // ibv_poll_cq(3): negative on error; a CQ that overran is the only cause here.
    DrainAsyncEvents(cqs_[id].ctx);
    MarkCqErrored(id, Format("ibv_poll_cq returned %d", n).c_str());
    return n;
  }
  if (n > max) Fail(Verb::kPollCq, Format("returned %d completions for %d entries", n, max));
  for (int i = 0; i < n; ++i) HandleCompletion(id, wcs[i]);
  return n;
}

bool Walk::GetCqEvents() {
  const Id id = Pick(channels_);
  if (!id) return false;
  ibv_comp_channel* channel = channels_[id].channel;
  for (int i = 0; i < 256; ++i) {
    ibv_cq* cq = nullptr;
    void* cq_context = nullptr;
    Enter(Verb::kGetCqEvent);
    errno = 0;
    const int rc = ibv_get_cq_event(channel, &cq, &cq_context);
    if (rc != 0) {
      if (rc != -1) Fail(Verb::kGetCqEvent, Format("returned %d (not 0 or -1)", rc));
      CheckErrno(Verb::kGetCqEvent, errno);
      return true;
    }
    const Id cq_id = PickWhere(cqs_, [&](const CqModel& m) { return m.cq == cq && m.channel == id; });
    if (!cq_id) Fail(Verb::kGetCqEvent, "an event for a CQ that is not alive on this channel");
    if (cq_context != CqContext(cq_id)) Fail(Verb::kGetCqEvent, "cq_context is not the one given at creation");
    CqModel& m = cqs_[cq_id];
    // ibv_req_notify_cq(3): one event per arming.
    if (m.arms == 0) Fail(Verb::kGetCqEvent, Format("a completion event for CQ %u, which was not armed", cq_id));
    --m.arms;
    ibv_ack_cq_events(cq, 1);
  }
  return true;
}

// ---- completions

void Walk::HandleCompletion(Id cq_id, const ibv_wc& wc) {
  const CqModel& cq = cqs_[cq_id];
  const std::string wc_text = Format("completion (wr_id 0x%" PRIx64 ", %s, qp_num 0x%06x) in CQ %u", wc.wr_id,
                                     ibv_wc_status_str(wc.status), wc.qp_num, cq_id);
  if (wc.status > IBV_WC_TM_RNDV_INCOMPLETE) Fail(Verb::kPollCq, wc_text + ": not an ibv_wc_status");
  auto it = pending_.find(wc.wr_id);
  if (it == pending_.end()) {
    if (graveyard_.erase(wc.wr_id)) return;
    if (cq.errored) return;
    Fail(Verb::kPollCq, wc_text + ": no such work request is outstanding (never posted, or completed already)");
  }
  const PendingWr p = it->second;
  pending_.erase(it);
  const std::string wr_text = Format("%s: the %s posted at step %" PRIu64, wc_text.c_str(),
                                     p.recv ? "receive" : WrOpcodeName(p.opcode), p.step);
  if (p.srq) {
    SrqModel& s = srqs_[p.srq];
    s.posted.erase(wc.wr_id);
    if (!s.recv_cqs.count(cq_id))
      Fail(Verb::kPollCq, wr_text + Format(" to SRQ %u, and no QP on it uses this CQ", p.srq));
    if (const Id qp = QpByNum(wc.qp_num); qp && (qps_[qp].srq != p.srq || qps_[qp].recv_cq != cq_id)) {
      Fail(Verb::kPollCq,
           wr_text + Format(" to SRQ %u; %s does not receive from it into this CQ", p.srq, Describe(qp).c_str()));
    }
  } else {
    QpModel& q = qps_[p.qp];
    if (p.cq != cq_id) Fail(Verb::kPollCq, wr_text + Format(" to %s belongs in CQ %u", Describe(p.qp).c_str(), p.cq));
    if (wc.qp_num != q.qp->qp_num) Fail(Verb::kPollCq, wr_text + " to " + Describe(p.qp) + ": wrong qp_num");
    // IBTA ch. 10 (work completions): a work queue completes in the order its work
    // requests were posted. An unsignaled send before this one is done.
    std::deque<uint64_t>& queue = p.recv ? q.rq : q.sq;
    auto pos = std::find(queue.begin(), queue.end(), wc.wr_id);
    for (auto e = queue.begin(); e != pos; ++e) {
      const PendingWr& earlier = pending_[*e];
      if (earlier.recv || earlier.signaled) {
        const std::string why = wr_text + Format(" to %s came before wr_id 0x%" PRIx64 " (%s, step %" PRIu64
                                                 "), posted earlier to the same queue",
                                                 Describe(p.qp).c_str(), *e,
                                                 earlier.recv ? "receive" : WrOpcodeName(earlier.opcode), earlier.step);
        // Unless the CQ overran and lost that one (rxe drops the completion,
        // raises CQ_ERR and goes on): the event tells.
        DrainAsyncEvents(cq.ctx);
        if (cqs_[cq_id].errored) return;
        Fail(Verb::kPollCq, why);
      }
      pending_.erase(*e);
    }
    if (pos != queue.end()) queue.erase(queue.begin(), pos + 1);
  }
  if (trace_) Count(Format("completion %s %s", p.recv ? "recv" : WrOpcodeName(p.opcode), ibv_wc_status_str(wc.status)));
  if (wc.status != IBV_WC_SUCCESS) return;
  if (!p.recv && !p.signaled) Fail(Verb::kPollCq, wr_text + ", unsignaled, completed successfully");
  if (p.must_fail) Fail(Verb::kPollCq, wr_text + std::string(" succeeded, but it has ") + p.must_fail);
  if (p.recv) {
    if (wc.opcode != IBV_WC_RECV && wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM) {
      Fail(Verb::kPollCq, wr_text + Format(": opcode %d is not a receive", wc.opcode));
    }
    // A SEND lands in the receive's buffers (a UD one counts the 40 bytes of
    // the GRH area); a WRITE with immediate reports the length it wrote.
    if (wc.opcode == IBV_WC_RECV && wc.byte_len > p.length + 40)
      Fail(Verb::kPollCq, wr_text + Format(": byte_len %u > its %" PRIu64 " bytes", wc.byte_len, p.length));
  } else if (wc.opcode != SendWcOpcode(p.opcode)) {
    Fail(Verb::kPollCq, wr_text + Format(": opcode %d, expected %d", wc.opcode, SendWcOpcode(p.opcode)));
  }
}

void Walk::MarkCqErrored(Id id, const std::string& how) {
  CqModel& cq = cqs_[id];
  if (cq.errored) return;
  // IBTA 11.4.2.1: a CQ fails when it overruns (or the HCA raises CQ_ERR).
  if (!cq.may_overrun) {
    Fail(Verb::kPollCq,
         Format("CQ %u failed (%s), but it could never hold more than its %d entries", id, how.c_str(), cq.capacity));
  }
  cq.errored = true;
  // Completions into it may be lost from now on.
  for (auto& [qid, q] : qps_) {
    for (std::deque<uint64_t>* queue : {&q.sq, &q.rq}) {
      if ((queue == &q.sq ? q.send_cq : q.recv_cq) != id) continue;
      for (uint64_t wr : *queue) graveyard_.insert(pending_.extract(wr));
      queue->clear();
    }
  }
}

void Walk::UpdateOverrunBounds() {
  // Each outstanding work request completes at most once; a receive of an SRQ
  // in any CQ a QP on that SRQ uses. More than a CQ holds may overrun it.
  std::map<Id, size_t> due;
  auto count = [&](const PendingWr& p) {
    if (!p.srq) {
      ++due[p.cq];
    } else if (srqs_.count(p.srq)) {
      for (Id cq : srqs_[p.srq].recv_cqs) ++due[cq];
    } else {
      for (auto& [id, cq] : cqs_) ++due[id];
    }
  };
  for (const auto& [wr, p] : pending_) count(p);
  for (const auto& [wr, p] : graveyard_) count(p);
  for (auto& [id, cq] : cqs_) {
    if (due[id] > static_cast<size_t>(cq.capacity)) cq.may_overrun = true;
  }
}

}  // namespace verbs_fuzz
