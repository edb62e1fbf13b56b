#include "comp_channel.h"

#include <unistd.h>

#include "context.h"
#include "fault/fault_points.h"

namespace simverbs {

CompChannel::CompChannel(Context* ctx) : ctx_(ctx) {
  handle_.Bind(this);
  handle_.pub.context = ctx->ibv();
  handle_.pub.fd = events_.fd();
  handle_.pub.refcnt = 0;
  ctx->AddChannel(this);
}

CompChannel::~CompChannel() {
  if (ctx_) ctx_->RemoveChannel(this);
  if (events_.fd() >= 0) close(events_.fd());
  handle_.Unbind();
}

Result<CompChannel*> CompChannel::Create(Context* ctx) {
  if (int err = FaultPoints::Get().Hit(FaultPoint::kCreateCompChannel)) return Result<CompChannel*>::Error(err);
  CompChannel* channel = new CompChannel(ctx);
  // No fd left for it (RLIMIT_NOFILE): EMFILE, as the kernel answers.
  if (const int fd_error = channel->events_.fd_error()) {
    delete channel;
    return Result<CompChannel*>::Error(fd_error);
  }
  return channel;
}

int CompChannel::Destroy() {
  // libibverbs checks refcnt under context->mutex; the context may be closed already.
  if (ctx_) pthread_mutex_lock(&ctx_->ibv()->mutex);
  const int refcnt = handle_.pub.refcnt;
  if (ctx_) pthread_mutex_unlock(&ctx_->ibv()->mutex);
  if (refcnt != 0) return EBUSY;
  delete this;
  return 0;
}

void CompChannel::DetachFromContext() {
  ctx_ = nullptr;
  events_.Close();
}

}  // namespace simverbs
