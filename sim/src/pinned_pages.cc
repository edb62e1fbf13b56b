#include "pinned_pages.h"

#include <linux/capability.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "fork_generation.h"

namespace simverbs {
namespace {

std::atomic<uint64_t> pinned{0};

// A child of fork() has a new mm, with nothing pinned.
const int fork_handler = pthread_atfork(nullptr, nullptr, [] { pinned.store(0, std::memory_order_relaxed); });

// The kernel asks capable(CAP_IPC_LOCK): the capability in the initial user
// namespace. A process in another user namespace (unshare -U, rootless
// containers) has it only there, which does not count.
bool InInitialUserNamespace() {
  FILE* f = fopen("/proc/self/uid_map", "re");
  if (!f) return true;  // no /proc: nothing tells otherwise
  char line[128] = {};
  const bool read = fgets(line, sizeof line, f) != nullptr;
  const bool more = read && fgetc(f) != EOF;
  fclose(f);
  unsigned long inside = 1, outside = 1, count = 0;
  return read && !more && sscanf(line, "%lu %lu %lu", &inside, &outside, &count) == 3 && inside == 0 &&
         outside == 0 && count == 4294967295ul;
}

bool CanPinPastTheLimit() {
  __user_cap_header_struct header = {};
  header.version = _LINUX_CAPABILITY_VERSION_3;
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (syscall(SYS_capget, &header, data) != 0) return false;
  if (!(data[CAP_TO_INDEX(CAP_IPC_LOCK)].effective & CAP_TO_MASK(CAP_IPC_LOCK))) return false;
  return InInitialUserNamespace();
}

uint64_t LimitInPages() {
  rlimit limit = {};
  if (getrlimit(RLIMIT_MEMLOCK, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return UINT64_MAX;
  return limit.rlim_cur / static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

}  // namespace

int PinnedPages::MayPin() {
  rlimit limit = {};
  if (getrlimit(RLIMIT_MEMLOCK, &limit) != 0 || limit.rlim_cur != 0) return 0;
  return CanPinPastTheLimit() ? 0 : EPERM;
}

int PinnedPages::Pin(uint64_t pages) {
  const uint64_t now = pinned.fetch_add(pages, std::memory_order_relaxed) + pages;
  if (now > LimitInPages() && !CanPinPastTheLimit()) {
    pinned.fetch_sub(pages, std::memory_order_relaxed);
    return ENOMEM;
  }
  return 0;
}

void PinnedPages::Unpin(uint64_t pages, uint32_t generation) {
  if (generation == ForkGeneration()) pinned.fetch_sub(pages, std::memory_order_relaxed);
}

}  // namespace simverbs
