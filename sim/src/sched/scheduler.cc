#include "sched/scheduler.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "fork_locks.h"

namespace simverbs {

Scheduler& Scheduler::Get() {
  static Scheduler* scheduler = [] {
    auto* made = new Scheduler();  // never destroyed: used from atexit handlers
    // A leaf lock: held across fork (fork_locks.h).
    HoldAcrossFork([] { Get().mu_.lock(); }, [] { Get().mu_.unlock(); });
    return made;
  }();
  return *scheduler;
}

Scheduler::Scheduler() {
  const char* env = std::getenv("SIMVERBS_SEED");
  if (env && *env) {
    if (ParseSeed(env, &seed_)) {
      seed_from_env_ = true;
    } else {
      std::fprintf(stderr, "simverbs: SIMVERBS_SEED=%s is not a number (decimal or 0x hex); using a random seed\n",
                   env);
    }
  }
  if (!seed_from_env_) {
    std::random_device rd;
    seed_ = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }
  state_ = seed_;
}

void Scheduler::Reseed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(mu_);
  seed_ = state_ = seed;
}

bool Scheduler::ParseSeed(const std::string& text, uint64_t* out) {
  if (text.empty() || text[0] == '-') return false;
  errno = 0;
  char* end = nullptr;
  // Decimal, or hex after 0x: a leading zero is not octal (010 is ten).
  const bool hex = text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X');
  const unsigned long long v = std::strtoull(text.c_str(), &end, hex ? 16 : 10);
  if (errno != 0 || !end || *end != '\0') return false;
  *out = v;
  return true;
}

// splitmix64: small, fast, and every seed (including 0) gives a good sequence.
uint64_t Scheduler::NextLocked() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t Scheduler::Next() {
  std::lock_guard<std::mutex> lock(mu_);
  return NextLocked();
}

size_t Scheduler::Choose(size_t n) {
  if (n <= 1) return 0;
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<size_t>(NextLocked() % n);
}

bool Scheduler::OneIn(uint32_t one_in) {
  if (one_in <= 1) return one_in == 1;
  std::lock_guard<std::mutex> lock(mu_);
  return NextLocked() % one_in == 0;
}

}  // namespace simverbs
