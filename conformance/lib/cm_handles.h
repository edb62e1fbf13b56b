#pragma once

#include <rdma/rdma_cma.h>

#include <memory>

namespace conformance {

// Owning handles for rdma_cm objects, like verbs_handles.h for verbs ones. An
// event is acknowledged when its handle goes, so a failed ASSERT never leaves
// an rdma_destroy_id waiting for it (declare the event after the id).
struct CmDeleter {
  void operator()(rdma_event_channel* channel) const { rdma_destroy_event_channel(channel); }
  void operator()(rdma_cm_id* id) const {
    if (id->qp) rdma_destroy_qp(id);
    rdma_destroy_id(id);
  }
  void operator()(rdma_cm_event* event) const { rdma_ack_cm_event(event); }
};

using CmChannelPtr = std::unique_ptr<rdma_event_channel, CmDeleter>;
using CmIdPtr = std::unique_ptr<rdma_cm_id, CmDeleter>;
using CmEventPtr = std::unique_ptr<rdma_cm_event, CmDeleter>;

}  // namespace conformance
