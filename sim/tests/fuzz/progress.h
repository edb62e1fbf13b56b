#pragma once

// What a walk running in a child process shares with the parent that watches
// it: enough to name the seed, the step and the verb when the child hangs or
// dies, since it cannot say so itself then.

#include <atomic>
#include <cstdint>
#include <cstring>

namespace verbs_fuzz {

struct Progress {
  std::atomic<uint64_t> seed{0};
  std::atomic<uint64_t> step{0};        // the step being executed
  std::atomic<uint64_t> heartbeat{0};   // bumped before every verb call
  std::atomic<uint64_t> steps_done{0};  // steps the walk finished
  std::atomic<bool> draining{false};    // the final drain and teardown has begun
  std::atomic<bool> failed{false};      // the walk reported a failure itself
  char verb[64] = {};                   // the verb being called

  void Enter(const char* name) {
    std::strncpy(verb, name, sizeof verb - 1);
    heartbeat.fetch_add(1, std::memory_order_release);
  }
};

}  // namespace verbs_fuzz
