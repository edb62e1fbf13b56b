#include "fabric/fabric.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <new>
#include <sstream>

#include "device.h"
#include "device_list.h"
#include "fabric/packet_ring.h"
#include "fabric/shared_regions.h"
#include "fault/inject.h"
#include "fault/mailbox.h"
#include "transport/engine.h"

namespace simverbs {
namespace {

constexpr uint64_t kMagic = 0x53494d4641425233;  // "SIMFABR3"
constexpr int kMaxProcs = 64;
constexpr int kMaxDevices = 16;
constexpr uint32_t kDirSize = 8192;
constexpr uint32_t kFirstQpn = 0x11;
constexpr uint32_t kKeySlots = 4096;
constexpr size_t kMaxPeerObjects = 32;  // mappings kept per peer

struct ProcSlot {
  std::atomic<int32_t> pid;
  uint64_t start_time;
  std::atomic<uint32_t> generation;
  // The key this process is writing through right now (KeyTag), or 0: a
  // process writes into one peer MR at a time, under its engine lock.
  std::atomic<uint64_t> placing;
};

struct DirEntry {
  std::atomic<uint32_t> qpn;  // 0: free
  std::atomic<int32_t> slot;
  std::atomic<uint32_t> write_type;  // Fabric::PublishQpLocked
  std::atomic<uint64_t> pd;
};

// An MR peers may write into (Fabric::PublishKey), at its key index.
struct KeyEntry {
  // The rkey while published; 0 free; ClaimMark(slot) while being filled in.
  std::atomic<uint32_t> key;
  int32_t slot;
  uint32_t generation;
  uint32_t object;
  uint32_t access;
  uint64_t object_size;
  uint64_t object_offset;
  uint64_t iova;
  uint64_t length;
  uint64_t pd;
};

struct DeviceState {
  std::atomic<uint32_t> next_qpn;
  std::atomic<uint32_t> next_key;
  DirEntry dir[kDirSize];
  KeyEntry keys[kKeySlots];
};

// Never an rkey (their low byte is 0x01), and names the claiming slot.
uint32_t ClaimMark(int slot) { return 0xfe | (static_cast<uint32_t>(slot) << 8); }

uint64_t KeyTag(int device_index, uint32_t rkey) {
  return (static_cast<uint64_t>(device_index + 1) << 32) | rkey;
}

// /proc/<pid>/stat field 22: the start time, to tell a reused pid apart.
uint64_t StartTime(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return 0;
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(line.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i) {
    if (i == 22) return std::strtoull(field.c_str(), nullptr, 10);
  }
  return 0;
}

bool Alive(int pid, uint64_t start_time) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  const uint64_t now = StartTime(pid);
  return now == 0 || start_time == 0 || now == start_time;
}

bool Zombie(int pid);  // below, with the mailbox

std::string RingName(const std::string& segment, int slot) { return segment + "-p" + std::to_string(slot); }

void* MapShared(const std::string& name, size_t size, bool create, int* err) {
  const int fd = shm_open(name.c_str(), O_RDWR | (create ? O_CREAT | O_TRUNC : 0) | O_CLOEXEC, 0600);
  if (fd < 0) {
    *err = errno;
    return nullptr;
  }
  if (create && ftruncate(fd, static_cast<off_t>(size)) != 0) {
    *err = errno;
    close(fd);
    return nullptr;
  }
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    *err = errno;
    return nullptr;
  }
  return p;
}

uint64_t HashFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return std::hash<std::string>{}(ss.str());
}

class SegmentLock {
 public:
  explicit SegmentLock(pthread_mutex_t* mu) : mu_(mu) {
    // Robust: the owner may have been killed while holding it.
    if (pthread_mutex_lock(mu_) == EOWNERDEAD) pthread_mutex_consistent(mu_);
  }
  ~SegmentLock() { pthread_mutex_unlock(mu_); }

 private:
  pthread_mutex_t* mu_;
};

}  // namespace

struct FabricSegment {
  uint64_t magic;
  std::atomic<uint32_t> ready;
  uint32_t unlinked;  // the last process left and removed the name
  uint64_t profile_hash;
  char profile_path[512];
  pthread_mutex_t mutex;
  ProcSlot procs[kMaxProcs];
  DeviceState devices[kMaxDevices];
  FaultMailbox faults;
};

Fabric& Fabric::Get() {
  static Fabric* fabric = new Fabric();  // leaked: used from atexit
  return *fabric;
}

// Takes a slot in `seg` and creates our ring. Requires: the segment's mutex.
// On failure returns the error and leaves segment_ unset.
std::string Fabric::JoinLocked(FabricSegment* seg, const std::string& fabric, const std::string& profile_path,
                               uint64_t profile_hash) {
  segment_ = seg;
  CleanDeadLocked();
  bool others = false;
  for (auto& proc : seg->procs) others |= proc.pid.load() != 0;
  std::string error;
  if (!others) {
    // The first process fixes the profile of the fabric.
    seg->profile_hash = profile_hash;
    std::snprintf(seg->profile_path, sizeof seg->profile_path, "%s", profile_path.c_str());
  } else if (seg->profile_hash != profile_hash) {
    error = "fabric \"" + fabric + "\" is running with profile " + seg->profile_path + ", this process asked for " +
            profile_path + " (use the same profile, or another SIMVERBS_FABRIC)";
  }
  for (int i = 0; error.empty() && i < kMaxProcs && slot_ < 0; ++i) {
    if (seg->procs[i].pid.load() == 0) slot_ = i;
  }
  if (error.empty() && slot_ < 0) {
    error = "fabric \"" + fabric + "\" has " + std::to_string(kMaxProcs) + " processes already";
  }
  if (error.empty()) {
    int err = 0;
    ring_name_ = RingName(segment_name_, slot_);
    void* ring_mem = MapShared(ring_name_, sizeof(PacketRing), true, &err);
    if (!ring_mem) error = "cannot create " + ring_name_ + ": " + strerror(err);
    if (ring_mem) ring_ = PacketRing::Init(ring_mem);
  }
  if (!error.empty()) {
    segment_ = nullptr;
    slot_ = -1;
    return error;
  }
  TakeFaultStateLocked();
  ProcSlot& me = seg->procs[slot_];
  me.start_time = StartTime(getpid());
  me.generation.fetch_add(1);
  me.placing.store(0);
  me.pid.store(getpid());
  return "";
}

std::string Fabric::Attach() {
  std::lock_guard<std::mutex> attach_lock(attach_mu_);
  if (segment_ && attach_pid_ == getpid()) return "";
  if (segment_) {
    // A child of fork(): the parent's attachment (its slot, ring and objects)
    // is not ours. Forget it without touching it and join as a new process.
    ring_ = nullptr;
    slot_ = -1;
    segment_ = nullptr;
    // The thread object names the parent's thread, which does not exist here:
    // forget it without joining or detaching.
    new (&progress_) std::thread();
    for (auto& q : backlog_) q.clear();
    backlog_empty_ = true;
    for (auto& r : peer_rings_) r = nullptr;
    for (bool& p : pushed_) p = false;
  }
  const char* env = std::getenv("SIMVERBS_FABRIC");
  const std::string fabric = env && *env ? env : "default";
  for (char c : fabric) {
    if (!isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') {
      return "SIMVERBS_FABRIC=\"" + fabric + "\": use letters, digits, '-', '_' and '.' only";
    }
  }
  segment_name_ = "/simverbs-" + std::to_string(getuid()) + "-" + fabric;
  const Profile& profile = DeviceList::Get().profile();
  const uint64_t profile_hash = HashFile(profile.path);

  FabricSegment* seg = nullptr;
  slot_ = -1;
  for (int attempt = 0; attempt < 100 && !seg; ++attempt) {
    int fd = shm_open(segment_name_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    const bool creator = fd >= 0;
    if (!creator) {
      if (errno != EEXIST) return "cannot create the fabric's shared memory " + segment_name_ + ": " + strerror(errno);
      fd = shm_open(segment_name_.c_str(), O_RDWR | O_CLOEXEC, 0600);
      if (fd < 0) continue;  // removed meanwhile: try again
    } else if (ftruncate(fd, sizeof(FabricSegment)) != 0) {
      const int err = errno;
      close(fd);
      shm_unlink(segment_name_.c_str());
      return "cannot size the fabric's shared memory " + segment_name_ + ": " + strerror(err);
    }
    struct stat st {};
    // The creator sizes the segment right after creating it.
    for (int i = 0; i < 1000 && fstat(fd, &st) == 0 && st.st_size < static_cast<off_t>(sizeof(FabricSegment)); ++i) {
      usleep(1000);
    }
    void* p = st.st_size >= static_cast<off_t>(sizeof(FabricSegment)) || creator
                  ? mmap(nullptr, sizeof(FabricSegment), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                  : MAP_FAILED;
    close(fd);
    if (p == MAP_FAILED) continue;
    auto* candidate = static_cast<FabricSegment*>(p);
    if (creator) {
      candidate->magic = kMagic;
      pthread_mutexattr_t attr;
      pthread_mutexattr_init(&attr);
      pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
      pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
      pthread_mutex_init(&candidate->mutex, &attr);
      for (auto& d : candidate->devices) {
        d.next_qpn.store(kFirstQpn);
        d.next_key.store(1);
      }
      candidate->ready.store(1, std::memory_order_release);
    }
    for (int i = 0; i < 1000 && !candidate->ready.load(std::memory_order_acquire); ++i) usleep(1000);
    if (candidate->magic != kMagic || !candidate->ready.load()) {
      munmap(candidate, sizeof(FabricSegment));
      return "shared memory " + segment_name_ + " is not a simverbs fabric (remove it or set SIMVERBS_FABRIC)";
    }
    std::string error;
    {
      SegmentLock lock(&candidate->mutex);
      if (!candidate->unlinked) error = JoinLocked(candidate, fabric, profile.path, profile_hash);
    }
    if (!error.empty()) {
      munmap(candidate, sizeof(FabricSegment));
      return error;
    }
    seg = segment_;
    if (!seg) munmap(candidate, sizeof(FabricSegment));
  }
  if (!seg) return "cannot join fabric \"" + fabric + "\"";
  attach_pid_ = getpid();
  stop_ = false;
  progress_ = std::thread([this] { ProgressThread(); });
  static bool registered = false;
  if (!registered) {
    registered = true;
    std::atexit([] { Fabric::Get().Detach(); });
    // A child of fork() must not drain the parent's ring (packets for the
    // parent's QPs): it has none until it opens a device and joins itself.
    pthread_atfork(nullptr, nullptr, [] { Fabric::Get().ring_ = nullptr; });
  }
  return "";
}

// Frees every QP number that the process in `slot` owned.
// Requires: segment mutex held.
void Fabric::ForgetQpnsLocked(int slot) {
  for (auto& dev : segment_->devices) {
    for (auto& e : dev.dir) {
      if (e.qpn.load() != 0 && e.slot.load() == slot) {
        e.write_type.store(0);
        e.slot.store(-1);
        e.qpn.store(0);
      }
    }
  }
}

// Requires: segment mutex held.
void Fabric::CleanDeadLocked() {
  for (int i = 0; i < kMaxProcs; ++i) {
    ProcSlot& proc = segment_->procs[i];
    const int pid = proc.pid.load();
    if (pid == 0 || Alive(pid, proc.start_time)) continue;
    ForgetQpnsLocked(i);
    ForgetKeysLocked(i);
    shm_unlink(RingName(segment_name_, i).c_str());
    proc.pid.store(0);
  }
}

void Fabric::Detach() {
  if (!segment_ || getpid() != attach_pid_) return;
  stop_ = true;
  ring_->MarkPolled(0);
  ring_->Interrupt();
  if (progress_.joinable()) progress_.join();
  bool last = false;
  {
    SegmentLock lock(&segment_->mutex);
    ForgetQpnsLocked(slot_);
    ForgetKeysLocked(slot_);
    shm_unlink(ring_name_.c_str());
    segment_->procs[slot_].pid.store(0);
    CleanDeadLocked();
    last = true;
    for (auto& proc : segment_->procs) last &= proc.pid.load() == 0;
    if (last) {
      // Nobody else is attached: remove the name so nothing is left behind.
      segment_->unlinked = 1;
      shm_unlink(segment_name_.c_str());
    }
  }
  // Detach runs at exit, while the program's other threads may still poll
  // or post through these mappings: they stay until the process is gone.
  // The slot is not ours any more: a second Detach must not release it.
  attach_pid_ = 0;
}

uint32_t Fabric::AllocQpn(int device_index) {
  if (!segment_ || device_index >= kMaxDevices) return 0;
  DeviceState& d = segment_->devices[device_index];
  for (uint32_t tries = 0; tries < 4 * kDirSize; ++tries) {
    uint32_t qpn = d.next_qpn.fetch_add(1) & 0xffffff;
    if (qpn < kFirstQpn) continue;
    DirEntry& e = d.dir[qpn % kDirSize];
    uint32_t expected = 0;
    // Claim first, then publish the owner: an entry in use keeps its slot.
    // (A sender that sees the number before the slot finds slot -1 and retries.)
    if (e.qpn.compare_exchange_strong(expected, qpn)) {
      e.write_type.store(0);
      e.slot.store(slot_);
      return qpn;
    }
  }
  return 0;  // the device's QP table is full
}

bool Fabric::ClaimQpn(int device_index, uint32_t qpn) {
  if (!segment_ || device_index >= kMaxDevices) return false;
  DirEntry& e = segment_->devices[device_index].dir[qpn % kDirSize];
  uint32_t expected = 0;
  if (!e.qpn.compare_exchange_strong(expected, qpn)) return false;
  e.write_type.store(0);
  e.slot.store(slot_);
  return true;
}

void Fabric::ReleaseQpn(int device_index, uint32_t qpn) {
  if (!segment_ || device_index >= kMaxDevices) return;
  DirEntry& e = segment_->devices[device_index].dir[qpn % kDirSize];
  if (e.qpn.load() == qpn) {
    e.write_type.store(0);
    e.slot.store(-1);
    e.qpn.store(0);
  }
}

uint32_t Fabric::AllocKeyIndex(int device_index) {
  if (!segment_ || device_index >= kMaxDevices) return 0;
  return segment_->devices[device_index].next_key.fetch_add(1) & 0xffffff;
}

// Requires: segment mutex held.
void Fabric::ForgetKeysLocked(int slot) {
  for (auto& dev : segment_->devices) {
    for (KeyEntry& k : dev.keys) {
      uint32_t key = k.key.load();
      if (key == ClaimMark(slot) || (key != 0 && (key & 0xff) != 0xfe && k.slot == slot)) {
        k.key.compare_exchange_strong(key, 0);
      }
    }
  }
  // Every object named after the slot, whether or not a key still names it.
  const std::string prefix = SharedRegions::ObjectPrefix(RingName(segment_name_, slot)).substr(1);
  if (DIR* dir = opendir("/dev/shm")) {
    while (const dirent* d = readdir(dir)) {
      if (std::strncmp(d->d_name, prefix.c_str(), prefix.size()) == 0) {
        shm_unlink(("/" + std::string(d->d_name)).c_str());
      }
    }
    closedir(dir);
  }
}

bool Fabric::PublishKey(int device_index, uint32_t rkey, const PublishedKey& key) {
  if (!segment_ || device_index < 0 || device_index >= kMaxDevices) return false;
  KeyEntry& k = segment_->devices[device_index].keys[(rkey >> 8) % kKeySlots];
  uint32_t expected = 0;
  if (!k.key.compare_exchange_strong(expected, ClaimMark(slot_))) return false;  // another live key's place
  k.slot = slot_;
  k.generation = segment_->procs[slot_].generation.load();
  k.object = key.object;
  k.access = key.access;
  k.object_size = key.object_size;
  k.object_offset = key.object_offset;
  k.iova = key.iova;
  k.length = key.length;
  k.pd = key.pd;
  k.key.store(rkey, std::memory_order_seq_cst);
  return true;
}

void Fabric::RevokeKey(int device_index, uint32_t rkey) {
  if (!segment_ || device_index < 0 || device_index >= kMaxDevices) return;
  KeyEntry& k = segment_->devices[device_index].keys[(rkey >> 8) % kKeySlots];
  uint32_t expected = rkey;
  if (!k.key.compare_exchange_strong(expected, 0, std::memory_order_seq_cst)) return;
  // Dekker with PlaceWrite: a writer announces the key, then looks at it; we
  // withdrew it, now look at the announcements. A writer that got in first
  // finishes its copy; a dead one never will.
  const uint64_t tag = KeyTag(device_index, rkey);
  for (int i = 0; i < kMaxProcs; ++i) {
    ProcSlot& proc = segment_->procs[i];
    for (uint64_t spins = 1; proc.placing.load(std::memory_order_seq_cst) == tag; ++spins) {
      if (spins % 4096 == 0 && !Alive(proc.pid.load(), proc.start_time)) break;
      if (spins > 64) sched_yield();
    }
  }
}

void Fabric::PublishQpLocked(int device_index, uint32_t qpn, uint64_t pd, uint32_t write_type) {
  if (!segment_ || device_index < 0 || device_index >= kMaxDevices) return;
  DirEntry& e = segment_->devices[device_index].dir[qpn % kDirSize];
  if (e.qpn.load() != qpn || e.slot.load() != slot_) return;
  e.pd.store(pd);
  e.write_type.store(write_type);
}

uint8_t* Fabric::MapPeerObject(int slot, uint32_t generation, uint32_t object, uint64_t size) {
  std::vector<PeerObject>& objects = peer_objects_[slot];
  if (!objects.empty() && objects.front().generation != generation) {
    for (const PeerObject& o : objects) munmap(o.base, o.size);  // the slot is another process's now
    objects.clear();
  }
  for (const PeerObject& o : objects) {
    if (o.object == object && o.size >= size) return o.base;
  }
  if (objects.size() >= kMaxPeerObjects) {
    munmap(objects.front().base, objects.front().size);  // the one mapped longest ago
    objects.erase(objects.begin());
  }
  const std::string name = SharedRegions::ObjectName(RingName(segment_name_, slot), object);
  const int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return nullptr;
  struct stat st {};
  void* p = MAP_FAILED;
  if (fstat(fd, &st) == 0 && static_cast<uint64_t>(st.st_size) >= size) {
    p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  close(fd);
  if (p == MAP_FAILED) return nullptr;
  objects.push_back(PeerObject{generation, object, static_cast<uint8_t*>(p), size});
  return static_cast<uint8_t*>(p);
}

int Fabric::OwnerSlot(int device_index, uint32_t qpn) const {
  if (!segment_ || device_index < 0 || device_index >= kMaxDevices) return -1;
  const DirEntry& e = segment_->devices[device_index].dir[qpn % kDirSize];
  const int slot = e.slot.load();
  // Any process writes the directory: a slot out of range is nobody.
  return e.qpn.load() == qpn && slot >= 0 && slot < kMaxProcs ? slot : -1;
}

bool Fabric::PlaceWrite(int device_index, uint32_t dst_qpn, ibv_qp_type type, uint32_t rkey, uint64_t va,
                        uint64_t length, const std::function<void(uint8_t*)>& gather) {
  const int slot = OwnerSlot(device_index, dst_qpn);
  if (slot < 0 || slot == slot_ || length == 0) return false;
  DeviceState& d = segment_->devices[device_index];
  const DirEntry& e = d.dir[dst_qpn % kDirSize];
  if (e.write_type.load() != static_cast<uint32_t>(type) + 1) return false;
  const uint64_t pd = e.pd.load();
  const KeyEntry& k = d.keys[(rkey >> 8) % kKeySlots];
  std::atomic<uint64_t>& placing = segment_->procs[slot_].placing;
  placing.store(KeyTag(device_index, rkey), std::memory_order_seq_cst);
  // While we announce the key, its owner cannot withdraw it and reuse its
  // entry: the fields below stay as they were published.
  bool placed = false;
  if (k.key.load(std::memory_order_seq_cst) == rkey && k.slot == slot &&
      k.generation == segment_->procs[slot].generation.load() && k.pd == pd &&
      (k.access & IBV_ACCESS_REMOTE_WRITE) && va >= k.iova && length <= k.length && va - k.iova <= k.length - length &&
      k.object_offset <= k.object_size && k.length <= k.object_size - k.object_offset) {
    if (uint8_t* base = MapPeerObject(slot, k.generation, k.object, k.object_size)) {
      gather(base + k.object_offset + (va - k.iova));
      placed = true;
    }
  }
  placing.store(0, std::memory_order_release);
  return placed;
}

bool Fabric::SendRemote(int device_index, const Packet& pkt) {
  const int slot = OwnerSlot(device_index, pkt.dst_qpn);
  if (slot < 0 || slot == slot_) return false;
  PacketRing*& ring = peer_rings_[slot];
  const uint32_t generation = segment_->procs[slot].generation.load();
  if (ring && peer_generation_[slot] != generation) {
    munmap(ring, sizeof(PacketRing));  // the slot belongs to another process now
    ring = nullptr;
  }
  if (!ring) {
    int err = 0;
    ring = static_cast<PacketRing*>(MapShared(RingName(segment_name_, slot), sizeof(PacketRing), false, &err));
    peer_generation_[slot] = generation;
    if (!ring) return false;
  }
  uint64_t pos = 0;
  if (!backlog_[slot].empty() || !ring->Push(pkt, pkt.src_device ? pkt.src_device->index() : 0, &pos)) {
    backlog_[slot].push_back(pkt);
    backlog_empty_ = false;
    return true;
  }
  last_pushed_[slot] = pos;
  pushed_[slot] = true;
  return true;
}

void Fabric::FlushBacklogLocked() {
  if (backlog_empty_) return;
  bool empty = true;
  for (int slot = 0; slot < kMaxProcs; ++slot) {
    std::deque<Packet>& q = backlog_[slot];
    if (q.empty()) continue;
    const ProcSlot& proc = segment_->procs[slot];
    if (!peer_rings_[slot] || peer_generation_[slot] != proc.generation.load() ||
        !Alive(proc.pid.load(), proc.start_time)) {
      q.clear();  // the peer is gone: what it did not take is lost
      continue;
    }
    uint64_t pos = 0;
    while (!q.empty() && peer_rings_[slot]->Push(q.front(), q.front().src_device ? q.front().src_device->index() : 0,
                                                 &pos)) {
      q.pop_front();
      last_pushed_[slot] = pos;
      pushed_[slot] = true;
    }
    empty &= q.empty();
  }
  backlog_empty_ = empty;
}

bool Fabric::DeliveryPending(int device_index, uint32_t qpn) {
  const int slot = OwnerSlot(device_index, qpn);
  if (slot < 0 || slot == slot_ || !peer_rings_[slot] || !pushed_[slot]) return false;
  if (backlog_[slot].empty() && peer_rings_[slot]->Consumed(last_pushed_[slot])) return false;
  const ProcSlot& proc = segment_->procs[slot];
  return Alive(proc.pid.load(), proc.start_time);
}

bool Fabric::OwnerAlive(int device_index, uint32_t qpn) {
  const int slot = OwnerSlot(device_index, qpn);
  if (slot < 0) return false;
  if (slot == slot_) return true;
  const ProcSlot& proc = segment_->procs[slot];
  return Alive(proc.pid.load(), proc.start_time) && !Zombie(proc.pid.load());
}

void Fabric::PollInbound() {
  if (!ring_) return;
  const uint64_t now = MonotonicNs();
  ring_->MarkPolled(now);
  app_poll_ns_.store(now, std::memory_order_relaxed);
  DrainInbound();
  if (!backlog_empty_) {
    std::lock_guard<std::mutex> lock(Engine::Get().mu());
    FlushBacklogLocked();
  }
}

void Fabric::PollFoundWork() {
  if (ring_) ring_->MarkPolled(0);
}

void Fabric::BeforeBlocking() {
  if (!ring_) return;
  ring_->MarkPolled(0);
  DrainInbound();
}

bool Fabric::DrainInbound() {
  if (ring_->Empty()) return false;
  std::lock_guard<std::mutex> lock(Engine::Get().mu());
  DrainInboundLocked();
  return true;
}

void Fabric::DrainInboundLocked() {
  if (!ring_) return;
  FlushBacklogLocked();
  const auto& devices = DeviceList::Get().devices();
  Packet pkt;
  pkt.payload = Engine::Get().PayloadBuffer();
  while (ring_->Pop([&](const WirePacket& wp) {
    Device* src = wp.src_device >= 0 && static_cast<size_t>(wp.src_device) < devices.size()
                      ? devices[wp.src_device].get()
                      : nullptr;
    wp.ToPacket(src, &pkt);
  })) {
    Engine::Get().Transmit(std::move(pkt));
    pkt = Packet();
    pkt.payload = Engine::Get().PayloadBuffer();
  }
  Engine::Get().RecyclePayload(std::move(pkt.payload));
}

namespace {

// How long the progress thread keeps looking at its ring after it found work.
constexpr uint64_t kLookAfterWorkNs = 50'000;

void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

void Fabric::ProgressThread() {
  uint64_t look_until = 0;
  for (;;) {
    const uint32_t seq = ring_->WakeSeq();
    if (stop_) break;
    HandleFaults();
    const bool worked = DrainInbound();
    if (!backlog_empty_) {
      std::lock_guard<std::mutex> lock(Engine::Get().mu());
      FlushBacklogLocked();
    }
    // A peer streaming to a program that does not poll (a bandwidth server
    // asleep in a socket read): keep looking a moment before sleeping, so the
    // stream costs the producer no wake-up system call per burst, nor us a
    // context switch. A program that polls drains the ring itself: then we
    // stay out of its way.
    const uint64_t now = MonotonicNs();
    if (worked) look_until = now + kLookAfterWorkNs;
    if (now < look_until && now - app_poll_ns_.load(std::memory_order_relaxed) >= 10'000'000) {
      CpuRelax();
      continue;
    }
    // While the application polls, producers do not wake us: look again
    // every millisecond in case it stopped just after a producer looked
    // (and while a backlog waits for room in a peer's ring). Otherwise look
    // again every 20 ms all the same: an application that polls once more
    // after we went to sleep, and stops right after a producer looked, would
    // leave that packet in the ring for good.
    const bool app_polling = MonotonicNs() - ring_->last_poll_ns() < 10'000'000;
    ring_->Sleep(seq, app_polling || !backlog_empty_ ? 1 : 20);
  }
}

}  // namespace simverbs

// ---- Faults from outside: the mailbox (fault/mailbox.h).

namespace simverbs {
namespace {

// A process that exited without detaching (killed, or _exit) stays a zombie
// until its parent reaps it: kill(pid, 0) still succeeds, but it will never
// answer.
bool Zombie(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return false;
  const size_t close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z';
}

}  // namespace

// Requires: segment mutex held, segment_ set.
void Fabric::TakeFaultStateLocked() {
  FaultMailbox& box = segment_->faults;
  faults_seen_ = box.last_seq.load(std::memory_order_acquire);
  const auto& devices = DeviceList::Get().devices();
  for (size_t d = 0; d < devices.size() && d < FaultMailbox::kMaxDevices; ++d) {
    for (int port = 1; port <= devices[d]->port_count() && port <= FaultMailbox::kMaxPorts; ++port) {
      const int32_t state = box.port_state[d][port - 1].load();
      if (state != 0) devices[d]->SetPortState(port, static_cast<ibv_port_state>(state));
    }
  }
}

void Fabric::HandleFaults() {
  FaultMailbox& box = segment_->faults;
  const uint64_t last = box.last_seq.load(std::memory_order_acquire);
  // Only the last kRequests can still be in the ring; a corrupt last_seq
  // must not make us count through the rest.
  if (last > faults_seen_ + FaultMailbox::kRequests) faults_seen_ = last - FaultMailbox::kRequests;
  while (faults_seen_ < last) {
    const uint64_t seq = ++faults_seen_;
    FaultRequest& request = box.requests[seq % FaultMailbox::kRequests];
    if (request.seq.load(std::memory_order_acquire) != seq) continue;  // overwritten by a newer one
    const int delivered = HandleFaultRequest(request);
    request.delivered.fetch_add(static_cast<uint32_t>(delivered));
    request.answered.fetch_or(uint64_t{1} << slot_, std::memory_order_release);
  }
}

FaultPost Fabric::PostFault(const std::string& fabric,
                            const std::function<std::string(const std::string&, FaultRequest*)>& fill,
                            int timeout_ms) {
  FaultPost post;
  const std::string name = "/simverbs-" + std::to_string(getuid()) + "-" + fabric;
  const int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600);
  struct stat st {};
  if (fd >= 0 && (fstat(fd, &st) != 0 || st.st_size < static_cast<off_t>(sizeof(FabricSegment)))) {
    close(fd);
    post.error = "shared memory " + name + " is not a fabric of this simverbs version";
    return post;
  }
  if (fd < 0) {
    post.error = "no fabric \"" + fabric + "\" is running: no process has opened a simulated device with SIMVERBS_FABRIC=" +
                 fabric + " (start the program with 'simverbs run' and the same SIMVERBS_FABRIC, or set --fabric)";
    return post;
  }
  void* p = mmap(nullptr, sizeof(FabricSegment), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    post.error = "cannot map " + name + ": " + strerror(errno);
    return post;
  }
  auto* seg = static_cast<FabricSegment*>(p);
  if (seg->magic != kMagic) {
    munmap(seg, sizeof(FabricSegment));
    post.error = "shared memory " + name + " is not a fabric of this simverbs version";
    return post;
  }
  uint64_t waiting = 0;  // process slots that must answer
  FaultRequest* request = nullptr;
  uint64_t seq = 0;
  {
    SegmentLock lock(&seg->mutex);
    for (int i = 0; i < kMaxProcs; ++i) {
      const int pid = seg->procs[i].pid.load();
      if (pid != 0 && Alive(pid, seg->procs[i].start_time)) waiting |= uint64_t{1} << i;
    }
    FaultRequest fields{};
    if (seg->unlinked || waiting == 0) {
      post.error = "no process is attached to fabric \"" + fabric +
                   "\" (its programs have ended; start them with 'simverbs run' and the same SIMVERBS_FABRIC)";
    } else {
      post.error = fill(seg->profile_path, &fields);
    }
    if (post.error.empty()) {
      FaultMailbox& box = seg->faults;
      seq = box.last_seq.load() + 1;
      request = &box.requests[seq % FaultMailbox::kRequests];
      request->seq.store(0, std::memory_order_release);
      request->event = fields.event;
      request->device_index = fields.device_index;
      request->port_num = fields.port_num;
      request->object = fields.object;
      request->qpn = fields.qpn;
      request->answered.store(0);
      request->delivered.store(0);
      // The port state outlives the request: processes that join later see it.
      const int d = fields.device_index;
      const int port = fields.port_num;
      if (fields.object == FaultObject::kDevice && d >= 0 && d < FaultMailbox::kMaxDevices && port >= 1 &&
          port <= FaultMailbox::kMaxPorts) {
        if (fields.event == IBV_EVENT_PORT_ERR) box.port_state[d][port - 1].store(IBV_PORT_DOWN);
        if (fields.event == IBV_EVENT_PORT_ACTIVE) box.port_state[d][port - 1].store(IBV_PORT_ACTIVE);
      }
      request->seq.store(seq, std::memory_order_release);
      box.last_seq.store(seq, std::memory_order_release);
    }
  }
  if (!post.error.empty()) {
    munmap(seg, sizeof(FabricSegment));
    return post;
  }
  // Wake every progress thread: each handles the request on its own.
  for (int i = 0; i < kMaxProcs; ++i) {
    if (!(waiting & (uint64_t{1} << i))) continue;
    int err = 0;
    auto* ring = static_cast<PacketRing*>(MapShared(RingName(name, i), sizeof(PacketRing), false, &err));
    if (!ring) continue;
    ring->Interrupt();
    munmap(ring, sizeof(PacketRing));
  }
  const uint64_t deadline = MonotonicNs() + static_cast<uint64_t>(timeout_ms) * 1'000'000;
  uint64_t answered = 0;
  while (request->seq.load(std::memory_order_acquire) == seq) {
    answered = request->answered.load(std::memory_order_acquire) & waiting;
    if (answered == waiting || MonotonicNs() > deadline) break;
    // A process that exits meanwhile will never answer.
    for (int i = 0; i < kMaxProcs; ++i) {
      if ((waiting & (uint64_t{1} << i)) && !(answered & (uint64_t{1} << i)) &&
          (!Alive(seg->procs[i].pid.load(), seg->procs[i].start_time) || Zombie(seg->procs[i].pid.load()))) {
        waiting &= ~(uint64_t{1} << i);
      }
    }
    usleep(1000);
  }
  post.processes = __builtin_popcountll(waiting);  // without those that exited meanwhile
  post.answered = __builtin_popcountll(answered);
  for (int i = 0; i < kMaxProcs; ++i) {
    if ((waiting & ~answered) & (uint64_t{1} << i)) {
      post.silent += (post.silent.empty() ? "" : " ") + std::to_string(seg->procs[i].pid.load());
    }
  }
  post.delivered = request->delivered.load();
  munmap(seg, sizeof(FabricSegment));
  return post;
}

}  // namespace simverbs
