#pragma once

// Helpers for the extern "C" layer: each verb converts its arguments, calls
// the object, and maps the result to the convention its man page documents.

#include <cerrno>
#include <cstddef>

#include "result.h"

#define SIMVERBS_EXPORT extern "C" __attribute__((visibility("default")))

// Functions that also have an IBVERBS_1.0 variant are defined under an
// internal name and bound as the default name@@IBVERBS_1.1, as rdma-core does.
// A .symver directive rather than GCC's symver attribute, which clang lacks.
#define SIMVERBS_EXPORT_1_1(name)                           \
  __asm__(".symver sv_" #name "," #name "@@IBVERBS_1.1"); \
  extern "C" __attribute__((visibility("default")))

namespace simverbs {

// NULL + errno (ibv_alloc_pd, ibv_create_cq, ...).
template <typename T>
T* PointerOrErrno(const Result<T*>& r) {
  if (!r.ok()) {
    errno = r.err();
    return nullptr;
  }
  return r.value();
}

// NULL + errno where there is no Result to convert (bad handles).
inline std::nullptr_t NullWithErrno(int err) {
  errno = err;
  return nullptr;
}

// -1 + errno (ibv_query_gid, ibv_get_cq_event, ...).
inline int MinusOneOrZero(int err) {
  if (err == 0) return 0;
  errno = err;
  return -1;
}

}  // namespace simverbs
