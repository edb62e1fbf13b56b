#pragma once

#include <infiniband/verbs.h>

namespace simverbs {

// Fills every op of a context: the simulator's implementation where there is
// one, otherwise a stub that fails with EOPNOTSUPP. No slot is ever NULL,
// because verbs.h inlines call several of them without checking.
void InstallOps(verbs_context* vctx);

}  // namespace simverbs
