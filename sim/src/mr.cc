#include "mr.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>

#include "context.h"
#include "device.h"
#include "fabric/fabric.h"
#include "mw.h"
#include "pd.h"
#include "transport/engine.h"
#include "fault/fault_points.h"
#include "fork_generation.h"
#include "pinned_pages.h"

namespace simverbs {
namespace {

constexpr unsigned kKnownAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                  IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND | IBV_ACCESS_ZERO_BASED |
                                  IBV_ACCESS_ON_DEMAND | IBV_ACCESS_HUGETLB | IBV_ACCESS_RELAXED_ORDERING |
                                  IBV_ACCESS_OPTIONAL_RANGE;

// Access that lets the HCA write into the pages: the kernel pins those with
// FOLL_WRITE (include/rdma/ib_verbs.h: ib_access_writable).
constexpr unsigned kWritableAccess =
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND;

// Whether the mappings of /proc/self/maps cover [start, end) without a gap,
// readable, and writable too when `writable`. The file is read once and
// parsed as it streams (no allocation); the memory itself is never touched.
// -1: the file cannot be read.
int ReadMapsCover(uintptr_t start, uintptr_t end, bool writable) {
  const int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[4096];
  size_t have = 0;
  uintptr_t covered = start;  // [start, covered) is mapped as needed
  int result = EFAULT;        // the file ended before `end` was covered
  bool done = false;
  while (!done) {
    const ssize_t n = read(fd, buf + have, sizeof buf - have);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    have += static_cast<size_t>(n);
    size_t line = 0;
    for (size_t i = 0; i < have && !done; ++i) {
      if (buf[i] != '\n') continue;
      // "start-end perms offset dev inode path", addresses in hex.
      char* p = buf + line;
      buf[i] = '\0';
      line = i + 1;
      char* dash = nullptr;
      const uintptr_t lo = std::strtoull(p, &dash, 16);
      if (*dash != '-') continue;
      char* space = nullptr;
      const uintptr_t hi = std::strtoull(dash + 1, &space, 16);
      if (*space != ' ' || hi <= covered) continue;
      if (lo > covered || space[1] != 'r' || (writable && space[2] != 'w')) {
        result = EFAULT;  // a hole, or pages the kernel could not pin this way
        done = true;
      } else {
        covered = hi;
        if (covered >= end) {
          result = 0;
          done = true;
        }
      }
    }
    // Keep the partial last line; a line longer than the buffer (a very long
    // path) is cut, which loses nothing: only its first fields matter.
    if (line == 0 && have == sizeof buf) line = have;
    std::memmove(buf, buf + line, have - line);
    have -= line;
  }
  close(fd);
  return result;
}

// The pages themselves (after PinRange's checks of the range): every page
// must be mapped, and writable for a writable access. Read-only access in 6.1
// pins with FOLL_WRITE | FOLL_FORCE, which takes private PROT_NONE pages too;
// 6.2 dropped FOLL_FORCE ("RDMA/umem: remove FOLL_FORCE usage"), so those fail
// with EFAULT as well. The simulator reads and writes the memory itself, so
// it takes the 6.2 rule: every page must be readable, and writable for a
// writable access (a later receive into PROT_READ memory would fault).
int CheckMapped(const void* addr, size_t length, unsigned access) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(addr);
  const uintptr_t first = begin & ~(page - 1);
  const uintptr_t last = (begin + length + page - 1) & ~(page - 1);
  const int cover = ReadMapsCover(first, last, access & kWritableAccess);
  if (cover >= 0) return cover;
  // No /proc: at least refuse holes (msync reports them as ENOMEM without
  // touching the pages).
  return msync(reinterpret_cast<void*>(first), last - first, MS_ASYNC) == 0 ? 0 : EFAULT;
}

// The kernel pins an MR's pages when it is registered, in
// drivers/infiniband/core/umem.c: ib_umem_get (6.1), in this order:
// - EINVAL when addr + length overflows;
// - EPERM when the process may pin nothing (PinnedPages::MayPin);
// - EINVAL when the range touches no page or more than UINT_MAX pages
//   (npages == ib_umem_num_pages(), counted from the page of addr to the page
//   end after addr + length: 0 only for a zero length at a page boundary);
// - ENOMEM past RLIMIT_MEMLOCK (PinnedPages::Pin);
// - pin_user_pages_fast() with FOLL_WRITE when the access is writable
//   (ib_access_writable), which fails with EFAULT on pages mapped without
//   PROT_WRITE, and on holes (CheckMapped).
// On success *pages is what was counted: PinnedPages::Unpin gives it back.
int PinRange(const void* addr, size_t length, unsigned access, uint64_t* pages) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(addr);
  const uintptr_t end = begin + length;
  if (end < begin || ((end + page - 1) & ~(page - 1)) < end) return EINVAL;
  if (int err = PinnedPages::MayPin()) return err;
  const uint64_t count = (((end + page - 1) & ~(page - 1)) - (begin & ~(page - 1))) / page;
  if (count == 0 || count > UINT32_MAX) return EINVAL;
  if (int err = PinnedPages::Pin(count)) return err;
  if (int err = CheckMapped(addr, length, access)) {
    PinnedPages::Unpin(count, ForkGeneration());
    return err;
  }
  *pages = count;
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

int Mr::CheckOnDemand(const Device* dev, unsigned access) {
  // include/rdma/ib_verbs.h: ib_check_mr_access, EOPNOTSUPP since 6.0 on a
  // device without on-demand paging.
  const bool odp = dev->profile().attr_ex.odp_caps.general_caps & IBV_ODP_SUPPORT;
  return (access & IBV_ACCESS_ON_DEMAND) && !odp ? EOPNOTSUPP : 0;
}

uint64_t Mr::NextSerial() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

Mr::Mr(Pd* pd, void* addr, size_t length, uint64_t iova, unsigned access, uint32_t key_index)
    : pd_(pd), iova_(iova), access_(access) {
  handle_.Bind(this);
  ibv_mr& m = handle_.pub;
  m.context = pd->context()->ibv();
  m.pd = pd->ibv();
  m.addr = addr;
  m.length = length;
  m.lkey = 0;
  AssignKeys(key_index);
  pd->AddUser();
}

Mr::~Mr() {
  pd_->RemoveUser();
  handle_.Unbind();
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

void Mr::AssignKeys(uint32_t index) {
  Device* dev = pd_->context()->device();
  handle_.pub.lkey = (index << 8) | 0x01;
  handle_.pub.rkey = handle_.pub.lkey;
  handle_.pub.handle = index;
  dev->AddKey(handle_.pub.lkey, this);
}

bool Mr::Shareable(unsigned access) {
  // Memory windows keep the copying path: only the MR's own rkey is published.
  return (access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)) && Fabric::Get().attached();
}

SharedFile Mr::FileFor(const void* addr, size_t length, unsigned access) {
  return Shareable(access) ? HoldSharedFile(addr, length) : SharedFile{};
}

void Mr::ShareLocked(const SharedFile& file) {
  const ibv_mr& m = handle_.pub;
  PublishedKey key;
  key.addr = reinterpret_cast<uintptr_t>(m.addr);
  key.iova = iova_;
  key.length = m.length;
  key.access = access_;
  key.pd = reinterpret_cast<uintptr_t>(pd_);
  key.file_fd = file.fd;
  key.file_dev = file.dev;
  key.file_ino = file.ino;
  key.file_offset = file.offset;
  if (!Shareable(access_) || !Fabric::Get().PublishKey(pd_->context()->device()->index(), m.rkey, key)) {
    ReleaseSharedFile(file);
    return;
  }
  shared_ = true;
  share_rkey_ = m.rkey;
  share_pid_ = getpid();
  file_ = file;
}

void Mr::UnshareLocked() {
  if (WithdrawLocked()) WaitUnused();
  ReleaseFile();
}

void Mr::ReleaseFile() {
  ReleaseSharedFile(file_);
  file_ = SharedFile{};
}

bool Mr::WithdrawLocked() {
  if (!shared_) return false;
  shared_ = false;
  if (share_pid_ != getpid()) return false;  // the parent's publication
  return Fabric::Get().RevokeKey(pd_->context()->device()->index(), share_rkey_);
}

void Mr::WaitUnused() const { Fabric::Get().WaitKeyUnused(pd_->context()->device()->index(), share_rkey_); }

Result<Mr*> Mr::Register(Pd* pd, void* addr, size_t length, uint64_t iova, unsigned access) {
  if (int err = FaultPoints::Get().Hit(FaultPoint::kRegMr)) return Result<Mr*>::Error(err);
  if (int err = CheckAccess(access)) return Result<Mr*>::Error(err);
  if (int err = CheckOnDemand(pd->context()->device(), access)) return Result<Mr*>::Error(err);
  const ibv_device_attr& attr = pd->context()->device()->profile().attr_ex.orig_attr;
  if (length > attr.max_mr_size) return Result<Mr*>::Error(EINVAL);
  // The HCA maps pages: the iova must sit at addr's offset in its page
  // (drivers/infiniband/core/uverbs_cmd.c: ib_uverbs_reg_mr, EINVAL).
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  if (((reinterpret_cast<uintptr_t>(addr) ^ iova) & (page - 1)) != 0) return Result<Mr*>::Error(EINVAL);
  uint64_t pages = 0;
  if (int err = PinRange(addr, length, access, &pages)) return Result<Mr*>::Error(err);
  Device* dev = pd->context()->device();
  if (!pd->context()->ReserveObject(Device::Kind::kMr)) {
    PinnedPages::Unpin(pages, ForkGeneration());
    return Result<Mr*>::Error(ENOMEM);
  }
  const SharedFile file = FileFor(addr, length, access);
  std::lock_guard<DataPathMutex> lock(Engine::Get().mu());
  const uint32_t key_index = dev->NewKeyIndex();
  if (key_index == 0) {
    ReleaseSharedFile(file);
    pd->context()->ReleaseObject(Device::Kind::kMr);
    PinnedPages::Unpin(pages, ForkGeneration());
    return Result<Mr*>::Error(ENOMEM);
  }
  Mr* mr = nullptr;
  try {
    mr = new Mr(pd, addr, length, iova, access, key_index);
  } catch (const std::bad_alloc&) {
    ReleaseSharedFile(file);
    dev->ReleaseKeyIndex(key_index);
    pd->context()->ReleaseObject(Device::Kind::kMr);
    PinnedPages::Unpin(pages, ForkGeneration());
    return Result<Mr*>::Error(ENOMEM);
  }
  mr->SetPinnedPages(pages);
  mr->ShareLocked(file);
  return mr;
}

int Mr::Reregister(int flags, Pd* pd, void* addr, size_t length, unsigned access) {
  constexpr int kSupported = IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_ACCESS;
  // libibverbs' own checks come first, in its order (verbs.c: ibv_rereg_mr).
  if (flags & ~kSupported) return IBV_REREG_MR_ERR_INPUT;
  if ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) && (!addr || length == 0)) return IBV_REREG_MR_ERR_INPUT;
  if (access && !(flags & IBV_REREG_MR_CHANGE_ACCESS)) return IBV_REREG_MR_ERR_INPUT;
  if (!pd_->context()->device()->behaviour().rereg_mr_supported) {
    errno = EOPNOTSUPP;  // libibverbs' stand-in for a provider without rereg_mr (dummy_ops.c)
    return IBV_REREG_MR_ERR_CMD;
  }
  if (flags == 0 && pd_->context()->device()->behaviour().rereg_no_flags_cmd_error) {
    // A kernel provider: libibverbs passes flags 0 on and the kernel refuses
    // it (drivers/infiniband/core/uverbs_cmd.c: ib_uverbs_rereg_mr).
    errno = EINVAL;
    return IBV_REREG_MR_ERR_CMD;
  }
  if (flags == 0) return IBV_REREG_MR_ERR_INPUT;
  if (pd_->context()->fatal()) {
    errno = EIO;  // a command to the dead firmware (fault/device_fatal.h)
    return IBV_REREG_MR_ERR_CMD;
  }
  if ((flags & IBV_REREG_MR_CHANGE_PD) && !pd) return IBV_REREG_MR_ERR_INPUT;
  // The kernel checks the access and the PD (ib_uverbs_rereg_mr): a failed command.
  if (((flags & IBV_REREG_MR_CHANGE_ACCESS) && CheckAccess(access)) ||
      ((flags & IBV_REREG_MR_CHANGE_PD) && pd->context() != pd_->context())) {
    errno = EINVAL;
    return IBV_REREG_MR_ERR_CMD;
  }
  if (flags & IBV_REREG_MR_CHANGE_ACCESS) {
    if (int err = CheckOnDemand(pd_->context()->device(), access)) {
      errno = err;  // the kernel's answer (ib_uverbs_rereg_mr checks the access as registration does)
      return IBV_REREG_MR_ERR_CMD;
    }
  }
  // The new range, or the old one under a new access, must be usable as a
  // registration is: the kernel's ib_umem_get fails, and libibverbs reports
  // a failed command with its errno. A new range is pinned (and counted)
  // before the old one is let go.
  const bool moves = flags & IBV_REREG_MR_CHANGE_TRANSLATION;
  const unsigned new_access = (flags & IBV_REREG_MR_CHANGE_ACCESS) ? access : access_;
  uint64_t new_pages = 0;
  if (flags & (IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_ACCESS)) {
    if (int err = moves ? PinRange(addr, length, new_access, &new_pages)
                        : CheckMapped(handle_.pub.addr, handle_.pub.length, new_access)) {
      errno = err;
      return IBV_REREG_MR_ERR_CMD;
    }
  }
  // Every check passed: apply all changes together so a failure loses nothing.
  // Under the engine lock: no packet writes into the pages while a change of
  // translation moves their content. The keys stay, as rxe and mlx5 keep them
  // (rxe_rereg_user_mr; mlx5: "Original memory keys are kept if possible"), so
  // a peer that was given the rkey goes on using it; a one-copy writer sees
  // the key withdrawn, waited for, and published again with the new range.
  const SharedFile file = FileFor(moves ? addr : handle_.pub.addr, moves ? length : handle_.pub.length, new_access);
  std::lock_guard<DataPathMutex> lock(Engine::Get().mu());
  // A window bound to it would keep the old view of it (ibv_rereg_mr(3): as
  // a deregistration and a registration, and ibv_dereg_mr refuses with a
  // window bound).
  if (windows_ > 0) {
    ReleaseSharedFile(file);
    PinnedPages::Unpin(new_pages, ForkGeneration());
    errno = EBUSY;
    return IBV_REREG_MR_ERR_CMD;
  }
  UnshareLocked();
  ibv_mr& m = handle_.pub;
  if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
    m.addr = addr;
    m.length = length;
    iova_ = reinterpret_cast<uintptr_t>(addr);
    UnpinPages();
    SetPinnedPages(new_pages);
  }
  if (flags & IBV_REREG_MR_CHANGE_PD) {
    pd->AddUser();
    pd_->RemoveUser();
    pd_ = pd;
    m.pd = pd->ibv();
  }
  if (flags & IBV_REREG_MR_CHANGE_ACCESS) access_ = access;
  ShareLocked(file);
  return 0;
}

void Mr::SetPinnedPages(uint64_t pages) {
  pinned_pages_ = pages;
  pinned_generation_ = ForkGeneration();
  pd_->context()->CountPinnedPages(static_cast<int64_t>(pages));
}

void Mr::UnpinPages() {
  PinnedPages::Unpin(pinned_pages_, pinned_generation_);
  pd_->context()->CountPinnedPages(-static_cast<int64_t>(pinned_pages_));
  pinned_pages_ = 0;
}

int Mr::Deregister() {
  Context* ctx = pd_->context();
  Device* dev = ctx->device();
  bool wait = false;
  {
    // After this no packet can reach the memory: its keys are gone.
    std::lock_guard<DataPathMutex> lock(Engine::Get().mu());
    if (windows_ > 0) return EBUSY;  // a memory window is bound to it
    dev->RemoveKey(handle_.pub.lkey);
    dev->ReleaseKeyIndex(handle_.pub.lkey >> 8);
    wait = WithdrawLocked();
  }
  // A peer that was writing into it finishes first (nothing lands after this
  // returns), but holds up only this call: every other verb of the process
  // goes on meanwhile.
  if (wait) WaitUnused();
  ReleaseFile();
  UnpinPages();
  ctx->ReleaseObject(Device::Kind::kMr);
  delete this;
  return 0;
}

}  // namespace simverbs
