#pragma once

// One random walk over the verbs API: each step picks an action (create,
// modify, use or destroy an object, with valid and deliberately bad
// arguments) and checks the answer against a model of what the walk created.
// The end of the walk moves every QP to ERR, drains the CQs and destroys
// everything, checking that every work request that must complete did.
//
// Oracles, each ending the process with a message naming seed, step and verb:
//  - every failing verb returns an errno its table allows (verb.h);
//  - what must succeed succeeds (a PD with no objects is deallocated, a valid
//    QP transition is made) and what must fail fails (a PD with an MR is
//    EBUSY, an invalid transition EINVAL, an MR on PROT_NONE memory EFAULT);
//  - completions: each names an outstanding work request of that CQ, arrives
//    in posting order on its queue, succeeds only if it can, and every
//    signaled send and every receive completes by the end;
//  - queries answer what the walk set (QP state and attributes, SRQ limits);
//  - async events name live objects of their context; CQ_ERR only when the
//    CQ could have overrun; completion events only for armed CQs.
// Crashes and hangs are caught by the parent process (verbs_random_walk.cc).

#include <infiniband/verbs.h>

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "model.h"
#include "progress.h"
#include "rng.h"
#include "sim_control.h"
#include "verb.h"

namespace verbs_fuzz {

// The child's exit status when the walk found a bug.
constexpr int kExitFailure = 3;

// Bounds on what one walk keeps alive, so that objects meet often.
constexpr size_t kMaxContexts = 3;
constexpr int kMaxAbandoned = 2;  // contexts closed with objects alive
constexpr size_t kMaxPds = 6;
constexpr size_t kMaxMrs = 16;
constexpr size_t kMaxMws = 8;
constexpr size_t kMaxChannels = 3;
constexpr size_t kMaxCqs = 8;
constexpr size_t kMaxQps = 12;
constexpr size_t kMaxSrqs = 4;
constexpr size_t kMaxAhs = 8;
constexpr size_t kBufferPages = 32;
constexpr int kMaxSge = 6;  // the most SGEs a WR of the walk carries

std::string StateName(ibv_qp_state state);

class Walk {
 public:
  struct Config {
    uint64_t seed = 0;
    uint64_t steps = 0;
    std::string device;               // empty: the first device
    unsigned long long sim_seed = 0;  // the simulator's scheduler (SIMVERBS_SEED)
  };

  Walk(const Config& config, Progress* progress);
  ~Walk();
  Walk(const Walk&) = delete;
  Walk& operator=(const Walk&) = delete;

  // The steps, then the drain and teardown. Returns only if nothing failed.
  void Run();

 private:
  using Action = bool (Walk::*)();  // false: not applicable now
  struct WeightedAction {
    Action action;
    unsigned weight;
    const char* name;
  };

  // ---- walk.cc: the loop, failures, contexts, async events, the end.
  void Step();
  void Enter(Verb verb) { progress_->Enter(VerbName(verb)); }
  [[noreturn]] void Fail(Verb verb, const std::string& what);
  // A failed call of `verb` returned `err`: it must be in the verb's table.
  void CheckErrno(Verb verb, int err);
  // A call that must fail succeeded, or one that must succeed failed.
  void ExpectFailed(Verb verb, bool failed, const std::string& why);
  bool OpenDevice();
  bool CloseDevice();
  bool QueryDevice();
  bool ReadAsyncEvents();
  void DrainAsyncEvents(Id ctx);
  void HandleAsyncEvent(Id ctx, const ibv_async_event& event);
  bool Inject();
  bool Pause();
  void Drain();
  void Teardown();
  // Forgets every object of a context closed with objects alive.
  void ForgetContext(Id ctx);
  bool HasChildren(Id ctx) const;

  // ---- walk_memory.cc: PDs, MRs, memory windows.
  bool AllocPd();
  bool DeallocPd();
  int PdUsers(Id pd) const;
  bool RegMr();
  bool ReregMr();
  bool DeregMr();
  bool AllocMw();
  bool DeallocMw();
  bool BindMw();
  unsigned RandomAccess();  // a valid combination of MR access flags
  // Picks a range of the walk's buffer.
  void PickRange(uint8_t** addr, size_t* length);
  // Whether [addr, addr+length) is inside a live MR of `pd` whose key is `lkey`
  // and whose access includes `access`.
  bool LkeyCovers(Id pd, uint32_t lkey, uint64_t addr, uint64_t length, unsigned access) const;
  // Why a remote access through `rkey` to a responder of `pd` cannot pass the
  // responder's checks, or nullptr if it may.
  const char* RemoteKeyFault(Id pd, uint32_t rkey, uint64_t addr, uint64_t length, unsigned access) const;
  // A scatter/gather entry: valid for `pd` (into an MR with `access`, at most
  // `max_length` bytes) or, when `bad` is set, one that cannot pass the lkey
  // check. Returns the reason it is bad, or nullptr.
  const char* MakeSge(Id pd, unsigned access, bool bad, uint32_t max_length, ibv_sge* sge);
  uint32_t RandomKey();

  // ---- walk_cq.cc: completion channels, CQs, polling, completion events.
  bool CreateCompChannel();
  bool DestroyCompChannel();
  bool CreateCq();
  bool ResizeCq();
  bool DestroyCq();
  bool ReqNotifyCq();
  bool PollCq();
  bool GetCqEvents();
  // Polls once; returns the number of completions (<0: the CQ failed).
  int PollOnce(Id cq, int max);
  void HandleCompletion(Id cq, const ibv_wc& wc);
  void MarkCqErrored(Id cq, const std::string& how);
  // Recomputes whether each CQ may overrun with what is outstanding now.
  void UpdateOverrunBounds();

  // ---- walk_qp.cc: QPs, SRQs, AHs.
  bool CreateQp();
  bool DestroyQp();
  bool ModifyQp();
  bool BringUpQp();
  // Brings `qp` to RTS, connected to `peer` (0: any); false if a step failed.
  bool BringUp(Id qp, Id peer);
  bool QueryQp();
  bool CreateSrq();
  bool ModifySrq();
  bool QuerySrq();
  bool DestroySrq();
  bool CreateAh();
  bool DestroyAh();
  // Gives every attribute a valid value for `qp` now.
  void FillAttrs(Id qp, ibv_qp_attr* attr);
  // Fills the attributes of a valid transition of `qp` to `next`; returns the
  // mask, or -1 if there is no such transition.
  int ValidTransition(Id qp, ibv_qp_state next, ibv_qp_attr* attr);
  // Modifies `qp` and checks the answer. `must` = true: the modify is valid
  // and must succeed unless the HCA moved the QP meanwhile; false: it must
  // fail; unset (-1): either. Returns whether it succeeded.
  bool DoModify(Id qp, ibv_qp_attr& attr, int mask, int must, const std::string& what);
  // Queries the QP's state and checks it against the model (adopting ERR or
  // SQE if the HCA moved it there). Returns the state.
  ibv_qp_state CheckState(Id qp, const char* when);
  void CheckQueryAttrs(Id qp);
  void RetireQueues(Id qp);  // RESET or destroy: what was queued never completes
  // Another stream of PSNs reaches `qp`'s peer: its requests may now look
  // like duplicates there, so their R_Keys may go unchecked.
  void LosePsnFreshness(Id qp);
  // Whether a QP other than `qp`'s peer is connected to `qp`: its ACKs and
  // NAKs, answers to other requesters, reach `qp` too.
  bool StrayResponder(Id qp) const;
  void FillAv(Id ctx, ibv_ah_attr* av);

  // ---- walk_post.cc: posting work requests.
  bool PostSend();
  bool PostRecv();
  bool PostSrqRecv();
  uint64_t NewWrId() { return next_wr_id_++; }
  // A work request was posted to `qp`'s send or receive queue.
  void AddPending(Id qp, uint64_t wr_id, const PendingWr& p);

  // ---- helpers shared by all.
  template <typename M>
  Id Pick(const std::map<Id, M>& objects) {
    if (objects.empty()) return 0;
    auto it = objects.begin();
    std::advance(it, static_cast<long>(rng_.Below(objects.size())));
    return it->first;
  }
  template <typename M, typename Pred>
  Id PickWhere(const std::map<Id, M>& objects, Pred pred) {
    std::vector<Id> ids;
    for (const auto& [id, m] : objects) {
      if (pred(m)) ids.push_back(id);
    }
    return ids.empty() ? 0 : ids[rng_.Below(ids.size())];
  }
  Id QpByNum(uint32_t qp_num) const;
  std::string Describe(Id qp) const;

  Config config_;
  Progress* progress_;
  Rng rng_;
  const bool trace_;  // VERBS_WALK_TRACE: each step's action, and counts at the end, on stderr
  std::map<std::string, uint64_t> counts_;
  void Count(const std::string& what) { ++counts_[what]; }
  SimControl sim_;
  uint64_t step_ = 0;
  Id next_id_ = 1;
  Id forced_peer_ = 0;  // FillAttrs connects to this QP when set
  uint64_t next_wr_id_ = 0x1000;
  int abandoned_ = 0;  // contexts closed with objects alive

  ibv_device** device_list_ = nullptr;
  ibv_device* device_ = nullptr;

  // Memory: a buffer for MRs and SGEs, and pages a correct library must refuse.
  size_t page_ = 4096;
  uint8_t* buffer_ = nullptr;
  size_t buffer_size_ = 0;
  uint8_t* prot_none_ = nullptr;
  uint8_t* read_only_ = nullptr;
  std::vector<uint32_t> stale_keys_;  // keys of MRs deregistered

  std::map<Id, CtxModel> ctxs_;
  std::map<Id, PdModel> pds_;
  std::map<Id, MrModel> mrs_;
  std::map<Id, MwModel> mws_;
  std::map<Id, ChannelModel> channels_;
  std::map<Id, CqModel> cqs_;
  std::map<Id, SrqModel> srqs_;
  std::map<Id, QpModel> qps_;
  std::map<Id, AhModel> ahs_;

  std::unordered_map<uint64_t, PendingWr> pending_;
  // Work requests that may still complete but need not (their QP was reset
  // or destroyed, their CQ failed): a completion for one is accepted once.
  std::unordered_map<uint64_t, PendingWr> graveyard_;

  static const WeightedAction kActions[];
};

}  // namespace verbs_fuzz
