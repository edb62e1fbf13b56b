#pragma once

// A fault plan (SIMVERBS_FAULTS=<file>, format in fixtures/FORMAT.md): faults
// for programs that know nothing of the simulator. Each fault is a trigger
// and an action and fires once.
//
// Triggers, all counted in this process:
//   completions  the Nth completion ibv_poll_cq (or ibv_start_poll / ibv_next_poll) returns, over every CQ
//   after_ms     T milliseconds after the process's first ibv_open_device returned
//   post_send    the Nth ibv_post_send (or ibv_wr_complete) call on a QP, named by creation order ("#2") or number
// Actions are rows of one table (kActions in fault_plan.cc): a row names the
// action's field and runs it on the objects the trigger involves (the QP that
// posted, the CQ that was polled and the QP of the completion). A new action
// (a WC error on the Nth WR, a QP or CQ put in error) is one row calling the
// control API.
//
// Hooks: the plan is loaded by the first Context::Open of the process, which
// also wraps that context's poll_cq / post_send ops when a trigger needs them;
// Device::AddQp tells it the creation order of QPs. Without SIMVERBS_FAULTS
// every hook returns at once.

#include <infiniband/verbs.h>

#include <string>

namespace simverbs {

class Context;
class Cq;
class Qp;

namespace fault_plan {

// Loads the plan on the first call in this process and installs the hooks
// it needs on `ctx`. Returns an error for the user (the plan is broken: file
// and field) or an empty string.
std::string OnContextOpen(Context* ctx);

// The extended verbs, which bypass the context ops the plan wraps: an
// ibv_wr_complete is one post_send call on `qp` (fires what falls due before
// the post runs); a completion handed out by ibv_start_poll / ibv_next_poll
// counts as one polled completion, and what falls due fires at ibv_end_poll,
// once the CQ is unlocked. Return at once without a plan.
void OnWrComplete(Qp* qp);
void OnPolledEx(Cq* cq, uint32_t qp_num);
void OnEndPoll();

// A QP was created. Requires: engine lock.
void OnQpCreated(const Qp* qp);

// For tests: parses `text` as a plan read from `path`; the error or "".
std::string Check(const std::string& path, const std::string& text);

}  // namespace fault_plan
}  // namespace simverbs
