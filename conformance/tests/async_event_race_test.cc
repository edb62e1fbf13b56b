// Async events across threads, portable: the events come from the SQ Drain
// state (IBV_EVENT_SQ_DRAINED), which every backend raises for a QP moved to
// SQD with en_sqd_async_notify. Every test runs in a watchdog child with its
// own context; the calls that may block run on their own threads.

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
#include "conformance/lib/fd_poll.h"
#include "conformance/lib/qp_pair.h"
#include "conformance/lib/timeouts.h"
#include "conformance/lib/verbs_handles.h"
#include "conformance/lib/watchdog.h"

namespace conformance {
namespace {

class AsyncEventRaceTest : public QpTest {
 protected:
  // Two connected RC pairs, ends[0] <-> ends[1] and ends[2] <-> ends[3], on
  // `context` in `pd`.
  void MakeTwoPairs(ibv_context* context, ibv_pd* pd, std::array<QpEnd, 4>* ends) {
    for (QpEnd& end : *ends) ASSERT_TRUE(CreateEndOn(context, pd, &end, EndConfig{}));
    ASSERT_TRUE(Connect((*ends)[0], (*ends)[1]));
    ASSERT_TRUE(Connect((*ends)[2], (*ends)[3]));
  }

  // RTS -> SQD asking for IBV_EVENT_SQ_DRAINED; ibv_modify_qp's value.
  static int ModifyToSqdWithNotify(ibv_qp* qp) {
    ibv_qp_attr attr = {};
    attr.qp_state = IBV_QPS_SQD;
    attr.en_sqd_async_notify = 1;
    return ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY);
  }

  // Opens the child's own context and PD.
  void OpenContextAndPd(ContextPtr* context, PdPtr* pd) {
    *context = OpenAnotherContext();
    ASSERT_NE(*context, nullptr);
    pd->reset(ibv_alloc_pd(context->get()));
    ASSERT_NE(*pd, nullptr) << ErrnoName(errno);
  }
};

// Rule: ibv_get_async_event(3): "If multiple threads call this function simultaneously, then when
//   an async event occurs, only one thread will receive it, and it is not possible to predict
//   which thread will receive it."
// Checks: 4 threads blocked in ibv_get_async_event, then 4 QPs moved to SQD with
//   en_sqd_async_notify: every thread returns 0 with IBV_EVENT_SQ_DRAINED, the 4 events name the
//   4 QPs (none twice, none lost), and no event is left over.
TEST_F(AsyncEventRaceTest, EachSqDrainedReachesExactlyOneWaiter) {
  const ChildResult result = RunChecksInChild(
      [&] {
        ContextPtr context;
        PdPtr pd;
        ASSERT_NO_FATAL_FAILURE(OpenContextAndPd(&context, &pd));
        std::array<QpEnd, 4> ends;
        ASSERT_NO_FATAL_FAILURE(MakeTwoPairs(context.get(), pd.get(), &ends));
        // Shared with the threads, which may outlive this scope if one never returns.
        auto events = std::make_shared<std::array<ibv_async_event, 4>>();
        std::vector<std::unique_ptr<BlockingCall>> waiters;
        for (size_t i = 0; i < ends.size(); ++i) {
          waiters.push_back(std::make_unique<BlockingCall>(
              [ctx = context.get(), events, i] { return ibv_get_async_event(ctx, &(*events)[i]); }));
        }
        // All four have been waiting for the whole window after the first check.
        for (size_t i = 0; i < waiters.size(); ++i) {
          if (!ExpectBlocks(*waiters[i], i == 0 ? kBlockWindow : 0ms)) return;
        }
        for (QpEnd& end : ends) ASSERT_EQ(ModifyToSqdWithNotify(end.get()), 0) << ErrnoName(errno);

        std::multiset<const void*> received;
        for (size_t i = 0; i < waiters.size(); ++i) {
          if (!ExpectReturnsWithin(*waiters[i], kReturnWindow)) continue;
          ASSERT_EQ(waiters[i]->result(), 0) << "waiter " << i << ": " << ErrnoName(errno);
          EXPECT_EQ((*events)[i].event_type, IBV_EVENT_SQ_DRAINED) << "waiter " << i << ": " << DescribeEvent((*events)[i]);
          received.insert(EventElement((*events)[i]));
          ibv_ack_async_event(&(*events)[i]);
        }
        const std::multiset<const void*> expected = {ends[0].get(), ends[1].get(), ends[2].get(), ends[3].get()};
        EXPECT_EQ(received, expected) << "each QP's event must reach exactly one waiter";
        for (const auto& waiter : waiters) {
          if (!waiter->returned()) return;  // a stuck reader would race the check below
        }
        EXPECT_TRUE(NoAsyncEventWithin(context.get(), kQuietWindow)) << "an event was left over";
      },
      kChildTimeout, "4 threads in ibv_get_async_event, 4 SQ_DRAINED events");
  EXPECT_TRUE(Passed(result));
}

// Rule: ibv_get_async_event(3): "destroying an object (CQ, SRQ or QP) will wait for all affiliated
//   events for the object to be acknowledged" - whichever thread read the event and whichever
//   thread acknowledges it.
// Checks: IBV_EVENT_SQ_DRAINED is read on one thread; ibv_destroy_qp on a second thread is still
//   blocked after 200 ms; ibv_ack_async_event on a third thread lets it return 0 within 2 s.
TEST_F(AsyncEventRaceTest, DestroyOnOneThreadReturnsAfterAckOnAnother) {
  const ChildResult result = RunChecksInChild(
      [&] {
        ContextPtr context;
        PdPtr pd;
        ASSERT_NO_FATAL_FAILURE(OpenContextAndPd(&context, &pd));
        std::array<QpEnd, 4> ends;
        ASSERT_NO_FATAL_FAILURE(MakeTwoPairs(context.get(), pd.get(), &ends));
        auto event = std::make_shared<ibv_async_event>();
        BlockingCall reader([ctx = context.get(), event] { return ibv_get_async_event(ctx, event.get()); });
        ASSERT_EQ(ModifyToSqdWithNotify(ends[0].get()), 0) << ErrnoName(errno);
        if (!ExpectReturnsWithin(reader, kReturnWindow)) return;
        ASSERT_EQ(reader.result(), 0) << ErrnoName(errno);
        ASSERT_EQ(event->event_type, IBV_EVENT_SQ_DRAINED) << DescribeEvent(*event);
        ASSERT_EQ(event->element.qp, ends[0].get());

        ibv_qp* qp = ends[0].qp.release();
        BlockingCall destroy([qp] { return ibv_destroy_qp(qp); });
        if (!ExpectBlocks(destroy, kBlockWindow)) return;
        const auto ack_on_another_thread = [event] {
          BlockingCall acker([event] {
            ibv_ack_async_event(event.get());
            return 0;
          });
          EXPECT_TRUE(acker.WaitFor(kReturnWindow)) << "ibv_ack_async_event did not return";
        };
        if (!ExpectReturnsAfter(destroy, ack_on_another_thread, kReturnWindow)) return;
        EXPECT_EQ(destroy.result(), 0);
      },
      kChildTimeout, "ibv_destroy_qp and ibv_ack_async_event on different threads");
  EXPECT_TRUE(Passed(result));
}

// Rule: ibv_get_async_event(3): the destroy waits for the affiliated events that were returned,
//   which "avoids an application retrieving an affiliated event after the corresponding object has
//   already been destroyed" - an event still queued is dropped with its QP.
// Checks: with IBV_EVENT_SQ_DRAINED queued for a QP (async_fd readable) and not read,
//   ibv_destroy_qp returns 0 within 2 s and no async event can be read afterwards.
TEST_F(AsyncEventRaceTest, QpDestroyDropsQueuedEvent) {
  const ChildResult result = RunChecksInChild(
      [&] {
        ContextPtr context;
        PdPtr pd;
        ASSERT_NO_FATAL_FAILURE(OpenContextAndPd(&context, &pd));
        std::array<QpEnd, 4> ends;
        ASSERT_NO_FATAL_FAILURE(MakeTwoPairs(context.get(), pd.get(), &ends));
        ASSERT_EQ(ModifyToSqdWithNotify(ends[0].get()), 0) << ErrnoName(errno);
        ASSERT_TRUE(WaitReadable(context->async_fd, kReturnWindow)) << "SQD with notify raised no async event";
        ibv_qp* qp = ends[0].qp.release();
        BlockingCall destroy([qp] { return ibv_destroy_qp(qp); });
        if (!ExpectReturnsWithin(destroy, kReturnWindow)) return;
        EXPECT_EQ(destroy.result(), 0);
        EXPECT_TRUE(NoAsyncEventWithin(context.get(), kQuietWindow))
            << "an event of the destroyed QP can still be read";
      },
      kChildTimeout, "ibv_destroy_qp with an unread IBV_EVENT_SQ_DRAINED");
  EXPECT_TRUE(Passed(result));
}

}  // namespace
}  // namespace conformance
