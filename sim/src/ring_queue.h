#pragma once

// A FIFO of work queue entries in a circular array. Unlike std::deque it does
// not free an entry when it leaves the front: the slot, with whatever buffers
// its entry owns (an SGE list), is reused by a later push_back, so a queue in
// steady state allocates nothing per entry. It grows (doubling) only when full;
// its capacity is a power of two, so finding a slot takes a mask, not a division.

#include <cstddef>
#include <utility>
#include <vector>

namespace simverbs {

template <typename T>
class RingQueue {
 public:
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  size_t capacity() const { return slots_.size(); }
  T& operator[](size_t i) { return slots_[(head_ + i) & mask_]; }
  const T& operator[](size_t i) const { return slots_[(head_ + i) & mask_]; }
  T& front() { return (*this)[0]; }
  T& back() { return (*this)[size_ - 1]; }

  // A slot at the back, holding whatever entry last used it (to be refilled
  // by the caller, keeping its buffers' capacity). May throw std::bad_alloc
  // (then the queue is unchanged).
  T& push_back_slot() {
    if (size_ == slots_.size()) Grow();
    ++size_;
    return back();
  }
  // push_back_slot, the slot then filled by `fill(slot)`; if that throws
  // (std::bad_alloc), the slot is taken back and the queue is unchanged.
  template <typename Fill>
  void push_back_filled(Fill&& fill) {
    T& slot = push_back_slot();
    try {
      fill(slot);
    } catch (...) {
      pop_back();
      throw;
    }
  }
  // Grows now, if need be, to hold `n` entries: pushes up to that size then
  // need no memory. May throw std::bad_alloc (then the queue is unchanged).
  void reserve(size_t n) {
    while (slots_.size() < n) Grow();
  }
  // A slot at the front, as push_back_slot gives one at the back (an entry put back).
  T& push_front_slot() {
    if (size_ == slots_.size()) Grow();
    head_ = (head_ - 1) & mask_;
    ++size_;
    return front();
  }
  void pop_front() {
    head_ = (head_ + 1) & mask_;
    --size_;
  }
  // Takes back the last entry pushed (its filling failed, or the batch it
  // belonged to).
  void pop_back() { --size_; }
  void clear() {
    head_ = 0;
    size_ = 0;
  }

  template <typename Q, typename V>
  class Iterator {
   public:
    Iterator(Q* q, size_t i) : q_(q), i_(i) {}
    V& operator*() const { return (*q_)[i_]; }
    Iterator& operator++() {
      ++i_;
      return *this;
    }
    bool operator!=(const Iterator& other) const { return i_ != other.i_; }

   private:
    Q* q_;
    size_t i_;
  };
  Iterator<RingQueue, T> begin() { return {this, 0}; }
  Iterator<RingQueue, T> end() { return {this, size_}; }
  Iterator<const RingQueue, const T> begin() const { return {this, 0}; }
  Iterator<const RingQueue, const T> end() const { return {this, size_}; }

 private:
  void Grow() {
    std::vector<T> bigger(slots_.empty() ? 16 : 2 * slots_.size());
    for (size_t i = 0; i < slots_.size(); ++i) bigger[i] = std::move((*this)[i]);
    slots_ = std::move(bigger);
    mask_ = slots_.size() - 1;
    head_ = 0;
  }

  std::vector<T> slots_;
  size_t mask_ = 0;  // slots_.size() - 1
  size_t head_ = 0;
  size_t size_ = 0;
};

}  // namespace simverbs
