#pragma once

// rxe's queue sizes: a ring of a power of two slots holds one entry less
// (rxe_queue_init), so a queue asked for n entries holds 2^k - 1 >= n.

#include <algorithm>
#include <cstdint>

namespace simverbs {

inline uint32_t Pow2Minus1AtLeast(uint32_t entries) {
  uint64_t slots = 1;
  while (slots < uint64_t{entries} + 1) slots *= 2;
  return static_cast<uint32_t>(std::min<uint64_t>(slots - 1, UINT32_MAX));
}

}  // namespace simverbs
