#pragma once

// A protection domain. Objects created in it (MRs, QPs, AHs, MWs, SRQs) hold
// a reference, and dealloc fails with EBUSY while any exist, as the kernel's
// usecnt does.

#include <infiniband/verbs.h>

#include <atomic>

#include "handle.h"
#include "result.h"

namespace simverbs {

class Context;

class Pd {
 public:
  static constexpr uint64_t kMagic = 0x53494d5044000001;  // "SIMPD"

  static Result<Pd*> Alloc(Context* ctx);
  int Dealloc();  // 0, or EBUSY while objects use the PD (the PD is kept)

  static Pd* From(const ibv_pd* pd) { return Handle<ibv_pd, Pd>::From(pd); }
  ibv_pd* ibv() { return &handle_.pub; }
  Context* context() const { return ctx_; }

  void AddUser() { users_.fetch_add(1); }
  void RemoveUser() { users_.fetch_sub(1); }

 private:
  explicit Pd(Context* ctx);
  ~Pd();

  Handle<ibv_pd, Pd> handle_;
  Context* ctx_;
  std::atomic<int> users_{0};
};

}  // namespace simverbs
