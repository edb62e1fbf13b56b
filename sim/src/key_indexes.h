#pragma once

// The memory key indexes of one device: the upper 24 bits of every lkey and
// rkey (key_index << 8 | key byte, as on mlx HCAs). A counter proposes them
// (shared by the processes of a fabric, so their keys stay apart); after the
// counter wraps, an index that a live MR or memory window still holds is
// skipped, so a key is never issued twice while its holder lives.

#include <cstdint>
#include <functional>
#include <unordered_set>

namespace simverbs {

class KeyIndexes {
 public:
  static constexpr uint32_t kLimit = 1u << 24;  // indexes are 1 .. kLimit - 1

  // A new index, taken from the candidates `next` proposes (only the low 24
  // bits count; 0 is never used), that is not live; it is live from now on.
  // 0 when every index is live. Not thread-safe: the caller serialises.
  uint32_t Allocate(const std::function<uint32_t()>& next);
  // The holder of `index` is gone: it may be issued again.
  void Release(uint32_t index) { live_.erase(index); }
  bool Live(uint32_t index) const { return live_.contains(index); }
  size_t live_count() const { return live_.size(); }

 private:
  std::unordered_set<uint32_t> live_;
};

}  // namespace simverbs
