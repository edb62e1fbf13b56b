// poll-clock: ibv_poll_cq on an empty CQ reads no clock. In a VM whose clock
// source has no vDSO (HPET), each clock_gettime is a system call, so a busy
// poll loop that read the clock would make one system call per poll.
//
// This program defines clock_gettime itself (exported: the simulator's calls
// resolve to it first) and counts the calls made on the polling thread while
// it polls an empty CQ 200000 times on the simulator. Any call fails the check.
//
// usage: poll-clock (with LD_LIBRARY_PATH at the simulator's libibverbs.so.1)

#include <dlfcn.h>
#include <infiniband/verbs.h>
#include <time.h>

#include <atomic>
#include <cstdio>

namespace {

thread_local bool counting = false;
std::atomic<long> calls{0};

using ClockGettime = int (*)(clockid_t, timespec*);

}  // namespace

extern "C" __attribute__((visibility("default"))) int clock_gettime(clockid_t clock, timespec* ts) {
  static const auto real = reinterpret_cast<ClockGettime>(dlsym(RTLD_NEXT, "clock_gettime"));
  if (counting) calls.fetch_add(1, std::memory_order_relaxed);
  return real(clock, ts);
}

int main() {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (!list || n == 0) {
    std::fprintf(stderr, "poll-clock: no device (is LD_LIBRARY_PATH the simulator's?)\n");
    return 2;
  }
  ibv_context* ctx = ibv_open_device(list[0]);
  ibv_cq* cq = ctx ? ibv_create_cq(ctx, 16, nullptr, nullptr, 0) : nullptr;
  if (!cq) {
    std::fprintf(stderr, "poll-clock: ibv_open_device or ibv_create_cq failed\n");
    return 2;
  }
  // The check can fail: the counter sees a call made on this thread.
  counting = true;
  timespec probe{};
  clock_gettime(CLOCK_MONOTONIC, &probe);
  const long probed = calls.exchange(0);
  constexpr int kPolls = 200000;
  ibv_wc wc;
  int found = 0;
  for (int i = 0; i < kPolls; ++i) found += ibv_poll_cq(cq, 1, &wc);
  counting = false;
  const long during = calls.load();
  ibv_destroy_cq(cq);
  ibv_close_device(ctx);
  ibv_free_device_list(list);
  if (probed != 1) {
    std::fprintf(stderr, "poll-clock: the counter did not see a call of our own (%ld): this proves nothing\n", probed);
    return 2;
  }
  std::printf("poll-clock: %d polls of an empty CQ (%d completions), %ld clock_gettime calls\n", kPolls, found, during);
  if (during > 0) {
    std::fprintf(stderr, "poll-clock: ibv_poll_cq read the clock %ld times in %d polls\n", during, kPolls);
    return 1;
  }
  return 0;
}
