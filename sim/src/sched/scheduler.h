#pragma once

// The seeded scheduler: every choice the simulator makes among behaviours that
// are all legal (which blocked thread receives an event, whether a spurious
// completion event fires, which SRQ receive a message takes, which QP number a
// new QP gets, what an error completion leaves in its invalid fields) comes
// from one pseudo-random sequence seeded by SIMVERBS_SEED. The same seed and the
// same single-threaded program make the same choices, so a failing run replays.
//
// Without SIMVERBS_SEED a seed is drawn at start; simverbs_seed() and the
// trace header report it, so any run can be replayed.

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

namespace simverbs {

class Scheduler {
 public:
  static Scheduler& Get();

  uint64_t seed() const { return seed_; }
  // True when SIMVERBS_SEED set the seed (rather than a random draw).
  bool seed_from_env() const { return seed_from_env_; }

  // A uniform choice in [0, n); 0 when n is 0 or 1 (no choice to make, so the
  // sequence is not advanced: adding an object never shifts later choices).
  size_t Choose(size_t n);
  // True with probability 1/one_in.
  bool OneIn(uint32_t one_in);
  uint64_t Next();
  // Restarts the sequence as if the run had started with SIMVERBS_SEED=seed.
  void Reseed(uint64_t seed);

  // Parses SIMVERBS_SEED text; false if it is not a decimal or 0x number.
  static bool ParseSeed(const std::string& text, uint64_t* out);

 private:
  Scheduler();
  uint64_t NextLocked();

  std::mutex mu_;
  uint64_t seed_ = 0;
  uint64_t state_ = 0;
  bool seed_from_env_ = false;
};

}  // namespace simverbs
