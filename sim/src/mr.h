#pragma once

// A memory region. Registration checks the access rules of ibv_reg_mr(3) and
// that the range is mapped; later the transport validates every remote access
// against lkey/rkey, bounds, access flags and PD here.

#include <infiniband/verbs.h>

#include <cstdint>

#include "fabric/shared_file.h"
#include "handle.h"
#include "result.h"

namespace simverbs {

class Device;
class Pd;

class Mr {
 public:
  static constexpr uint64_t kMagic = 0x53494d4d52000001;  // "SIMMR"

  static Result<Mr*> Register(Pd* pd, void* addr, size_t length, uint64_t iova, unsigned access);
  // ibv_rereg_mr: returns 0 or a negative IBV_REREG_MR_ERR_* / errno as the man page says.
  int Reregister(int flags, Pd* pd, void* addr, size_t length, unsigned access);
  int Deregister();

  static Mr* From(const ibv_mr* mr) { return Handle<ibv_mr, Mr>::From(mr); }
  ibv_mr* ibv() { return &handle_.pub; }

  Pd* pd() const { return pd_; }
  uint64_t iova() const { return iova_; }
  unsigned access() const { return access_; }

  // The bytes behind [va, va + len) of this MR's address space (iova), or
  // nullptr if the range is not inside the region. (Inline: on every
  // message's path, and the link-time optimiser does not always inline it.)
  uint8_t* Translate(uint64_t va, uint64_t len) const {
    const ibv_mr& m = handle_.pub;
    if (va < iova_ || len > m.length || va - iova_ > m.length - len) return nullptr;
    return static_cast<uint8_t*>(m.addr) + (va - iova_);
  }

  // Looks up a key for the transport: the MR if `key` names one of `device`
  // in `pd` whose range holds [va, va + len) and which allows `access`
  // (IBV_ACCESS_* bits; 0 for local read). Requires: engine lock.
  // A remote key may also name a memory window (checked against `qp_num`
  // for type 2 windows).
  static Mr* Check(Device* device, uint32_t key, bool remote, const Pd* pd, uint64_t va, uint64_t len,
                   unsigned access, uint32_t qp_num = 0);

  // Memory windows bound to this MR: deregistration fails with EBUSY while
  // any is. Requires: engine lock.
  uint64_t serial() const { return serial_; }
  void AddWindow() { ++windows_; }
  void RemoveWindow() { --windows_; }

  // Checks the access flags by themselves (EINVAL rules of ibv_reg_mr(3)).
  static int CheckAccess(unsigned access);
  // EOPNOTSUPP for IBV_ACCESS_ON_DEMAND on a device without on-demand paging.
  static int CheckOnDemand(const Device* dev, unsigned access);

 private:
  Mr(Pd* pd, void* addr, size_t length, uint64_t iova, unsigned access, uint32_t key_index);
  ~Mr();
  // Gives the MR the keys of `key_index` (from Device::NewKeyIndex); they
  // stay for its life, ibv_rereg_mr included. Requires: engine lock.
  void AssignKeys(uint32_t key_index);
  // Peers may write into this MR directly (fabric/fabric.h): publishes its
  // rkey, and `file` (from FileFor: the MR keeps it, or gives it back when it
  // is not published). Neither the memory's content nor its mappings change.
  // Requires: engine lock.
  void ShareLocked(const SharedFile& file);
  // The file a peer may map to write into [addr, addr + length) registered
  // with `access` (fabric/shared_file.h), held; fd -1 for none. Reads
  // /proc/self/maps: called before the engine lock is taken.
  static SharedFile FileFor(const void* addr, size_t length, unsigned access);
  // Withdraws that: returns once no peer writes into it any more (or one has
  // been at it too long: Fabric::WaitKeyUnused). Requires: engine lock (a
  // peer's write does not need ours).
  void UnshareLocked();
  // The same in steps, for ibv_dereg_mr, which waits for peers without the
  // engine lock: WithdrawLocked (true: wait for peers), then WaitUnused.
  bool WithdrawLocked();
  void WaitUnused() const;
  // Gives back the file ShareLocked kept, once no peer writes into the MR.
  void ReleaseFile();
  // The pages registration counted against RLIMIT_MEMLOCK (PinnedPages), in
  // this process and in the context's total; UnpinPages gives them back.
  void SetPinnedPages(uint64_t pages);
  void UnpinPages();
  static bool Shareable(unsigned access);

  Handle<ibv_mr, Mr> handle_;
  Pd* pd_;
  uint64_t iova_;
  unsigned access_;
  int windows_ = 0;
  // Unique in the process: a later MR may get this one's handle address and
  // key index once it is gone (BIND_MW names the MR it was posted with).
  const uint64_t serial_ = NextSerial();
  static uint64_t NextSerial();
  bool shared_ = false;
  uint32_t share_rkey_ = 0;
  int share_pid_ = 0;  // a child of fork() inherits the MR, not the publication
  SharedFile file_;    // published with the rkey (a child of fork() holds its copy of the descriptor)
  uint64_t pinned_pages_ = 0;
  uint32_t pinned_generation_ = 0;  // the fork generation that counted them
};

}  // namespace simverbs
