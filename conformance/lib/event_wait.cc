#include "conformance/lib/event_wait.h"

#include <cerrno>

#include "conformance/lib/errno_capture.h"
#include "conformance/lib/fd_poll.h"

namespace conformance {
namespace {

testing::AssertionResult MakeNonBlocking(int fd, const char* what) {
  if (SetNonBlocking(fd) != 0) {
    return testing::AssertionFailure() << "cannot set O_NONBLOCK on the " << what << " fd " << fd << ": "
                                       << ErrnoName(errno);
  }
  return testing::AssertionSuccess();
}

}  // namespace

testing::AssertionResult GetAsyncEventWithin(ibv_context* context, ibv_async_event* event,
                                             std::chrono::milliseconds timeout) {
  if (auto ok = MakeNonBlocking(context->async_fd, "async"); !ok) return ok;
  if (!WaitReadable(context->async_fd, timeout)) {
    return testing::AssertionFailure() << "no async event within " << timeout.count()
                                       << " ms (async_fd never became readable)";
  }
  IntCall call = CaptureErrno([&] { return ibv_get_async_event(context, event); });
  if (call.rc != 0) {
    return testing::AssertionFailure() << "async_fd was readable, but ibv_get_async_event returned " << call.rc
                                       << " with errno " << ErrnoName(call.err);
  }
  return testing::AssertionSuccess();
}

testing::AssertionResult GetCqEventWithin(ibv_comp_channel* channel, ibv_cq** cq, void** cq_context,
                                          std::chrono::milliseconds timeout) {
  if (auto ok = MakeNonBlocking(channel->fd, "completion channel"); !ok) return ok;
  if (!WaitReadable(channel->fd, timeout)) {
    return testing::AssertionFailure() << "no completion event within " << timeout.count()
                                       << " ms (channel fd never became readable)";
  }
  IntCall call = CaptureErrno([&] { return ibv_get_cq_event(channel, cq, cq_context); });
  if (call.rc != 0) {
    return testing::AssertionFailure() << "channel fd was readable, but ibv_get_cq_event returned " << call.rc
                                       << " with errno " << ErrnoName(call.err);
  }
  return testing::AssertionSuccess();
}

testing::AssertionResult NoAsyncEventWithin(ibv_context* context, std::chrono::milliseconds window) {
  if (auto ok = MakeNonBlocking(context->async_fd, "async"); !ok) return ok;
  const bool readable = WaitReadable(context->async_fd, window);
  ibv_async_event event = {};
  IntCall call = CaptureErrno([&] { return ibv_get_async_event(context, &event); });
  if (call.rc == 0) {
    const ibv_event_type type = event.event_type;
    ibv_ack_async_event(&event);
    return testing::AssertionFailure() << "got an unexpected async event " << ibv_event_type_str(type) << " (" << type
                                       << ")";
  }
  if (call.rc != -1 || call.err != EAGAIN) {
    return testing::AssertionFailure() << "nonblocking ibv_get_async_event returned " << call.rc << " with errno "
                                       << ErrnoName(call.err) << ", expected -1 with EAGAIN";
  }
  if (readable) {
    return testing::AssertionFailure() << "async_fd is readable although there is no event";
  }
  return testing::AssertionSuccess();
}

testing::AssertionResult NoCqEventWithin(ibv_comp_channel* channel, std::chrono::milliseconds window) {
  if (auto ok = MakeNonBlocking(channel->fd, "completion channel"); !ok) return ok;
  const bool readable = WaitReadable(channel->fd, window);
  ibv_cq* cq = nullptr;
  void* cq_context = nullptr;
  IntCall call = CaptureErrno([&] { return ibv_get_cq_event(channel, &cq, &cq_context); });
  if (call.rc == 0) {
    ibv_ack_cq_events(cq, 1);
    return testing::AssertionFailure() << "got an unexpected completion event for CQ " << cq;
  }
  if (call.rc != -1 || call.err != EAGAIN) {
    return testing::AssertionFailure() << "nonblocking ibv_get_cq_event returned " << call.rc << " with errno "
                                       << ErrnoName(call.err) << ", expected -1 with EAGAIN";
  }
  if (readable) {
    return testing::AssertionFailure() << "channel fd is readable although there is no event";
  }
  return testing::AssertionSuccess();
}

}  // namespace conformance
