#pragma once

// A completion channel: a real fd that becomes readable when an armed CQ
// produces a completion event. ibv_comp_channel::refcnt counts the CQs that
// use it (destroy fails with EBUSY while it is non-zero), as in libibverbs.

#include <infiniband/verbs.h>

#include <memory>

#include "event_queue.h"
#include "handle.h"
#include "result.h"

namespace simverbs {

class Context;

class CompChannel {
 public:
  static constexpr uint64_t kMagic = 0x53494d4348000001;  // "SIMCH"

  static Result<CompChannel*> Create(Context* ctx);
  int Destroy();  // 0, or EBUSY while a CQ uses the channel

  static CompChannel* From(const ibv_comp_channel* ch) { return Handle<ibv_comp_channel, CompChannel>::From(ch); }
  ibv_comp_channel* ibv() { return &handle_.pub; }
  Context* context() const { return ctx_; }
  EventQueue& events() { return events_; }

  // The context was closed: reads of an empty channel return EIO from now on.
  void DetachFromContext();

 private:
  explicit CompChannel(Context* ctx);
  ~CompChannel();

  Handle<ibv_comp_channel, CompChannel> handle_;
  Context* ctx_;  // nullptr once the context is closed
  EventQueue events_;
};

}  // namespace simverbs
