// Protection domains and memory regions.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <linux/capability.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "conformance/lib/backend_profile.h"
#include "conformance/lib/errno_capture.h"
#include "conformance/lib/skip_if.h"
#include "conformance/lib/timeouts.h"
#include "conformance/lib/verbs_handles.h"
#include "conformance/lib/verbs_matchers.h"
#include "conformance/lib/verbs_test.h"
#include "conformance/lib/watchdog.h"

namespace conformance {
namespace {

// Page-aligned memory, so the same buffer works for reg_mr and for an iova
// with the same page offset.
class PageBuffer {
 public:
  explicit PageBuffer(size_t pages)
      : size_(pages * static_cast<size_t>(sysconf(_SC_PAGESIZE))),
        data_(static_cast<char*>(std::aligned_alloc(static_cast<size_t>(sysconf(_SC_PAGESIZE)), size_))) {
    if (data_) std::memset(data_.get(), 0, size_);
  }
  char* data() const { return data_.get(); }
  size_t size() const { return size_; }

 private:
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };
  size_t size_;
  std::unique_ptr<char, Free> data_;
};

// Fresh anonymous pages mapped with `prot`, unmapped with the object.
class Mapping {
 public:
  Mapping(size_t pages, int prot) : size_(pages * static_cast<size_t>(sysconf(_SC_PAGESIZE))) {
    void* p = mmap(nullptr, size_, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    data_ = p == MAP_FAILED ? nullptr : static_cast<char*>(p);
  }
  ~Mapping() {
    if (data_) munmap(data_, size_);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  size_t size_;
  char* data_ = nullptr;
};

class PdMrTest : public VerbsTest {
 protected:
  void SetUp() override {
    VerbsTest::SetUp();
    if (HasFatalFailure()) return;
    pd_.reset(ibv_alloc_pd(context()));
    ASSERT_NE(pd_, nullptr) << "ibv_alloc_pd: " << ErrnoName(errno);
    ASSERT_NE(buffer_.data(), nullptr);
  }

  ibv_pd* pd() const { return pd_.get(); }

  PageBuffer buffer_{2};

 private:
  PdPtr pd_;
};

// The ibv_rereg_mr_err_code a backend file names.
int ReregErrCode(const std::string& name) {
  if (name == "IBV_REREG_MR_ERR_INPUT") return IBV_REREG_MR_ERR_INPUT;
  if (name == "IBV_REREG_MR_ERR_DONT_FORK_NEW") return IBV_REREG_MR_ERR_DONT_FORK_NEW;
  if (name == "IBV_REREG_MR_ERR_DO_FORK_OLD") return IBV_REREG_MR_ERR_DO_FORK_OLD;
  if (name == "IBV_REREG_MR_ERR_CMD") return IBV_REREG_MR_ERR_CMD;
  if (name == "IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW") return IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW;
  ADD_FAILURE() << "unknown ibv_rereg_mr_err_code name in the backend file: " << name;
  return 0;
}

// Rule: ibv_alloc_pd(3): "ibv_alloc_pd() returns a pointer to the allocated PD, or NULL if the
//   request fails. ibv_dealloc_pd() returns 0 on success".
// Checks: a PD is allocated for the context it was asked on and deallocating it returns 0.
TEST_F(PdMrTest, AllocPdAndDeallocSucceed) {
  auto call = CaptureErrno([&] { return ibv_alloc_pd(context()); });
  ASSERT_THAT(call, ReturnsObject());
  EXPECT_EQ(call.ptr->context, context());
  EXPECT_EQ(ibv_dealloc_pd(call.ptr.release()), 0);
}

// Rule: ibv_close_device(3) "does not release all the resources allocated using context" (the
//   program's memory for them stays its own), but the kernel destroys the objects themselves when it
//   closes the context (ib_uverbs_close: uverbs_destroy_ufile_hw): the device's limits
//   (ibv_query_device: max_pd) no longer count them.
// Checks: in a child, a second context allocates PDs until the device refuses one (within max_pd + 1)
//   and is closed with them alive; a third context then allocates a PD.
TEST_F(PdMrTest, PdsOfAClosedContextCountNoMore) {
  const int max_pd = device_attr().max_pd;
  SKIP_IF(max_pd <= 0 || max_pd > 8192) << "(max_pd " << max_pd << ": too many to fill in a test)";
  const ChildResult result = RunChecksInChild(
      [&] {
        ContextPtr filled = OpenAnotherContext();
        ASSERT_NE(filled, nullptr);
        int made = 0;
        while (made <= max_pd && ibv_alloc_pd(filled.get()) != nullptr) ++made;  // (left to the close)
        ASSERT_LE(made, max_pd) << "the device took more than max_pd PDs";
        ASSERT_EQ(ibv_close_device(filled.release()), 0);
        ContextPtr next = OpenAnotherContext();
        ASSERT_NE(next, nullptr);
        auto call = CaptureErrno([&] { return ibv_alloc_pd(next.get()); });
        EXPECT_THAT(call, ReturnsObject()) << "the " << made << " PDs of the closed context still count";
      },
      kChildTimeout, "PDs left to ibv_close_device");
  EXPECT_TRUE(Passed(result));
}

// Rule: ibv_alloc_pd(3): "ibv_dealloc_pd() may fail if any other resource is still associated
//   with the PD being freed" and returns "the value of errno on failure"; IBTA Vol 1 ch. 11
//   (Deallocate Protection Domain) fails while objects still reference the PD (EBUSY in Linux).
// Checks: dealloc with a registered MR returns EBUSY, leaves the MR registered (dereg returns 0)
//   and then succeeds.
TEST_F(PdMrTest, DeallocPdFails_MrStillRegistered) {
  SKIP_IF(!Backend().Answer("DeallocPdWithMrFails", true)) << "(the backend frees such a PD)";
  PdPtr pd(ibv_alloc_pd(context()));
  ASSERT_NE(pd, nullptr);
  ibv_mr* mr = ibv_reg_mr(pd.get(), buffer_.data(), buffer_.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr) << ErrnoName(errno);
  EXPECT_THAT(ibv_dealloc_pd(pd.get()), ReturnsErrno(EBUSY));
  EXPECT_EQ(mr->pd, pd.get());
  EXPECT_EQ(ibv_dereg_mr(mr), 0) << "the MR did not survive the failed dealloc";
  EXPECT_EQ(ibv_dealloc_pd(pd.release()), 0);
}

// Rule: ibv_reg_mr(3): "The MR's starting address is addr and its size is length ... The local
//   key (L_Key) field lkey is used as the lkey field of struct ibv_sge ... the remote key (R_Key)
//   field rkey is used by remote processes".
// Checks: addr, length, pd and context are as given, and two live MRs never share an lkey or an
//   rkey (a key must identify one region).
TEST_F(PdMrTest, RegMrReportsAddrLengthAndDistinctKeys) {
  const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
  const size_t half = buffer_.size() / 2;
  auto first = CaptureErrno([&] { return ibv_reg_mr(pd(), buffer_.data(), half, access); });
  auto second = CaptureErrno([&] { return ibv_reg_mr(pd(), buffer_.data() + half, half, access); });
  ASSERT_THAT(first, ReturnsObject());
  ASSERT_THAT(second, ReturnsObject());
  EXPECT_EQ(first.ptr->addr, buffer_.data());
  EXPECT_EQ(first.ptr->length, half);
  EXPECT_EQ(first.ptr->pd, pd());
  EXPECT_EQ(first.ptr->context, context());
  EXPECT_EQ(second.ptr->addr, buffer_.data() + half);
  EXPECT_NE(first.ptr->lkey, second.ptr->lkey);
  EXPECT_NE(first.ptr->rkey, second.ptr->rkey);
}

// Rule: ibv_reg_mr(3): "If IBV_ACCESS_REMOTE_WRITE or IBV_ACCESS_REMOTE_ATOMIC is set, then
//   IBV_ACCESS_LOCAL_WRITE must be set too."
// Checks: REMOTE_WRITE without LOCAL_WRITE returns NULL with errno EINVAL.
TEST_F(PdMrTest, RegMrFails_RemoteWriteWithoutLocalWrite) {
  EXPECT_THAT(CaptureErrno([&] { return ibv_reg_mr(pd(), buffer_.data(), buffer_.size(), IBV_ACCESS_REMOTE_WRITE); }),
              ReturnsNullWithErrno(EINVAL));
}

// Rule: ibv_reg_mr(3): "If IBV_ACCESS_REMOTE_WRITE or IBV_ACCESS_REMOTE_ATOMIC is set, then
//   IBV_ACCESS_LOCAL_WRITE must be set too."
// Checks: REMOTE_ATOMIC without LOCAL_WRITE returns NULL with errno EINVAL.
TEST_F(PdMrTest, RegMrFails_RemoteAtomicWithoutLocalWrite) {
  EXPECT_THAT(CaptureErrno([&] { return ibv_reg_mr(pd(), buffer_.data(), buffer_.size(), IBV_ACCESS_REMOTE_ATOMIC); }),
              ReturnsNullWithErrno(EINVAL));
}

// Rule: ibv_reg_mr(3): only REMOTE_WRITE and REMOTE_ATOMIC require LOCAL_WRITE; "Local read
//   access is always enabled for the MR."
// Checks: REMOTE_READ alone registers, and so does access 0 (local read only).
TEST_F(PdMrTest, RegMrSucceeds_RemoteReadOnly) {
  EXPECT_THAT(CaptureErrno([&] { return ibv_reg_mr(pd(), buffer_.data(), buffer_.size(), IBV_ACCESS_REMOTE_READ); }),
              ReturnsObject());
  EXPECT_THAT(CaptureErrno([&] { return ibv_reg_mr(pd(), buffer_.data(), buffer_.size(), 0); }), ReturnsObject());
}

// Rule: drivers/infiniband/core/umem.c ib_umem_get(): the pages of a user MR are pinned at
//   registration, with FOLL_WRITE when the access lets the HCA write (ib_access_writable: local
//   write, remote write, remote atomic, MW bind); pin_user_pages fails with EFAULT on pages mapped
//   without PROT_WRITE, and ibv_reg_mr(3) "returns ... NULL if the request fails".
// Checks: on PROT_READ pages, ibv_reg_mr with LOCAL_WRITE, with LOCAL_WRITE | REMOTE_WRITE and with
//   LOCAL_WRITE | REMOTE_ATOMIC each returns NULL with errno EFAULT; the same pages register with
//   REMOTE_READ (nothing writes there).
TEST_F(PdMrTest, RegMrFails_WritableAccessOnReadOnlyMemory) {
  Mapping pages(2, PROT_READ);
  ASSERT_NE(pages.data(), nullptr) << ErrnoName(errno);
  for (int access : {int{IBV_ACCESS_LOCAL_WRITE}, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC}) {
    SCOPED_TRACE("access " + std::to_string(access));
    EXPECT_THAT(CaptureErrno([&] { return ibv_reg_mr(pd(), pages.data(), pages.size(), access); }),
                ReturnsNullWithErrno(EFAULT));
  }
  EXPECT_THAT(CaptureErrno([&] { return ibv_reg_mr(pd(), pages.data(), pages.size(), IBV_ACCESS_REMOTE_READ); }),
              ReturnsObject());
}

// Rule: drivers/infiniband/core/umem.c ib_umem_get(): a writable registration pins with FOLL_WRITE,
//   which fails with EFAULT on pages the process may not access at all (PROT_NONE).
// Checks: ibv_reg_mr of PROT_NONE pages with LOCAL_WRITE returns NULL with errno EFAULT.
TEST_F(PdMrTest, RegMrFails_ProtNoneMemory) {
  Mapping pages(2, PROT_NONE);
  ASSERT_NE(pages.data(), nullptr) << ErrnoName(errno);
  EXPECT_THAT(CaptureErrno([&] { return ibv_reg_mr(pd(), pages.data(), pages.size(), IBV_ACCESS_LOCAL_WRITE); }),
              ReturnsNullWithErrno(EFAULT));
}

// Rule: drivers/infiniband/core/umem.c ib_umem_get() (kernel >= 6.2, "RDMA/umem: remove FOLL_FORCE
//   usage"): a read-only registration pins without FOLL_WRITE, which needs readable pages: EFAULT
//   on PROT_NONE. (6.1 still pinned read-only MRs with FOLL_WRITE | FOLL_FORCE, which takes
//   private PROT_NONE pages: the simulator, which reads the memory itself, keeps the 6.2 rule.)
// Checks: ibv_reg_mr of PROT_NONE pages with access 0 (local read only) returns NULL with errno
//   EFAULT.
TEST_F(PdMrTest, RegMrFails_ReadOnlyAccessOnProtNoneMemory) {
  SKIP_IF(!Sim()) << "(kernels before 6.2 pin private PROT_NONE pages for a read-only MR)";
  Mapping pages(2, PROT_NONE);
  ASSERT_NE(pages.data(), nullptr) << ErrnoName(errno);
  EXPECT_THAT(CaptureErrno([&] { return ibv_reg_mr(pd(), pages.data(), pages.size(), 0); }),
              ReturnsNullWithErrno(EFAULT));
}

// Rule: drivers/infiniband/core/umem.c ib_umem_get(): "npages == 0" gives EINVAL, npages being
//   the pages from the one holding addr up to the page end after addr + length
//   (ib_umem_num_pages): none for length 0 at a page boundary.
// Checks: ibv_reg_mr of length 0 at a page-aligned address returns NULL with errno EINVAL.
TEST_F(PdMrTest, RegMrFails_ZeroLength) {
  EXPECT_THAT(CaptureErrno([&] { return ibv_reg_mr(pd(), buffer_.data(), 0, IBV_ACCESS_LOCAL_WRITE); }),
              ReturnsNullWithErrno(EINVAL));
}

// Rule: drivers/infiniband/core/umem.c ib_umem_get(): "npages > UINT_MAX" gives EINVAL, before
//   any page is pinned (so even when the range is not mapped).
// Checks: ibv_reg_mr of 2^32 + 1 pages at a mapped address returns NULL with errno EINVAL.
TEST_F(PdMrTest, RegMrFails_MorePagesThanTheKernelCounts) {
  const size_t length = (size_t{UINT32_MAX} + 1) * static_cast<size_t>(sysconf(_SC_PAGESIZE));
  EXPECT_THAT(CaptureErrno([&] { return ibv_reg_mr(pd(), buffer_.data(), length, IBV_ACCESS_LOCAL_WRITE); }),
              ReturnsNullWithErrno(EINVAL));
}

// This process's effective CAP_IPC_LOCK is dropped (it may pin past RLIMIT_MEMLOCK with it).
testing::AssertionResult DropIpcLockCapability() {
  __user_cap_header_struct header = {};
  header.version = _LINUX_CAPABILITY_VERSION_3;
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (syscall(SYS_capget, &header, data) != 0) return testing::AssertionFailure() << "capget: " << ErrnoName(errno);
  data[CAP_TO_INDEX(CAP_IPC_LOCK)].effective &= ~CAP_TO_MASK(CAP_IPC_LOCK);
  if (syscall(SYS_capset, &header, data) != 0) return testing::AssertionFailure() << "capset: " << ErrnoName(errno);
  return testing::AssertionSuccess();
}

// Sets this process's soft RLIMIT_MEMLOCK to `bytes`.
testing::AssertionResult LimitLockedMemory(rlim_t bytes) {
  rlimit limit = {};
  if (getrlimit(RLIMIT_MEMLOCK, &limit) != 0) return testing::AssertionFailure() << "getrlimit: " << ErrnoName(errno);
  if (limit.rlim_max != RLIM_INFINITY && limit.rlim_max < bytes) {
    return testing::AssertionFailure() << "the hard RLIMIT_MEMLOCK " << limit.rlim_max << " is below " << bytes;
  }
  limit.rlim_cur = bytes;
  if (setrlimit(RLIMIT_MEMLOCK, &limit) != 0) return testing::AssertionFailure() << "setrlimit: " << ErrnoName(errno);
  return testing::AssertionSuccess();
}

// Rule: drivers/infiniband/core/umem.c ib_umem_get(): each registration adds its pages to the
//   process's pinned_vm, and without CAP_IPC_LOCK "new_pinned > lock_limit" (RLIMIT_MEMLOCK in
//   pages) fails with ENOMEM; the same pages registered twice count twice; ib_umem_release gives them
//   back, at ibv_dereg_mr and when ibv_close_device destroys the MRs left to it. (The error programs
//   meet until they raise `ulimit -l`.)
// Checks: in a child without CAP_IPC_LOCK and a limit of 16 pages, 16 pages register; one more page,
//   and the same 16 pages again, fail with ENOMEM; after ibv_dereg_mr 16 pages register again; after
//   ibv_close_device with that MR alive, a new context registers 16 pages.
TEST_F(PdMrTest, RegMrFails_PastTheLockedMemoryLimit) {
  const ChildResult result = RunChecksInChild(
      [&] {
        ASSERT_TRUE(DropIpcLockCapability());
        const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
        ASSERT_TRUE(LimitLockedMemory(16 * page));
        Mapping memory(17, PROT_READ | PROT_WRITE);
        ASSERT_NE(memory.data(), nullptr);
        ContextPtr context = OpenAnotherContext();
        ASSERT_NE(context, nullptr);
        ibv_pd* pd = ibv_alloc_pd(context.get());  // (left to the close)
        ASSERT_NE(pd, nullptr) << ErrnoName(errno);
        auto first = CaptureErrno([&] { return ibv_reg_mr(pd, memory.data(), 16 * page, IBV_ACCESS_LOCAL_WRITE); });
        ASSERT_THAT(first, ReturnsObject()) << "16 pages within a limit of 16";
        EXPECT_THAT(CaptureErrno([&] { return ibv_reg_mr(pd, memory.data() + 16 * page, page, 0); }),
                    ReturnsNullWithErrno(ENOMEM))
            << "a 17th page";
        EXPECT_THAT(CaptureErrno([&] { return ibv_reg_mr(pd, memory.data(), 16 * page, 0); }),
                    ReturnsNullWithErrno(ENOMEM))
            << "the same 16 pages again";
        ASSERT_EQ(ibv_dereg_mr(first.ptr.release()), 0);
        auto again = CaptureErrno([&] { return ibv_reg_mr(pd, memory.data(), 16 * page, IBV_ACCESS_LOCAL_WRITE); });
        ASSERT_THAT(again, ReturnsObject()) << "16 pages after the first 16 were deregistered";
        (void)again.ptr.release();  // (left to the close)
        ASSERT_EQ(ibv_close_device(context.release()), 0);
        ContextPtr next = OpenAnotherContext();
        ASSERT_NE(next, nullptr);
        PdPtr next_pd(ibv_alloc_pd(next.get()));
        ASSERT_NE(next_pd, nullptr) << ErrnoName(errno);
        auto after_close =
            CaptureErrno([&] { return ibv_reg_mr(next_pd.get(), memory.data(), 16 * page, IBV_ACCESS_LOCAL_WRITE); });
        EXPECT_THAT(after_close, ReturnsObject()) << "the closed context's MR still counts";
      },
      kChildTimeout, "registrations against RLIMIT_MEMLOCK");
  EXPECT_TRUE(Passed(result));
}

// Rule: drivers/infiniband/core/umem.c ib_umem_get(): "if (!can_do_mlock()) return -EPERM", and
//   can_do_mlock (mm/mlock.c) is false with RLIMIT_MEMLOCK 0 and without CAP_IPC_LOCK.
// Checks: in a child without CAP_IPC_LOCK and a limit of 0, ibv_reg_mr of one page returns NULL with
//   errno EPERM.
TEST_F(PdMrTest, RegMrFails_LockedMemoryLimitZero) {
  const ChildResult result = RunChecksInChild(
      [&] {
        ASSERT_TRUE(DropIpcLockCapability());
        ASSERT_TRUE(LimitLockedMemory(0));
        ContextPtr context = OpenAnotherContext();
        ASSERT_NE(context, nullptr);
        PdPtr pd(ibv_alloc_pd(context.get()));
        ASSERT_NE(pd, nullptr) << ErrnoName(errno);
        Mapping memory(1, PROT_READ | PROT_WRITE);
        ASSERT_NE(memory.data(), nullptr);
        EXPECT_THAT(CaptureErrno([&] { return ibv_reg_mr(pd.get(), memory.data(), memory.size(), 0); }),
                    ReturnsNullWithErrno(EPERM));
      },
      kChildTimeout, "a registration with RLIMIT_MEMLOCK 0");
  EXPECT_TRUE(Passed(result));
}

// Rule: ibv_reg_mr(3): "ibv_reg_mr_iova() is the same as the normal reg_mr, except that the user
//   is allowed to specify the virtual base address of the MR when accessed through a lkey or
//   rkey."
// Checks: ibv_reg_mr_iova2 with an iova unrelated to addr (same page offset) succeeds and reports
//   the user address and length, like ibv_reg_mr.
TEST_F(PdMrTest, RegMrIova2ReportsAddrAndLength) {
  const uint64_t iova = 0x100000000ull;  // page aligned, like the buffer
  auto call = CaptureErrno([&] {
    return ibv_reg_mr_iova2(pd(), buffer_.data(), buffer_.size(), iova,
                            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
  });
  ASSERT_THAT(call, ReturnsObject());
  EXPECT_EQ(call.ptr->addr, buffer_.data());
  EXPECT_EQ(call.ptr->length, buffer_.size());
  EXPECT_EQ(call.ptr->pd, pd());
}

// Rule: ibv_reg_mr(3): ibv_reg_mr_iova2 lets "the user ... specify the virtual base address of the MR";
//   the HCA translates whole pages, so the kernel wants that address at the same offset in its page as
//   addr (drivers/infiniband/core/uverbs_cmd.c ib_uverbs_reg_mr: EINVAL otherwise).
// Checks: ibv_reg_mr_iova2 of a page-aligned buffer with an iova 8 bytes past a page boundary returns
//   NULL with errno EINVAL; the same call with the iova page-aligned succeeds.
TEST_F(PdMrTest, RegMrIovaFails_PageOffsetDiffersFromAddr) {
  constexpr int kAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ;
  EXPECT_THAT(CaptureErrno([&] {
                return ibv_reg_mr_iova2(pd(), buffer_.data(), buffer_.size(), 0x100000008ull, kAccess);
              }),
              ReturnsNullWithErrno(EINVAL));
  EXPECT_THAT(CaptureErrno([&] {
                return ibv_reg_mr_iova2(pd(), buffer_.data(), buffer_.size(), 0x100000000ull, kAccess);
              }),
              ReturnsObject());
}

// Rule: ibv_reg_mr(3): IBV_ACCESS_ON_DEMAND "Create an on-demand paging MR", which needs the device's
//   ODP support (ibv_query_device_ex(3): odp_caps.general_caps IBV_ODP_SUPPORT); the kernel refuses it
//   otherwise with EOPNOTSUPP (include/rdma/ib_verbs.h ib_check_mr_access, Linux 6.0 and later).
// Checks: on a device whose odp_caps.general_caps lacks IBV_ODP_SUPPORT, ibv_reg_mr with
//   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND returns NULL with errno EOPNOTSUPP.
TEST_F(PdMrTest, RegMrFails_OnDemandWithoutOdpSupport) {
  ibv_device_attr_ex attr = {};
  ASSERT_EQ(ibv_query_device_ex(context(), nullptr, &attr), 0);
  SKIP_IF(attr.odp_caps.general_caps & IBV_ODP_SUPPORT) << "(the device supports on-demand paging)";
  EXPECT_THAT(CaptureErrno([&] {
                return ibv_reg_mr(pd(), buffer_.data(), buffer_.size(),
                                  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND);
              }),
              ReturnsNullWithErrno(EOPNOTSUPP));
}

// Rule: ibv_rereg_mr(3): "IBV_REREG_MR_CHANGE_ACCESS Change access flags ... ibv_rereg_mr()
//   returns 0 on success".
// Checks: changing LOCAL_WRITE to LOCAL_WRITE|REMOTE_READ returns 0, keeps addr and length, and
//   the MR still deregisters.
TEST_F(PdMrTest, ReregMrChangeAccessSucceeds) {
  SKIP_IF(!Backend().Answer("ReregMrSupported", true)) << "(the provider has no rereg_mr)";
  ibv_mr* mr = ibv_reg_mr(pd(), buffer_.data(), buffer_.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr) << ErrnoName(errno);
  EXPECT_EQ(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0,
                         IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ),
            0);
  EXPECT_EQ(mr->addr, buffer_.data());
  EXPECT_EQ(mr->length, buffer_.size());
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
}

// Rule: ibv_rereg_mr(3): "flags is a bit-mask used to indicate which of the following properties
//   of the memory region are being modified ... returns 0 on success, otherwise an error has
//   occurred, enum ibv_rereg_mr_err_code represents the error"; "Even on a failure, the user
//   still needs to call ibv_dereg_mr on this MR."
//   libibverbs does not look at flags 0 (verbs.c: ibv_rereg_mr) and passes the call on; the kernel
//   refuses it (uverbs_cmd.c: ib_uverbs_rereg_mr, EINVAL), which libibverbs reports as
//   IBV_REREG_MR_ERR_CMD.
// Checks: flags 0 (nothing to modify) fails with the error code the backend answers for
//   ReregMrNoFlagsResult (default IBV_REREG_MR_ERR_CMD: the kernel's refusal), and the MR can
//   still be deregistered.
TEST_F(PdMrTest, ReregMrFails_NoFlags) {
  ibv_mr* mr = ibv_reg_mr(pd(), buffer_.data(), buffer_.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr) << ErrnoName(errno);
  const int expected = ReregErrCode(Backend().Answer("ReregMrNoFlagsResult", "IBV_REREG_MR_ERR_CMD"));
  EXPECT_EQ(ibv_rereg_mr(mr, 0, nullptr, nullptr, 0, 0), expected);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
}

// Rule: ibv_rereg_mr(3): "IBV_REREG_MR_ERR_INPUT - Old MR is valid, an input error was detected by
//   libibverbs"; "IBV_REREG_MR_ERR_CMD - MR shouldn't be used, command error". libibverbs checks
//   only the flags, the translation's addr and length and access without CHANGE_ACCESS
//   (libibverbs/verbs.c ibv_rereg_mr); the access flags themselves are checked by the kernel
//   (drivers/infiniband/core/uverbs_cmd.c ib_uverbs_rereg_mr → ib_check_mr_access: EINVAL for
//   REMOTE_WRITE without LOCAL_WRITE), whose failure libibverbs reports as IBV_REREG_MR_ERR_CMD.
// Checks: CHANGE_ACCESS to REMOTE_WRITE without LOCAL_WRITE returns IBV_REREG_MR_ERR_CMD with errno
//   EINVAL, and the MR can still be deregistered.
TEST_F(PdMrTest, ReregMrFails_AccessTheKernelRefuses) {
  SKIP_IF(!Backend().Answer("ReregMrSupported", true)) << "(the provider has no rereg_mr)";
  ibv_mr* mr = ibv_reg_mr(pd(), buffer_.data(), buffer_.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr) << ErrnoName(errno);
  auto call = CaptureErrno(
      [&] { return ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0, IBV_ACCESS_REMOTE_WRITE); });
  EXPECT_EQ(call.rc, IBV_REREG_MR_ERR_CMD);
  EXPECT_EQ(call.err, EINVAL) << ErrnoName(call.err);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
}

// Rule: ibv_rereg_mr(3): "IBV_REREG_MR_ERR_CMD - MR shouldn't be used, command error". A provider
//   without rereg_mr gets libibverbs' stand-in (libibverbs/dummy_ops.c rereg_mr: EOPNOTSUPP),
//   whose failure ibv_rereg_mr reports as IBV_REREG_MR_ERR_CMD (libibverbs/verbs.c).
// Checks: (a backend whose provider has no rereg_mr) a CHANGE_ACCESS that libibverbs accepts returns
//   IBV_REREG_MR_ERR_CMD with errno EOPNOTSUPP, and the MR can still be deregistered.
TEST_F(PdMrTest, ReregMrFails_WhereTheProviderHasNone) {
  SKIP_IF(Backend().Answer("ReregMrSupported", true)) << "(the provider has rereg_mr)";
  ibv_mr* mr = ibv_reg_mr(pd(), buffer_.data(), buffer_.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr) << ErrnoName(errno);
  auto call = CaptureErrno([&] {
    return ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0,
                        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
  });
  EXPECT_EQ(call.rc, IBV_REREG_MR_ERR_CMD);
  EXPECT_EQ(call.err, EOPNOTSUPP) << ErrnoName(call.err);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
}

// Rule: ibv_rereg_mr(3): "When IBV_REREG_MR_CHANGE_TRANSLATION is used, addr. represents the
//   virtual address (user-space pointer) of the new MR, while length represents its length";
//   "IBV_REREG_MR_ERR_INPUT - Old MR is valid, an input error was detected by libibverbs" (which
//   sets errno to EINVAL: rdma-core libibverbs/verbs.c ibv_rereg_mr).
// Checks: CHANGE_TRANSLATION with length 0 returns IBV_REREG_MR_ERR_INPUT with errno EINVAL and
//   leaves the old MR as it was (addr, length) and deregistrable.
TEST_F(PdMrTest, ReregMrFails_TranslationWithZeroLength) {
  ibv_mr* mr = ibv_reg_mr(pd(), buffer_.data(), buffer_.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr) << ErrnoName(errno);
  errno = 0;
  EXPECT_EQ(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, buffer_.data(), 0, 0), IBV_REREG_MR_ERR_INPUT);
  EXPECT_EQ(errno, EINVAL) << ErrnoName(errno);
  EXPECT_EQ(mr->addr, buffer_.data());
  EXPECT_EQ(mr->length, buffer_.size());
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
}

// Rule: ibv_rereg_mr(3): "IBV_REREG_MR_ERR_CMD - MR shouldn't be used, command error" (libibverbs
//   returns it when the provider's command fails, errno says why); the kernel pins the new range
//   as a registration does (drivers/infiniband/core/umem.c ib_umem_get: EFAULT for a writable
//   access on PROT_READ pages).
// Checks: CHANGE_TRANSLATION of a LOCAL_WRITE MR onto PROT_READ pages returns IBV_REREG_MR_ERR_CMD
//   with errno EFAULT, and the MR can still be deregistered.
TEST_F(PdMrTest, ReregMrFails_TranslationToReadOnlyMemory) {
  SKIP_IF(!Backend().Answer("ReregMrSupported", true)) << "(the provider has no rereg_mr)";
  Mapping pages(2, PROT_READ);
  ASSERT_NE(pages.data(), nullptr) << ErrnoName(errno);
  ibv_mr* mr = ibv_reg_mr(pd(), buffer_.data(), buffer_.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr) << ErrnoName(errno);
  auto call = CaptureErrno([&] {
    return ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, pages.data(), pages.size(), 0);
  });
  EXPECT_EQ(call.rc, IBV_REREG_MR_ERR_CMD);
  EXPECT_EQ(call.err, EFAULT) << ErrnoName(call.err);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
}

// Rule: ibv_rereg_mr(3): CHANGE_TRANSLATION is as a deregistration and a registration; the kernel
//   pins the new range (drivers/infiniband/core/umem.c ib_umem_get, counted against RLIMIT_MEMLOCK
//   without CAP_IPC_LOCK: ENOMEM) before it releases the old one (mlx5_ib_rereg_user_mr).
// Checks: in a child without CAP_IPC_LOCK and a limit of 16 pages, an MR of 8 pages moved onto 16
//   other pages fails with IBV_REREG_MR_ERR_CMD and errno ENOMEM; moved onto 8 other pages it
//   succeeds; 8 more pages then register (the first 8 no longer count).
TEST_F(PdMrTest, ReregMrFails_TranslationPastTheLockedMemoryLimit) {
  SKIP_IF(!Backend().Answer("ReregMrSupported", true)) << "(the provider has no rereg_mr)";
  const ChildResult result = RunChecksInChild(
      [&] {
        ASSERT_TRUE(DropIpcLockCapability());
        const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
        ASSERT_TRUE(LimitLockedMemory(16 * page));
        Mapping memory(32, PROT_READ | PROT_WRITE);
        ASSERT_NE(memory.data(), nullptr);
        ContextPtr context = OpenAnotherContext();
        ASSERT_NE(context, nullptr);
        PdPtr pd(ibv_alloc_pd(context.get()));
        ASSERT_NE(pd, nullptr) << ErrnoName(errno);
        MrPtr mr(ibv_reg_mr(pd.get(), memory.data(), 8 * page, IBV_ACCESS_LOCAL_WRITE));
        ASSERT_NE(mr, nullptr) << ErrnoName(errno);
        auto too_many = CaptureErrno([&] {
          return ibv_rereg_mr(mr.get(), IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, memory.data() + 16 * page,
                              16 * page, 0);
        });
        EXPECT_EQ(too_many.rc, IBV_REREG_MR_ERR_CMD) << "8 pinned pages moved onto 16 with a limit of 16";
        EXPECT_EQ(too_many.err, ENOMEM) << ErrnoName(too_many.err);
        auto fits = CaptureErrno([&] {
          return ibv_rereg_mr(mr.get(), IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, memory.data() + 8 * page, 8 * page,
                              0);
        });
        ASSERT_EQ(fits.rc, 0) << ErrnoName(fits.err);
        auto more = CaptureErrno([&] { return ibv_reg_mr(pd.get(), memory.data(), 8 * page, IBV_ACCESS_LOCAL_WRITE); });
        EXPECT_THAT(more, ReturnsObject()) << "the pages the MR moved away from still count";
      },
      kChildTimeout, "ibv_rereg_mr against RLIMIT_MEMLOCK");
  EXPECT_TRUE(Passed(result));
}

// Rule: ibv_rereg_mr(3): IBV_REREG_MR_CHANGE_ACCESS changes the access flags; the simulator holds
//   the MR's memory to what a registration with the new access could pin (ib_umem_get: writable
//   access needs writable pages). Providers that change the access in place (mlx5's UMR path
//   keeps the old pin) may accept it, so this is the simulator's rule.
// Checks: a read-only MR on PROT_READ pages cannot be given LOCAL_WRITE: IBV_REREG_MR_ERR_CMD with
//   errno EFAULT; the MR can still be deregistered.
TEST_F(PdMrTest, ReregMrFails_WritableAccessOnReadOnlyMemory) {
  SKIP_IF(!Sim()) << "(providers may change the access of the pinned pages in place)";
  SKIP_IF(!Backend().Answer("ReregMrSupported", true)) << "(the provider has no rereg_mr)";
  Mapping pages(2, PROT_READ);
  ASSERT_NE(pages.data(), nullptr) << ErrnoName(errno);
  ibv_mr* mr = ibv_reg_mr(pd(), pages.data(), pages.size(), 0);
  ASSERT_NE(mr, nullptr) << ErrnoName(errno);
  auto call = CaptureErrno([&] {
    return ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0, IBV_ACCESS_LOCAL_WRITE);
  });
  EXPECT_EQ(call.rc, IBV_REREG_MR_ERR_CMD);
  EXPECT_EQ(call.err, EFAULT) << ErrnoName(call.err);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
}

// Rule: ibv_rereg_mr(3): "IBV_REREG_MR_ERR_INPUT - Old MR is valid, an input error was detected by
//   libibverbs"; libibverbs (verbs.c) refuses access flags given without IBV_REREG_MR_CHANGE_ACCESS.
// Checks: IBV_REREG_MR_CHANGE_TRANSLATION with access IBV_ACCESS_LOCAL_WRITE returns
//   IBV_REREG_MR_ERR_INPUT and leaves the MR as it was (addr, length) and deregistrable.
TEST_F(PdMrTest, ReregMrFails_AccessWithoutChangeAccess) {
  ibv_mr* mr = ibv_reg_mr(pd(), buffer_.data(), buffer_.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr) << ErrnoName(errno);
  const size_t half = buffer_.size() / 2;
  EXPECT_EQ(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, buffer_.data(), half, IBV_ACCESS_LOCAL_WRITE),
            IBV_REREG_MR_ERR_INPUT);
  EXPECT_EQ(mr->addr, buffer_.data());
  EXPECT_EQ(mr->length, buffer_.size());
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
}

// Rule: ibv_reg_mr(3): "ibv_dereg_mr() returns 0 on success, or the value of errno on failure".
// Checks: deregistering a fresh MR returns 0, after which its PD has no MR left and deallocates.
TEST_F(PdMrTest, DeregMrSucceeds) {
  PdPtr pd(ibv_alloc_pd(context()));
  ASSERT_NE(pd, nullptr);
  ibv_mr* mr = ibv_reg_mr(pd.get(), buffer_.data(), buffer_.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr) << ErrnoName(errno);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd.release()), 0);
}

// Rule: ibv_reg_mr(3) registers memory for the device's access; the kernel pins the pages where they
//   are (drivers/infiniband/core/umem.c: ib_umem_get pins with pin_user_pages_fast) and neither
//   moves nor copies them, so registering never changes what the program's own loads and stores see.
// Checks: one thread increments a counter in page-aligned anonymous memory while another registers
//   and deregisters REMOTE_WRITE MRs over those pages; every increment is still there at the end.
TEST_F(PdMrTest, RegistrationLosesNoConcurrentStore) {
  const size_t size = 4 * static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* pages = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(pages, MAP_FAILED) << ErrnoName(errno);
  volatile uint64_t* counter = static_cast<volatile uint64_t*>(pages) + 100;
  std::atomic<bool> stop{false};
  uint64_t increments = 0;
  std::thread writer([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      *counter = *counter + 1;  // the only thread that stores there
      ++increments;
    }
  });
  int registrations = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
  while (std::chrono::steady_clock::now() < until && registrations < 2000) {
    ibv_mr* mr = ibv_reg_mr(pd(), pages, size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (!mr) {
      ADD_FAILURE() << "ibv_reg_mr: " << ErrnoName(errno);
      break;
    }
    ASSERT_EQ(ibv_dereg_mr(mr), 0);
    ++registrations;
  }
  stop = true;
  writer.join();
  EXPECT_GT(registrations, 0);
  EXPECT_EQ(*counter, increments) << increments - *counter << " of " << increments << " stores lost over "
                                  << registrations << " registrations";
  munmap(pages, size);
}

}  // namespace
}  // namespace conformance
