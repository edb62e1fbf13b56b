#include "qp_wr_builder.h"

#include <cerrno>
#include <cstring>

#include "abi/c_api.h"
#include "fault/fault_plan.h"
#include "fabric/fabric.h"
#include "qp.h"

namespace simverbs {
namespace {

QpWrBuilder& B(ibv_qp_ex* q) { return Qp::From(&q->qp_base)->wr_builder(); }

// Starts a new WR with the qp_ex's current wr_id and wr_flags.
ibv_send_wr& NewWr(ibv_qp_ex* q, ibv_wr_opcode op) {
  QpWrBuilder::Entry& e = B(q).entries_.emplace_back();
  e.wr.wr_id = q->wr_id;
  e.wr.send_flags = q->wr_flags;
  e.wr.opcode = op;
  return e.wr;
}

// The WR the wr_set_* calls apply to: the last one started.
QpWrBuilder::Entry* Last(ibv_qp_ex* q) {
  QpWrBuilder& b = B(q);
  if (b.entries_.empty()) {
    b.error_ = EINVAL;
    return nullptr;
  }
  return &b.entries_.back();
}

void Unsupported(ibv_qp_ex* q) { B(q).error_ = EOPNOTSUPP; }

// Forgets the WRs built so far.
void Reset(QpWrBuilder& b) {
  b.entries_.clear();
  b.error_ = 0;
}

// Ends the open critical section (whichever thread opened it); false when none is open.
bool Leave(QpWrBuilder& b) {
  std::lock_guard<std::mutex> lock(b.gate_mu_);
  if (!b.open_) return false;
  Reset(b);
  b.open_ = false;
  b.gate_cv_.notify_one();
  return true;
}

bool SectionOpen(QpWrBuilder& b) {
  std::lock_guard<std::mutex> lock(b.gate_mu_);
  return b.open_;
}

// The builder calls return nothing, and programs call them through the
// ibv_qp_ex function pointers (C entry points, abi/c_api.h): a failure of one
// (std::bad_alloc as it copies an SGE list or inline data) is kept, and
// wr_complete returns it, as it does an unsupported call's.
template <typename Fn>
void Recording(ibv_qp_ex* q, Fn&& fn) noexcept {
  try {
    fn();
  } catch (...) {
    B(q).error_ = ErrnoOfCurrentException();
  }
}

}  // namespace

void QpWrBuilder::Install(ibv_qp_ex* q) {
  q->wr_start = [](ibv_qp_ex* qp) {
    QpWrBuilder& b = B(qp);
    std::unique_lock<std::mutex> lock(b.gate_mu_);
    // A second wr_start of the thread in the section starts over (waiting for
    // itself would never end); any other waits for the section to end.
    if (!(b.open_ && b.opened_by_ == std::this_thread::get_id())) {
      b.gate_cv_.wait(lock, [&b] { return !b.open_; });
      b.open_ = true;
      b.opened_by_ = std::this_thread::get_id();
    }
    Reset(b);
  };
  q->wr_complete = [](ibv_qp_ex* qp) {
    QpWrBuilder& b = B(qp);
    if (!SectionOpen(b)) return EINVAL;  // no wr_start
    const int err = Guarded<OnThrow::kErrno>([&] {
      if (b.error_ || b.entries_.empty()) return b.error_;
      for (size_t i = 0; i < b.entries_.size(); ++i) {
        Entry& e = b.entries_[i];
        e.wr.next = i + 1 < b.entries_.size() ? &b.entries_[i + 1].wr : nullptr;
        // IBV_SEND_INLINE is not a wr_flags flag (ibv_wr_post(3), Flags): data
        // is inline when an inline setter gave it, as mlx5 builds it.
        e.wr.send_flags &= ~static_cast<unsigned>(IBV_SEND_INLINE);
        if (e.is_inline) {
          e.wr.send_flags |= IBV_SEND_INLINE;
          e.sges.assign(1, ibv_sge{reinterpret_cast<uintptr_t>(e.inline_data.data()),
                                   static_cast<uint32_t>(e.inline_data.size()), 0});
        }
        e.wr.sg_list = e.sges.data();
        e.wr.num_sge = static_cast<int>(e.sges.size());
      }
      ibv_send_wr* bad = nullptr;
      Qp* target = Qp::From(&qp->qp_base);
      fault_plan::OnWrComplete(target);
      Fabric::Get().PostedWork();
      return target->PostSend(&b.entries_[0].wr, &bad, Qp::PostMode::kAllOrNothing);
    });
    Leave(b);
    return err;
  };
  q->wr_abort = [](ibv_qp_ex* qp) { Leave(B(qp)); };

  q->wr_send = [](ibv_qp_ex* qp) { Recording(qp, [&] { NewWr(qp, IBV_WR_SEND); }); };
  q->wr_send_imm = [](ibv_qp_ex* qp, __be32 imm) {
    Recording(qp, [&] { NewWr(qp, IBV_WR_SEND_WITH_IMM).imm_data = imm; });
  };
  q->wr_rdma_write = [](ibv_qp_ex* qp, uint32_t rkey, uint64_t addr) {
    Recording(qp, [&] {
      ibv_send_wr& wr = NewWr(qp, IBV_WR_RDMA_WRITE);
      wr.wr.rdma.rkey = rkey;
      wr.wr.rdma.remote_addr = addr;
    });
  };
  q->wr_rdma_write_imm = [](ibv_qp_ex* qp, uint32_t rkey, uint64_t addr, __be32 imm) {
    Recording(qp, [&] {
      ibv_send_wr& wr = NewWr(qp, IBV_WR_RDMA_WRITE_WITH_IMM);
      wr.wr.rdma.rkey = rkey;
      wr.wr.rdma.remote_addr = addr;
      wr.imm_data = imm;
    });
  };
  q->wr_rdma_read = [](ibv_qp_ex* qp, uint32_t rkey, uint64_t addr) {
    Recording(qp, [&] {
      ibv_send_wr& wr = NewWr(qp, IBV_WR_RDMA_READ);
      wr.wr.rdma.rkey = rkey;
      wr.wr.rdma.remote_addr = addr;
    });
  };
  q->wr_atomic_cmp_swp = [](ibv_qp_ex* qp, uint32_t rkey, uint64_t addr, uint64_t compare, uint64_t swap) {
    Recording(qp, [&] {
      ibv_send_wr& wr = NewWr(qp, IBV_WR_ATOMIC_CMP_AND_SWP);
      wr.wr.atomic.rkey = rkey;
      wr.wr.atomic.remote_addr = addr;
      wr.wr.atomic.compare_add = compare;
      wr.wr.atomic.swap = swap;
    });
  };
  q->wr_atomic_fetch_add = [](ibv_qp_ex* qp, uint32_t rkey, uint64_t addr, uint64_t add) {
    Recording(qp, [&] {
      ibv_send_wr& wr = NewWr(qp, IBV_WR_ATOMIC_FETCH_AND_ADD);
      wr.wr.atomic.rkey = rkey;
      wr.wr.atomic.remote_addr = addr;
      wr.wr.atomic.compare_add = add;
    });
  };
  q->wr_bind_mw = [](ibv_qp_ex* qp, ibv_mw* mw, uint32_t rkey, const ibv_mw_bind_info* info) {
    Recording(qp, [&] {
      ibv_send_wr& wr = NewWr(qp, IBV_WR_BIND_MW);
      wr.bind_mw.mw = mw;
      wr.bind_mw.rkey = rkey;
      if (info) wr.bind_mw.bind_info = *info;
    });
  };
  q->wr_local_inv = [](ibv_qp_ex* qp, uint32_t rkey) {
    Recording(qp, [&] { NewWr(qp, IBV_WR_LOCAL_INV).invalidate_rkey = rkey; });
  };
  q->wr_send_inv = [](ibv_qp_ex* qp, uint32_t rkey) {
    Recording(qp, [&] { NewWr(qp, IBV_WR_SEND_WITH_INV).invalidate_rkey = rkey; });
  };
  // TSO and atomic write are not simulated.
  q->wr_send_tso = [](ibv_qp_ex* qp, void*, uint16_t, uint16_t) { Unsupported(qp); };
  q->wr_set_xrc_srqn = [](ibv_qp_ex* qp, uint32_t remote_srqn) {
    Recording(qp, [&] {
      if (Entry* e = Last(qp)) e->wr.qp_type.xrc.remote_srqn = remote_srqn;
    });
  };
  q->wr_atomic_write = [](ibv_qp_ex* qp, uint32_t, uint64_t, const void*) { Unsupported(qp); };

  q->wr_set_ud_addr = [](ibv_qp_ex* qp, ibv_ah* ah, uint32_t remote_qpn, uint32_t remote_qkey) {
    Recording(qp, [&] {
      if (Entry* e = Last(qp)) {
        e->wr.wr.ud.ah = ah;
        e->wr.wr.ud.remote_qpn = remote_qpn;
        e->wr.wr.ud.remote_qkey = remote_qkey;
      }
    });
  };
  q->wr_set_sge = [](ibv_qp_ex* qp, uint32_t lkey, uint64_t addr, uint32_t length) {
    Recording(qp, [&] {
      if (Entry* e = Last(qp)) {
        e->sges.assign(1, ibv_sge{addr, length, lkey});
        e->is_inline = false;
      }
    });
  };
  q->wr_set_sge_list = [](ibv_qp_ex* qp, size_t num_sge, const ibv_sge* sg_list) {
    Recording(qp, [&] {
      if (Entry* e = Last(qp)) {
        e->sges.assign(sg_list, sg_list + num_sge);
        e->is_inline = false;
      }
    });
  };
  // Inline data is copied at once: the caller may reuse its buffer right away.
  q->wr_set_inline_data = [](ibv_qp_ex* qp, void* addr, size_t length) {
    Recording(qp, [&] {
      if (Entry* e = Last(qp)) {
        const auto* p = static_cast<const uint8_t*>(addr);
        e->inline_data.assign(p, p + length);
        e->is_inline = true;
      }
    });
  };
  q->wr_set_inline_data_list = [](ibv_qp_ex* qp, size_t num_buf, const ibv_data_buf* buf_list) {
    Recording(qp, [&] {
      if (Entry* e = Last(qp)) {
        e->inline_data.clear();
        for (size_t i = 0; i < num_buf; ++i) {
          const auto* p = static_cast<const uint8_t*>(buf_list[i].addr);
          e->inline_data.insert(e->inline_data.end(), p, p + buf_list[i].length);
        }
        e->is_inline = true;
      }
    });
  };
}

}  // namespace simverbs
