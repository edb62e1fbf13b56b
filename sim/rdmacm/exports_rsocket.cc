// rsockets (rdma/rsocket.h) are not simulated: every call fails with ENOSYS
// and the first one says so on stderr, so rstream and friends stop with a
// clear message instead of misbehaving.

#include <poll.h>
#include <rdma/rsocket.h>

#include <atomic>
#include <cerrno>
#include <cstdio>

namespace {

template <typename T>
T NotSimulated(T failure) {
  static std::atomic<bool> said{false};
  if (!said.exchange(true)) {
    std::fprintf(stderr, "simverbs: rsockets (rsocket, rconnect, ...) are not simulated; the call fails with ENOSYS\n");
  }
  errno = ENOSYS;
  return failure;
}

}  // namespace

extern "C" {

int rsocket(int, int, int) { return NotSimulated(-1); }
int rbind(int, const sockaddr*, socklen_t) { return NotSimulated(-1); }
int rlisten(int, int) { return NotSimulated(-1); }
int raccept(int, sockaddr*, socklen_t*) { return NotSimulated(-1); }
int rconnect(int, const sockaddr*, socklen_t) { return NotSimulated(-1); }
int rshutdown(int, int) { return NotSimulated(-1); }
int rclose(int) { return NotSimulated(-1); }
ssize_t rrecv(int, void*, size_t, int) { return NotSimulated<ssize_t>(-1); }
ssize_t rrecvfrom(int, void*, size_t, int, sockaddr*, socklen_t*) { return NotSimulated<ssize_t>(-1); }
ssize_t rrecvmsg(int, msghdr*, int) { return NotSimulated<ssize_t>(-1); }
ssize_t rsend(int, const void*, size_t, int) { return NotSimulated<ssize_t>(-1); }
ssize_t rsendto(int, const void*, size_t, int, const sockaddr*, socklen_t) { return NotSimulated<ssize_t>(-1); }
ssize_t rsendmsg(int, const msghdr*, int) { return NotSimulated<ssize_t>(-1); }
ssize_t rread(int, void*, size_t) { return NotSimulated<ssize_t>(-1); }
ssize_t rreadv(int, const iovec*, int) { return NotSimulated<ssize_t>(-1); }
ssize_t rwrite(int, const void*, size_t) { return NotSimulated<ssize_t>(-1); }
ssize_t rwritev(int, const iovec*, int) { return NotSimulated<ssize_t>(-1); }
int rpoll(pollfd*, nfds_t, int) { return NotSimulated(-1); }
int rselect(int, fd_set*, fd_set*, fd_set*, timeval*) { return NotSimulated(-1); }
int rgetpeername(int, sockaddr*, socklen_t*) { return NotSimulated(-1); }
int rgetsockname(int, sockaddr*, socklen_t*) { return NotSimulated(-1); }
int rsetsockopt(int, int, int, const void*, socklen_t) { return NotSimulated(-1); }
int rgetsockopt(int, int, int, void*, socklen_t*) { return NotSimulated(-1); }
int rfcntl(int, int, ...) { return NotSimulated(-1); }
off_t riomap(int, void*, size_t, int, int, off_t) { return NotSimulated<off_t>(-1); }
int riounmap(int, void*, size_t) { return NotSimulated(-1); }
size_t riowrite(int, const void*, size_t, off_t, int) { return NotSimulated<size_t>(0); }

}  // extern "C"
