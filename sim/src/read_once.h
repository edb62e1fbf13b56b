#pragma once

// Memory another process writes (a ring slot, the fabric segment, a fault
// request) is hostile input: each value is loaded once, checked, then used.
// A plain read of a field into a local is not enough: the compiler may read
// the field again where the local is used, after the check.

#include <cstddef>
#include <cstring>

namespace simverbs {

template <typename T>
T ReadOnce(const T& shared) {
  T value;
  __atomic_load(&shared, &value, __ATOMIC_RELAXED);  // (the generic form: enums too)
  return value;
}

// `n` bytes of such memory copied once into `dst`: a snapshot, which the
// compiler may not read from the shared bytes again where it is used.
inline void ReadOnceBytes(void* dst, const void* shared, size_t n) {
  std::memcpy(dst, shared, n);
  asm volatile("" : : "r"(dst) : "memory");
}

}  // namespace simverbs
