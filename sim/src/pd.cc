#include "pd.h"

#include <atomic>

#include "context.h"
#include "device.h"
#include "fault/fault_points.h"

namespace simverbs {
namespace {
std::atomic<uint32_t> next_pd_handle{1};
}

Pd::Pd(Context* ctx) : ctx_(ctx) {
  handle_.Bind(this);
  handle_.pub.context = ctx->ibv();
  handle_.pub.handle = next_pd_handle.fetch_add(1);
}

Pd::~Pd() { handle_.Unbind(); }

Result<Pd*> Pd::Alloc(Context* ctx) {
  if (int err = FaultPoints::Get().Hit(FaultPoint::kAllocPd)) return Result<Pd*>::Error(err);
  if (!ctx->ReserveObject(Device::Kind::kPd)) return Result<Pd*>::Error(ENOMEM);
  return new Pd(ctx);
}

int Pd::Dealloc() {
  if (users_.load() != 0) return EBUSY;
  ctx_->ReleaseObject(Device::Kind::kPd);
  delete this;
  return 0;
}

}  // namespace simverbs
