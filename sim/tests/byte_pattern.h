#pragma once

// Test data for copies: distinct bytes, so that a byte copied from the wrong
// place shows.

#include <cstddef>
#include <cstdint>
#include <vector>

namespace simverbs {

inline std::vector<uint8_t> BytePattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7 + i / 251);
  return v;
}

}  // namespace simverbs
