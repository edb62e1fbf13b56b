#include "xrcd.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <atomic>
#include <cerrno>
#include <list>
#include <mutex>
#include <set>

#include "context.h"
#include "device.h"
#include "fault/fault_points.h"
#include "fork_locks.h"

namespace simverbs {
namespace {

// The domains of this process. Domains are never moved (a list), so QPs and
// SRQs may keep pointers to them while a handle is open.
struct Registry {
  std::mutex mu;
  std::list<XrcDomain> domains;
  std::set<Xrcd*> handles;  // open, in every context
};

Registry& Domains() {
  static Registry* r = [] {
    auto* registry = new Registry();  // leaked: may be used from atexit
    // A leaf lock: held across fork (fork_locks.h).
    HoldAcrossFork([] { Domains().mu.lock(); }, [] { Domains().mu.unlock(); });
    return registry;
  }();
  return *r;
}
// Made when the library loads: a fork while another thread makes it would
// leave the child waiting on the guard of Domains' static.
Registry& g_registry_at_load = Domains();

}  // namespace

Xrcd::Xrcd(Context* ctx, XrcDomain* domain) : ctx_(ctx), domain_(domain) {
  handle_.Bind(this);
  handle_.pub.context = ctx->ibv();
}

Xrcd::~Xrcd() { handle_.Unbind(); }

Result<Xrcd*> Xrcd::Open(Context* ctx, const ibv_xrcd_init_attr& attr) {
  using R = Result<Xrcd*>;
  if (int err = FaultPoints::Get().Hit(FaultPoint::kOpenXrcd)) return R::Error(err);
  // A device without XRC has no open_xrcd command at all.
  if (!(ctx->device()->profile().attr_ex.orig_attr.device_cap_flags & IBV_DEVICE_XRC)) return R::Error(EOPNOTSUPP);
  // rdma-core's ibv_cmd_open_xrcd: unknown comp_mask bits, then fd and oflags both required.
  if (attr.comp_mask >= IBV_XRCD_INIT_ATTR_RESERVED) return R::Error(EOPNOTSUPP);
  if (!(attr.comp_mask & IBV_XRCD_INIT_ATTR_FD) || !(attr.comp_mask & IBV_XRCD_INIT_ATTR_OFLAGS)) {
    return R::Error(EINVAL);
  }
  struct stat st {};
  if (attr.fd != -1 && fstat(attr.fd, &st) != 0) return R::Error(EBADF);

  Registry& reg = Domains();
  std::lock_guard<std::mutex> lock(reg.mu);
  XrcDomain* domain = nullptr;
  if (attr.fd != -1) {
    for (XrcDomain& d : reg.domains) {
      if (d.device == ctx->device() && d.has_inode && d.st_dev == st.st_dev && d.st_ino == st.st_ino) domain = &d;
    }
    // ib_uverbs_open_xrcd: no domain on the inode and no O_CREAT is EAGAIN;
    // an existing one with O_EXCL is EINVAL.
    if (!domain && !(attr.oflags & O_CREAT)) return R::Error(EAGAIN);
    if (domain && (attr.oflags & O_EXCL)) return R::Error(EINVAL);
  }
  if (!domain) {
    XrcDomain& d = reg.domains.emplace_back();
    d.device = ctx->device();
    d.has_inode = attr.fd != -1;
    d.st_dev = st.st_dev;
    d.st_ino = st.st_ino;
    domain = &d;
  }
  Xrcd* handle = new Xrcd(ctx, domain);
  try {
    reg.handles.insert(handle);
  } catch (...) {
    delete handle;
    if (domain->handles == 0) reg.domains.remove_if([domain](const XrcDomain& d) { return &d == domain; });
    return R::Error(ENOMEM);
  }
  ++domain->handles;
  return handle;
}

int Xrcd::Close() {
  if (users_.load() != 0) return EBUSY;
  Registry& reg = Domains();
  {
    std::lock_guard<std::mutex> lock(reg.mu);
    reg.handles.erase(this);
    if (--domain_->handles == 0) {
      reg.domains.remove_if([this](const XrcDomain& d) { return &d == domain_; });
    }
  }
  delete this;
  return 0;
}

void Xrcd::OrphanAll(const Context* ctx) {
  Registry& reg = Domains();
  std::lock_guard<std::mutex> lock(reg.mu);
  for (auto it = reg.handles.begin(); it != reg.handles.end();) {
    Xrcd* handle = *it;
    if (handle->ctx_ != ctx) {
      ++it;
      continue;
    }
    it = reg.handles.erase(it);
    handle->handle_.Unbind();  // (a later ibv_close_xrcd of it is EINVAL, not a second release)
    // The last handle gone, the inode has no domain any more (a new open needs
    // O_CREAT again). The domain itself stays: the orphaned QPs and SRQs of
    // the context may still point at it, and at a handle they use.
    if (--handle->domain_->handles == 0) handle->domain_->has_inode = false;
    if (handle->users_.load() == 0) delete handle;
  }
}

ibv_xrcd* Xrcd::OpenOp(ibv_context* ibctx, ibv_xrcd_init_attr* attr) {
  Context* ctx = Context::From(ibctx);
  if (!ctx || !attr) {
    errno = EINVAL;
    return nullptr;
  }
  Result<Xrcd*> r = Open(ctx, *attr);
  if (!r.ok()) {
    errno = r.err();
    return nullptr;
  }
  return r.value()->ibv();
}

int Xrcd::CloseOp(ibv_xrcd* xrcd) {
  Xrcd* x = From(xrcd);
  return x ? x->Close() : EINVAL;
}

}  // namespace simverbs
