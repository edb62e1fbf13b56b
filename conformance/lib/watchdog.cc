#include "conformance/lib/watchdog.h"

#include <fcntl.h>
#include <gtest/gtest-spi.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <utility>

#include "conformance/lib/errno_capture.h"

namespace conformance {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Exit codes of the child besides the body's own.
constexpr int kChildChecksFailed = 1;
constexpr int kChildThrew = 125;

void WriteAll(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

std::string FormatPart(const testing::TestPartResult& part) {
  std::ostringstream out;
  out << (part.file_name() ? part.file_name() : "unknown file") << ":" << part.line_number() << ": "
      << (part.skipped()          ? "skipped"
          : part.fatally_failed() ? "fatal failure"
                                  : "failure")
      << "\n"
      << part.message() << "\n";
  return out.str();
}

[[noreturn]] void RunChild(const std::function<int()>& body, int report_fd) {
  int code = 0;
  testing::TestPartResultArray parts;
  {
    // Intercept on every thread: blocking checks run on helper threads.
    testing::ScopedFakeTestPartResultReporter reporter(testing::ScopedFakeTestPartResultReporter::INTERCEPT_ALL_THREADS,
                                                       &parts);
    try {
      code = body();
    } catch (const std::exception& e) {
      WriteAll(report_fd, std::string("child threw: ") + e.what() + "\n");
      code = kChildThrew;
    } catch (...) {
      WriteAll(report_fd, "child threw a non-std exception\n");
      code = kChildThrew;
    }
  }
  bool failed = false;
  for (int i = 0; i < parts.size(); ++i) {
    const testing::TestPartResult& part = parts.GetTestPartResult(i);
    failed = failed || part.failed();
    WriteAll(report_fd, FormatPart(part));
  }
  if (code == 0 && failed) code = kChildChecksFailed;
  // _exit: no atexit handlers, no flushing the parent's stdio buffers twice.
  _exit(code & 0xff);
}

int OpenPidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  errno = ENOSYS;
  return -1;
#endif
}

// Reads what is there; returns false on EOF or error.
bool DrainOnce(int fd, std::string* out) {
  char buffer[4096];
  const ssize_t n = read(fd, buffer, sizeof buffer);
  if (n > 0) {
    out->append(buffer, static_cast<size_t>(n));
    return true;
  }
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
  return false;
}

std::string Trimmed(std::string text) {
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

}  // namespace

std::string ChildResult::Describe() const {
  std::ostringstream out;
  switch (status) {
    case Status::kNotStarted:
      out << "could not start a watchdog child for " << what << ": " << error;
      break;
    case Status::kTimedOut:
      out << "timed out after " << timeout.count() << " ms waiting for " << what << " (the child was killed)";
      break;
    case Status::kKilledBySignal:
      out << "the watchdog child for " << what << " was killed by signal " << signal << " ("
          << (sigabbrev_np(signal) ? sigabbrev_np(signal) : "?") << ") after " << elapsed.count() << " ms";
      break;
    case Status::kExited:
      out << "the watchdog child for " << what << " exited with " << exit_code << " after " << elapsed.count() << " ms";
      break;
  }
  if (!output.empty()) out << "\n--- reported by the child ---\n" << Trimmed(output);
  return out.str();
}

ChildResult RunInChild(std::function<int()> body, milliseconds timeout, std::string what) {
  ChildResult result;
  result.what = std::move(what);
  result.timeout = timeout;

  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0) {
    result.error = "pipe2: " + ErrnoName(errno);
    return result;
  }
  // Whatever is buffered would otherwise be printed by both processes.
  std::fflush(stdout);
  std::fflush(stderr);

  const auto started = Clock::now();
  const pid_t pid = fork();
  if (pid < 0) {
    result.error = "fork: " + ErrnoName(errno);
    close(report[0]);
    close(report[1]);
    return result;
  }
  if (pid == 0) {
    close(report[0]);
    RunChild(body, report[1]);
  }
  close(report[1]);

  const int pidfd = OpenPidfd(pid);
  bool exited = false;
  bool report_open = true;
  bool timed_out = false;
  // Without a pidfd, EOF on the report pipe (the child's only copy of the
  // write end closes when it exits) says the child is gone.
  while (!exited && !(pidfd < 0 && !report_open)) {
    const auto now = Clock::now();
    if (now >= started + timeout) {
      timed_out = true;
      break;
    }
    // Rounded up, so poll never gives up before the deadline.
    const auto left = std::chrono::ceil<milliseconds>(started + timeout - now);
    pollfd fds[2];
    nfds_t count = 0;
    int report_index = -1;
    int pid_index = -1;
    if (report_open) {
      report_index = static_cast<int>(count);
      fds[count++] = {.fd = report[0], .events = POLLIN, .revents = 0};
    }
    if (pidfd >= 0) {
      pid_index = static_cast<int>(count);
      fds[count++] = {.fd = pidfd, .events = POLLIN, .revents = 0};
    }
    const int ready = poll(fds, count, static_cast<int>(left.count()));
    if (ready < 0 && errno != EINTR) {
      // Cannot watch the child any more: do not risk an unbounded waitpid.
      result.output += "poll: " + ErrnoName(errno) + "\n";
      timed_out = true;
      break;
    }
    if (ready <= 0) continue;
    if (report_index >= 0 && fds[report_index].revents != 0) {
      report_open = DrainOnce(report[0], &result.output);
    }
    if (pid_index >= 0 && fds[pid_index].revents != 0) exited = true;
  }

  if (timed_out) kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  result.elapsed = std::chrono::duration_cast<milliseconds>(Clock::now() - started);
  // The child is gone, so the pipe has no writer left: read to EOF.
  while (report_open) report_open = DrainOnce(report[0], &result.output);
  close(report[0]);
  if (pidfd >= 0) close(pidfd);

  if (timed_out) {
    result.status = ChildResult::Status::kTimedOut;
  } else if (WIFSIGNALED(status)) {
    result.status = ChildResult::Status::kKilledBySignal;
    result.signal = WTERMSIG(status);
  } else {
    result.status = ChildResult::Status::kExited;
    result.exit_code = WEXITSTATUS(status);
  }
  return result;
}

ChildResult RunChecksInChild(std::function<void()> body, milliseconds timeout, std::string what) {
  return RunInChild(
      [body = std::move(body)] {
        body();
        return 0;
      },
      timeout, std::move(what));
}

testing::AssertionResult Passed(const ChildResult& result) {
  if (result.ok()) return testing::AssertionSuccess();
  return testing::AssertionFailure() << result.Describe();
}

bool ExpectBlocks(BlockingCall& call, milliseconds window, CallSite where) {
  if (!call.WaitFor(window)) return true;
  ADD_FAILURE_AT(where.file, where.line)
      << "expected the call to block for at least " << window.count() << " ms, but it returned " << call.result()
      << " after " << call.elapsed().count() << " ms";
  return false;
}

bool ExpectReturnsAfter(BlockingCall& call, const std::function<void()>& unblock, milliseconds within,
                        CallSite where) {
  if (call.returned()) {
    ADD_FAILURE_AT(where.file, where.line)
        << "the call returned " << call.result() << " after " << call.elapsed().count()
        << " ms, before it was unblocked";
    return false;
  }
  unblock();
  if (call.WaitFor(within)) return true;
  ADD_FAILURE_AT(where.file, where.line)
      << "the call is still blocked " << within.count() << " ms after it was unblocked";
  return false;
}

bool ExpectReturnsWithin(BlockingCall& call, milliseconds within, CallSite where) {
  if (call.WaitFor(within)) return true;
  ADD_FAILURE_AT(where.file, where.line)
      << "the call has not returned within " << within.count() << " ms";
  return false;
}

}  // namespace conformance
