#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace conformance {

// Runs a call that may block (ibv_destroy_cq, ibv_get_async_event, ...) on its
// own thread, so the caller can check whether it has returned yet.
//
// Only use it inside a watchdog child (RunInChild): if the call never
// returns, the thread is detached and the child's exit reclaims it.
class BlockingCall {
 public:
  // Starts fn right away.
  explicit BlockingCall(std::function<int()> fn);
  BlockingCall(const BlockingCall&) = delete;
  BlockingCall& operator=(const BlockingCall&) = delete;
  ~BlockingCall();

  // Waits up to timeout for the call to return; true if it has.
  bool WaitFor(std::chrono::milliseconds timeout);

  bool returned() const;
  // What fn returned; only meaningful once returned().
  int result() const;
  // How long fn ran, or has been running.
  std::chrono::milliseconds elapsed() const;

 private:
  struct State {
    std::mutex mutex;
    std::condition_variable done_cv;
    bool done = false;
    int result = 0;
    std::chrono::steady_clock::time_point started;
    std::chrono::steady_clock::time_point finished;
  };

  std::shared_ptr<State> state_;
  std::thread thread_;
};

}  // namespace conformance
