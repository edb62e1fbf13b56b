// The C layer's guards: an exception thrown under a verb becomes that verb's
// failure convention (abi/c_api.h) instead of leaving through the C ABI.

#include "abi/c_api.h"

#include <infiniband/verbs.h>

#include <cerrno>
#include <new>
#include <stdexcept>
#include <system_error>

#include "gtest/gtest.h"

namespace simverbs {
namespace {

int* ThrowsBadAlloc() { throw std::bad_alloc(); }
int ThrowsLogicError() { throw std::logic_error("a simulator bug"); }

TEST(CApiGuardTest, BadAllocGivesNullWithEnomem) {
  errno = 0;
  EXPECT_EQ(Guarded<OnThrow::kNullErrno>([] { return ThrowsBadAlloc(); }), nullptr);
  EXPECT_EQ(errno, ENOMEM);
}

TEST(CApiGuardTest, BadAllocGivesReturnedEnomem) {
  EXPECT_EQ(Guarded<OnThrow::kErrno>([]() -> int { throw std::bad_alloc(); }), ENOMEM);
}

TEST(CApiGuardTest, BadAllocGivesMinusOneWithEnomem) {
  errno = 0;
  EXPECT_EQ(Guarded<OnThrow::kMinusOneErrno>([]() -> int { throw std::bad_alloc(); }), -1);
  EXPECT_EQ(errno, ENOMEM);
}

TEST(CApiGuardTest, BadAllocGivesNegativeEnomem) {
  EXPECT_EQ(Guarded<OnThrow::kNegativeErrno>([]() -> int { throw std::bad_alloc(); }), -ENOMEM);
}

TEST(CApiGuardTest, BadAllocGivesReregCmdWithEnomem) {
  errno = 0;
  EXPECT_EQ(Guarded<OnThrow::kReregCmd>([]() -> int { throw std::bad_alloc(); }), IBV_REREG_MR_ERR_CMD);
  EXPECT_EQ(errno, ENOMEM);
}

TEST(CApiGuardTest, OtherExceptionGivesEio) {
  EXPECT_EQ(Guarded<OnThrow::kErrno>([] { return ThrowsLogicError(); }), EIO);
  Guarded<OnThrow::kNothing>([] { ThrowsLogicError(); });  // swallowed: nothing to report
}

TEST(CApiGuardTest, ThreadCreationFailureGivesEnomem) {
  EXPECT_EQ(Guarded<OnThrow::kErrno>([]() -> int {
              throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again));
            }),
            ENOMEM);
}

TEST(CApiGuardTest, ResultWithoutExceptionPassesThrough) {
  int value = 7;
  EXPECT_EQ(Guarded<OnThrow::kNullErrno>([&] { return &value; }), &value);
  EXPECT_EQ(Guarded<OnThrow::kErrno>([] { return EBUSY; }), EBUSY);
}

int PostThrowing(ibv_qp*, ibv_send_wr*, ibv_send_wr**) { throw std::bad_alloc(); }

TEST(CApiGuardTest, PostGivesEnomemWithBadWr) {
  ibv_send_wr wrs[2] = {};
  wrs[0].next = &wrs[1];
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(GuardPost<PostThrowing>::Call(nullptr, wrs, &bad), ENOMEM);
  EXPECT_EQ(bad, &wrs[0]);
}

int QueryThrowing(ibv_context*, ibv_device_attr*) { throw std::bad_alloc(); }

TEST(CApiGuardTest, OpTableSlotKeepsSignature) {
  int (*slot)(ibv_context*, ibv_device_attr*) = Guard<QueryThrowing, OnThrow::kErrno>::Call;
  EXPECT_EQ(slot(nullptr, nullptr), ENOMEM);
}

}  // namespace
}  // namespace simverbs
