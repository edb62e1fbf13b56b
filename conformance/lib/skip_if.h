#pragma once

#include <gtest/gtest.h>

// Skips the current test when cond holds, naming the condition; more reason
// can be streamed after it:  SKIP_IF(!Sim()) << "needs the control API";
// The if/else shape keeps it safe inside an unbraced if.
#define SKIP_IF(cond) \
  if (!(cond)) {      \
  } else              \
    GTEST_SKIP() << "skipped: " #cond " "

namespace conformance {

// __has_feature is clang's; GCC says the same with __SANITIZE_*__.
#if defined(__has_feature)
#define CONFORMANCE_HAS_FEATURE(x) __has_feature(x)
#else
#define CONFORMANCE_HAS_FEATURE(x) 0
#endif

// ThreadSanitizer runs a signal handler only when the interrupted thread is
// at a point it deems safe, which need not come while a test looks.
#if defined(__SANITIZE_THREAD__) || CONFORMANCE_HAS_FEATURE(thread_sanitizer)
inline constexpr bool kThreadSanitizedBuild = true;
#else
inline constexpr bool kThreadSanitizedBuild = false;
#endif

// AddressSanitizer's allocator (GCC 12's libasan) takes none of its locks
// around fork(): a child forked while another thread was allocating can wait
// for ever in its first allocation of that size (glibc's malloc locks its
// arenas around fork).
#if defined(__SANITIZE_ADDRESS__) || CONFORMANCE_HAS_FEATURE(address_sanitizer)
inline constexpr bool kAddressSanitizedBuild = true;
#else
inline constexpr bool kAddressSanitizedBuild = false;
#endif

// This test binary runs under AddressSanitizer or ThreadSanitizer, whose
// operator new cannot fail gracefully: it reports out-of-memory and aborts
// instead of throwing std::bad_alloc (so a test that exhausts memory on
// purpose cannot run there).
#if defined(__SANITIZE_ADDRESS__) || CONFORMANCE_HAS_FEATURE(address_sanitizer)
inline constexpr bool kSanitizedBuild = true;
#else
inline constexpr bool kSanitizedBuild = kThreadSanitizedBuild;
#endif

}  // namespace conformance
