#pragma once

#include <cerrno>
#include <utility>

namespace simverbs {

// The outcome of an internal operation: a value, or the errno that the verbs
// layer reports. The C layer maps it to each function family's convention.
template <typename T>
class Result {
 public:
  Result(T value) : value_(std::move(value)), err_(0) {}  // NOLINT: implicit by design
  static Result Error(int err) { return Result(err, 0); }

  bool ok() const { return err_ == 0; }
  int err() const { return err_; }
  T& value() { return value_; }
  const T& value() const { return value_; }

 private:
  Result(int err, int) : value_(), err_(err) {}
  T value_;
  int err_;
};

}  // namespace simverbs
