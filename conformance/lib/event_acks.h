#pragma once

#include <infiniband/verbs.h>

namespace conformance {

// Acknowledges what a test got from ibv_get_cq_event / ibv_get_async_event
// when it goes out of scope. Declared after the CQ it refers to, it runs
// before the CQ's destroy, which would otherwise wait for the ack forever.
class EventAcks {
 public:
  EventAcks() = default;
  EventAcks(const EventAcks&) = delete;
  EventAcks& operator=(const EventAcks&) = delete;
  ~EventAcks() { AckAll(); }

  // Remembers one completion event on cq.
  void AddCqEvent(ibv_cq* cq) {
    if (cq_ != nullptr && cq_ != cq) AckAll();
    cq_ = cq;
    ++cq_events_;
  }

  // Takes over one async event (a copy is enough: ack reads its element).
  void AddAsyncEvent(const ibv_async_event& event) {
    if (async_count_ == kMaxAsync) AckAll();
    async_[async_count_++] = event;
  }

  void AckAll() {
    if (cq_ != nullptr && cq_events_ > 0) ibv_ack_cq_events(cq_, cq_events_);
    cq_ = nullptr;
    cq_events_ = 0;
    for (int i = 0; i < async_count_; ++i) ibv_ack_async_event(&async_[i]);
    async_count_ = 0;
  }

 private:
  static constexpr int kMaxAsync = 8;

  ibv_cq* cq_ = nullptr;
  unsigned int cq_events_ = 0;
  ibv_async_event async_[kMaxAsync] = {};
  int async_count_ = 0;
};

}  // namespace conformance
