#pragma once

// The simulator's own threads (a process's progress thread, the transport
// timers, the CM's and the fault plan's) run with every signal blocked that
// is sent to the process: it reaches one of the program's threads, as it
// does with rdma-core, which has none of its own. Otherwise the program's
// handler could run on ours, and one that calls exit() there would have the
// progress thread wait for itself at exit. The signals a thread's own fault
// raises (SIGSEGV, SIGBUS...) stay open: blocked, they would kill the process
// where the program's handler (a garbage collector's that unprotects its
// pages, say) lets our copy into its memory go on.

#include <pthread.h>
#include <signal.h>

#include <initializer_list>
#include <thread>
#include <utility>

namespace simverbs {

// A std::thread running `f`, started with those signals blocked (it inherits
// the mask, so none of them reaches it even before `f` runs). Throws as
// std::thread does, the caller's mask restored.
template <typename F>
std::thread QuietThread(F&& f) {
  sigset_t all, old;
  sigfillset(&all);
  for (int fault : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS}) sigdelset(&all, fault);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  try {
    std::thread thread(std::forward<F>(f));
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    return thread;
  } catch (...) {
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    throw;
  }
}

}  // namespace simverbs
