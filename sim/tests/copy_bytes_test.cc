// The data path's copies (transport/copy_bytes.h): every byte lands where
// memcpy or memmove would put it, at every size around the piece boundary and
// with the ranges overlapping either way, and nothing beside the range moves.

#include "transport/copy_bytes.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "byte_pattern.h"
#include "gtest/gtest.h"

namespace simverbs {
namespace {

const size_t kSizes[] = {0, 1, 63, kCopyPiece - 1, kCopyPiece, kCopyPiece + 1, 2 * kCopyPiece, 4096, 3 * kCopyPiece + 5,
                         65536};

TEST(CopyBytes, CopiesEveryByteAndNothingElse) {
  for (size_t n : kSizes) {
    const std::vector<uint8_t> src = BytePattern(n, 3);
    std::vector<uint8_t> dst(n + 32, 0xee);
    CopyBytes(dst.data() + 16, src.data(), n);
    for (size_t i = 0; i < 16; ++i) ASSERT_EQ(dst[i], 0xee) << "n=" << n << ": byte " << i << " before the range";
    ASSERT_TRUE(std::equal(src.begin(), src.end(), dst.begin() + 16)) << "n=" << n;
    for (size_t i = n + 16; i < n + 32; ++i) ASSERT_EQ(dst[i], 0xee) << "n=" << n << ": byte " << i << " after the range";
  }
}

TEST(MoveBytes, MatchesMemmoveWhenTheRangesOverlap) {
  for (size_t n : kSizes) {
    // Shifts within one buffer, forward and back, by less than a piece and by more.
    for (ptrdiff_t shift : {1, 100, static_cast<int>(kCopyPiece) + 3, -1, -100, -static_cast<int>(kCopyPiece) - 3}) {
      const size_t room = n + 2 * kCopyPiece + 16;
      std::vector<uint8_t> ours = BytePattern(room, 9);
      std::vector<uint8_t> reference = ours;
      const size_t from = kCopyPiece + 8;
      MoveBytes(ours.data() + from + shift, ours.data() + from, n);
      std::memmove(reference.data() + from + shift, reference.data() + from, n);
      ASSERT_EQ(ours, reference) << "n=" << n << " shift=" << shift;
    }
  }
}

TEST(MoveBytes, CopiesApartRanges) {
  for (size_t n : kSizes) {
    const std::vector<uint8_t> src = BytePattern(n, 5);
    std::vector<uint8_t> dst(n, 0);
    MoveBytes(dst.data(), src.data(), n);
    ASSERT_EQ(dst, src) << "n=" << n;
  }
}

}  // namespace
}  // namespace simverbs
