// PDs, memory regions and memory windows; the scatter/gather entries and
// keys that work requests use.

#include <algorithm>
#include <cinttypes>
#include <cstdint>

#include "format.h"
#include "walk.h"

namespace verbs_fuzz {
namespace {

// ib_access_writable() in the kernel: these make it pin the pages for write.
constexpr unsigned kWritableAccess =
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND;

// Outside IBV_ACCESS_OPTIONAL_RANGE (which libibverbs may drop): the kernel
// refuses it (ib_check_mr_access).
constexpr unsigned kUnknownAccess = 1u << 30;

}  // namespace

unsigned Walk::RandomAccess() {
  unsigned access = 0;
  if (rng_.Percent(80)) access |= IBV_ACCESS_LOCAL_WRITE;
  if (access & IBV_ACCESS_LOCAL_WRITE) {
    if (rng_.Percent(50)) access |= IBV_ACCESS_REMOTE_WRITE;
    if (rng_.Percent(30)) access |= IBV_ACCESS_REMOTE_ATOMIC;
  }
  if (rng_.Percent(50)) access |= IBV_ACCESS_REMOTE_READ;
  if (rng_.Percent(30)) access |= IBV_ACCESS_MW_BIND;
  return access;
}

void Walk::PickRange(uint8_t** addr, size_t* length) {
  size_t offset = rng_.Below(buffer_size_ - 1);
  if (rng_.OneIn(2)) offset &= ~(page_ - 1);
  const size_t room = buffer_size_ - offset;
  size_t len = rng_.Between(1, std::min(room, 4 * page_));
  if (rng_.OneIn(8)) len = room;
  *addr = buffer_ + offset;
  *length = len;
}

// ---- PD

bool Walk::AllocPd() {
  const Id ctx = Pick(ctxs_);
  if (!ctx || pds_.size() >= kMaxPds) return false;
  Enter(Verb::kAllocPd);
  errno = 0;
  ibv_pd* pd = ibv_alloc_pd(ctxs_[ctx].ctx);
  if (!pd) {
    CheckErrno(Verb::kAllocPd, errno);
    return true;
  }
  if (pd->context != ctxs_[ctx].ctx) Fail(Verb::kAllocPd, "pd->context is not the context");
  pds_[next_id_++] = PdModel{pd, ctx};
  return true;
}

int Walk::PdUsers(Id pd) const {
  int users = 0;
  auto count = [&](const auto& objects) {
    for (const auto& [id, m] : objects) users += m.pd == pd;
  };
  count(mrs_);
  count(mws_);
  count(srqs_);
  count(qps_);
  count(ahs_);
  return users;
}

bool Walk::DeallocPd() {
  const Id id = Pick(pds_);
  if (!id) return false;
  const int users = PdUsers(id);
  Enter(Verb::kDeallocPd);
  const int rc = ibv_dealloc_pd(pds_[id].pd);
  if (users > 0) {
    // The kernel counts the PD's users (ib_dealloc_pd_user: EBUSY).
    if (rc == 0) Fail(Verb::kDeallocPd, Format("succeeded with %d objects still on the PD", users));
    CheckErrno(Verb::kDeallocPd, rc);
    if (rc != EBUSY)
      Fail(Verb::kDeallocPd, Format("with %d objects on the PD: %s, not EBUSY", users, ErrnoName(rc).c_str()));
    return true;
  }
  if (rc != 0) Fail(Verb::kDeallocPd, "with no object on the PD: failed with " + ErrnoName(rc));
  pds_.erase(id);
  return true;
}

// ---- MR

bool Walk::RegMr() {
  const Id pd = Pick(pds_);
  if (!pd || mrs_.size() >= kMaxMrs) return false;
  uint8_t* addr;
  size_t length;
  PickRange(&addr, &length);
  unsigned access = RandomAccess();
  const char* must_fail = nullptr;
  bool may_fail = false;
  switch (rng_.Below(20)) {
    case 0:
      length = 0;  // the kernel's answer varies
      may_fail = true;
      break;
    case 1:
      addr = nullptr;
      must_fail = "a NULL address";
      break;
    case 2:
      // Below mmap_min_addr: never mapped.
      addr = reinterpret_cast<uint8_t*>(uintptr_t{0x2000});
      length = rng_.Between(1, page_);
      must_fail = "unmapped memory";
      break;
    case 3:
      addr = prot_none_ + rng_.Below(page_);
      length = rng_.Between(1, static_cast<uint64_t>(prot_none_ + page_ - addr));
      must_fail = "PROT_NONE memory";
      break;
    case 4:
      addr = read_only_ + rng_.Below(page_);
      length = rng_.Between(1, static_cast<uint64_t>(read_only_ + page_ - addr));
      if (access & kWritableAccess) {
        must_fail = "read-only memory with writable access";
      } else if (rng_.OneIn(2)) {
        access = 0;
      }
      break;
    case 5:
      access |= kUnknownAccess;
      must_fail = "an unknown access flag";
      break;
    case 6:
      access = (access & ~IBV_ACCESS_LOCAL_WRITE) | IBV_ACCESS_REMOTE_WRITE;
      must_fail = "REMOTE_WRITE without LOCAL_WRITE";  // ibv_reg_mr(3)
      break;
    case 7:
      access = (access & ~IBV_ACCESS_LOCAL_WRITE) | IBV_ACCESS_REMOTE_ATOMIC;
      must_fail = "REMOTE_ATOMIC without LOCAL_WRITE";
      break;
    case 8:
      length = SIZE_MAX - page_;
      must_fail = "a range that wraps around";
      break;
    default:
      break;
  }
  Enter(Verb::kRegMr);
  errno = 0;
  ibv_mr* mr = ibv_reg_mr(pds_[pd].pd, addr, length, static_cast<int>(access));
  const std::string what = Format("[%p, +%zu) access 0x%x", static_cast<void*>(addr), length, access);
  if (!mr) {
    CheckErrno(Verb::kRegMr, errno);
    if (!must_fail && !may_fail && errno != ENOMEM) {
      Fail(Verb::kRegMr, what + ": a valid registration failed with " + ErrnoName(errno));
    }
    return true;
  }
  if (must_fail) Fail(Verb::kRegMr, what + ": succeeded, but must fail: " + must_fail);
  if (mr->addr != addr || mr->length != length || mr->pd != pds_[pd].pd || mr->context != pds_[pd].pd->context) {
    Fail(Verb::kRegMr, what + ": the ibv_mr does not describe the registration");
  }
  MrModel m;
  m.mr = mr;
  m.ctx = pds_[pd].ctx;
  m.pd = pd;
  m.addr = addr;
  m.length = length;
  m.access = access;
  m.lkey = mr->lkey;
  m.rkey = mr->rkey;
  mrs_[next_id_++] = m;
  return true;
}

bool Walk::ReregMr() {
  const Id id = PickWhere(mrs_, [](const MrModel& m) { return m.known; });
  if (!id) return false;
  MrModel& m = mrs_[id];
  int flags = 0;
  if (rng_.Percent(50)) flags |= IBV_REREG_MR_CHANGE_TRANSLATION;
  if (rng_.Percent(40)) flags |= IBV_REREG_MR_CHANGE_PD;
  if (rng_.Percent(50) || flags == 0) flags |= IBV_REREG_MR_CHANGE_ACCESS;
  Id pd = m.pd;
  uint8_t* addr = nullptr;
  size_t length = 0;
  unsigned access = 0;
  const char* must_fail = nullptr;
  if (flags & IBV_REREG_MR_CHANGE_PD) {
    pd = Pick(pds_);
    if (pds_[pd].ctx != m.ctx) must_fail = "a PD of another context";
  }
  if (flags & IBV_REREG_MR_CHANGE_ACCESS) access = RandomAccess();
  const unsigned new_access = (flags & IBV_REREG_MR_CHANGE_ACCESS) ? access : m.access;
  if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) PickRange(&addr, &length);
  switch (rng_.Below(12)) {
    case 0:
      flags = 0;  // the kernel refuses a rereg that changes nothing
      access = 0;
      must_fail = "no flags";
      break;
    case 1:
      flags |= 1 << 3;
      must_fail = "an unknown flag";
      break;
    case 2:
      flags &= ~IBV_REREG_MR_CHANGE_ACCESS;
      access = IBV_ACCESS_LOCAL_WRITE;
      must_fail = "access flags without IBV_REREG_MR_CHANGE_ACCESS";  // rdma-core's ibv_rereg_mr
      break;
    case 3:
      flags |= IBV_REREG_MR_CHANGE_ACCESS;
      access = IBV_ACCESS_REMOTE_WRITE;
      must_fail = "REMOTE_WRITE without LOCAL_WRITE";
      break;
    case 4:
      flags |= IBV_REREG_MR_CHANGE_TRANSLATION;
      addr = prot_none_;
      length = page_;
      must_fail = "PROT_NONE memory";
      break;
    case 5:
      if (!(new_access & kWritableAccess)) break;
      flags |= IBV_REREG_MR_CHANGE_TRANSLATION;
      addr = read_only_;
      length = page_;
      must_fail = "read-only memory with writable access";
      break;
    case 6:
      flags |= IBV_REREG_MR_CHANGE_TRANSLATION;
      addr = buffer_;
      length = 0;
      must_fail = "a new translation of length 0";
      break;
    default:
      break;
  }
  // The pages stay where they are: write access to read-only ones cannot be pinned.
  const bool on_read_only = m.addr >= read_only_ && m.addr < read_only_ + page_;
  if (!(flags & IBV_REREG_MR_CHANGE_TRANSLATION) && on_read_only && (flags & IBV_REREG_MR_CHANGE_ACCESS) &&
      (access & kWritableAccess) && !must_fail) {
    must_fail = "writable access to read-only memory";
  }
  Enter(Verb::kReregMr);
  const int rc =
      ibv_rereg_mr(m.mr, flags, pds_.count(pd) ? pds_[pd].pd : nullptr, addr, length, static_cast<int>(access));
  const std::string what =
      Format("MR %u flags 0x%x [%p, +%zu) access 0x%x", id, flags, static_cast<void*>(addr), length, access);
  if (rc < IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW || rc > 0) {
    Fail(Verb::kReregMr, what + Format(": returned %d, not 0 or an ibv_rereg_mr_err_code", rc));
  }
  if (rc != 0) {
    // A valid rereg may still fail while a window is bound to the MR.
    if (!must_fail && m.windows.empty()) Fail(Verb::kReregMr, what + Format(": a valid rereg returned %d", rc));
    // ibv_rereg_mr(3): past the input checks, a failure may leave the MR changed in part.
    if (rc != IBV_REREG_MR_ERR_INPUT) m.known = false;
    return true;
  }
  if (must_fail) Fail(Verb::kReregMr, what + ": succeeded, but must fail: " + must_fail);
  if (flags & IBV_REREG_MR_CHANGE_PD) m.pd = pd;
  if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
    m.addr = addr;
    m.length = length;
  }
  if (flags & IBV_REREG_MR_CHANGE_ACCESS) m.access = access;
  if (m.mr->pd != pds_[m.pd].pd || m.mr->addr != m.addr || m.mr->length != m.length) {
    Fail(Verb::kReregMr, what + ": the ibv_mr does not describe the new registration");
  }
  stale_keys_.push_back(m.lkey);
  stale_keys_.push_back(m.rkey);
  m.lkey = m.mr->lkey;
  m.rkey = m.mr->rkey;
  return true;
}

bool Walk::DeregMr() {
  const Id id = Pick(mrs_);
  if (!id) return false;
  MrModel& m = mrs_[id];
  bool windows = false;
  for (Id w : m.windows) windows |= mws_.count(w) > 0;
  Enter(Verb::kDeregMr);
  const int rc = ibv_dereg_mr(m.mr);
  if (rc != 0) {
    CheckErrno(Verb::kDeregMr, rc);
    if (!windows) Fail(Verb::kDeregMr, Format("MR %u, no window bound: failed with %s", id, ErrnoName(rc).c_str()));
    return true;
  }
  stale_keys_.push_back(m.lkey);
  stale_keys_.push_back(m.rkey);
  mrs_.erase(id);
  return true;
}

// ---- memory windows

bool Walk::AllocMw() {
  const Id pd = Pick(pds_);
  if (!pd || mws_.size() >= kMaxMws) return false;
  const CtxModel& c = ctxs_[pds_[pd].ctx];
  const uint64_t r = rng_.Below(10);
  const auto type = static_cast<ibv_mw_type>(r < 5 ? IBV_MW_TYPE_1 : r < 9 ? IBV_MW_TYPE_2 : 3);
  const bool supported =
      type == IBV_MW_TYPE_1 ? (c.attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW)
      : type == IBV_MW_TYPE_2
          ? (c.attr.device_cap_flags & (IBV_DEVICE_MEM_WINDOW_TYPE_2A | IBV_DEVICE_MEM_WINDOW_TYPE_2B))
          : false;
  Enter(Verb::kAllocMw);
  errno = 0;
  ibv_mw* mw = ibv_alloc_mw(pds_[pd].pd, type);
  if (!mw) {
    CheckErrno(Verb::kAllocMw, errno);
    if (supported && errno != ENOMEM) Fail(Verb::kAllocMw, Format("type %d, which the device supports: failed", type));
    return true;
  }
  if (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2) ExpectFailed(Verb::kAllocMw, false, "an unknown window type");
  if (mw->type != type || mw->pd != pds_[pd].pd) Fail(Verb::kAllocMw, "the ibv_mw does not describe the window");
  mws_[next_id_++] = MwModel{mw, pds_[pd].ctx, pd, type, mw->rkey};
  return true;
}

bool Walk::DeallocMw() {
  const Id id = Pick(mws_);
  if (!id) return false;
  Enter(Verb::kDeallocMw);
  if (int rc = ibv_dealloc_mw(mws_[id].mw)) Fail(Verb::kDeallocMw, "failed with " + ErrnoName(rc));
  mws_.erase(id);
  return true;
}

bool Walk::BindMw() {
  const Id mw_id = PickWhere(mws_, [](const MwModel& w) { return w.type == IBV_MW_TYPE_1; });
  if (!mw_id) return false;
  MwModel& w = mws_[mw_id];
  const Id qp = rng_.Percent(85) ? PickWhere(qps_, [&](const QpModel& q) { return q.ctx == w.ctx; }) : Pick(qps_);
  if (!qp) return false;
  QpModel& q = qps_[qp];
  ibv_mw_bind bind{};
  bind.wr_id = NewWrId();
  bind.send_flags = rng_.Percent(70) ? IBV_SEND_SIGNALED : 0;
  const char* must_fail = nullptr;
  Id mr_id = 0;
  if (rng_.Percent(85)) {
    mr_id = rng_.Percent(85) ? PickWhere(mrs_, [&](const MrModel& m) { return m.known && m.pd == w.pd; })
                             : PickWhere(mrs_, [](const MrModel& m) { return m.known; });
  }
  if (mr_id) {
    const MrModel& m = mrs_[mr_id];
    bind.bind_info.mr = m.mr;
    const uint64_t offset = rng_.Below(m.length + 1);
    bind.bind_info.addr = reinterpret_cast<uintptr_t>(m.addr) + offset;
    bind.bind_info.length = rng_.Below(m.length - offset + 1);
    if (rng_.OneIn(10)) {
      bind.bind_info.length = m.length - offset + 1 + rng_.Below(64);
      must_fail = "a range beyond its MR";
    }
    if (rng_.Percent(60)) bind.bind_info.mw_access_flags |= IBV_ACCESS_REMOTE_READ;
    if (rng_.Percent(50)) bind.bind_info.mw_access_flags |= IBV_ACCESS_REMOTE_WRITE;
    if (rng_.Percent(20)) bind.bind_info.mw_access_flags |= IBV_ACCESS_REMOTE_ATOMIC;
    if (bind.bind_info.length > 0) {
      if (!(m.access & IBV_ACCESS_MW_BIND)) must_fail = "an MR registered without IBV_ACCESS_MW_BIND";
      if ((bind.bind_info.mw_access_flags & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
          !(m.access & IBV_ACCESS_LOCAL_WRITE)) {
        must_fail = "remote write access to an MR without LOCAL_WRITE";
      }
    }
  }
  if (q.pd != w.pd) must_fail = "a QP of another PD than the window's";
  Enter(Verb::kBindMw);
  const int rc = ibv_bind_mw(q.qp, w.mw, &bind);
  if (rc != 0) {
    CheckErrno(Verb::kBindMw, rc);
    return true;
  }
  w.rkey = w.mw->rkey;
  if (mr_id) mrs_[mr_id].windows.insert(mw_id);
  PendingWr p;
  p.qp = qp;
  p.cq = q.send_cq;
  p.signaled = q.sig_all || (bind.send_flags & IBV_SEND_SIGNALED);
  p.must_fail = must_fail;
  p.opcode = IBV_WR_BIND_MW;
  p.step = step_;
  AddPending(qp, bind.wr_id, p);
  return true;
}

// ---- keys

uint32_t Walk::RandomKey() {
  for (;;) {
    const auto key = static_cast<uint32_t>(rng_.Next());
    bool live = false;
    for (const auto& [id, m] : mrs_) live |= m.lkey == key || m.rkey == key;
    for (const auto& [id, w] : mws_) live |= w.rkey == key;
    if (!live) return key;
  }
}

bool Walk::LkeyCovers(Id pd, uint32_t lkey, uint64_t addr, uint64_t length, unsigned access) const {
  for (const auto& [id, m] : mrs_) {
    // After a failed rereg the MR may be anything: assume the best.
    if (!m.known && (m.mr->lkey == lkey || m.lkey == lkey)) return true;
    if (m.pd != pd || m.lkey != lkey) continue;
    const auto start = reinterpret_cast<uintptr_t>(m.addr);
    if ((m.access & access) == access && addr >= start && length <= m.length && addr - start <= m.length - length) {
      return true;
    }
  }
  return false;
}

const char* Walk::MakeSge(Id pd, unsigned access, bool bad, uint32_t max_length, ibv_sge* sge) {
  auto fits = [&](const MrModel& m) { return m.known && m.pd == pd && (m.access & access) == access; };
  if (!bad) {
    if (const Id id = PickWhere(mrs_, fits)) {
      const MrModel& m = mrs_[id];
      const uint64_t offset = rng_.Below(m.length + 1);
      sge->addr = reinterpret_cast<uintptr_t>(m.addr) + offset;
      sge->length = static_cast<uint32_t>(rng_.Below(std::min<uint64_t>(m.length - offset, max_length) + 1));
      sge->lkey = m.lkey;
      return nullptr;
    }
  }
  // Every bad entry is at least a byte long: a zero-length one is not checked.
  sge->addr = reinterpret_cast<uintptr_t>(buffer_) + rng_.Below(buffer_size_ - 64);
  sge->length = static_cast<uint32_t>(rng_.Between(1, 64));
  const char* why = "an lkey that names no MR";
  sge->lkey = RandomKey();
  switch (rng_.Below(5)) {
    case 0:
      if (!stale_keys_.empty()) {
        sge->lkey = stale_keys_[rng_.Below(stale_keys_.size())];
        why = "the lkey of a deregistered MR";
      }
      break;
    case 1:
      if (const Id id = PickWhere(mrs_, [&](const MrModel& m) { return m.known && m.pd != pd && m.length > 0; })) {
        const MrModel& m = mrs_[id];
        sge->addr = reinterpret_cast<uintptr_t>(m.addr);
        sge->length = static_cast<uint32_t>(std::min<size_t>(m.length, 64));
        sge->lkey = m.lkey;
        why = "an MR of another PD";
      }
      break;
    case 2:
      if (const Id id = PickWhere(mrs_, fits)) {
        const MrModel& m = mrs_[id];
        sge->addr = reinterpret_cast<uintptr_t>(m.addr) + m.length - rng_.Below(std::min<size_t>(m.length, 16) + 1);
        sge->length = static_cast<uint32_t>(rng_.Between(17, 64));
        sge->lkey = m.lkey;
        why = "a range beyond its MR";
      }
      break;
    case 3:
      if (access == 0) break;
      if (const Id id = PickWhere(mrs_, [&](const MrModel& m) {
            return m.known && m.pd == pd && (m.access & access) != access && m.length > 0;
          })) {
        const MrModel& m = mrs_[id];
        sge->addr = reinterpret_cast<uintptr_t>(m.addr);
        sge->length = static_cast<uint32_t>(std::min<size_t>(m.length, 64));
        sge->lkey = m.lkey;
        why = "an MR without LOCAL_WRITE";
      }
      break;
    default:
      break;
  }
  // A stale key may have been handed out again.
  if (LkeyCovers(pd, sge->lkey, sge->addr, sge->length, access)) return nullptr;
  return why;
}

const char* Walk::RemoteKeyFault(Id pd, uint32_t rkey, uint64_t addr, uint64_t length, unsigned access) const {
  for (const auto& [id, w] : mws_) {
    if (w.rkey == rkey || w.mw->rkey == rkey) return nullptr;  // windows: not modelled, assume the best
  }
  bool named = false;
  for (const auto& [id, m] : mrs_) {
    if (!m.known && (m.mr->rkey == rkey || m.rkey == rkey)) return nullptr;
    if (m.rkey != rkey) continue;
    named = true;
    if (m.pd != pd) return "an rkey of an MR in another PD than the responder's";
    if ((m.access & access) != access) return "an rkey of an MR without the remote access it needs";
    const auto start = reinterpret_cast<uintptr_t>(m.addr);
    if (addr < start || length > m.length || addr - start > m.length - length) return "a remote range beyond its MR";
    return nullptr;
  }
  return named ? nullptr : "an rkey that names no MR";
}

}  // namespace verbs_fuzz
