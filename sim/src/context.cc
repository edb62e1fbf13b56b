#include "context.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <vector>

#include "comp_channel.h"
#include "cq.h"
#include "device.h"
#include "event_element.h"
#include "fabric/fabric.h"
#include "fault/fault_plan.h"
#include "fork_generation.h"
#include "ops_table.h"
#include "pinned_pages.h"
#include "qp.h"
#include "srq.h"
#include "xrcd.h"
#include "transport/engine.h"
#include "trace/trace.h"
#include "fault/fault_points.h"

namespace simverbs {

Context::Context(Device* device) : device_(device) {
  handle_.Bind(this);
  verbs_context& v = handle_.pub;
  InstallOps(&v);
  v.sz = sizeof(verbs_context);
  ibv_context& c = v.context;
  c.device = device->ibv();
  c.abi_compat = __VERBS_ABI_IS_EXTENDED;
  c.num_comp_vectors = device->profile().num_comp_vectors;
  c.async_fd = async_.fd();
  // cmd_fd is never used for commands; it is a real fd so programs that
  // inspect or dup it see a valid descriptor.
  c.cmd_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  fd_error_ = c.cmd_fd < 0 ? errno : async_.fd_error();
  pthread_mutex_init(&c.mutex, nullptr);
  device->AddContext(this);
}

Context::~Context() {
  device_->RemoveContext(this);
  pthread_mutex_destroy(&handle_.pub.context.mutex);
  if (handle_.pub.context.cmd_fd >= 0) close(handle_.pub.context.cmd_fd);
  if (async_.fd() >= 0) close(async_.fd());
  handle_.Unbind();
}

Result<Context*> Context::Open(Device* device) {
  if (int err = FaultPoints::Get().Hit(FaultPoint::kOpenDevice)) return Result<Context*>::Error(err);
  // Opening a device joins the fabric, so that other processes' QPs are reachable.
  int err = EINVAL;
  const std::string error = Fabric::Get().Attach(&err);
  if (!error.empty()) {
    std::fprintf(stderr, "simverbs: %s\n", error.c_str());
    return Result<Context*>::Error(err);
  }
  // A broken fault plan (SIMVERBS_FAULTS) stops the program before it starts.
  const std::string plan_error = fault_plan::OnContextOpen(nullptr);
  if (!plan_error.empty()) {
    std::fprintf(stderr, "simverbs: %s\n", plan_error.c_str());
    return Result<Context*>::Error(EINVAL);
  }
  Context* ctx = new Context(device);
  // No fd left for async_fd or cmd_fd (RLIMIT_NOFILE): EMFILE, as open(2) of
  // the uverbs device gives libibverbs.
  if (const int fd_error = ctx->fd_error_) {
    delete ctx;
    return Result<Context*>::Error(fd_error);
  }
  fault_plan::OnContextOpen(ctx);  // the plan's hooks on this context's ops
  return ctx;
}

void Context::Close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (CompChannel* ch : channels_) ch->DetachFromContext();
    channels_.clear();
  }
  if (fork_generation_ != ForkGeneration()) {
    // A child of fork() closes the context it inherited: the kernel drops the
    // child's reference to the device file, and the parent's objects stay the
    // parent's (its QP numbers, XRC SRQs and domains on the fabric).
    delete this;
    return;
  }
  {
    // Objects still alive are left to the program (ibv_close_device(3)), but
    // the kernel destroys them: nothing may reach them, and through them this
    // context, once it is gone.
    std::lock_guard<DataPathMutex> lock(Engine::Get().mu());
    std::vector<Qp*> qps;
    device_->ForEachQp([&](Qp* qp) {
      if (qp->context() == this) qps.push_back(qp);
    });
    for (Qp* qp : qps) qp->OrphanLocked();
    Srq::OrphanXrcLocked(this);
  }
  Xrcd::OrphanAll(this);
  for (int kind = 0; kind < static_cast<int>(Device::Kind::kCount); ++kind) {
    device_->Release(static_cast<Device::Kind>(kind), objects_[kind].exchange(0));
  }
  PinnedPages::Unpin(pinned_pages_.exchange(0), fork_generation_);
  delete this;
}

bool Context::ReserveObject(Device::Kind kind) {
  if (!device_->Reserve(kind)) return false;
  objects_[static_cast<int>(kind)].fetch_add(1);
  return true;
}

void Context::ReleaseObject(Device::Kind kind) {
  objects_[static_cast<int>(kind)].fetch_sub(1);
  device_->Release(kind);
}

void Context::RaiseAsync(const QueuedEvent& ev) {
  // DEVICE_FATAL is the last event of a context (fault/device_fatal.h).
  if (fatal() && ev.type != IBV_EVENT_DEVICE_FATAL) return;
  Trace& trace = Trace::Get();
  if (trace.enabled()) {
    switch (ElementOf(ev.type)) {
      case EventElement::kCq:
        trace.AsyncObject(ev.type, "cq", static_cast<ibv_cq*>(ev.element)->handle);
        break;
      case EventElement::kQp:
        trace.AsyncObject(ev.type, "qp", static_cast<ibv_qp*>(ev.element)->qp_num);
        break;
      case EventElement::kSrq:
        trace.AsyncObject(ev.type, "srq", static_cast<ibv_srq*>(ev.element)->handle);
        break;
      case EventElement::kPort:
        trace.AsyncPort(ev.type, device_->name(), ev.port_num);
        break;
      default:
        trace.AsyncDevice(ev.type, device_->name());
        break;
    }
  }
  async_.Push(ev);
}

void Context::AddChannel(CompChannel* ch) {
  std::lock_guard<std::mutex> lock(mu_);
  channels_.insert(ch);
}

void Context::RemoveChannel(CompChannel* ch) {
  std::lock_guard<std::mutex> lock(mu_);
  channels_.erase(ch);
}

}  // namespace simverbs
