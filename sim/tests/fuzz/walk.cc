// The walk's loop, its failures, contexts, async events and the final drain.

#include "walk.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "format.h"

namespace verbs_fuzz {

// How often each action is drawn: posting and polling most, so that traffic flows.
#define WALK_ACTION(name, weight) {&Walk::name, weight, #name}
const Walk::WeightedAction Walk::kActions[] = {
    WALK_ACTION(OpenDevice, 3),
    WALK_ACTION(CloseDevice, 1),
    WALK_ACTION(QueryDevice, 1),
    WALK_ACTION(AllocPd, 4),
    WALK_ACTION(DeallocPd, 2),
    WALK_ACTION(RegMr, 6),
    WALK_ACTION(ReregMr, 2),
    WALK_ACTION(DeregMr, 3),
    WALK_ACTION(AllocMw, 2),
    WALK_ACTION(DeallocMw, 1),
    WALK_ACTION(BindMw, 3),
    WALK_ACTION(CreateCompChannel, 1),
    WALK_ACTION(DestroyCompChannel, 1),
    WALK_ACTION(CreateCq, 4),
    WALK_ACTION(ResizeCq, 2),
    WALK_ACTION(DestroyCq, 2),
    WALK_ACTION(ReqNotifyCq, 3),
    WALK_ACTION(PollCq, 14),
    WALK_ACTION(GetCqEvents, 3),
    WALK_ACTION(CreateQp, 5),
    WALK_ACTION(DestroyQp, 2),
    WALK_ACTION(ModifyQp, 8),
    WALK_ACTION(BringUpQp, 6),
    WALK_ACTION(QueryQp, 4),
    WALK_ACTION(CreateSrq, 2),
    WALK_ACTION(ModifySrq, 2),
    WALK_ACTION(QuerySrq, 1),
    WALK_ACTION(DestroySrq, 1),
    WALK_ACTION(PostSrqRecv, 4),
    WALK_ACTION(CreateAh, 2),
    WALK_ACTION(DestroyAh, 1),
    WALK_ACTION(PostSend, 22),
    WALK_ACTION(PostRecv, 12),
    WALK_ACTION(ReadAsyncEvents, 4),
    WALK_ACTION(Inject, 1),
    WALK_ACTION(Pause, 1),
};
#undef WALK_ACTION

namespace {

// What ibv_close_device left to the program stays reachable, for leak checkers.
std::vector<void*>& LeftToTheProgram() {
  static auto* objects = new std::vector<void*>();
  return *objects;
}

void SetNonBlocking(int fd) {
  const int flags = fcntl(fd, F_GETFL);
  if (flags >= 0) fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

uint8_t* MapPages(size_t bytes, int prot) {
  void* p = mmap(nullptr, bytes, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    std::perror("verbs-random-walk: mmap");
    std::exit(2);
  }
  return static_cast<uint8_t*>(p);
}

}  // namespace

std::string StateName(ibv_qp_state state) {
  static const char* const kNames[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
  return state >= 0 && state <= IBV_QPS_ERR ? kNames[state] : "state " + std::to_string(state);
}

Walk::Walk(const Config& config, Progress* progress)
    : config_(config), progress_(progress), rng_(config.seed), trace_(std::getenv("VERBS_WALK_TRACE") != nullptr) {
  progress_->seed = config.seed;
  if (sim_.available()) sim_.Reseed(config.sim_seed);
  int count = 0;
  device_list_ = ibv_get_device_list(&count);
  for (int i = 0; device_list_ && i < count; ++i) {
    if (config.device.empty() || config.device == ibv_get_device_name(device_list_[i])) {
      device_ = device_list_[i];
      break;
    }
  }
  if (!device_) {
    std::fprintf(stderr, "verbs-random-walk: no RDMA device%s%s\n", config.device.empty() ? "" : " named ",
                 config.device.c_str());
    std::exit(2);
  }
  page_ = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  buffer_size_ = kBufferPages * page_;
  buffer_ = MapPages(buffer_size_, PROT_READ | PROT_WRITE);
  for (size_t i = 0; i < buffer_size_; ++i) buffer_[i] = static_cast<uint8_t>(i * 7);
  prot_none_ = MapPages(page_, PROT_NONE);
  read_only_ = MapPages(page_, PROT_READ);
}

Walk::~Walk() {
  if (device_list_) ibv_free_device_list(device_list_);
  munmap(buffer_, buffer_size_);
  munmap(prot_none_, page_);
  munmap(read_only_, page_);
}

void Walk::Run() {
  for (step_ = 0; step_ < config_.steps; ++step_) {
    progress_->step = step_;
    Step();
    progress_->steps_done = step_ + 1;
  }
  progress_->draining = true;
  Drain();
  Teardown();
  for (const auto& [what, n] : counts_) std::fprintf(stderr, "%8" PRIu64 " %s\n", n, what.c_str());
}

void Walk::Step() {
  unsigned total = 0;
  for (const WeightedAction& a : kActions) total += a.weight;
  // An action that does not apply now (nothing to destroy) draws again.
  for (int attempt = 0; attempt < 8; ++attempt) {
    uint64_t r = rng_.Below(total);
    for (const WeightedAction& a : kActions) {
      if (r < a.weight) {
        if (trace_) std::fprintf(stderr, "step %" PRIu64 ": %s\n", step_, a.name);
        if ((this->*a.action)()) return;
        break;
      }
      r -= a.weight;
    }
  }
}

void Walk::Fail(Verb verb, const std::string& what) {
  progress_->failed = true;
  std::fprintf(stderr, "verbs-random-walk: FAILED at seed %" PRIu64 " step %" PRIu64 "%s, %s: %s\n", config_.seed,
               step_, progress_->draining ? " (final drain)" : "", VerbName(verb), what.c_str());
  std::fflush(stderr);
  progress_->Enter("exit after a failure");
  std::exit(kExitFailure);
}

void Walk::CheckErrno(Verb verb, int err) {
  if (err == 0) Fail(verb, "failed without an errno");
  if (!ErrnoDocumented(verb, err)) {
    Fail(verb, "failed with " + ErrnoName(err) + ", not one of " + DocumentedErrnos(verb));
  }
}

void Walk::ExpectFailed(Verb verb, bool failed, const std::string& why) {
  if (!failed) Fail(verb, "succeeded, but must fail: " + why);
}

bool Walk::OpenDevice() {
  if (ctxs_.size() >= kMaxContexts) return false;
  Enter(Verb::kOpenDevice);
  errno = 0;
  ibv_context* ctx = ibv_open_device(device_);
  if (!ctx) {
    CheckErrno(Verb::kOpenDevice, errno);
    return true;
  }
  CtxModel m;
  m.ctx = ctx;
  // The walk never blocks: it reads events when they are there.
  SetNonBlocking(ctx->async_fd);
  Enter(Verb::kQueryDevice);
  if (int rc = ibv_query_device(ctx, &m.attr)) Fail(Verb::kQueryDevice, "failed with " + ErrnoName(rc));
  Enter(Verb::kQueryPort);
  if (int rc = ibv_query_port(ctx, 1, &m.port)) Fail(Verb::kQueryPort, "port 1: failed with " + ErrnoName(rc));
  m.roce = m.port.link_layer == IBV_LINK_LAYER_ETHERNET;
  if (m.port.gid_tbl_len > 0 && ibv_query_gid(ctx, 1, 0, &m.gid) != 0) Fail(Verb::kQueryPort, "ibv_query_gid failed");
  ctxs_[next_id_++] = m;
  return true;
}

bool Walk::HasChildren(Id ctx) const {
  auto in = [ctx](const auto& objects) {
    for (const auto& [id, m] : objects) {
      if (m.ctx == ctx) return true;
    }
    return false;
  };
  return in(pds_) || in(mrs_) || in(mws_) || in(channels_) || in(cqs_) || in(srqs_) || in(qps_) || in(ahs_);
}

bool Walk::CloseDevice() {
  const Id id = Pick(ctxs_);
  if (!id) return false;
  // ibv_close_device(3) leaves objects still alive to the program (leaked);
  // the kernel destroys them. Now and then the walk does that on purpose.
  const bool children = HasChildren(id);
  if (children && (abandoned_ >= kMaxAbandoned || !rng_.OneIn(6))) return false;
  Enter(Verb::kCloseDevice);
  const int rc = ibv_close_device(ctxs_[id].ctx);
  if (rc != 0) Fail(Verb::kCloseDevice, Format("returned %d%s", rc, children ? " with objects alive" : ""));
  if (children) {
    ++abandoned_;
    ForgetContext(id);
  }
  ctxs_.erase(id);
  return true;
}

void Walk::ForgetContext(Id ctx) {
  auto keep = [ctx](const auto& objects, auto member) {
    for (const auto& [id, m] : objects) {
      if (m.ctx == ctx) LeftToTheProgram().push_back(m.*member);
    }
  };
  keep(pds_, &PdModel::pd);
  keep(mrs_, &MrModel::mr);
  keep(mws_, &MwModel::mw);
  keep(channels_, &ChannelModel::channel);
  keep(cqs_, &CqModel::cq);
  keep(srqs_, &SrqModel::srq);
  keep(qps_, &QpModel::qp);
  keep(ahs_, &AhModel::ah);
  for (auto& [id, m] : mrs_) {
    if (m.ctx == ctx) stale_keys_.push_back(m.lkey);
  }
  for (auto& [id, q] : qps_) {
    if (q.ctx != ctx) continue;
    for (uint64_t wr : q.sq) pending_.erase(wr);
    for (uint64_t wr : q.rq) pending_.erase(wr);
  }
  for (auto& [id, s] : srqs_) {
    if (s.ctx != ctx) continue;
    for (uint64_t wr : s.posted) pending_.erase(wr);
  }
  std::erase_if(graveyard_, [&](const auto& e) {
    const Id cq = e.second.cq;
    return cq && cqs_.count(cq) && cqs_.at(cq).ctx == ctx;
  });
  auto drop = [ctx](auto& objects) { std::erase_if(objects, [ctx](const auto& e) { return e.second.ctx == ctx; }); };
  drop(pds_);
  drop(mrs_);
  drop(mws_);
  drop(channels_);
  drop(cqs_);
  drop(srqs_);
  drop(qps_);
  drop(ahs_);
}

bool Walk::QueryDevice() {
  const Id id = Pick(ctxs_);
  if (!id) return false;
  const CtxModel& c = ctxs_[id];
  ibv_device_attr attr;
  Enter(Verb::kQueryDevice);
  if (int rc = ibv_query_device(c.ctx, &attr)) Fail(Verb::kQueryDevice, "failed with " + ErrnoName(rc));
  if (std::memcmp(&attr, &c.attr, sizeof attr) != 0) Fail(Verb::kQueryDevice, "answered differently than before");
  ibv_port_attr port;
  Enter(Verb::kQueryPort);
  if (int rc = ibv_query_port(c.ctx, 1, &port)) Fail(Verb::kQueryPort, "failed with " + ErrnoName(rc));
  if (port.state != c.port.state || port.lid != c.port.lid || port.link_layer != c.port.link_layer) {
    Fail(Verb::kQueryPort, "port 1 answered differently than before");
  }
  // A port that does not exist.
  Enter(Verb::kQueryPort);
  const int rc = ibv_query_port(c.ctx, static_cast<uint8_t>(c.attr.phys_port_cnt + 1), &port);
  if (rc == 0)
    Fail(Verb::kQueryPort, Format("succeeded for port %d of %d", c.attr.phys_port_cnt + 1, c.attr.phys_port_cnt));
  return true;
}

// ---- async events

bool Walk::ReadAsyncEvents() {
  const Id id = Pick(ctxs_);
  if (!id) return false;
  DrainAsyncEvents(id);
  return true;
}

void Walk::DrainAsyncEvents(Id ctx) {
  for (int i = 0; i < 1024; ++i) {
    ibv_async_event event;
    Enter(Verb::kGetAsyncEvent);
    errno = 0;
    const int rc = ibv_get_async_event(ctxs_[ctx].ctx, &event);
    if (rc != 0) {
      if (rc != -1) Fail(Verb::kGetAsyncEvent, Format("returned %d (not 0 or -1)", rc));
      CheckErrno(Verb::kGetAsyncEvent, errno);
      return;
    }
    HandleAsyncEvent(ctx, event);
    ibv_ack_async_event(&event);
  }
  Fail(Verb::kGetAsyncEvent, "more than 1024 events queued");
}

void Walk::HandleAsyncEvent(Id ctx, const ibv_async_event& event) {
  const std::string name = ibv_event_type_str(event.event_type);
  auto find = [ctx](const auto& objects, const void* pointer, auto member) -> Id {
    for (const auto& [id, m] : objects) {
      if (m.ctx == ctx && m.*member == pointer) return id;
    }
    return 0;
  };
  switch (event.event_type) {
    case IBV_EVENT_CQ_ERR: {
      const Id cq = find(cqs_, event.element.cq, &CqModel::cq);
      if (!cq) Fail(Verb::kGetAsyncEvent, name + " for a CQ that is not alive in this context");
      MarkCqErrored(cq, "IBV_EVENT_CQ_ERR");
      return;
    }
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_QP_LAST_WQE_REACHED: {
      const Id qp = find(qps_, event.element.qp, &QpModel::qp);
      if (!qp) Fail(Verb::kGetAsyncEvent, name + " for a QP that is not alive in this context");
      // IBTA 11.6.3.2: Last WQE Reached is for QPs attached to an SRQ.
      if (event.event_type == IBV_EVENT_QP_LAST_WQE_REACHED && !qps_[qp].srq) {
        Fail(Verb::kGetAsyncEvent, name + " for " + Describe(qp) + ", which has no SRQ");
      }
      return;
    }
    case IBV_EVENT_SRQ_ERR:
    case IBV_EVENT_SRQ_LIMIT_REACHED: {
      const Id srq = find(srqs_, event.element.srq, &SrqModel::srq);
      if (!srq) Fail(Verb::kGetAsyncEvent, name + " for an SRQ that is not alive in this context");
      SrqModel& s = srqs_[srq];
      if (event.event_type == IBV_EVENT_SRQ_LIMIT_REACHED) {
        // ibv_modify_srq(3): the event fires once per arming.
        if (s.limit_arms == 0)
          Fail(Verb::kGetAsyncEvent, Format("%s for SRQ %u, which was not armed", name.c_str(), srq));
        --s.limit_arms;  // the limit now reads 0 (unless the event was injected)
      }
      return;
    }
    case IBV_EVENT_PORT_ACTIVE:
    case IBV_EVENT_PORT_ERR:
    case IBV_EVENT_LID_CHANGE:
    case IBV_EVENT_PKEY_CHANGE:
    case IBV_EVENT_SM_CHANGE:
    case IBV_EVENT_CLIENT_REREGISTER:
    case IBV_EVENT_GID_CHANGE:
      if (event.element.port_num != 1)
        Fail(Verb::kGetAsyncEvent, Format("%s for port %d", name.c_str(), event.element.port_num));
      return;
    default:
      Fail(Verb::kGetAsyncEvent, "unexpected event " + name);
  }
}

// The simulator raises what an HCA would on its own: QP and SRQ events, a
// QP moved to ERR or SQE, a CQ in error.
bool Walk::Inject() {
  if (!sim_.available()) return false;
  Enter(Verb::kInject);
  switch (rng_.Below(4)) {
    case 0: {
      const Id qp = Pick(qps_);
      if (!qp) return false;
      static const ibv_event_type kTypes[] = {IBV_EVENT_COMM_EST, IBV_EVENT_PATH_MIG,   IBV_EVENT_PATH_MIG_ERR,
                                              IBV_EVENT_QP_FATAL, IBV_EVENT_QP_REQ_ERR, IBV_EVENT_QP_ACCESS_ERR};
      const int rc = sim_.RaiseQpEvent(qps_[qp].qp, kTypes[rng_.Below(std::size(kTypes))]);
      if (rc) Fail(Verb::kInject, "simverbs_raise_qp_event failed with " + ErrnoName(rc));
      return true;
    }
    case 1: {
      const Id qp = Pick(qps_);
      if (!qp) return false;
      const ibv_qp_state state = rng_.OneIn(2) ? IBV_QPS_ERR : IBV_QPS_SQE;
      const int rc = sim_.SetQpState(qps_[qp].qp, state);
      if (rc) CheckErrno(Verb::kInject, rc);
      return true;
    }
    case 2: {
      const Id srq = Pick(srqs_);
      if (!srq) return false;
      const bool limit = rng_.OneIn(2);
      const int rc = sim_.RaiseSrqEvent(srqs_[srq].srq, limit ? IBV_EVENT_SRQ_LIMIT_REACHED : IBV_EVENT_SRQ_ERR);
      if (rc) Fail(Verb::kInject, "simverbs_raise_srq_event failed with " + ErrnoName(rc));
      if (limit) ++srqs_[srq].limit_arms;
      return true;
    }
    default: {
      const Id cq = PickWhere(cqs_, [](const CqModel& c) { return !c.errored; });
      if (!cq || !rng_.OneIn(4)) return false;  // a CQ in error is for good: rarely
      cqs_[cq].may_overrun = true;
      const int rc = sim_.RaiseCqEvent(cqs_[cq].cq, IBV_EVENT_CQ_ERR);
      if (rc) Fail(Verb::kInject, "simverbs_raise_cq_event failed with " + ErrnoName(rc));
      return true;
    }
  }
}

// Retransmission and RNR timers run on wall time, and the walk is much
// faster: now and then it gives them some.
bool Walk::Pause() {
  progress_->Enter("(pause)");
  usleep(static_cast<useconds_t>(rng_.Between(100, 3000)));
  return true;
}

// ---- the end of the walk

void Walk::Drain() {
  for (const auto& [id, c] : ctxs_) DrainAsyncEvents(id);
  // IBTA 10.3.1: in ERR every outstanding work request completes (flushed).
  for (auto& [id, q] : qps_) {
    const ibv_qp_state state = CheckState(id, "before the drain");
    if (state == IBV_QPS_RESET || state == IBV_QPS_ERR) continue;
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_ERR;
    DoModify(id, attr, IBV_QP_STATE, 1, "to ERR for the drain");
  }
  auto required = [](const PendingWr& p) { return !p.srq && (p.recv || p.signaled); };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (;;) {
    int polled = 0;
    for (const auto& [id, cq] : cqs_) {
      if (cq.errored) continue;
      for (int n; (n = PollOnce(id, 16)) > 0;) polled += n;
    }
    for (const auto& [id, c] : ctxs_) DrainAsyncEvents(id);
    const PendingWr* missing = nullptr;
    uint64_t missing_id = 0;
    for (const auto& [wr, p] : pending_) {
      if (required(p) && (!missing || p.step < missing->step)) {
        missing = &p;
        missing_id = wr;
      }
    }
    if (!missing) break;
    if (std::chrono::steady_clock::now() > deadline) {
      Fail(Verb::kPollCq,
           Format("wr_id 0x%" PRIx64 " (%s%s posted at step %" PRIu64 " to %s) never completed, 5 s after every QP "
                  "was moved to ERR",
                  missing_id, missing->recv ? "receive" : WrOpcodeName(missing->opcode),
                  missing->signaled ? ", signaled," : "", missing->step, Describe(missing->qp).c_str()));
    }
    if (polled == 0) usleep(200);
  }
}

void Walk::Teardown() {
  // Children first; each destroy must succeed now that nothing uses the object.
  for (auto& [id, a] : ahs_) {
    Enter(Verb::kDestroyAh);
    if (int rc = ibv_destroy_ah(a.ah)) Fail(Verb::kDestroyAh, "failed with " + ErrnoName(rc));
  }
  ahs_.clear();
  while (!qps_.empty()) {
    const Id id = qps_.begin()->first;
    Enter(Verb::kDestroyQp);
    if (int rc = ibv_destroy_qp(qps_[id].qp)) Fail(Verb::kDestroyQp, Describe(id) + ": failed with " + ErrnoName(rc));
    RetireQueues(id);
    qps_.erase(id);
  }
  for (auto& [id, s] : srqs_) {
    Enter(Verb::kDestroySrq);
    if (int rc = ibv_destroy_srq(s.srq)) Fail(Verb::kDestroySrq, "failed with " + ErrnoName(rc));
  }
  srqs_.clear();
  for (auto& [id, w] : mws_) {
    Enter(Verb::kDeallocMw);
    if (int rc = ibv_dealloc_mw(w.mw)) Fail(Verb::kDeallocMw, "failed with " + ErrnoName(rc));
  }
  mws_.clear();
  for (auto& [id, m] : mrs_) {
    Enter(Verb::kDeregMr);
    if (int rc = ibv_dereg_mr(m.mr)) Fail(Verb::kDeregMr, "with no window allocated: failed with " + ErrnoName(rc));
  }
  mrs_.clear();
  for (auto& [id, c] : cqs_) {
    Enter(Verb::kDestroyCq);
    if (int rc = ibv_destroy_cq(c.cq)) Fail(Verb::kDestroyCq, "with no QP: failed with " + ErrnoName(rc));
  }
  cqs_.clear();
  for (auto& [id, ch] : channels_) {
    Enter(Verb::kDestroyCompChannel);
    if (int rc = ibv_destroy_comp_channel(ch.channel)) {
      Fail(Verb::kDestroyCompChannel, "with no CQ: failed with " + ErrnoName(rc));
    }
  }
  channels_.clear();
  for (auto& [id, p] : pds_) {
    Enter(Verb::kDeallocPd);
    if (int rc = ibv_dealloc_pd(p.pd)) Fail(Verb::kDeallocPd, "with no object: failed with " + ErrnoName(rc));
  }
  pds_.clear();
  for (auto& [id, c] : ctxs_) {
    Enter(Verb::kCloseDevice);
    if (int rc = ibv_close_device(c.ctx)) Fail(Verb::kCloseDevice, Format("returned %d", rc));
  }
  ctxs_.clear();
}

// ---- helpers

Id Walk::QpByNum(uint32_t qp_num) const {
  for (const auto& [id, q] : qps_) {
    if (q.qp->qp_num == qp_num) return id;
  }
  return 0;
}

std::string Walk::Describe(Id qp) const {
  auto it = qps_.find(qp);
  if (it == qps_.end()) return Format("QP %u (destroyed)", qp);
  const QpModel& q = it->second;
  static const char* const kTypes[] = {"", "", "RC", "UC", "UD"};
  return Format("QP %u (%s 0x%06x, %s)", qp, q.type <= IBV_QPT_UD ? kTypes[q.type] : "?", q.qp->qp_num,
                StateName(q.state).c_str());
}

}  // namespace verbs_fuzz
