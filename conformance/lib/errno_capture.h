#pragma once

#include <cerrno>
#include <ostream>
#include <string>
#include <type_traits>
#include <utility>

#include "conformance/lib/verbs_handles.h"

namespace conformance {

// "EINVAL (Invalid argument)".
std::string ErrnoName(int err);

// What a pointer-returning verb gave back, and errno right after it. Owns the
// object, so an unexpected success does not leak it.
template <typename T>
struct PtrCall {
  VerbsPtr<T> ptr;
  int err = 0;
};

// What an int-returning verb gave back, and errno right after it.
struct IntCall {
  int rc = 0;
  int err = 0;
};

// Runs fn with errno cleared and reads errno before anything else can
// overwrite it (a gtest macro or an allocation may set it).
template <typename Fn>
auto CaptureErrno(Fn&& fn) {
  using Result = std::invoke_result_t<Fn>;
  errno = 0;
  if constexpr (std::is_pointer_v<Result>) {
    Result ptr = std::forward<Fn>(fn)();
    const int err = errno;
    return PtrCall<std::remove_pointer_t<Result>>{VerbsPtr<std::remove_pointer_t<Result>>(ptr), err};
  } else {
    const auto rc = std::forward<Fn>(fn)();
    const int err = errno;
    return IntCall{static_cast<int>(rc), err};
  }
}

template <typename T>
void PrintTo(const PtrCall<T>& call, std::ostream* os) {
  *os << (call.ptr ? "non-NULL" : "NULL") << " with errno " << ErrnoName(call.err);
}

inline void PrintTo(const IntCall& call, std::ostream* os) { *os << call.rc << " with errno " << ErrnoName(call.err); }

}  // namespace conformance
