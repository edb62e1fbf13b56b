#include "device.h"

#include <cstdio>
#include <cstring>

#include "context.h"
#include "fabric/fabric.h"
#include "fault/fault_plan.h"
#include "gid.h"
#include "mr.h"
#include "mw.h"
#include "qp.h"
#include "sched/scheduler.h"
#include "trace/trace.h"

namespace simverbs {

Device::Device(const DeviceProfile& profile, const Behaviour& behaviour, int index)
    : profile_(profile), behaviour_(behaviour), index_(index) {
  handle_.Bind(this);
  ibv_device& d = handle_.pub;
  d.node_type = profile.node_type;
  d.transport_type = profile.transport_type;
  std::snprintf(d.name, sizeof d.name, "%s", profile.name.c_str());
  std::snprintf(d.dev_name, sizeof d.dev_name, "uverbs%d", index);
  std::snprintf(d.dev_path, sizeof d.dev_path, "/sys/class/infiniband_verbs/uverbs%d", index);
  std::snprintf(d.ibdev_path, sizeof d.ibdev_path, "%s/%s", kSysfsRoot, profile.name.c_str());
  port_state_ = std::make_unique<std::atomic<int>[]>(profile.ports.size());
  for (size_t i = 0; i < profile.ports.size(); ++i) port_state_[i].store(profile.ports[i].attr.state);
}

ibv_port_attr Device::PortAttr(int port_num) const {
  ibv_port_attr attr = profile_.ports[port_num - 1].attr;
  attr.state = PortState(port_num);
  // phys_state follows the logical state: 5 = LinkUp, 3 = Disabled.
  if (attr.state == IBV_PORT_DOWN) attr.phys_state = 3;
  return attr;
}

void Device::SetPortState(int port_num, ibv_port_state state) {
  std::lock_guard<std::mutex> lock(mu_);  // one trace line per change, in order
  Trace::Get().PortState(name(), port_num, PortState(port_num), state);
  port_state_[port_num - 1].store(state, std::memory_order_release);
  port_changes_.fetch_add(1, std::memory_order_acq_rel);
}

}  // namespace simverbs

namespace simverbs {

void Device::AddContext(Context* ctx) {
  std::lock_guard<std::mutex> lock(contexts_mu_);
  contexts_.insert(ctx);
}

void Device::RemoveContext(Context* ctx) {
  std::lock_guard<std::mutex> lock(contexts_mu_);
  contexts_.erase(ctx);
}

bool Device::Reserve(Kind kind) {
  const ibv_device_attr& a = profile_.attr_ex.orig_attr;
  int limit = 0;
  switch (kind) {
    case Kind::kPd: limit = a.max_pd; break;
    case Kind::kMr: limit = a.max_mr; break;
    case Kind::kCq: limit = a.max_cq; break;
    case Kind::kQp: limit = a.max_qp; break;
    case Kind::kSrq: limit = a.max_srq; break;
    case Kind::kAh: limit = a.max_ah; break;
    case Kind::kMw: limit = a.max_mw; break;
    case Kind::kCount: return false;
  }
  std::atomic<int>& count = counts_[static_cast<int>(kind)];
  int current = count.load();
  do {
    if (current >= limit) return false;
  } while (!count.compare_exchange_weak(current, current + 1));
  return true;
}

void Device::Release(Kind kind, int count) { counts_[static_cast<int>(kind)].fetch_sub(count); }

}  // namespace simverbs

namespace simverbs {

void Device::RaisePortEvent(int port_num, ibv_event_type type) {
  if (type == IBV_EVENT_PORT_ERR) SetPortState(port_num, IBV_PORT_DOWN);
  if (type == IBV_EVENT_PORT_ACTIVE) SetPortState(port_num, IBV_PORT_ACTIVE);
  QueuedEvent ev;
  ev.type = type;
  ev.port_num = port_num;
  ForEachContext([&](Context* c) {
    if (!c->fatal()) c->RaiseAsync(ev);  // DEVICE_FATAL was its last event
  });
}

}  // namespace simverbs

namespace simverbs {

uint32_t Device::AllocQpn() {
  if (behaviour_.qp_number_reuse) {
    // Reuse a number this process freed, if the fabric still has it free.
    std::lock_guard<std::mutex> lock(mu_);
    while (!released_qpns_.empty()) {
      const size_t pick = Scheduler::Get().Choose(released_qpns_.size());
      const uint32_t qpn = released_qpns_[pick];
      released_qpns_.erase(released_qpns_.begin() + static_cast<std::ptrdiff_t>(pick));
      if (!Fabric::Get().attached() || Fabric::Get().ClaimQpn(index_, qpn)) return qpn;
    }
  }
  if (Fabric::Get().attached()) return Fabric::Get().AllocQpn(index_);
  return next_qpn_.fetch_add(1) & 0xffffff;
}

void Device::ReleaseQpn(uint32_t qpn) {
  Fabric::Get().ReleaseQpn(index_, qpn);
  if (behaviour_.qp_number_reuse) {
    std::lock_guard<std::mutex> lock(mu_);
    released_qpns_.push_back(qpn);
  }
}

uint32_t Device::NewKeyIndex() {
  return key_indexes_.Allocate([this] {
    if (Fabric::Get().attached()) {
      if (const uint32_t index = Fabric::Get().AllocKeyIndex(index_)) return index;
    }
    return next_key_index_++;
  });
}

void Device::AddQp(Qp* qp) {
  qps_[qp->qp_num()] = qp;
  if (qp->qp_num() == last_qpn_) last_qp_ = qp;
  fault_plan::OnQpCreated(qp);  // "#N" in fault plans: creation order
}
void Device::RemoveQp(Qp* qp) {
  qps_.erase(qp->qp_num());
  if (qp->qp_num() == last_qpn_) last_qp_ = nullptr;
}

Mw* Device::FindWindowHandle(const ibv_mw* handle) const {
  for (const auto& [key, mw] : window_keys_) {
    if (mw->ibv() == handle) return mw;
  }
  return nullptr;
}

void Device::ForgetWindowsOfQp(uint32_t qp_num) {
  for (const auto& [key, mw] : window_keys_) mw->ForgetQpLocked(qp_num);
}

Mr* Device::FindMrHandle(const ibv_mr* handle) const {
  for (const auto& [key, mr] : keys_) {
    if (mr->ibv() == handle) return mr;
  }
  return nullptr;
}

Qp* Device::FindQp(uint32_t qpn) const {
  if (qpn == last_qpn_ && last_qp_ && !last_qp_->Inherited()) return last_qp_;
  auto it = qps_.find(qpn);
  // A child of fork() keeps copies of its parent's QPs: the number names the parent's.
  if (it == qps_.end() || it->second->Inherited()) return nullptr;
  last_qpn_ = qpn;
  last_qp_ = it->second;
  return it->second;
}

const GidProfile* Device::Gid(int port_num, uint32_t index) const {
  if (!ValidPort(port_num)) return nullptr;
  const auto& gids = profile_.ports[port_num - 1].gids;
  return index < gids.size() && !IsZeroGid(gids[index].gid) ? &gids[index] : nullptr;
}

int Device::GidIndex(int port_num, const ibv_gid& gid, GidKind kind) const {
  if (!ValidPort(port_num)) return -1;
  const auto& gids = profile_.ports[port_num - 1].gids;
  for (size_t i = 0; i < gids.size(); ++i) {
    if (SameGid(gids[i].gid, gid) && gids[i].kind == kind) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace simverbs
