#include "mr.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include "context.h"
#include "device.h"
#include "fabric/fabric.h"
#include "mw.h"
#include "pd.h"
#include "transport/engine.h"
#include "fault/fault_points.h"

namespace simverbs {
namespace {

constexpr unsigned kKnownAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                  IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND | IBV_ACCESS_ZERO_BASED |
                                  IBV_ACCESS_ON_DEMAND | IBV_ACCESS_HUGETLB | IBV_ACCESS_RELAXED_ORDERING |
                                  IBV_ACCESS_OPTIONAL_RANGE;

// The kernel pins the pages at registration and fails with EFAULT when they
// are not mapped; msync reports unmapped pages as ENOMEM without touching them.
int CheckMapped(void* addr, size_t length) {
  if (length == 0) return 0;
  if (addr == nullptr) return EFAULT;
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t start = reinterpret_cast<uintptr_t>(addr) & ~(page - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(addr) + length;
  if (end < start) return EINVAL;
  if (msync(reinterpret_cast<void*>(start), end - start, MS_ASYNC) != 0) return EFAULT;
  return 0;
}

}  // namespace

int Mr::CheckAccess(unsigned access) {
  if (access & ~kKnownAccess) return EINVAL;
  // ibv_reg_mr(3): REMOTE_WRITE or REMOTE_ATOMIC require LOCAL_WRITE.
  if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(access & IBV_ACCESS_LOCAL_WRITE)) {
    return EINVAL;
  }
  return 0;
}

Mr::Mr(Pd* pd, void* addr, size_t length, uint64_t iova, unsigned access)
    : pd_(pd), iova_(iova), access_(access) {
  handle_.Bind(this);
  ibv_mr& m = handle_.pub;
  m.context = pd->context()->ibv();
  m.pd = pd->ibv();
  m.addr = addr;
  m.length = length;
  m.lkey = 0;
  AssignKeys();
  pd->AddUser();
}

Mr::~Mr() {
  pd_->RemoveUser();
  handle_.Unbind();
}

uint8_t* Mr::Translate(uint64_t va, uint64_t len) const {
  const ibv_mr& m = handle_.pub;
  if (va < iova_ || len > m.length || va - iova_ > m.length - len) return nullptr;
  return static_cast<uint8_t*>(m.addr) + (va - iova_);
}

Mr* Mr::Check(Device* device, uint32_t key, bool remote, const Pd* pd, uint64_t va, uint64_t len, unsigned access,
              uint32_t qp_num) {
  Mr* mr = device->FindKey(key);
  if (!mr && remote) {
    const Mw* mw = device->FindWindow(key);
    return mw ? mw->CheckLocked(pd, qp_num, va, len, access) : nullptr;
  }
  if (!mr) return nullptr;
  if ((remote ? mr->handle_.pub.rkey : mr->handle_.pub.lkey) != key) return nullptr;
  if (mr->pd_ != pd) return nullptr;
  if ((mr->access_ & access) != access) return nullptr;
  // A zero-length access touches no memory, but the address must still be in range.
  if (len == 0) return va >= mr->iova_ && va - mr->iova_ <= mr->handle_.pub.length ? mr : nullptr;
  return mr->Translate(va, len) ? mr : nullptr;
}

// Requires: engine lock (the device's key table changes).
void Mr::AssignKeys() {
  Device* dev = pd_->context()->device();
  if (handle_.pub.lkey) dev->RemoveKey(handle_.pub.lkey);
  const uint32_t index = dev->NewKeyIndex();
  handle_.pub.lkey = (index << 8) | 0x01;
  handle_.pub.rkey = handle_.pub.lkey;
  handle_.pub.handle = index;
  dev->AddKey(handle_.pub.lkey, this);
}

bool Mr::Shareable(unsigned access) {
  // Memory windows keep the copying path: only the MR's own rkey is published.
  return (access & IBV_ACCESS_REMOTE_WRITE) && Fabric::Get().attached();
}

void Mr::ShareLocked(const SharedRegions::Share* acquired) {
  const ibv_mr& m = handle_.pub;
  SharedRegions::Share share;
  if (acquired) {
    share = *acquired;
  } else if (!Shareable(access_) || !SharedRegions::Get().Acquire(Fabric::Get().object_prefix(), m.addr, m.length,
                                                                   &share)) {
    return;
  }
  PublishedKey key;
  key.object = share.object;
  key.object_size = share.object_size;
  key.object_offset = share.offset;
  key.iova = iova_;
  key.length = m.length;
  key.access = access_;
  key.pd = reinterpret_cast<uintptr_t>(pd_);
  if (!Fabric::Get().PublishKey(pd_->context()->device()->index(), m.rkey, key)) {
    SharedRegions::Get().Release(share.object);
    return;
  }
  shared_ = true;
  share_object_ = share.object;
  share_rkey_ = m.rkey;
  share_pid_ = getpid();
}

void Mr::UnshareLocked() {
  if (WithdrawLocked()) WaitUnused();
  ReleaseLocked();
}

bool Mr::WithdrawLocked() {
  if (!shared_ || share_pid_ != getpid()) return false;  // not shared, or the parent's publication
  return Fabric::Get().RevokeKey(pd_->context()->device()->index(), share_rkey_);
}

void Mr::WaitUnused() const { Fabric::Get().WaitKeyUnused(pd_->context()->device()->index(), share_rkey_); }

void Mr::ReleaseLocked() {
  if (!shared_) return;
  shared_ = false;
  if (share_pid_ != getpid()) return;  // the parent's objects
  SharedRegions::Get().Release(share_object_);
}

Result<Mr*> Mr::Register(Pd* pd, void* addr, size_t length, uint64_t iova, unsigned access) {
  if (int err = FaultPoints::Get().Hit(FaultPoint::kRegMr)) return Result<Mr*>::Error(err);
  if (int err = CheckAccess(access)) return Result<Mr*>::Error(err);
  const ibv_device_attr& attr = pd->context()->device()->profile().attr_ex.orig_attr;
  if (length > attr.max_mr_size) return Result<Mr*>::Error(EINVAL);
  if (int err = CheckMapped(addr, length)) return Result<Mr*>::Error(err);
  if (!pd->context()->device()->Reserve(Device::Kind::kMr)) return Result<Mr*>::Error(ENOMEM);
  std::lock_guard<std::mutex> lock(Engine::Get().mu());
  // Re-backed before the MR has keys, so no packet can write into the pages
  // while their content moves.
  SharedRegions::Share share;
  const bool shared = Shareable(access) && SharedRegions::Get().Acquire(Fabric::Get().object_prefix(), addr, length,
                                                                      &share);
  Mr* mr = new Mr(pd, addr, length, iova, access);
  if (shared) mr->ShareLocked(&share);
  return mr;
}

int Mr::Reregister(int flags, Pd* pd, void* addr, size_t length, unsigned access) {
  constexpr int kSupported = IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_ACCESS;
  if (flags == 0 && pd_->context()->device()->behaviour().rereg_no_flags_cmd_error) {
    // A kernel provider: libibverbs passes flags 0 on and the kernel refuses
    // it (drivers/infiniband/core/uverbs_cmd.c: ib_uverbs_rereg_mr).
    errno = EINVAL;
    return IBV_REREG_MR_ERR_CMD;
  }
  if (flags == 0 || (flags & ~kSupported)) return IBV_REREG_MR_ERR_INPUT;
  if ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) && (!addr || length == 0)) return IBV_REREG_MR_ERR_INPUT;
  if ((flags & IBV_REREG_MR_CHANGE_PD) && !pd) return IBV_REREG_MR_ERR_INPUT;
  if ((flags & IBV_REREG_MR_CHANGE_ACCESS) && CheckAccess(access)) return IBV_REREG_MR_ERR_INPUT;
  if ((flags & IBV_REREG_MR_CHANGE_PD) && pd->context() != pd_->context()) return IBV_REREG_MR_ERR_INPUT;
  if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
    if (CheckMapped(addr, length)) return IBV_REREG_MR_ERR_DONT_FORK_NEW;
  }
  // Every check passed: apply all changes together so a failure loses nothing.
  // Under the engine lock: no packet writes into the pages while a change of
  // translation moves their content.
  std::lock_guard<std::mutex> lock(Engine::Get().mu());
  UnshareLocked();
  ibv_mr& m = handle_.pub;
  if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
    m.addr = addr;
    m.length = length;
    iova_ = reinterpret_cast<uintptr_t>(addr);
  }
  if (flags & IBV_REREG_MR_CHANGE_PD) {
    pd->AddUser();
    pd_->RemoveUser();
    pd_ = pd;
    m.pd = pd->ibv();
  }
  if (flags & IBV_REREG_MR_CHANGE_ACCESS) access_ = access;
  AssignKeys();
  ShareLocked(nullptr);
  return 0;
}

int Mr::Deregister() {
  Device* dev = pd_->context()->device();
  bool wait = false;
  {
    // After this no packet can reach the memory: its keys are gone.
    std::lock_guard<std::mutex> lock(Engine::Get().mu());
    if (windows_ > 0) return EBUSY;  // a memory window is bound to it
    dev->RemoveKey(handle_.pub.lkey);
    wait = WithdrawLocked();
  }
  // A peer that was writing into it finishes first, but holds up only this
  // call: every other verb of the process goes on meanwhile.
  if (wait) WaitUnused();
  {
    // Nothing lands after this returns, from this process or a peer.
    std::lock_guard<std::mutex> lock(Engine::Get().mu());
    ReleaseLocked();
  }
  dev->Release(Device::Kind::kMr);
  delete this;
  return 0;
}

}  // namespace simverbs
