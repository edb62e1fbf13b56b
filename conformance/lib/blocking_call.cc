#include "conformance/lib/blocking_call.h"

#include <utility>

namespace conformance {

BlockingCall::BlockingCall(std::function<int()> fn) : state_(std::make_shared<State>()) {
  state_->started = std::chrono::steady_clock::now();
  // The thread owns a reference to the state, so a detached thread that
  // returns late never touches freed memory.
  thread_ = std::thread([state = state_, fn = std::move(fn)] {
    const int result = fn();
    std::lock_guard<std::mutex> lock(state->mutex);
    state->result = result;
    state->finished = std::chrono::steady_clock::now();
    state->done = true;
    state->done_cv.notify_all();
  });
}

BlockingCall::~BlockingCall() {
  if (returned()) {
    thread_.join();
  } else {
    thread_.detach();
  }
}

bool BlockingCall::WaitFor(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(state_->mutex);
  return state_->done_cv.wait_for(lock, timeout, [this] { return state_->done; });
}

bool BlockingCall::returned() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->done;
}

int BlockingCall::result() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->result;
}

std::chrono::milliseconds BlockingCall::elapsed() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  const auto end = state_->done ? state_->finished : std::chrono::steady_clock::now();
  return std::chrono::duration_cast<std::chrono::milliseconds>(end - state_->started);
}

}  // namespace conformance
