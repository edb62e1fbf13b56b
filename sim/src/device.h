#pragma once

// A simulated HCA as ibv_get_device_list returns it. Its attributes come from
// the profile; the port state can change at run time (control API).

#include <infiniband/verbs.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <new>
#include <set>
#include <unordered_map>
#include <string>
#include <vector>

#include "handle.h"
#include "key_indexes.h"
#include "profile.h"

namespace simverbs {

class Context;
class Mr;
class Mw;
class Qp;

class Device {
 public:
  static constexpr uint64_t kMagic = 0x53494d4445560001;  // "SIMDEV"

  Device(const DeviceProfile& profile, const Behaviour& behaviour, int index);
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  static Device* From(const ibv_device* d) { return Handle<ibv_device, Device>::From(d); }
  ibv_device* ibv() { return &handle_.pub; }

  const DeviceProfile& profile() const { return profile_; }
  const Behaviour& behaviour() const { return behaviour_; }
  const std::string& name() const { return profile_.name; }
  int index() const { return index_; }
  uint64_t guid_be() const { return profile_.attr_ex.orig_attr.node_guid; }
  int port_count() const { return static_cast<int>(profile_.ports.size()); }
  bool ValidPort(int port_num) const { return port_num >= 1 && port_num <= port_count(); }
  // The port's GID entry at index when it is valid (in the profile's table
  // and not all zero), else nullptr.
  const GidProfile* Gid(int port_num, uint32_t index) const;
  // The index of `gid` of `kind` in the port's table, or -1.
  int GidIndex(int port_num, const ibv_gid& gid, GidKind kind) const;

  // Port attributes as ibv_query_port reports them now.
  ibv_port_attr PortAttr(int port_num) const;
  // What of them never changes (the profile's: LID, MTU, max_msg_sz ...),
  // without copying the rest: the transport asks for every packet it makes.
  const ibv_port_attr& StaticPortAttr(int port_num) const { return profile_.ports[port_num - 1].attr; }
  // Only the state (no lock: the transport asks for every packet it routes).
  ibv_port_state PortState(int port_num) const {
    return static_cast<ibv_port_state>(port_state_[port_num - 1].load(std::memory_order_acquire));
  }
  void SetPortState(int port_num, ibv_port_state state);
  // Traffic may leave by port_num: it is ACTIVE, or not a port of ours (a QP
  // that has none yet; the destination decides then).
  bool PassesTraffic(int port_num) const { return !ValidPort(port_num) || PortState(port_num) == IBV_PORT_ACTIVE; }
  // Grows with every port state change of any device (Engine::Route's cache).
  static uint64_t PortChanges() { return port_changes_.load(std::memory_order_acquire); }

  // Held across fork() in their places in the library's lock order (fork_locks.h).
  std::mutex& contexts_mutex() { return contexts_mu_; }
  std::mutex& mutex() const { return mu_; }

  // Contexts opened on this device, for device-wide events (port, fatal).
  void AddContext(Context* ctx);
  void RemoveContext(Context* ctx);
  // `fn` may take the engine lock (DEVICE_FATAL does): contexts_mu_ comes
  // before it, mu_ (port states, QP numbers: it may be taken under the engine lock) after it.
  template <typename Fn>
  void ForEachContext(Fn fn) {
    std::lock_guard<std::mutex> lock(contexts_mu_);
    for (Context* c : contexts_) fn(c);
  }

  // A port event, delivered to every open context of the device that is not
  // fatal. DEVICE_FATAL goes through fault/inject.h (the contexts change too).
  void RaisePortEvent(int port_num, ibv_event_type type);

  // The QPs and memory keys of the device, as the transport finds them.
  // Requires: engine lock.
  void AddQp(Qp* qp);
  void RemoveQp(Qp* qp);
  Qp* FindQp(uint32_t qpn) const;
  template <typename Fn>
  void ForEachQp(Fn fn) const {
    for (const auto& entry : qps_) fn(entry.second);
  }
  // A memory key index (key_indexes.h) no live MR or window of the device
  // holds, or 0 when none is left; ReleaseKeyIndex when its holder goes.
  // Requires: engine lock.
  uint32_t NewKeyIndex();
  void ReleaseKeyIndex(uint32_t index) { key_indexes_.Release(index); }
  void AddWindowKey(uint32_t key, Mw* mw) { window_keys_[key] = mw; }
  void RemoveWindowKey(uint32_t key) { window_keys_.erase(key); }
  Mw* FindWindow(uint32_t key) const {
    auto it = window_keys_.find(key);
    return it == window_keys_.end() ? nullptr : it->second;
  }
  void AddKey(uint32_t key, Mr* mr) {
    keys_[key] = mr;
    if (key == last_key_) last_mr_ = mr;
  }
  void RemoveKey(uint32_t key) {
    keys_.erase(key);
    if (key == last_key_) last_mr_ = nullptr;
  }
  Mr* FindKey(uint32_t key) const {
    if (key == last_key_ && last_mr_) return last_mr_;
    auto it = keys_.find(key);
    if (it == keys_.end()) return nullptr;
    last_key_ = key;
    last_mr_ = it->second;
    return it->second;
  }
  // The live window or MR behind a handle that a work request carried since
  // it was posted, or nullptr once it was deallocated: looked up in the key
  // tables, so a freed handle is never read. Requires: engine lock.
  Mw* FindWindowHandle(const ibv_mw* handle) const;
  // The QP `qp_num` is being destroyed: the type 2 windows it bound are told
  // (Mw::ForgetQpLocked). Requires: engine lock.
  void ForgetWindowsOfQp(uint32_t qp_num);
  Mr* FindMrHandle(const ibv_mr* handle) const;

  // QP numbers are unique on the device across the processes of the fabric;
  // 0 and 1 are the special QPs. 0 means none is left.
  uint32_t AllocQpn();
  void ReleaseQpn(uint32_t qpn);

  // Device-wide object counts against the profile limits (max_pd, max_cq ...).
  enum class Kind { kPd, kMr, kCq, kQp, kSrq, kAh, kMw, kCount };
  bool Reserve(Kind kind);  // false when the limit is reached
  void Release(Kind kind, int count = 1);

  // The fake sysfs directory that ibv_device::ibdev_path names.
  static constexpr const char* kSysfsRoot = "/sys/class/infiniband";

 private:
  Handle<ibv_device, Device> handle_;
  DeviceProfile profile_;
  Behaviour behaviour_;
  int index_;
  mutable std::mutex mu_;
  std::unique_ptr<std::atomic<int>[]> port_state_;  // an ibv_port_state; index 0 = port 1
  alignas(64) static inline std::atomic<uint64_t> port_changes_{0};  // read per packet: a line of its own
  std::mutex contexts_mu_;
  std::set<Context*> contexts_;  // contexts_mu_
  std::atomic<uint32_t> next_qpn_{0x11};
  std::vector<uint32_t> released_qpns_;  // mu_; only with behaviour qp_number_reuse
  std::unordered_map<uint32_t, Qp*> qps_;  // engine lock
  std::unordered_map<uint32_t, Mr*> keys_;  // engine lock
  // The last QP and MR found (engine lock): a program works with a few of
  // each, and every packet looks them up (a hash look-up divides).
  mutable uint32_t last_qpn_ = 0;
  mutable Qp* last_qp_ = nullptr;
  mutable uint32_t last_key_ = 0;
  mutable Mr* last_mr_ = nullptr;
  std::unordered_map<uint32_t, Mw*> window_keys_;  // engine lock
  // Keys are an index in the upper 24 bits and a key byte below it, as on
  // mlx HCAs; a new binding changes the key byte.
  uint32_t next_key_index_ = 1;  // engine lock; off a fabric
  KeyIndexes key_indexes_;       // engine lock
  std::atomic<int> counts_[static_cast<int>(Kind::kCount)] = {};
};

}  // namespace simverbs
