#pragma once

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>

namespace conformance {

// Runs a blocking call on a POSIX thread of its own that pthread_cancel can
// end, as programs stop their event threads (ibv_get_async_event and
// ibv_get_cq_event block in read(2), a cancellation point).
//
// Only use it inside a watchdog child (RunInChild): a thread that does not
// end is left behind, and the child's exit reclaims it.
class CancellableCall {
 public:
  // Starts fn right away; started() is false when no thread could be made.
  explicit CancellableCall(std::function<void()> fn);
  CancellableCall(const CancellableCall&) = delete;
  CancellableCall& operator=(const CancellableCall&) = delete;
  ~CancellableCall();

  bool started() const { return started_; }
  // Whether fn has returned by itself (it was not cancelled).
  bool returned() const { return state_->returned.load(); }

  // pthread_cancel, then a join of at most `within`: true when the thread
  // ended cancelled (pthread_join's result PTHREAD_CANCELED).
  bool CancelAndJoin(std::chrono::milliseconds within);

 private:
  struct State {
    std::function<void()> fn;
    std::atomic<bool> returned{false};
  };
  static void* Run(void* state);

  std::shared_ptr<State> state_;
  pthread_t thread_{};
  bool started_ = false;
  bool joined_ = false;
};

}  // namespace conformance
