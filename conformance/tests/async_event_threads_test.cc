// Several threads waiting in ibv_get_async_event at once.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <array>
#include <cerrno>
#include <memory>
#include <set>
#include <vector>

#include "conformance/lib/blocking_call.h"
#include "conformance/lib/errno_capture.h"
#include "conformance/lib/event_wait.h"
#include "conformance/lib/sim_test.h"
#include "conformance/lib/timeouts.h"
#include "conformance/lib/verbs_handles.h"
#include "conformance/lib/watchdog.h"

namespace conformance {
namespace {

class AsyncEventThreadsTest : public SimTest {};

// Rule: ibv_get_async_event(3): "ibv_get_async_event() is a blocking function. If multiple threads
//   call this function simultaneously, then when an async event occurs, only one thread will
//   receive it, and it is not possible to predict which thread will receive it."
// Checks: 4 threads blocked in ibv_get_async_event and 4 different port events raised: every
//   thread returns 0 with one event, no event is received twice, none is lost, none is left over.
TEST_F(AsyncEventThreadsTest, EachEventReachesExactlyOneWaiter) {
  const ChildResult result = RunChecksInChild(
      [&] {
        constexpr int kWaiters = 4;
        const std::array<ibv_event_type, kWaiters> raised = {IBV_EVENT_LID_CHANGE, IBV_EVENT_PKEY_CHANGE,
                                                             IBV_EVENT_SM_CHANGE, IBV_EVENT_GID_CHANGE};
        ContextPtr context = OpenAnotherContext();
        ASSERT_NE(context, nullptr);
        // Shared with the threads, which may outlive this scope if one never returns.
        auto events = std::make_shared<std::array<ibv_async_event, kWaiters>>();
        std::vector<std::unique_ptr<BlockingCall>> waiters;
        for (int i = 0; i < kWaiters; ++i) {
          waiters.push_back(std::make_unique<BlockingCall>(
              [ctx = context.get(), events, i] { return ibv_get_async_event(ctx, &(*events)[i]); }));
        }
        // All four have been running for the whole window after the first check.
        for (int i = 0; i < kWaiters; ++i) {
          if (!ExpectBlocks(*waiters[i], i == 0 ? kBlockWindow : 0ms)) return;
        }
        for (ibv_event_type type : raised) ASSERT_EQ(sim().RaisePortEvent(context.get(), port(), type), 0);

        std::multiset<int> received;
        for (int i = 0; i < kWaiters; ++i) {
          if (!ExpectReturnsWithin(*waiters[i], kReturnWindow)) continue;
          EXPECT_EQ(waiters[i]->result(), 0) << "waiter " << i;
          if (waiters[i]->result() != 0) continue;
          received.insert((*events)[i].event_type);
          EXPECT_EQ((*events)[i].element.port_num, port()) << "waiter " << i;
          ibv_ack_async_event(&(*events)[i]);
        }
        EXPECT_EQ(received, std::multiset<int>(raised.begin(), raised.end()));
        for (const auto& waiter : waiters) {
          if (!waiter->returned()) return;  // a stuck reader would race the check below
        }
        EXPECT_TRUE(NoAsyncEventWithin(context.get(), kQuietWindow)) << "an event was left over";
      },
      kChildTimeout, "4 threads in ibv_get_async_event");
  EXPECT_TRUE(Passed(result));
}

// Rule: closing the device file destroys the context's async event file, which marks its queue
//   closed and wakes its readers (uverbs_async_event_destroy_uobj -> ib_uverbs_free_event_queue,
//   drivers/infiniband/core/uverbs_std_types_async_fd.c); a reader of a closed, empty queue gets
//   EIO (ib_uverbs_event_read), so ibv_get_async_event(3) returns -1.
// Checks: a thread blocked in ibv_get_async_event returns -1 with errno EIO once another thread
//   has closed the context with ibv_close_device.
TEST_F(AsyncEventThreadsTest, CloseDeviceWakesABlockedReaderWithEio) {
  const ChildResult result = RunChecksInChild(
      [&] {
        ibv_context* context = OpenAnotherContext().release();
        ASSERT_NE(context, nullptr);
        // Shared with the thread, which may outlive this scope if it never returns.
        auto err = std::make_shared<int>(0);
        BlockingCall reader([context, err] {
          ibv_async_event event = {};
          const int rc = ibv_get_async_event(context, &event);
          *err = errno;
          return rc;
        });
        if (!ExpectBlocks(reader, kBlockWindow)) return;
        ASSERT_EQ(ibv_close_device(context), 0);
        if (!ExpectReturnsWithin(reader, kReturnWindow)) return;
        EXPECT_EQ(reader.result(), -1);
        EXPECT_EQ(*err, EIO) << ErrnoName(*err);
      },
      kChildTimeout, "ibv_get_async_event while the device is closed");
  EXPECT_TRUE(Passed(result));
}

}  // namespace
}  // namespace conformance
