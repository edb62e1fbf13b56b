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

// This test binary runs under AddressSanitizer or ThreadSanitizer, whose
// operator new cannot fail gracefully: it reports out-of-memory and aborts
// instead of throwing std::bad_alloc (so a test that exhausts memory on
// purpose cannot run there).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitizedBuild = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool kSanitizedBuild = true;
#else
inline constexpr bool kSanitizedBuild = false;
#endif
#else
inline constexpr bool kSanitizedBuild = false;
#endif

// ThreadSanitizer runs a signal handler only when the interrupted thread is
// at a point it deems safe, which need not come while a test looks.
#if defined(__SANITIZE_THREAD__)
inline constexpr bool kThreadSanitizedBuild = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
inline constexpr bool kThreadSanitizedBuild = true;
#else
inline constexpr bool kThreadSanitizedBuild = false;
#endif
#else
inline constexpr bool kThreadSanitizedBuild = false;
#endif

}  // namespace conformance
