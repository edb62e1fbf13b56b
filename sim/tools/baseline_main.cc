// simverbs-baseline: the machine's own limits, measured in the same run as a
// benchmark so its figures can be given as ratios (scripts/bench):
//   memcpy <bytes>   single-thread memcpy bandwidth in MB/s (hot buffers)
//   handoff          one-way latency of a cache-line hand-off between two
//                    processes busy-polling shared memory, in ns

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double MemcpyMBps(size_t bytes) {
  std::vector<char> src(bytes, 1), dst(bytes);
  // Enough repetitions for ~0.2 s; best of 5 runs (the machine is noisy).
  const size_t reps = std::max<size_t>(1, (size_t{2} << 30) / bytes / 10);
  double best = 0;
  for (int run = 0; run < 5; ++run) {
    const auto t0 = Clock::now();
    for (size_t i = 0; i < reps; ++i) {
      std::memcpy(dst.data(), src.data(), bytes);
      asm volatile("" : : "r"(dst.data()) : "memory");
    }
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, bytes * reps / s / 1e6);
  }
  return best;
}

double HandoffNs() {
  constexpr int kRounds = 200000;
  auto* line = static_cast<std::atomic<int>*>(
      mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  line->store(0);
  const pid_t child = fork();
  if (child == 0) {
    for (int i = 0; i < kRounds; ++i) {
      while (line->load(std::memory_order_acquire) != 2 * i + 1) {
      }
      line->store(2 * i + 2, std::memory_order_release);
    }
    _exit(0);
  }
  const auto t0 = Clock::now();
  for (int i = 0; i < kRounds; ++i) {
    line->store(2 * i + 1, std::memory_order_release);
    while (line->load(std::memory_order_acquire) != 2 * i + 2) {
    }
  }
  const double ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
  waitpid(child, nullptr, 0);
  return ns / kRounds / 2;  // a round trip is two hand-offs
}

}  // namespace

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "";
  if (what == "memcpy" && argc == 3) {
    std::printf("%.1f\n", MemcpyMBps(std::strtoull(argv[2], nullptr, 0)));
  } else if (what == "handoff") {
    std::printf("%.1f\n", HandoffNs());
  } else {
    std::fprintf(stderr, "usage: %s memcpy BYTES | handoff\n", argv[0]);
    return 2;
  }
  return 0;
}
