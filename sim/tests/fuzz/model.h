#pragma once

// What the walk believes about each object it created. The walk checks the
// verbs' answers against this model and updates it only from what the verbs
// said (a successful call, a completion, an async event, a query).

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <set>

namespace verbs_fuzz {

// Objects are named by ids that are never reused within a walk (0: none), so
// an id in a log line names one object.
using Id = uint32_t;

struct CtxModel {
  ibv_context* ctx = nullptr;
  ibv_device_attr attr{};
  ibv_port_attr port{};  // port 1
  ibv_gid gid{};         // port 1, GID index 0
  bool roce = false;
};

struct PdModel {
  ibv_pd* pd = nullptr;
  Id ctx = 0;
};

struct MrModel {
  ibv_mr* mr = nullptr;
  Id ctx = 0;
  Id pd = 0;
  uint8_t* addr = nullptr;
  size_t length = 0;
  unsigned access = 0;
  uint32_t lkey = 0;
  uint32_t rkey = 0;
  // False after ibv_rereg_mr failed past its input checks: the MR may have
  // changed in part (ibv_rereg_mr(3)); only ibv_dereg_mr is used on it then.
  bool known = true;
  // Windows whose last bind named this MR: while any is allocated,
  // ibv_dereg_mr may answer EBUSY.
  std::set<Id> windows;
};

struct MwModel {
  ibv_mw* mw = nullptr;
  Id ctx = 0;
  Id pd = 0;
  ibv_mw_type type = IBV_MW_TYPE_1;
  uint32_t rkey = 0;  // the key of the last bind posted (type 2: ours to choose)
};

struct ChannelModel {
  ibv_comp_channel* channel = nullptr;
  Id ctx = 0;
};

struct CqModel {
  ibv_cq* cq = nullptr;
  Id ctx = 0;
  Id channel = 0;
  int capacity = 0;  // cq->cqe
  // The walk has seen it fail (poll < 0, CQ_ERR): completions may be lost.
  bool errored = false;
  // At some point more completions could have been due than it holds, so an
  // overrun (CQ_ERR) is legal.
  bool may_overrun = false;
  // Successful ibv_req_notify_cq calls not yet answered by an event: each
  // arming gives at most one completion event.
  int arms = 0;
};

struct SrqModel {
  ibv_srq* srq = nullptr;
  Id ctx = 0;
  Id pd = 0;
  uint32_t max_wr = 0;  // as reported at creation
  uint32_t max_sge = 0;
  uint32_t limit = 0;         // the limit last set (it reads 0 once the event fired)
  int limit_arms = 0;         // armings (and injected events) not yet answered by an event
  std::set<uint64_t> posted;  // outstanding wr_ids
  std::set<Id> recv_cqs;      // where its receives may complete
};

struct QpModel {
  ibv_qp* qp = nullptr;
  Id ctx = 0;
  Id pd = 0;
  Id send_cq = 0;
  Id recv_cq = 0;
  Id srq = 0;
  ibv_qp_type type = IBV_QPT_RC;
  ibv_qp_cap cap{};  // as reported at creation
  bool sig_all = false;
  // The state the walk moved it to. The HCA may move it on its own: to ERR
  // from any state but RESET, and a UC or UD QP from RTS to SQE.
  ibv_qp_state state = IBV_QPS_RESET;
  // Attributes the walk set since the last RESET (for query checks).
  int set_mask = 0;
  ibv_qp_attr set{};
  uint32_t qkey = 0;     // the Q_Key it is given (UD)
  uint32_t psn = 0;      // the PSN this QP expects (its rq_psn) and its peer sends with
  uint32_t rtr_psn = 0;  // the rq_psn it was given at RTR
  // An RC QP sent to it since its RTR: the PSN it expects has moved on.
  bool received = false;
  // Its send PSNs start where its peer expects them, no other QP has sent to
  // that peer since, and no QP but its peer is connected to it. Otherwise its
  // requests may look like duplicates to the peer, which acknowledges them
  // without executing them (IBTA ch. 9), or another responder's ACKs reach
  // it: then even a bad R_Key may complete successfully.
  bool psn_fresh = false;
  // Outstanding work requests in posting order (wr_ids).
  std::deque<uint64_t> sq;
  std::deque<uint64_t> rq;
};

struct AhModel {
  ibv_ah* ah = nullptr;
  Id ctx = 0;
  Id pd = 0;
};

// A work request posted and not yet completed.
struct PendingWr {
  Id qp = 0;
  Id srq = 0;  // a receive posted to an SRQ (qp is 0)
  Id cq = 0;   // where it completes (0 for SRQ receives: any attached QP's)
  bool recv = false;
  bool signaled = false;
  // Set when it cannot succeed (a bad lkey, range or rkey); the reason.
  const char* must_fail = nullptr;
  // must_fail comes from the responder's checks, which hold only while its
  // QP's PSNs are fresh (QpModel::psn_fresh).
  bool remote_fault = false;
  ibv_wr_opcode opcode = IBV_WR_SEND;
  uint64_t length = 0;
  uint64_t step = 0;
};

}  // namespace verbs_fuzz
