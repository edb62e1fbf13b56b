#pragma once

#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <chrono>

namespace conformance {

// Bounded waits for verbs events, for use as ASSERT_TRUE(...) / EXPECT_TRUE(...).
// Each sets O_NONBLOCK on the event fd first, so a wrong answer from poll(2)
// turns into a failure (EAGAIN) instead of a read that blocks forever.

// Waits up to timeout for the next async event of context and reads it.
// The caller acknowledges it.
testing::AssertionResult GetAsyncEventWithin(ibv_context* context, ibv_async_event* event,
                                             std::chrono::milliseconds timeout);

// Waits up to timeout for the next completion event on channel and reads it.
// The caller acknowledges it.
testing::AssertionResult GetCqEventWithin(ibv_comp_channel* channel, ibv_cq** cq, void** cq_context,
                                          std::chrono::milliseconds timeout);

// Succeeds when no async event arrives within window and ibv_get_async_event
// then fails with EAGAIN. An unexpected event is described and acknowledged.
testing::AssertionResult NoAsyncEventWithin(ibv_context* context, std::chrono::milliseconds window);

// The same for completion events on channel.
testing::AssertionResult NoCqEventWithin(ibv_comp_channel* channel, std::chrono::milliseconds window);

}  // namespace conformance
