#pragma once

// Helpers shared by the C entry points of librdmacm (exports_*.cc).

#include <rdma/rdma_cma.h>

#include <cerrno>
#include <new>

namespace simverbs::rdmacm {

class CmId;

// librdmacm's convention: -1 with errno set.
inline int Fail(int err) {
  errno = err;
  return -1;
}

// Runs a C entry point's body; no C++ exception crosses the C ABI (an
// allocation failure becomes ENOMEM, anything else EIO).
template <typename F>
int Guarded(F&& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return Fail(ENOMEM);
  } catch (...) {
    return Fail(EIO);
  }
}

// For an id without a channel (synchronous, rdma_create_id with channel NULL):
// waits for the next event (the one the call caused), keeps it in id->event
// (acking the previous one) and fails when its status is not 0, as
// librdmacm's ucma_complete (REJECTED: ECONNREFUSED). Returns 0 at once for
// an id with a channel. Must be called without CmService::mu().
int CompleteSync(CmId* id);

}  // namespace simverbs::rdmacm
