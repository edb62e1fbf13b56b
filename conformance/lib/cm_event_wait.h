#pragma once

#include <gtest/gtest.h>
#include <rdma/rdma_cma.h>

#include <chrono>

#include "conformance/lib/cm_handles.h"

namespace conformance {

// Bounded waits for rdma_cm events, for ASSERT_TRUE(...). Each sets O_NONBLOCK
// on the channel's fd first, so a wrong answer from poll(2) becomes a failure
// (EAGAIN) instead of an rdma_get_cm_event that blocks forever.

// Waits up to timeout for the next event on channel; it must be of `type`.
// On success *event owns it (acknowledged when the handle goes).
testing::AssertionResult GetCmEventWithin(rdma_event_channel* channel, rdma_cm_event_type type,
                                          std::chrono::milliseconds timeout, CmEventPtr* event);

// Succeeds when no event arrives within window and rdma_get_cm_event then
// fails with EAGAIN. An unexpected event is described and acknowledged.
testing::AssertionResult NoCmEventWithin(rdma_event_channel* channel, std::chrono::milliseconds window);

}  // namespace conformance
