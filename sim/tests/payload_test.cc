// A packet's payload (transport/payload.h): a copy, or one made to own its
// bytes, holds exactly the bytes it was given, at every size around the copy
// piece, and no longer depends on where they came from.

#include "transport/payload.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "byte_pattern.h"
#include "gtest/gtest.h"
#include "transport/copy_bytes.h"

namespace simverbs {
namespace {

bool Holds(const Payload& p, const std::vector<uint8_t>& bytes) {
  return p.size() == bytes.size() && std::equal(bytes.begin(), bytes.end(), p.data());
}

const size_t kSizes[] = {0, 1, kCopyPiece - 1, kCopyPiece, kCopyPiece + 1, 4096, 3 * kCopyPiece + 5};

TEST(Payload, OwnKeepsTheBorrowedBytesAsTheyWere) {
  for (size_t n : kSizes) {
    std::vector<uint8_t> slot = BytePattern(n, 1);
    const std::vector<uint8_t> was = slot;
    Payload p;
    p.Borrow(slot.data(), slot.size());
    p.Own();
    std::fill(slot.begin(), slot.end(), uint8_t{0xee});  // the slot is reused
    EXPECT_TRUE(Holds(p, was)) << n << " bytes";
  }
}

TEST(Payload, CopyOfABorrowedPayloadOwnsItsBytes) {
  for (size_t n : kSizes) {
    std::vector<uint8_t> slot = BytePattern(n, 2);
    const std::vector<uint8_t> was = slot;
    Payload borrowed;
    borrowed.Borrow(slot.data(), slot.size());
    const Payload constructed(borrowed);
    Payload assigned;
    assigned.assign(n, uint8_t{0x55});
    assigned = borrowed;
    std::fill(slot.begin(), slot.end(), uint8_t{0xee});
    EXPECT_TRUE(Holds(constructed, was)) << n << " bytes";
    EXPECT_TRUE(Holds(assigned, was)) << n << " bytes";
  }
}

TEST(Payload, AssignReplacesOwnBytesOfAnySize) {
  // Longer and shorter than what the payload held before.
  for (size_t before : kSizes) {
    for (size_t n : kSizes) {
      const std::vector<uint8_t> bytes = BytePattern(n, 3);
      Payload p;
      p.assign(before, uint8_t{0x55});
      p.assign(bytes.data(), bytes.data() + bytes.size());
      EXPECT_TRUE(Holds(p, bytes)) << before << " then " << n << " bytes";
    }
  }
}

TEST(Payload, AssignFromItsOwnBytesKeepsThatRange) {
  for (size_t n : kSizes) {
    if (n < 2) continue;
    const std::vector<uint8_t> bytes = BytePattern(n, 4);
    Payload p;
    p.assign(bytes.data(), bytes.data() + n);
    const size_t from = n / 3 + 1;
    const uint8_t* own = static_cast<const Payload&>(p).data();
    p.assign(own + from, own + n);
    EXPECT_TRUE(Holds(p, std::vector<uint8_t>(bytes.begin() + from, bytes.end()))) << n << " bytes";
  }
}

}  // namespace
}  // namespace simverbs
