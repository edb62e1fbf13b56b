#pragma once

// An XRC domain (ibv_open_xrcd(3)). Each ibv_open_xrcd returns its own
// handle (an Xrcd); handles opened on the same file inode of the same device
// share one domain, as the kernel's per-device inode table does
// (ib_uverbs_open_xrcd): fd -1 makes a private domain; an fd whose inode has
// no domain yet needs O_CREAT (else EAGAIN); O_EXCL fails with EINVAL when
// the domain exists.
//
// Across processes. The domain's identity is (device, st_dev, st_ino), so
// handles of two processes on the same file name the same domain, and a
// target QP of one delivers into the other's XRC SRQs (xrc_remote.h). But
// whether a domain "exists" for O_CREAT/O_EXCL is decided within the process:
// the simulator has no machine-wide inode table, so a process's first open of
// a file needs O_CREAT even when another process has the domain open, and
// O_EXCL only sees this process's handles.
//
// A handle counts the SRQs and target QPs created with it: ibv_close_xrcd
// fails with EBUSY while any exist (the kernel's uobject refcnt); the domain
// ends with the last handle, or with the context of the last handle
// (ibv_close_device). The domain also lists its target QPs, so that
// an XRC SRQ being destroyed can detach from the QPs that delivered into it.

#include <infiniband/verbs.h>
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <set>

#include "handle.h"
#include "result.h"

namespace simverbs {

class Context;
class Device;
class Qp;
class Srq;

struct XrcDomain {
  Device* device = nullptr;
  bool has_inode = false;
  dev_t st_dev = 0;
  ino_t st_ino = 0;
  int handles = 0;            // Xrcd handles open on it (Xrcd registry mutex)
  std::set<Qp*> targets;      // its XRC_RECV QPs (engine lock)
};

class Xrcd {
 public:
  static constexpr uint64_t kMagic = 0x53494d5852430001;  // "SIMXRC"

  static Result<Xrcd*> Open(Context* ctx, const ibv_xrcd_init_attr& attr);
  int Close();  // 0, or EBUSY while SRQs or QPs use this handle
  // ibv_close_device: the kernel destroys the context's XRCDs with it; their
  // handles are left to the program, as its other objects are.
  static void OrphanAll(const Context* ctx);

  static Xrcd* From(const ibv_xrcd* x) { return Handle<ibv_xrcd, Xrcd>::From(x); }
  ibv_xrcd* ibv() { return &handle_.pub; }
  Context* context() const { return ctx_; }
  XrcDomain* domain() const { return domain_; }

  void AddUser() { users_.fetch_add(1); }
  void RemoveUser() { users_.fetch_sub(1); }

  static ibv_xrcd* OpenOp(ibv_context* ctx, ibv_xrcd_init_attr* attr);
  static int CloseOp(ibv_xrcd* xrcd);

 private:
  Xrcd(Context* ctx, XrcDomain* domain);
  ~Xrcd();

  Handle<ibv_xrcd, Xrcd> handle_;
  Context* ctx_;
  XrcDomain* domain_;
  std::atomic<int> users_{0};
};

}  // namespace simverbs
