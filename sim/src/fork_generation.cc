#include "fork_generation.h"

#include <pthread.h>

#include <atomic>

namespace simverbs {
namespace {

std::atomic<uint32_t> generation{0};

// Registered at load, before any object can be made: every child counts.
const int fork_handler = pthread_atfork(nullptr, nullptr, [] { generation.fetch_add(1, std::memory_order_relaxed); });

}  // namespace

uint32_t ForkGeneration() { return generation.load(std::memory_order_relaxed); }

}  // namespace simverbs
