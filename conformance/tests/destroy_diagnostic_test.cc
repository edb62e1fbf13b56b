// The simulator's diagnostic for the classic hang: a destroy that waits for
// acks longer than SIMVERBS_DESTROY_WARN_MS says on stderr which object it is
// and how many events were read but not acked, and goes on waiting. Runs in
// watchdog children whose stderr is a pipe the test reads.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "conformance/lib/blocking_call.h"
#include "conformance/lib/errno_capture.h"
#include "conformance/lib/event_wait.h"
#include "conformance/lib/fd_poll.h"
#include "conformance/lib/qp_pair.h"
#include "conformance/lib/sim_test.h"
#include "conformance/lib/timeouts.h"
#include "conformance/lib/verbs_handles.h"
#include "conformance/lib/watchdog.h"

namespace conformance {
namespace {

// Points this process's stderr at a pipe until destroyed.
class StderrCapture {
 public:
  StderrCapture() {
    int fds[2];
    if (pipe(fds) != 0) return;
    read_fd_ = fds[0];
    saved_ = dup(STDERR_FILENO);
    dup2(fds[1], STDERR_FILENO);
    close(fds[1]);
  }
  ~StderrCapture() {
    if (saved_ >= 0) {
      dup2(saved_, STDERR_FILENO);
      close(saved_);
    }
    if (read_fd_ >= 0) close(read_fd_);
  }
  StderrCapture(const StderrCapture&) = delete;
  StderrCapture& operator=(const StderrCapture&) = delete;

  bool ok() const { return read_fd_ >= 0 && saved_ >= 0; }

  // The first line written to stderr, waiting up to timeout for its end.
  testing::AssertionResult LineWithin(std::chrono::milliseconds timeout, std::string* line) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      if (const size_t end = text_.find('\n'); end != std::string::npos) {
        *line = text_.substr(0, end);
        return testing::AssertionSuccess();
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0 || !WaitReadable(read_fd_, left)) {
        return testing::AssertionFailure() << "nothing on stderr within " << timeout.count() << " ms (got \"" << text_
                                           << "\")";
      }
      char buf[256];
      const ssize_t n = read(read_fd_, buf, sizeof buf);
      if (n <= 0) return testing::AssertionFailure() << "reading the stderr pipe: " << ErrnoName(errno);
      text_.append(buf, static_cast<size_t>(n));
    }
  }

 private:
  int read_fd_ = -1;
  int saved_ = -1;
  std::string text_;
};

class DestroyDiagnosticTest : public SimTest {
 protected:
  // Makes destroys in this (child) process report after 100 ms.
  static void SetShortWarnDelay() { ASSERT_EQ(setenv("SIMVERBS_DESTROY_WARN_MS", "100", 1), 0); }
};

// Rule: ibv_get_async_event(3): "destroying an object (CQ, SRQ or QP) will wait for all affiliated
//   events for the object to be acknowledged"; README (simulator diagnostics): a destroy that
//   waits longer than SIMVERBS_DESTROY_WARN_MS names the object and the events not acked.
// Checks: with IBV_EVENT_QP_FATAL read and not acked and SIMVERBS_DESTROY_WARN_MS=100,
//   ibv_destroy_qp writes one stderr line naming ibv_destroy_qp, the QP number and "1 async event
//   read but not acked" while it is still blocked; after ibv_ack_async_event it returns 0.
TEST_F(DestroyDiagnosticTest, QpDestroyNamesUnackedAsyncEvent) {
  const ChildResult result = RunChecksInChild(
      [&] {
        ASSERT_NO_FATAL_FAILURE(SetShortWarnDelay());
        ContextPtr context = OpenAnotherContext();
        ASSERT_NE(context, nullptr);
        PdPtr pd(ibv_alloc_pd(context.get()));
        ASSERT_NE(pd, nullptr) << ErrnoName(errno);
        QpEnd end;
        ASSERT_TRUE(CreateEndOn(context.get(), pd.get(), &end, EndConfig{}));
        ibv_qp* qp = end.qp.release();
        ASSERT_EQ(sim().RaiseQpEvent(qp, IBV_EVENT_QP_FATAL), 0);
        ibv_async_event event = {};
        ASSERT_TRUE(GetAsyncEventWithin(context.get(), &event, kReturnWindow));
        ASSERT_EQ(event.element.qp, qp);

        StderrCapture err;
        ASSERT_TRUE(err.ok()) << ErrnoName(errno);
        char number[32];
        std::snprintf(number, sizeof number, "QP number 0x%06x", qp->qp_num);
        BlockingCall destroy([qp] { return ibv_destroy_qp(qp); });
        std::string line;
        const bool said = err.LineWithin(kReturnWindow, &line);
        const bool blocked = !destroy.returned();
        const auto ack = [&event] { ibv_ack_async_event(&event); };
        if (!ExpectReturnsAfter(destroy, ack, kReturnWindow)) return;
        EXPECT_EQ(destroy.result(), 0);
        ASSERT_TRUE(said);
        EXPECT_TRUE(blocked) << "the destroy returned before the ack";
        EXPECT_THAT(line, testing::HasSubstr("ibv_destroy_qp"));
        EXPECT_THAT(line, testing::HasSubstr(number));
        EXPECT_THAT(line, testing::HasSubstr("1 async event read but not acked"));
      },
      kChildTimeout, "ibv_destroy_qp with an unacknowledged event and SIMVERBS_DESTROY_WARN_MS=100");
  EXPECT_TRUE(Passed(result));
}

// Rule: ibv_get_cq_event(3): "destroying a CQ will wait for all completion events to be
//   acknowledged"; README (simulator diagnostics): the waiting destroy names the object and the
//   events not acked.
// Checks: with two completion events read and not acked and SIMVERBS_DESTROY_WARN_MS=100,
//   ibv_destroy_cq writes one stderr line naming ibv_destroy_cq, the CQ handle and "2 completion
//   events read but not acked"; after ibv_ack_cq_events(cq, 2) it returns 0.
TEST_F(DestroyDiagnosticTest, CqDestroyNamesUnackedCompletionEvents) {
  const ChildResult result = RunChecksInChild(
      [&] {
        ASSERT_NO_FATAL_FAILURE(SetShortWarnDelay());
        ContextPtr context = OpenAnotherContext();
        ASSERT_NE(context, nullptr);
        ChannelPtr channel(ibv_create_comp_channel(context.get()));
        ASSERT_NE(channel, nullptr) << ErrnoName(errno);
        ibv_cq* cq = ibv_create_cq(context.get(), 4, nullptr, channel.get(), 0);
        ASSERT_NE(cq, nullptr) << ErrnoName(errno);
        for (uint64_t i = 0; i < 2; ++i) {
          ASSERT_EQ(ibv_req_notify_cq(cq, 0), 0);
          ibv_wc wc = {};
          wc.wr_id = i;
          wc.opcode = IBV_WC_RECV;
          ASSERT_EQ(sim().PushCompletion(cq, wc, false), 0);
          ibv_cq* event_cq = nullptr;
          void* event_context = nullptr;
          ASSERT_TRUE(GetCqEventWithin(channel.get(), &event_cq, &event_context, kReturnWindow));
          ASSERT_EQ(event_cq, cq);
        }

        StderrCapture err;
        ASSERT_TRUE(err.ok()) << ErrnoName(errno);
        const uint32_t handle = cq->handle;
        BlockingCall destroy([cq] { return ibv_destroy_cq(cq); });
        std::string line;
        const bool said = err.LineWithin(kReturnWindow, &line);
        const bool blocked = !destroy.returned();
        const auto ack = [cq] { ibv_ack_cq_events(cq, 2); };
        if (!ExpectReturnsAfter(destroy, ack, kReturnWindow)) return;
        EXPECT_EQ(destroy.result(), 0);
        ASSERT_TRUE(said);
        EXPECT_TRUE(blocked) << "the destroy returned before the ack";
        EXPECT_THAT(line, testing::HasSubstr("ibv_destroy_cq"));
        EXPECT_THAT(line, testing::HasSubstr("CQ handle " + std::to_string(handle)));
        EXPECT_THAT(line, testing::HasSubstr("2 completion events read but not acked"));
      },
      kChildTimeout, "ibv_destroy_cq with unacknowledged completion events and SIMVERBS_DESTROY_WARN_MS=100");
  EXPECT_TRUE(Passed(result));
}

}  // namespace
}  // namespace conformance
