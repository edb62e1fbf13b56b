#pragma once

// A packet's payload bytes: its own, or borrowed while it is being delivered:
// from the ring slot it arrived in (Fabric::DrainInboundLocked), or from the
// registered memory it is sent from (a SEND's or WRITE's gather list:
// Qp::ExecuteLocked; a READ's answer: Qp::ReceiveRequest, and
// transport/response_stream.h for a longer one). That saves copying each
// byte once more on its way. A copy of a payload always owns its bytes, and a
// packet kept for later (a backlog, the engine's queue, a forwarded XRC
// request, a multicast copy) is a copy, or owns its bytes first (Own), so it
// never points into a slot or into registered memory.

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "transport/copy_bytes.h"

namespace simverbs {

class Payload {
 public:
  Payload() = default;
  Payload(const Payload& other) { CopyIn(other.data(), other.size()); }
  Payload(Payload&& other) noexcept
      : bytes_(std::move(other.bytes_)), borrowed_(other.borrowed_), borrowed_size_(other.borrowed_size_) {
    other.Unborrow();
  }
  Payload& operator=(const Payload& other) {
    if (this != &other) assign(other.data(), other.data() + other.size());
    return *this;
  }
  Payload& operator=(Payload&& other) noexcept {
    bytes_ = std::move(other.bytes_);
    borrowed_ = other.borrowed_;
    borrowed_size_ = other.borrowed_size_;
    other.Unborrow();
    return *this;
  }
  // Takes a buffer to fill (Engine::PayloadBuffer).
  Payload& operator=(std::vector<uint8_t>&& buffer) {
    bytes_ = std::move(buffer);
    Unborrow();
    return *this;
  }

  const uint8_t* data() const { return borrowed_ ? borrowed_ : bytes_.data(); }
  // For filling: the packet's own bytes (a borrowed payload is copied first).
  uint8_t* data() {
    Own();
    return bytes_.data();
  }
  size_t size() const { return borrowed_ ? borrowed_size_ : bytes_.size(); }
  void resize(size_t n) {
    Own();
    bytes_.resize(n);
  }
  void assign(const uint8_t* first, const uint8_t* last) {
    const size_t n = static_cast<size_t>(last - first);
    const auto at = reinterpret_cast<uintptr_t>(first);
    const auto own = reinterpret_cast<uintptr_t>(bytes_.data());
    if (!borrowed_ && at >= own && at < own + bytes_.size()) {
      // Part of our own bytes: moved to the front, then the rest cut off (no reallocation).
      MoveBytes(bytes_.data(), first, n);
      bytes_.resize(n);
      return;
    }
    Unborrow();
    CopyIn(first, n);
  }
  void assign(size_t n, uint8_t value) {
    bytes_.assign(n, value);
    Unborrow();
  }
  // Refers to `n` bytes at `bytes` instead of holding them. Requires: they
  // stay valid and unchanged by us for as long as this payload uses them.
  void Borrow(const uint8_t* bytes, size_t n) {
    bytes_.clear();
    borrowed_ = bytes;
    borrowed_size_ = n;
  }
  bool borrowed() const { return borrowed_ != nullptr; }
  // Holds its own copy of borrowed bytes (before it is kept for later).
  void Own() {
    if (!borrowed_) return;
    const uint8_t* from = borrowed_;
    const size_t n = borrowed_size_;
    Unborrow();
    CopyIn(from, n);
  }
  // The same, in `buffer` (a spare one: Engine::PayloadBuffer) instead of
  // the payload's own, which a borrowing payload most often has not.
  void Own(std::vector<uint8_t>&& buffer) {
    if (!borrowed_) return;
    bytes_ = std::move(buffer);
    Own();
  }
  // The buffer, for reuse (Engine::RecyclePayload); the payload is empty after.
  std::vector<uint8_t> TakeBuffer() {
    Unborrow();
    return std::move(bytes_);
  }

 private:
  // Bytes from elsewhere (not our own) become ours; copied as the data path
  // copies (copy_bytes.h), not by the vector, whose memmove uses glibc's
  // `rep movsb` for a packet's 4 KiB.
  void CopyIn(const uint8_t* from, size_t n) {
    bytes_.resize(n);
    CopyBytes(bytes_.data(), from, n);
  }
  void Unborrow() {
    borrowed_ = nullptr;
    borrowed_size_ = 0;
  }

  std::vector<uint8_t> bytes_;
  const uint8_t* borrowed_ = nullptr;
  size_t borrowed_size_ = 0;
};

}  // namespace simverbs
