#pragma once

// The pages memory regions pin, counted per process against RLIMIT_MEMLOCK as
// the kernel counts them (drivers/infiniband/core/umem.c: ib_umem_get adds
// each registration's pages to mm->pinned_vm; the same pages registered twice
// count twice). Without CAP_IPC_LOCK a registration past the limit fails with
// ENOMEM, and any registration with a limit of 0 with EPERM (can_do_mlock):
// the error programs meet on a real HCA until they raise `ulimit -l`.

#include <cstdint>

namespace simverbs {

class PinnedPages {
 public:
  // EPERM when the process may pin nothing at all (a limit of 0, without
  // CAP_IPC_LOCK), else 0: the kernel asks this before it counts the pages.
  static int MayPin();
  // Counts `pages` more for this process: 0, or ENOMEM past the limit without
  // CAP_IPC_LOCK (nothing counted then).
  static int Pin(uint64_t pages);
  // Gives back pages Pin counted in fork generation `generation` (a child of
  // fork() starts with none pinned, as its new mm does).
  static void Unpin(uint64_t pages, uint32_t generation);
};

}  // namespace simverbs
