#include "fabric/file_lock.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

namespace simverbs {
namespace {

// `length` 0: from `byte` to the end of the file, however far it grows.
struct flock Range(short type, off_t byte, off_t length = 1) {
  struct flock fl {};
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = byte;
  fl.l_len = length;
  fl.l_pid = 0;  // required for OFD locks
  return fl;
}

uint64_t NowMs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000 + static_cast<uint64_t>(ts.tv_nsec) / 1000000;
}

}  // namespace

bool LockByte(int fd, off_t byte, int timeout_ms) {
  const uint64_t deadline = NowMs() + static_cast<uint64_t>(timeout_ms);
  // Polled rather than F_OFD_SETLKW, which cannot time out: the lock is held
  // for short moments (join, leave), so a short nap between tries costs little.
  for (useconds_t nap = 50;; nap = nap < 5000 ? nap * 2 : nap) {
    struct flock fl = Range(F_WRLCK, byte);
    if (fcntl(fd, F_OFD_SETLK, &fl) == 0) return true;
    if ((errno != EAGAIN && errno != EACCES && errno != EINTR) || NowMs() >= deadline) return false;
    usleep(nap);
  }
}

void UnlockByte(int fd, off_t byte) {
  struct flock fl = Range(F_UNLCK, byte);
  fcntl(fd, F_OFD_SETLK, &fl);
}

bool ByteLockedByOther(int fd, off_t byte) {
  struct flock fl = Range(F_WRLCK, byte);
  if (fcntl(fd, F_OFD_GETLK, &fl) != 0) return true;
  return fl.l_type != F_UNLCK;
}

bool FileLockedByOther(int fd) {
  struct flock fl = Range(F_WRLCK, 0, 0);
  if (fcntl(fd, F_OFD_GETLK, &fl) != 0) return true;
  return fl.l_type != F_UNLCK;
}

}  // namespace simverbs
