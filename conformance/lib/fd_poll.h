#pragma once

#include <chrono>

namespace conformance {

// Small wrappers around poll(2) and fcntl(2) for the event file descriptors
// (async_fd, comp channel fd) that libibverbs hands out.

// True when fd is an open file descriptor.
bool IsOpenFd(int fd);

// True when fd becomes readable within timeout (0: just look). Waits on
// poll(2), never sleeps.
bool WaitReadable(int fd, std::chrono::milliseconds timeout);

// Sets O_NONBLOCK; returns 0 or -1 with errno, like fcntl.
int SetNonBlocking(int fd);

}  // namespace conformance
