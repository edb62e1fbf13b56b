#pragma once

// A memory window (ibv_alloc_mw(3), ibv_bind_mw(3)): a remote-access window
// onto part of an MR, with its own rkey. Type 1 is bound with ibv_bind_mw and
// belongs to its PD; type 2 is bound through the send queue (IBV_WR_BIND_MW),
// belongs to the QP that bound it, and is invalidated by IBV_WR_LOCAL_INV or a
// peer's SEND_WITH_INV.

#include <infiniband/verbs.h>

#include <cstdint>

#include "handle.h"
#include "result.h"

namespace simverbs {

class Context;
class Mr;
class Pd;

class Mw {
 public:
  static constexpr uint64_t kMagic = 0x53494d4d57000001;  // "SIMMW"

  static Result<Mw*> Alloc(Pd* pd, ibv_mw_type type);
  int Dealloc();

  static Mw* From(const ibv_mw* mw) { return Handle<ibv_mw, Mw>::From(mw); }
  ibv_mw* ibv() { return &handle_.pub; }
  Context* context() const { return ctx_; }
  ibv_mw_type type() const { return handle_.pub.type; }

  // Executes a bind work request posted on the QP `qp_num` of `pd`. A zero
  // length unbinds. Returns IBV_WC_SUCCESS or IBV_WC_MW_BIND_ERR. Requires:
  // engine lock.
  // `mr_serial`: the Mr::serial of the MR info.mr named when the bind was posted.
  ibv_wc_status BindLocked(const Pd* qp_pd, uint32_t qp_num, uint32_t new_rkey, const ibv_mw_bind_info& info,
                           uint64_t mr_serial);
  // Invalidates a bound type 2 window whose rkey is `rkey`, on behalf of QP
  // `qp_num` (LOCAL_INV, or SEND_WITH_INV arriving there). Requires: engine lock.
  bool InvalidateLocked(uint32_t rkey, uint32_t qp_num);
  // The QP `qp_num` is being destroyed: a type 2 window it bound serves no QP
  // any more (not the next one given its number), and any QP may invalidate
  // it, as rxe's window keeps the destroyed QP (rxe_mw.c: rxe_do_bind_mw
  // holds it, rxe_invalidate_mw checks no QP). Requires: engine lock.
  void ForgetQpLocked(uint32_t qp_num);

  // The MR behind a remote access through this window, or nullptr when the
  // window does not allow it. Requires: engine lock.
  Mr* CheckLocked(const Pd* pd, uint32_t qp_num, uint64_t va, uint64_t len, unsigned access) const;

  static ibv_mw* AllocOp(ibv_pd* pd, ibv_mw_type type);
  static int DeallocOp(ibv_mw* mw);
  static int BindOp(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* bind);

 private:
  Mw(Pd* pd, ibv_mw_type type, uint32_t key_index);
  ~Mw();
  void UnbindLocked();

  Handle<ibv_mw, Mw> handle_;
  Context* ctx_;
  Pd* pd_;
  // The R_Key the device's window table has for it (engine lock). mw->rkey
  // may already be ahead: ibv_bind_mw sets it when the bind is posted.
  uint32_t key_ = 0;
  // The binding (engine lock).
  Mr* mr_ = nullptr;
  uint64_t addr_ = 0;
  uint64_t length_ = 0;
  unsigned access_ = 0;
  uint32_t qp_num_ = 0;  // type 2: the QP that bound it, or kDestroyedQp
  // Not a QP number (they have 24 bits): the QP that bound it is gone.
  static constexpr uint32_t kDestroyedQp = 0xffffffff;
};

}  // namespace simverbs
