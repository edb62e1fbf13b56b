#include "conformance/lib/test_deadline.h"

#include <signal.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace conformance {
namespace {

// Written before the timer is armed, read only by the signal handler.
char g_message[768];
// A deadline is installed (its SIGALRM handler is in place): Extend may arm the timer.
bool g_installed = false;
volatile sig_atomic_t g_message_length = 0;

void OnDeadline(int) {
  // Async-signal-safe only: write and _exit.
  if (g_message_length > 0) (void)!write(STDERR_FILENO, g_message, static_cast<size_t>(g_message_length));
  _exit(3);
}

void SetTimer(std::chrono::milliseconds limit) {
  itimerval timer = {};
  timer.it_value.tv_sec = static_cast<time_t>(limit.count() / 1000);
  timer.it_value.tv_usec = static_cast<suseconds_t>((limit.count() % 1000) * 1000);
  setitimer(ITIMER_REAL, &timer, nullptr);
}

// The message the handler writes for the test running now, with its limit.
void SetMessage(const testing::TestInfo& info, std::chrono::milliseconds limit) {
  const int n = std::snprintf(g_message, sizeof g_message,
                              "\n[  TIMEOUT  ] %s.%s did not finish within %lld ms: a verbs call is probably "
                              "blocked forever. Ending the run.\n",
                              info.test_suite_name(), info.name(), static_cast<long long>(limit.count()));
  g_message_length = n < 0 ? 0 : std::min<int>(n, sizeof g_message - 1);
}

}  // namespace

void TestDeadline::Extend(std::chrono::milliseconds limit) {
  const testing::TestInfo* info = testing::UnitTest::GetInstance()->current_test_info();
  if (!info || !g_installed) return;
  SetTimer(std::chrono::milliseconds(0));
  SetMessage(*info, limit);
  SetTimer(limit);
}

TestDeadline::TestDeadline(std::chrono::milliseconds limit) : limit_(limit) {
  struct sigaction action = {};
  action.sa_handler = OnDeadline;
  sigemptyset(&action.sa_mask);
  sigaction(SIGALRM, &action, nullptr);
  g_installed = true;
}

TestDeadline::~TestDeadline() {
  SetTimer(std::chrono::milliseconds(0));
  signal(SIGALRM, SIG_DFL);
  g_installed = false;
}

void TestDeadline::OnTestStart(const testing::TestInfo& info) {
  SetMessage(info, limit_);
  SetTimer(limit_);
}

void TestDeadline::OnTestEnd(const testing::TestInfo&) { SetTimer(std::chrono::milliseconds(0)); }

}  // namespace conformance
