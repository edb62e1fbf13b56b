#pragma once

// The IBTA QP state machine as the verbs layer checks it (the same table as
// the kernel's ib_modify_qp_is_ok): which transitions exist, and for each the
// attributes that must and may be given, per QP type.

#include <infiniband/verbs.h>

namespace simverbs {

// True if `mask` is acceptable for cur → next on a QP of `type`.
// IBV_QP_STATE is implied by the caller when the state changes.
bool QpTransitionIsValid(ibv_qp_state cur, ibv_qp_state next, ibv_qp_type type, int mask);

}  // namespace simverbs
