#pragma once

#include <gmock/gmock.h>

#include "conformance/lib/errno_capture.h"

namespace conformance {

// Matchers for the three return conventions of the verbs man pages. Use them
// on the result of CaptureErrno (or a plain int for ReturnsErrno):
//   EXPECT_THAT(CaptureErrno([&] { return ibv_create_cq(ctx, 0, ...); }),
//               ReturnsNullWithErrno(EINVAL));

// "returns a pointer ..., or NULL if the request fails" (errno says why).
MATCHER_P(ReturnsNullWithErrno, expected_errno,
          std::string(negation ? "does not return" : "returns") + " NULL with errno " + ErrnoName(expected_errno)) {
  if (arg.ptr) {
    *result_listener << "returned a non-NULL object";
    return false;
  }
  if (arg.err != expected_errno) {
    *result_listener << "returned NULL, but errno is " << ErrnoName(arg.err);
    return false;
  }
  return true;
}

// The pointer-returning verb succeeded; on failure, say which errno it set.
MATCHER(ReturnsObject, std::string(negation ? "returns NULL" : "returns a non-NULL object")) {
  if (!arg.ptr) {
    *result_listener << "returned NULL with errno " << ErrnoName(arg.err);
    return false;
  }
  return true;
}

// "returns 0 on success, and -1 on error" (errno says why).
MATCHER_P(FailsWithErrno, expected_errno,
          std::string(negation ? "does not return" : "returns") + " -1 with errno " + ErrnoName(expected_errno)) {
  if (arg.rc != -1) {
    *result_listener << "returned " << arg.rc;
    return false;
  }
  if (arg.err != expected_errno) {
    *result_listener << "returned -1, but errno is " << ErrnoName(arg.err);
    return false;
  }
  return true;
}

// "returns 0 on success, or the value of errno on failure".
MATCHER_P(ReturnsErrno, expected_errno,
          std::string(negation ? "does not return" : "returns") + " the errno value " + ErrnoName(expected_errno)) {
  if (arg != expected_errno) {
    *result_listener << "returned " << (arg == 0 ? std::string("0 (success)") : ErrnoName(arg));
    return false;
  }
  return true;
}

}  // namespace conformance
