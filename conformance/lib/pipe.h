#pragma once

// A pipe whose ends close with it: how a test and its child process (watchdog.h)
// tell each other what they made and when to go on.

#include <unistd.h>

namespace conformance {

struct Pipe {
  int fds[2] = {-1, -1};
  Pipe() {
    if (pipe(fds) != 0) fds[0] = fds[1] = -1;
  }
  ~Pipe() {
    for (int fd : fds) {
      if (fd >= 0) close(fd);
    }
  }
  Pipe(const Pipe&) = delete;
  Pipe& operator=(const Pipe&) = delete;
};

}  // namespace conformance
