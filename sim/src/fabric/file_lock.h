#pragma once

// Byte-range locks on a file, held by an open file description (fcntl
// F_OFD_SETLK): the kernel keeps them, so no write into shared memory can
// corrupt them, and it releases them when the last descriptor of that open
// file is closed, which happens when the process exits or is killed, before
// it becomes a zombie. They work across PID namespaces (they name no pid).
// fabric/fabric.h uses them for its lock and for each process's liveness.

#include <sys/types.h>

namespace simverbs {

// Takes a write lock on byte `byte` of `fd`, waiting at most `timeout_ms`
// (0: only if it is free now). False: not taken.
bool LockByte(int fd, off_t byte, int timeout_ms);
void UnlockByte(int fd, off_t byte);
// Whether another open file description holds a lock on byte `byte` (a
// failed query counts as held: never take a live process for dead).
bool ByteLockedByOther(int fd, off_t byte);
// Whether another open file description holds a lock on any byte of `fd`
// (a failed query counts as held).
bool FileLockedByOther(int fd);

}  // namespace simverbs
