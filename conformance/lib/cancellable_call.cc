#include "conformance/lib/cancellable_call.h"

#include <time.h>

#include <utility>

namespace conformance {

CancellableCall::CancellableCall(std::function<void()> fn) : state_(std::make_shared<State>()) {
  state_->fn = std::move(fn);
  // The thread owns a reference to the state: one left behind never touches freed memory.
  auto* owned = new std::shared_ptr<State>(state_);
  started_ = pthread_create(&thread_, nullptr, &CancellableCall::Run, owned) == 0;
  if (!started_) delete owned;
}

CancellableCall::~CancellableCall() {
  if (started_ && !joined_) pthread_detach(thread_);
}

void* CancellableCall::Run(void* arg) {
  std::unique_ptr<std::shared_ptr<State>> owned(static_cast<std::shared_ptr<State>*>(arg));
  State& state = **owned;
  state.fn();
  state.returned = true;
  return nullptr;
}

bool CancellableCall::CancelAndJoin(std::chrono::milliseconds within) {
  if (!started_ || joined_) return false;
  if (pthread_cancel(thread_) != 0) return false;
  timespec deadline = {};
  clock_gettime(CLOCK_REALTIME, &deadline);
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(within).count();
  deadline.tv_sec += static_cast<time_t>(ns / 1000000000);
  deadline.tv_nsec += static_cast<long>(ns % 1000000000);
  if (deadline.tv_nsec >= 1000000000) {
    ++deadline.tv_sec;
    deadline.tv_nsec -= 1000000000;
  }
  void* result = nullptr;
  if (pthread_timedjoin_np(thread_, &result, &deadline) != 0) return false;
  joined_ = true;
  return result == PTHREAD_CANCELED;
}

}  // namespace conformance
