#include "conformance/lib/cm_event_wait.h"

#include <cerrno>

#include "conformance/lib/errno_capture.h"
#include "conformance/lib/fd_poll.h"

namespace conformance {
namespace {

testing::AssertionResult MakeNonBlocking(rdma_event_channel* channel) {
  if (SetNonBlocking(channel->fd) != 0) {
    return testing::AssertionFailure() << "cannot set O_NONBLOCK on the event channel fd " << channel->fd << ": "
                                       << ErrnoName(errno);
  }
  return testing::AssertionSuccess();
}

}  // namespace

testing::AssertionResult GetCmEventWithin(rdma_event_channel* channel, rdma_cm_event_type type,
                                          std::chrono::milliseconds timeout, CmEventPtr* event) {
  if (auto ok = MakeNonBlocking(channel); !ok) return ok;
  if (!WaitReadable(channel->fd, timeout)) {
    return testing::AssertionFailure() << "no rdma_cm event within " << timeout.count() << " ms (waiting for "
                                       << rdma_event_str(type) << "; the channel fd never became readable)";
  }
  rdma_cm_event* got = nullptr;
  IntCall call = CaptureErrno([&] { return rdma_get_cm_event(channel, &got); });
  if (call.rc != 0) {
    return testing::AssertionFailure() << "the channel fd was readable, but rdma_get_cm_event returned " << call.rc
                                       << " with errno " << ErrnoName(call.err);
  }
  event->reset(got);
  if (got->event != type) {
    return testing::AssertionFailure() << "got " << rdma_event_str(got->event) << " (status " << got->status
                                       << ") where " << rdma_event_str(type) << " was expected";
  }
  return testing::AssertionSuccess();
}

testing::AssertionResult NoCmEventWithin(rdma_event_channel* channel, std::chrono::milliseconds window) {
  if (auto ok = MakeNonBlocking(channel); !ok) return ok;
  const bool readable = WaitReadable(channel->fd, window);
  rdma_cm_event* got = nullptr;
  IntCall call = CaptureErrno([&] { return rdma_get_cm_event(channel, &got); });
  if (call.rc == 0) {
    CmEventPtr owned(got);
    return testing::AssertionFailure() << "got an unexpected " << rdma_event_str(got->event) << " (status "
                                       << got->status << ")";
  }
  if (call.err != EAGAIN) {
    return testing::AssertionFailure() << "rdma_get_cm_event on an empty non-blocking channel gave errno "
                                       << ErrnoName(call.err) << ", not EAGAIN";
  }
  if (readable) return testing::AssertionFailure() << "the channel fd was readable but there was no event";
  return testing::AssertionSuccess();
}

}  // namespace conformance
