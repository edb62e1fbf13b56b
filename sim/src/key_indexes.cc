#include "key_indexes.h"

namespace simverbs {

uint32_t KeyIndexes::Allocate(const std::function<uint32_t()>& next) {
  if (live_.size() >= kLimit - 1) return 0;
  // A sequential counter finds a free index within live_count() + 2 tries;
  // one shared with other processes may hand some to them, so allow a full
  // round of the index space before giving up.
  for (uint32_t tries = 0; tries < 2 * kLimit; ++tries) {
    const uint32_t index = next() & (kLimit - 1);
    if (index != 0 && live_.insert(index).second) return index;
  }
  return 0;
}

}  // namespace simverbs
