#pragma once

// An rdma_event_channel: a queue of rdma_cm events and a stream socket pair
// holding one byte per queued event, so the channel's fd (one end) is
// readable exactly while events wait, works with poll/epoll, and with
// O_NONBLOCK set by the program rdma_get_cm_event fails with EAGAIN, as
// librdmacm's read of the kernel's rdma_cm file does. The events of an id
// that is destroyed or moved leave with their bytes (recv with MSG_DONTWAIT),
// so the fd is not left readable with nothing to read.

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
  // destroyed or moved to another channel), and their bytes.
  std::vector<CmEvent*> Withdraw(CmId* id);

 private:
  EventChannel() = default;
  rdma_event_channel pub_ = {};  // first: the program's pointer is ours
  int write_fd_ = -1;            // the other end of the socket pair (non-blocking)
  std::mutex mu_;
  std::deque<CmEvent*> queue_;
};

}  // namespace simverbs::rdmacm
