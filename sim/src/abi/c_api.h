#pragma once

// Helpers for the extern "C" layer: each verb converts its arguments, calls
// the object, and maps the result to the convention its man page documents.
//
// No C++ exception crosses the C ABI: the callers are C programs, and an
// exception leaving an extern "C" function (or a function pointer the library
// hands out) ends in std::terminate. Every extern "C" verb that calls into the
// simulator runs its body in Guarded<convention>, and every op-table slot, and
// every ibv_cq_ex / ibv_qp_ex function pointer, is a Guard<&Fn, ...>::Call (or
// GuardPost for the post verbs) around the implementation. An exception then
// becomes that verb's failure: std::bad_alloc (running out of memory or
// address space) is ENOMEM, anything else EIO. Functions that call nothing
// able to throw (string tables, stubs, the ack counters) are left bare.

#include <infiniband/verbs.h>

#include <cerrno>
#include <cstddef>
#include <exception>
#include <new>
#include <stdexcept>
#include <system_error>
#include <type_traits>

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

// How a verb reports a failure (its man page's RETURN VALUE).
enum class OnThrow {
  kNullErrno,      // NULL, errno set (ibv_create_cq, ibv_reg_mr, ...)
  kErrno,          // the errno value returned (ibv_req_notify_cq, ibv_start_poll, ...)
  kErrnoSet,       // the same, and errno set to it: a kernel command's failure (ibv_modify_qp, ...)
  kMinusOneErrno,  // -1, errno set (ibv_get_cq_event, ibv_query_gid, ...)
  kNegativeErrno,  // -errno returned (ibv_poll_cq: "a negative value")
  kReregCmd,       // IBV_REREG_MR_ERR_CMD, errno set (ibv_rereg_mr)
  kNothing,        // void: nothing to report
};

// The errno for the exception being handled. Only inside a catch block.
inline int ErrnoOfCurrentException() noexcept {
  try {
    throw;
  } catch (const std::bad_alloc&) {
    return ENOMEM;
  } catch (const std::length_error&) {
    return ENOMEM;  // a container asked for more than it can ever hold
  } catch (const std::system_error& e) {
    // std::thread and friends: no thread or memory to be had.
    return e.code().value() == EAGAIN || e.code().value() == ENOMEM ? ENOMEM : EIO;
  } catch (...) {
    return EIO;
  }
}

// Runs `body`; an exception becomes the failure `kHow` describes.
template <OnThrow kHow, typename Body>
auto Guarded(Body&& body) noexcept -> decltype(body()) {
  using R = decltype(body());
  try {
    if constexpr (kHow == OnThrow::kErrnoSet) {
      // libibverbs returns the errno the failed command left (execute_ioctl), so a program's
      // perror after such a verb names the failure.
      const R r = body();
      if (r > 0) errno = static_cast<int>(r);
      return r;
    } else {
      return body();
    }
  } catch (...) {
    const int err = ErrnoOfCurrentException();
    if constexpr (kHow == OnThrow::kNothing) {
      static_assert(std::is_void_v<R>);
      return;
    } else if constexpr (kHow == OnThrow::kNullErrno) {
      static_assert(std::is_pointer_v<R>);
      errno = err;
      return nullptr;
    } else if constexpr (kHow == OnThrow::kErrno) {
      return static_cast<R>(err);
    } else if constexpr (kHow == OnThrow::kErrnoSet) {
      errno = err;
      return static_cast<R>(err);
    } else if constexpr (kHow == OnThrow::kMinusOneErrno) {
      errno = err;
      return static_cast<R>(-1);
    } else if constexpr (kHow == OnThrow::kNegativeErrno) {
      return static_cast<R>(-err);
    } else {
      static_assert(kHow == OnThrow::kReregCmd);
      errno = err;
      return static_cast<R>(IBV_REREG_MR_ERR_CMD);
    }
  }
}

// Guarded for the verbs that block where libibverbs blocks in read(2), a
// cancellation point (ibv_get_async_event, ibv_get_cq_event): the forced
// unwinding of pthread_cancel passes through (it may not be caught, and a
// noexcept frame would end it in std::terminate). So only the simulator's own
// exceptions, all std::exception, are caught here (a catch of
// abi::__forced_unwind by reference binds a null object: UBSan refuses it).
template <OnThrow kHow, typename Body>
auto GuardedCancellable(Body&& body) -> decltype(body()) {
  static_assert(kHow == OnThrow::kMinusOneErrno);
  try {
    return body();
  } catch (const std::exception&) {
    errno = ErrnoOfCurrentException();
    return -1;
  }
}

// ibv_post_send(3) / ibv_post_recv(3) / ibv_post_srq_recv(3): the errno is
// returned and *bad_wr names a WR that was not posted. The verbs name the
// exact WR when building it fails; an exception that still gets here names
// the first of the list.
template <typename Wr, typename Body>
int GuardedPost(Wr* wr, Wr** bad_wr, Body&& body) noexcept {
  try {
    return body();
  } catch (...) {
    if (bad_wr) *bad_wr = wr;
    return ErrnoOfCurrentException();
  }
}

// Guard<&Fn, kHow>::Call has Fn's signature and runs it through Guarded: what
// op tables and function pointers handed to programs are set to.
template <auto Fn, OnThrow kHow, typename Sig = decltype(Fn)>
struct Guard;

template <auto Fn, OnThrow kHow, typename R, typename... Args>
struct Guard<Fn, kHow, R (*)(Args...)> {
  static R Call(Args... args) noexcept {
    return Guarded<kHow>([&]() -> R { return Fn(args...); });
  }
};

// The same for the post verbs (queue, first WR, bad WR).
template <auto Fn, typename Sig = decltype(Fn)>
struct GuardPost;

template <auto Fn, typename Queue, typename Wr>
struct GuardPost<Fn, int (*)(Queue*, Wr*, Wr**)> {
  static int Call(Queue* queue, Wr* wr, Wr** bad_wr) noexcept {
    return GuardedPost(wr, bad_wr, [&] { return Fn(queue, wr, bad_wr); });
  }
};

}  // namespace simverbs
