#pragma once

// An open device (ibv_open_device). Owns the async event queue behind
// ctx->async_fd and counts the objects created on it for the profile limits.

#include <infiniband/verbs.h>

#include <atomic>
#include <cstddef>
#include <mutex>
#include <set>

#include "device.h"
#include "event_queue.h"
#include "fork_generation.h"
#include "handle.h"
#include "result.h"

namespace simverbs {

class CompChannel;

class Context {
 public:
  static constexpr uint64_t kMagic = 0x53494d4354580001;  // "SIMCTX"

  static Result<Context*> Open(Device* device);
  // ibv_close_device: no waiting for acks; channels of this context read EIO
  // afterwards; QPs and XRC SRQs still alive leave the wire (their memory is
  // the program's).
  void Close();

  static Context* From(const ibv_context* ctx) {
    if (ctx == nullptr) return nullptr;
    auto* vctx = reinterpret_cast<const verbs_context*>(reinterpret_cast<const char*>(ctx) -
                                                        offsetof(verbs_context, context));
    return Handle<verbs_context, Context>::From(vctx);
  }
  ibv_context* ibv() { return &handle_.pub.context; }
  verbs_context* vctx() { return &handle_.pub; }
  Device* device() const { return device_; }

  EventQueue& async_events() { return async_; }
  // Queues an async event for the application (ibv_get_async_event).
  void RaiseAsync(const QueuedEvent& ev);

  void AddChannel(CompChannel* ch);
  void RemoveChannel(CompChannel* ch);

  // One object of `kind` more (or less) on this context, against the device's
  // limit (Device::Reserve: false when it is reached). The kernel frees what a
  // closed context's objects held (ibv_close_device), as Close does.
  bool ReserveObject(Device::Kind kind);
  void ReleaseObject(Device::Kind kind);
  // Pages this context's MRs pinned (PinnedPages); ibv_close_device gives
  // back what its MRs still pin, as the kernel releases their memory.
  void CountPinnedPages(int64_t delta) { pinned_pages_.fetch_add(static_cast<uint64_t>(delta)); }

  // IBV_EVENT_DEVICE_FATAL was raised on this context (fault/device_fatal.h).
  bool fatal() const { return fatal_.load(std::memory_order_acquire); }
  // False when it already was fatal.
  bool MarkFatal() { return !fatal_.exchange(true, std::memory_order_acq_rel); }

 private:
  explicit Context(Device* device);
  ~Context();

  Handle<verbs_context, Context> handle_;
  Device* device_;
  EventQueue async_;
  int fd_error_ = 0;  // why async_fd or cmd_fd could not be made (EMFILE), or 0
  std::mutex mu_;
  std::set<CompChannel*> channels_;
  std::atomic<bool> fatal_{false};
  const uint32_t fork_generation_ = ForkGeneration();  // opened in this process, or inherited
  std::atomic<int> objects_[static_cast<int>(Device::Kind::kCount)] = {};  // ReserveObject
  std::atomic<uint64_t> pinned_pages_{0};
};

}  // namespace simverbs
