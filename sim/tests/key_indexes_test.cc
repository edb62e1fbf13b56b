// Memory key indexes: after the 24-bit counter wraps, an index that a live MR
// or window holds is never issued again (two live MRs with one key would let
// a remote access through one reach the other).

#include "key_indexes.h"

#include <cstdint>

#include "gtest/gtest.h"

namespace simverbs {
namespace {

constexpr uint32_t kLimit = KeyIndexes::kLimit;

TEST(KeyIndexesTest, LiveIndexSkippedAfterWrap) {
  KeyIndexes indexes;
  uint32_t counter = 1;
  auto next = [&] { return counter++; };
  const uint32_t held = indexes.Allocate(next);
  ASSERT_EQ(held, 1u);
  counter = kLimit - 1;  // the counter after 2^24 - 2 more registrations
  EXPECT_EQ(indexes.Allocate(next), kLimit - 1);
  // The counter wraps to 0 (never used) and then proposes 1, which is live.
  EXPECT_EQ(indexes.Allocate(next), 2u);
  EXPECT_TRUE(indexes.Live(held));
}

TEST(KeyIndexesTest, ReleasedIndexIssuedAgainAfterWrap) {
  KeyIndexes indexes;
  uint32_t counter = 1;
  auto next = [&] { return counter++; };
  const uint32_t first = indexes.Allocate(next);
  indexes.Release(first);
  EXPECT_FALSE(indexes.Live(first));
  counter = kLimit;  // wraps to 0, then 1
  EXPECT_EQ(indexes.Allocate(next), first);
}

TEST(KeyIndexesTest, ZeroNeverIssued) {
  KeyIndexes indexes;
  uint32_t counter = 0;
  EXPECT_EQ(indexes.Allocate([&] { return counter++; }), 1u);
}

// The reported failure: one MR stays registered while another is registered
// and deregistered 2^24 times; no registration may get the live MR's key.
TEST(KeyIndexesTest, FullCounterCycleNeverReissuesLiveIndex) {
  KeyIndexes indexes;
  uint32_t counter = 1;
  auto next = [&] { return counter++; };
  const uint32_t held = indexes.Allocate(next);
  uint32_t collisions = 0;
  uint32_t failures = 0;  // 0: no index given
  for (uint32_t i = 0; i < kLimit; ++i) {
    const uint32_t index = indexes.Allocate(next);
    if (index == held) ++collisions;
    if (index == 0) ++failures;
    indexes.Release(index);
  }
  EXPECT_EQ(collisions, 0u) << "the live index " << held << " was issued again";
  EXPECT_EQ(failures, 0u);
  EXPECT_EQ(indexes.live_count(), 1u);
}

}  // namespace
}  // namespace simverbs
