#pragma once

// What a completion frees of its QP's queues when it is polled (the
// profile's send_queue_release and receive_queue_release, poll).

#include <cstdint>

namespace simverbs {

class Qp;

// Qp::FreeSlots: a send completion frees the send queue slots up to
// SendWqe::seq `through`, a receive completion (`recv`) its receive queue
// slot; qp nullptr: nothing.
struct CqSlotRelease {
  Qp* qp = nullptr;
  uint64_t through = 0;
  bool recv = false;
};

}  // namespace simverbs
