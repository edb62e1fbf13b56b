#include "conformance/lib/fd_poll.h"

#include <fcntl.h>
#include <poll.h>

#include <cerrno>

namespace conformance {

bool IsOpenFd(int fd) { return fcntl(fd, F_GETFD) != -1; }

bool WaitReadable(int fd, std::chrono::milliseconds timeout) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    // Rounded up, so poll never gives up before the deadline.
    auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() < 0) left = std::chrono::milliseconds(0);
    pollfd pfd = {.fd = fd, .events = POLLIN, .revents = 0};
    const int rc = poll(&pfd, 1, static_cast<int>(left.count()));
    if (rc > 0) return (pfd.revents & POLLIN) != 0;
    if (rc == 0) return false;
    if (errno != EINTR) return false;
  }
}

int SetNonBlocking(int fd) {
  const int flags = fcntl(fd, F_GETFL);
  if (flags == -1) return -1;
  return fcntl(fd, F_SETFL, flags | O_NONBLOCK) == -1 ? -1 : 0;
}

}  // namespace conformance
