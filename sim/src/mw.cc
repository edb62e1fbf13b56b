#include "mw.h"

#include <cerrno>

#include "context.h"
#include "device.h"
#include "mr.h"
#include "pd.h"
#include "qp.h"
#include "transport/engine.h"
#include "fault/fault_points.h"

namespace simverbs {
namespace {
// A window grants remote access only; IBV_ACCESS_LOCAL_WRITE is taken and
// means nothing, as rxe takes it (rxe_mw.c checks no other bits) and
// rdma-core's own tests pass it (tests/test_mr.py MWRes, test_qpex.py).
constexpr unsigned kWindowAccess = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC |
                                   IBV_ACCESS_ZERO_BASED | IBV_ACCESS_LOCAL_WRITE;
}

Mw::Mw(Pd* pd, ibv_mw_type type, uint32_t key_index) : ctx_(pd->context()), pd_(pd) {
  handle_.Bind(this);
  ibv_mw& m = handle_.pub;
  m.context = ctx_->ibv();
  m.pd = pd->ibv();
  m.type = type;
  m.rkey = (key_index << 8) | 0x01;
  m.handle = m.rkey >> 8;
  key_ = m.rkey;
  pd->AddUser();
}

Mw::~Mw() {
  pd_->RemoveUser();
  handle_.Unbind();
}

Result<Mw*> Mw::Alloc(Pd* pd, ibv_mw_type type) {
  if (int err = FaultPoints::Get().Hit(FaultPoint::kAllocMw)) return Result<Mw*>::Error(err);
  Device* dev = pd->context()->device();
  const uint64_t caps = dev->profile().attr_ex.orig_attr.device_cap_flags;
  bool supported = false;
  if (type == IBV_MW_TYPE_1) supported = caps & IBV_DEVICE_MEM_WINDOW;
  if (type == IBV_MW_TYPE_2) supported = caps & (IBV_DEVICE_MEM_WINDOW_TYPE_2A | IBV_DEVICE_MEM_WINDOW_TYPE_2B);
  if (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2) return Result<Mw*>::Error(EINVAL);
  if (!supported) return Result<Mw*>::Error(EOPNOTSUPP);
  if (!pd->context()->ReserveObject(Device::Kind::kMw)) return Result<Mw*>::Error(ENOMEM);
  std::lock_guard<DataPathMutex> lock(Engine::Get().mu());
  const uint32_t key_index = dev->NewKeyIndex();
  if (key_index == 0) {
    pd->context()->ReleaseObject(Device::Kind::kMw);
    return Result<Mw*>::Error(ENOMEM);
  }
  Mw* mw = new Mw(pd, type, key_index);
  dev->AddWindowKey(mw->key_, mw);
  return mw;
}

int Mw::Dealloc() {
  Device* dev = ctx_->device();
  {
    std::lock_guard<DataPathMutex> lock(Engine::Get().mu());
    UnbindLocked();
    dev->RemoveWindowKey(key_);
    dev->ReleaseKeyIndex(key_ >> 8);
  }
  ctx_->ReleaseObject(Device::Kind::kMw);
  delete this;
  return 0;
}

void Mw::UnbindLocked() {
  if (mr_) mr_->RemoveWindow();
  mr_ = nullptr;
  length_ = 0;
  access_ = 0;
  qp_num_ = 0;
}

ibv_wc_status Mw::BindLocked(const Pd* qp_pd, uint32_t qp_num, uint32_t new_rkey, const ibv_mw_bind_info& info,
                             uint64_t mr_serial) {
  Device* dev = ctx_->device();
  // A type 2 window must be invalidated before it is bound again (IBTA 10.6.7.2).
  if (type() == IBV_MW_TYPE_2 && mr_) return IBV_WC_MW_BIND_ERR;
  // The key's index (upper 24 bits) is the window's; only the key byte may change.
  if ((new_rkey >> 8) != (key_ >> 8)) return IBV_WC_MW_BIND_ERR;
  if (qp_pd != pd_) return IBV_WC_MW_BIND_ERR;
  // A type 2 window is invalidated with IBV_WR_LOCAL_INV, not by a bind of
  // length 0 (IBTA o10-37.2.40; rxe_check_bind_mw refuses it too).
  if (type() == IBV_MW_TYPE_2 && info.length == 0) return IBV_WC_MW_BIND_ERR;
  // Zero-based windows: never for type 1 (IBTA o10-36.2.2, as rxe), and not
  // simulated for type 2; refused rather than bound at the wrong addresses.
  if (info.mw_access_flags & IBV_ACCESS_ZERO_BASED) return IBV_WC_MW_BIND_ERR;
  Mr* mr = nullptr;
  if (info.length > 0) {
    // It may have been deregistered since the bind was posted (and another
    // MR may have its handle now).
    mr = dev->FindMrHandle(info.mr);
    if (!mr || mr->serial() != mr_serial || mr->pd() != pd_ || !(mr->access() & IBV_ACCESS_MW_BIND)) {
      return IBV_WC_MW_BIND_ERR;
    }
    if (info.mw_access_flags & ~kWindowAccess) return IBV_WC_MW_BIND_ERR;
    // Remote write or atomic access through a window needs local write on the MR.
    if ((info.mw_access_flags & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
        !(mr->access() & IBV_ACCESS_LOCAL_WRITE)) {
      return IBV_WC_MW_BIND_ERR;
    }
    if (!mr->Translate(info.addr, info.length)) return IBV_WC_MW_BIND_ERR;
  }
  UnbindLocked();
  dev->RemoveWindowKey(key_);
  key_ = new_rkey;
  handle_.pub.rkey = new_rkey;
  dev->AddWindowKey(new_rkey, this);
  if (mr) {
    mr_ = mr;
    mr->AddWindow();
    addr_ = info.addr;
    length_ = info.length;
    access_ = info.mw_access_flags;
    qp_num_ = type() == IBV_MW_TYPE_2 ? qp_num : 0;
  }
  return IBV_WC_SUCCESS;
}

bool Mw::InvalidateLocked(uint32_t rkey, uint32_t qp_num) {
  if (type() != IBV_MW_TYPE_2 || key_ != rkey || !mr_ || (qp_num_ != qp_num && qp_num_ != kDestroyedQp)) return false;
  UnbindLocked();
  return true;
}

void Mw::ForgetQpLocked(uint32_t qp_num) {
  if (type() == IBV_MW_TYPE_2 && mr_ && qp_num_ == qp_num) qp_num_ = kDestroyedQp;
}

Mr* Mw::CheckLocked(const Pd* pd, uint32_t qp_num, uint64_t va, uint64_t len, unsigned access) const {
  if (!mr_ || (access_ & access) != access) return nullptr;
  // Type 1 windows belong to their PD, type 2 to the QP that bound them.
  if (type() == IBV_MW_TYPE_1 ? pd != pd_ : qp_num != qp_num_) return nullptr;
  if (va < addr_ || len > length_ || va - addr_ > length_ - len) return nullptr;
  return mr_;
}

ibv_mw* Mw::AllocOp(ibv_pd* pd, ibv_mw_type type) {
  Pd* p = Pd::From(pd);
  if (!p) {
    errno = EINVAL;
    return nullptr;
  }
  Result<Mw*> r = Alloc(p, type);
  if (!r.ok()) {
    errno = r.err();
    return nullptr;
  }
  return r.value()->ibv();
}

int Mw::DeallocOp(ibv_mw* mw) {
  Mw* m = From(mw);
  return m ? m->Dealloc() : EINVAL;
}

// ibv_bind_mw (type 1): a bind work request on the QP's send queue; the
// window's new rkey is returned in mw->rkey at once, as providers do.
int Mw::BindOp(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* bind) {
  Qp* q = Qp::From(qp);
  Mw* m = From(mw);
  if (!q || !m || !bind) return EINVAL;
  // Type 1 windows are never zero-based (IBTA o10-36.2.2): the providers
  // refuse it at the call (rdma-core providers/rxe/rxe.c, mlx5: rxe_bind_mw).
  if (bind->bind_info.mw_access_flags & IBV_ACCESS_ZERO_BASED) return EINVAL;
  ibv_send_wr wr{};
  wr.wr_id = bind->wr_id;
  wr.opcode = IBV_WR_BIND_MW;
  wr.send_flags = bind->send_flags;
  wr.bind_mw.mw = mw;
  wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
  wr.bind_mw.bind_info = bind->bind_info;
  ibv_send_wr* bad = nullptr;
  const int err = q->PostSend(&wr, &bad);
  if (err) return err;
  mw->rkey = wr.bind_mw.rkey;
  return 0;
}

}  // namespace simverbs
