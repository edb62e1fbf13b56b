#pragma once

// Which fork() this process is: 0 in the process that loaded the library, one
// more in each child of fork() (Engine's fork handler). An object made before
// a fork is the parent's: its copy in the child is not the one the fabric
// means by its number (a QP number names the parent's QP, as on an HCA).

#include <atomic>
#include <cstdint>

namespace simverbs {

inline std::atomic<uint32_t> fork_generation{0};

inline uint32_t ForkGeneration() { return fork_generation.load(std::memory_order_relaxed); }

}  // namespace simverbs
