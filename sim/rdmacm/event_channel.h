#pragma once

// An rdma_event_channel: a queue of rdma_cm events and an eventfd that counts
// them (EFD_SEMAPHORE), so the channel's fd is readable exactly while events
// wait, works with poll/epoll, and with O_NONBLOCK set by the program
// rdma_get_cm_event fails with EAGAIN, as librdmacm's read of the kernel's
// rdma_cm file does.

#include <rdma/rdma_cma.h>

#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

#include "cm_message.h"

namespace simverbs::rdmacm {

class CmId;

// One event handed to the program; freed by rdma_ack_cm_event.
struct CmEvent {
  rdma_cm_event pub = {};  // first: the program's pointer is ours
  CmId* id = nullptr;       // counted in id->unacked_ while not acked
  bool placeholder = false;  // stands for a withdrawn event: never handed out
  uint8_t private_data[kMaxPrivateData] = {};

  static CmEvent* From(rdma_cm_event* e) { return reinterpret_cast<CmEvent*>(e); }
};

class EventChannel {
 public:
  static EventChannel* Create();  // nullptr with errno set
  static EventChannel* From(rdma_event_channel* c) { return reinterpret_cast<EventChannel*>(c); }
  rdma_event_channel* pub() { return &pub_; }
  ~EventChannel();

  void Push(CmEvent* event);
  // Blocks (unless the fd is O_NONBLOCK) until an event is there. nullptr with errno.
  CmEvent* Pop();
  bool Empty();
  // Takes the events of `id` that are queued and not read yet (the id is being
  // destroyed or moved to another channel). Placeholders take their places,
  // so the eventfd's count still matches the queue: Pop skips them.
  std::vector<CmEvent*> Withdraw(CmId* id);

 private:
  EventChannel() = default;
  rdma_event_channel pub_ = {};  // first: the program's pointer is ours
  std::mutex mu_;
  std::deque<CmEvent*> queue_;
};

}  // namespace simverbs::rdmacm
