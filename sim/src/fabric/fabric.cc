#include "fabric/fabric.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
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
#include "fabric/profile_gids.h"
#include "fabric/file_lock.h"
#include "fabric/shm_object.h"
#include "fault/fault_points.h"
#include "fault/inject.h"
#include "fault/mailbox.h"
#include "qp.h"
#include "quiet_thread.h"
#include "read_once.h"
#include "transport/cumulative_ack.h"
#include "transport/engine.h"
#include "transport/lock_spinning.h"
#include "transport/response_stream.h"

namespace simverbs {
namespace {

// The low byte is the version of the layout of the segment and of its rings' packets.
constexpr uint64_t kMagic = 0x53494d4641425249;  // "SIMFABRI"
constexpr int kMaxProcs = kMaxFabricProcesses;
constexpr int kMaxDevices = 16;
constexpr int kMaxPorts = 254;  // a profile's limit
constexpr uint32_t kDirSize = 8192;
constexpr uint32_t kFirstQpn = 0x11;
constexpr uint32_t kKeySlots = 4096;
// How long ibv_dereg_mr waits for a live peer that is writing into the MR
// (a stopped one, say) before it stops waiting for it.
constexpr uint64_t kRevokeWaitNs = 2'000'000'000;

// A fabric's name becomes part of file names in /dev/shm: letters, digits, '-', '_' and '.' only.
bool ValidFabricName(const std::string& name) {
  for (char c : name) {
    if (!isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') return false;
  }
  return true;
}

}  // namespace

struct ProcSlot {
  // In the PID namespace pid_namespace names: for messages, and for placing
  // WRITEs from the same namespace. Liveness never looks at it.
  std::atomic<int32_t> pid;
  std::atomic<uint64_t> pid_namespace;
  std::atomic<uint32_t> generation;
  // The key and QP this process is writing or reading through right now
  // (PlaceTag), or the QP whose SEND it is pulling (PullTag), or 0: a process
  // places or pulls one message at a time, under its engine lock.
  std::atomic<uint64_t> placing;
  // 1 while its application polls in a loop (as its progress thread sees it):
  // counted against the CPUs (Fabric::LookForOversubscription).
  std::atomic<uint32_t> app_spinning;
  // The CPUs it may run on (sched_getaffinity at attach): CPU n is bit n % 64.
  std::atomic<uint64_t> cpus;
  // How many of its keys with a file it has withdrawn: writers that mapped
  // its files look again at their windows when this moves.
  std::atomic<uint32_t> files_revoked;
};

namespace {

struct DirEntry {
  std::atomic<uint32_t> qpn;  // 0: free
  std::atomic<int32_t> slot;
  std::atomic<uint32_t> accepts;  // Fabric::PublishQpLocked
  std::atomic<uint64_t> pd;
  // The epoch under which the QP's responder may pull the bytes of its SENDs
  // (Fabric::GrantPullsLocked); 0: none.
  std::atomic<uint32_t> pulls;
  // The requester its responder takes requests from (ConnectionTag) and the
  // PSN it expected first (rq_psn); written before `accepts`.
  std::atomic<uint32_t> peer;
  std::atomic<uint32_t> rq_psn;
};

// An MR peers may write into or read from (Fabric::PublishKey), at its key index. The
// fields are atomics so that a reader takes each value once.
struct KeyEntry {
  // The rkey while published; 0 free; ClaimMark(slot) while being filled in.
  std::atomic<uint32_t> key;
  std::atomic<int32_t> slot;
  std::atomic<uint32_t> generation;
  std::atomic<uint32_t> access;
  std::atomic<uint64_t> addr;
  std::atomic<uint64_t> iova;
  std::atomic<uint64_t> length;
  std::atomic<uint64_t> pd;
  // PublishedKey's file_*.
  std::atomic<int32_t> file_fd;
  std::atomic<uint64_t> file_dev;
  std::atomic<uint64_t> file_ino;
  std::atomic<uint64_t> file_offset;
};

struct DeviceState {
  std::atomic<uint32_t> next_qpn;
  std::atomic<uint32_t> next_key;
  DirEntry dir[kDirSize];
  KeyEntry keys[kKeySlots];
  // Port counters (sysfs ports/<n>/counters/<name>), index 0 = port 1: the
  // port is one for every process that opens the device.
  std::atomic<uint64_t> port_xmit_discards[kMaxPorts];
};

// Never an rkey (their low byte is 0x01), and names the claiming slot.
uint32_t ClaimMark(int slot) { return 0xfe | (static_cast<uint32_t>(slot) << 8); }

// What `k` (the entry of `rkey` on device `device_index`, of `length`
// bytes) publishes of the file behind the MR, each field read once.
FileWindowKey PublishedFile(const KeyEntry& k, int device_index, uint32_t rkey, uint64_t length) {
  FileWindowKey file;
  file.device = device_index;
  file.rkey = rkey;
  file.fd = k.file_fd.load(std::memory_order_relaxed);
  file.dev = k.file_dev.load(std::memory_order_relaxed);
  file.ino = k.file_ino.load(std::memory_order_relaxed);
  file.offset = k.file_offset.load(std::memory_order_relaxed);
  file.length = length;
  return file;
}

// What a process announces while it writes or reads through `rkey` into a
// QP of another process (Fabric::Place): the key in the low 40 bits, which
// ibv_dereg_mr waits on (kKeyTagMask), and the QP above them, which a state
// change that stops the QP's remote access waits on (kQpTagMask).
uint64_t PlaceTag(int device_index, uint32_t rkey, uint32_t qpn) {
  return (static_cast<uint64_t>(qpn & 0xffffff) << 40) | (static_cast<uint64_t>(device_index + 1) << 32) | rkey;
}
constexpr uint64_t kKeyTagMask = (uint64_t{1} << 40) - 1;
constexpr uint64_t kQpTagMask = ~uint64_t{0} << 32;
uint64_t KeyTag(int device_index, uint32_t rkey) { return PlaceTag(device_index, rkey, 0); }
uint64_t QpTag(int device_index, uint32_t qpn) { return PlaceTag(device_index, 0, qpn); }

// Never a PlaceTag of a published key: an rkey's low byte is 0x01.
uint64_t PullTag(int device_index, uint32_t qpn) {
  return (static_cast<uint64_t>(device_index + 1) << 32) | ((qpn & 0xffffff) << 8) | 0x02;
}

// Our announcement in ProcSlot::placing (a PlaceTag or a PullTag) for as
// long as this lives: withdrawn on every way out of Fabric::Place and
// Fabric::PullSend.
class Announcement {
 public:
  Announcement(std::atomic<uint64_t>& placing, uint64_t tag) : placing_(placing) {
    placing_.store(tag, std::memory_order_seq_cst);
  }
  ~Announcement() { placing_.store(0, std::memory_order_release); }
  Announcement(const Announcement&) = delete;
  Announcement& operator=(const Announcement&) = delete;

 private:
  std::atomic<uint64_t>& placing_;
};

// The segment file's bytes locked (fabric/file_lock.h): byte 0 is the
// fabric's lock, byte 1 + slot the liveness of the process in that slot.
constexpr off_t kFabricLockByte = 0;
off_t LivenessByte(int slot) { return 1 + slot; }

// Whether the process in `slot` is attached: it holds its liveness byte
// (fabric.h). `fd`: our descriptor of the segment.
bool SlotAlive(int fd, int slot) { return ByteLockedByOther(fd, LivenessByte(slot)); }

// Whether another process is attached: holds a liveness byte (the fabric's
// own byte is ours while we ask, under the fabric's lock). One look at the
// locks, never at the pid fields, which any process may have written.
bool OthersAttached(int fd) { return FileLockedByOther(fd); }

// Whether clean may judge a segment with this magic by the kernel's locks on
// its file. Versions up to "SIMFABR4" kept their processes' liveness in the
// segment itself: not ours to judge. Every later version holds a lock on the
// file for each process attached, so a segment of any other magic (this
// version's, a later one's, a version byte or a magic a stray write garbled)
// is judged by its locks: a garbled byte must not keep a dead fabric forever.
bool JudgedByLocks(uint64_t magic) {
  const uint64_t version = magic & 0xff;
  return (magic >> 8) != (kMagic >> 8) || version < '0' || version > '4';
}

// "+": no fabric's name holds one, so no ring's name is another fabric's
// segment (with "-p<slot>", fabric "job"'s ring 1 was fabric "job-p1").
constexpr char kRingSeparator[] = "+p";
std::string RingName(const std::string& segment, int slot) {
  return segment + kRingSeparator + std::to_string(slot);
}

std::string SegmentPrefix() { return "/simverbs-" + std::to_string(geteuid()) + "-"; }

uint64_t HashFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return std::hash<std::string>{}(ss.str());
}

// The fabric's lock: a lock the kernel keeps on the segment file, so another
// process can neither corrupt it nor, by dying, keep it. Bounded all the same.
class SegmentLock {
 public:
  // `timeout_ms` 0: only if it is free now.
  explicit SegmentLock(int fd, int timeout_ms = 10000) : fd_(fd), locked_(LockByte(fd, kFabricLockByte, timeout_ms)) {}
  ~SegmentLock() {
    if (locked_) UnlockByte(fd_, kFabricLockByte);
  }
  bool locked() const { return locked_; }
  static constexpr const char* kNotLocked =
      "the fabric's lock has been held for 10 s (a process of this user is stuck holding it): use another "
      "SIMVERBS_FABRIC, or end the fabric's programs and run 'simverbs clean'";

 private:
  int fd_;
  bool locked_;
};

}  // namespace

struct FabricSegment {
  uint64_t magic;
  std::atomic<uint32_t> ready;
  uint32_t unlinked;  // the last process left and removed the name
  uint64_t profile_hash;
  char profile_path[512];
  ProcSlot procs[kMaxProcs];
  DeviceState devices[kMaxDevices];
  FaultMailbox faults;
};

namespace {

// A descriptor of its own for the file `mapped_fd` maps, for our locks (see
// Liveness in fabric.h), never mapped: a mapping keeps the description it was
// made from (mmap(2)) and a child of fork() inherits the mapping, while an OFD
// lock goes only with the last close of its description (fcntl(2)), so a lock
// on the mapped one would keep a killed process alive as long as a child of
// it lives. -1 with *err 0 when `name` names another file now (removed meanwhile).
int LockDescriptor(const std::string& name, int mapped_fd, int* err) {
  *err = 0;
  const int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) {
    if (errno != ENOENT) *err = errno;
    return -1;
  }
  struct stat mine {}, mapped {};
  if (fstat(fd, &mine) != 0 || fstat(mapped_fd, &mapped) != 0 || mine.st_dev != mapped.st_dev ||
      mine.st_ino != mapped.st_ino) {
    close(fd);
    return -1;
  }
  return fd;
}

// Maps the fabric segment `name`, creating it if there is none; *fd is the
// descriptor it was mapped from (never one for our locks: LockDescriptor).
// nullptr with an empty *error: it was removed meanwhile, try again.
FabricSegment* MapSegment(const std::string& name, int* fd, std::string* error, int* err) {
  ShmMapping m = CreateShmInitialized(name, sizeof(FabricSegment), [](void* memory) {
    auto* seg = static_cast<FabricSegment*>(memory);
    seg->magic = kMagic;
    for (auto& d : seg->devices) {
      d.next_qpn.store(kFirstQpn);
      d.next_key.store(1);
    }
    seg->ready.store(1, std::memory_order_release);
  }, true);
  *fd = m.fd;
  if (m.addr) return static_cast<FabricSegment*>(m.addr);
  if (m.err != EEXIST) {
    *error = m.error;
    *err = m.err;
    return nullptr;
  }
  m = OpenShm(name, sizeof(FabricSegment), true);
  if (!m.addr) {
    if (m.err != ENOENT) {
      *error = m.error;
      *err = m.err;
    }
    return nullptr;
  }
  *fd = m.fd;
  auto* seg = static_cast<FabricSegment*>(m.addr);
  // Without O_TMPFILE the creator initialises it after naming it (bounded: 1 s).
  for (int i = 0; i < 1000 && !seg->ready.load(std::memory_order_acquire); ++i) usleep(1000);
  if (seg->magic != kMagic || !seg->ready.load(std::memory_order_acquire)) {
    munmap(seg, sizeof(FabricSegment));
    close(*fd);
    *fd = -1;
    *error = "shared memory " + ShmPath(name) +
             " is not a fabric of this simverbs version (remove it, run 'simverbs clean', or set SIMVERBS_FABRIC)";
    *err = EINVAL;
    return nullptr;
  }
  return seg;
}

// Opens the fabric segment `name` (MapSegment) and keeps a descriptor for our
// locks in *fd (its locks are ours while it is open). nullptr with an empty
// *error: it was removed meanwhile, try again.
FabricSegment* OpenSegment(const std::string& name, int* fd, std::string* error, int* err) {
  int mapped_fd = -1;
  FabricSegment* seg = MapSegment(name, &mapped_fd, error, err);
  if (!seg) return nullptr;
  *fd = LockDescriptor(name, mapped_fd, err);
  close(mapped_fd);  // (the mapping keeps the file)
  if (*fd >= 0) return seg;
  munmap(seg, sizeof(FabricSegment));
  if (*err != 0) *error = "cannot open shared memory " + ShmPath(name) + ": " + strerror(*err);
  return nullptr;
}

}  // namespace

std::string Fabric::NameFromEnvironment(const std::string& given) {
  if (!given.empty()) return given;
  const char* env = std::getenv("SIMVERBS_FABRIC");
  return env && *env ? env : "default";
}

Fabric& Fabric::Make() {
  static Fabric* fabric = [] {
    auto* f = new Fabric();  // leaked: used from atexit
    pthread_atfork(nullptr, nullptr, [] { Fabric::Get().ForkedChild(); });
    return f;
  }();
  instance_.store(fabric, std::memory_order_release);
  return *fabric;
}

void Fabric::ForkedChild() {
  // The progress thread is not the child's. (The attach lock was held
  // across fork: fork_locks.h.)
  new (&progress_) std::thread();
  // A child of fork() must not drain the parent's ring (packets for the
  // parent's QPs): it has none until it opens a device and joins itself.
  // Nor may it keep the parent's locks: the descriptor they are taken
  // through would make the parent look alive after it died.
  // Our windows onto peers' files are not inherited (MADV_DONTFORK).
  for (auto& peer : peers_) {
    if (peer) {
      for (FileWindow& window : peer->windows) window.Forget();
    }
  }
  ring_ = nullptr;
  oversubscribed_.store(false, std::memory_order_relaxed);
  if (segment_fd_ >= 0) close(segment_fd_);
  segment_fd_ = -1;
}

// Takes a slot in `seg` (locking its liveness byte) and creates our ring.
// Requires: the fabric's lock.
// On failure returns the error and leaves segment_ unset.
std::string Fabric::JoinLocked(FabricSegment* seg, int* err) {
  segment_ = seg;
  CleanDeadLocked();
  const bool others = OthersAttached(segment_fd_);
  std::string error;
  if (!others) {
    // The first process fixes the profile of the fabric.
    seg->profile_hash = join_profile_hash_;
    std::snprintf(seg->profile_path, sizeof seg->profile_path, "%s", join_profile_path_.c_str());
  } else if (seg->profile_hash != join_profile_hash_) {
    char path[sizeof seg->profile_path];
    std::memcpy(path, seg->profile_path, sizeof path);
    path[sizeof path - 1] = 0;
    error = "fabric \"" + fabric_name_ + "\" is running with profile " + path + ", this process asked for " +
            join_profile_path_ + " (use the same profile, or another SIMVERBS_FABRIC)";
    *err = EINVAL;
  }
  for (int i = 0; error.empty() && i < kMaxProcs && slot_ < 0; ++i) {
    // A free slot whose liveness byte nobody holds (a slot that looks free
    // but is held is not ours to take, whatever its pid field says).
    if (seg->procs[i].pid.load() == 0 && LockByte(segment_fd_, LivenessByte(i), 0)) slot_ = i;
  }
  if (error.empty() && slot_ < 0) {
    error = "fabric \"" + fabric_name_ + "\" has " + std::to_string(kMaxProcs) +
            " processes already, the most one fabric takes (give some programs another SIMVERBS_FABRIC)";
    *err = ENOSPC;
  }
  if (error.empty()) {
    ring_name_ = RingName(segment_name_, slot_);
    ShmMapping ring = CreateShm(ring_name_, sizeof(PacketRing));
    if (!ring.addr && ring.err == EEXIST) {
      // Left by a dead process of this slot (we hold the slot's lock now).
      shm_unlink(ring_name_.c_str());
      ring = CreateShm(ring_name_, sizeof(PacketRing));
    }
    if (ring.addr) {
      ring_ = PacketRing::Init(ring.addr);
    } else {
      error = ring.error;
      *err = ring.err;
      UnlockByte(segment_fd_, LivenessByte(slot_));
    }
  }
  if (!error.empty()) {
    segment_ = nullptr;
    slot_ = -1;
    return error;
  }
  TakeFaultStateLocked();
  ProcSlot& me = seg->procs[slot_];
  generation_ = me.generation.fetch_add(1) + 1;
  me.placing.store(0);
  me.app_spinning.store(0);
  cpu_set_t cpus;
  uint64_t cpu_bits = 0;
  if (sched_getaffinity(0, sizeof cpus, &cpus) == 0) {
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (CPU_ISSET(cpu, &cpus)) cpu_bits |= uint64_t{1} << (cpu % 64);
    }
  }
  me.cpus.store(cpu_bits ? cpu_bits : 1);
  struct stat ns {};
  pid_namespace_ = stat("/proc/self/ns/pid", &ns) == 0 ? static_cast<uint64_t>(ns.st_ino) : 0;
  me.pid_namespace.store(pid_namespace_);
  me.pid.store(getpid());
  return "";
}

std::string Fabric::Attach(int* err) {
  std::lock_guard<std::mutex> attach_lock(attach_mu_);
  if (segment_ && attach_pid_ == getpid()) return "";
  if (segment_) {
    // A child of fork(): the parent's attachment (its slot, ring, peers and
    // objects) is not ours. Forget it without touching it and join as a new
    // process.
    ring_ = nullptr;
    slot_ = -1;
    segment_ = nullptr;
    // (progress_, the parent's thread, was forgotten at fork.) The parent's
    // ring mappings stay, unused; its windows were forgotten at fork.
    for (auto& peer : peers_) peer.reset();
    segment_fd_ = -1;  // closed by the fork handler
    backlogged_.clear();
    backlog_empty_ = true;
  }
  fabric_name_ = NameFromEnvironment("");
  if (!ValidFabricName(fabric_name_)) {
    *err = EINVAL;
    return "SIMVERBS_FABRIC=\"" + fabric_name_ + "\": use letters, digits, '-', '_' and '.' only";
  }
  segment_name_ = SegmentPrefix() + fabric_name_;
  // Every name in /dev/shm (without shm_open's leading '/') fits NAME_MAX:
  // the longest is the last slot's ring.
  const size_t longest = RingName(segment_name_, kMaxProcs - 1).size() - 1;
  if (longest > NAME_MAX) {
    *err = EINVAL;
    return "SIMVERBS_FABRIC=\"" + fabric_name_ + "\": too long (at most " +
           std::to_string(fabric_name_.size() - (longest - NAME_MAX)) + " characters)";
  }
  const Profile& profile = DeviceList::Get().profile();
  join_profile_path_ = profile.path;
  join_profile_hash_ = HashFile(profile.path);
  // What dead programs of this user left on other fabrics.
  Sweep(segment_name_);

  slot_ = -1;
  for (int attempt = 0; attempt < 100 && !segment_; ++attempt) {
    std::string error;
    FabricSegment* candidate = OpenSegment(segment_name_, &segment_fd_, &error, err);
    if (!candidate) {
      if (!error.empty()) return error;
      continue;  // removed meanwhile: try again
    }
    // The progress thread joins, and leaves when we detach.
    stop_ = false;
    std::promise<JoinResult> joined;
    std::future<JoinResult> result = joined.get_future();
    progress_ = QuietThread([this, candidate, &joined] { ProgressThread(candidate, &joined); });
    const JoinResult join = result.get();
    if (segment_) break;
    progress_.join();
    munmap(candidate, sizeof(FabricSegment));
    close(segment_fd_);
    segment_fd_ = -1;
    if (!join.error.empty()) {
      *err = join.err;
      return join.error;
    }
  }
  if (!segment_) {
    *err = EAGAIN;
    return "cannot join fabric \"" + fabric_name_ + "\" (its shared memory " + ShmPath(segment_name_) +
           " kept disappearing)";
  }
  attach_pid_ = getpid();
  static bool registered = false;
  if (!registered) {
    registered = true;
    std::atexit([] { Fabric::Get().Detach(); });
  }
  return "";
}

// Frees every QP number that the process in `slot` owned.
// Requires: the fabric's lock.
void Fabric::ForgetQpnsLocked(int slot) {
  for (auto& dev : segment_->devices) {
    for (auto& e : dev.dir) {
      if (e.qpn.load() != 0 && e.slot.load() == slot) {
        e.accepts.store(0);
        e.pulls.store(0);
        e.slot.store(-1);
        e.qpn.store(0);
      }
    }
  }
}

// Requires: the fabric's lock.
void Fabric::CleanDeadLocked() {
  for (int i = 0; i < kMaxProcs; ++i) {
    ProcSlot& proc = segment_->procs[i];
    if (i == slot_ || proc.pid.load() == 0 || SlotAlive(segment_fd_, i)) continue;
    ForgetQpnsLocked(i);
    ForgetKeysLocked(i);
    shm_unlink(RingName(segment_name_, i).c_str());
    proc.app_spinning.store(0);
    proc.pid.store(0);
  }
}

// Requires: the fabric's lock. We still hold our liveness byte until the end
// (so nobody takes the slot, or cleans it as dead, while we clean it).
void Fabric::LeaveLocked() {
  ForgetQpnsLocked(slot_);
  ForgetKeysLocked(slot_);
  shm_unlink(ring_name_.c_str());
  segment_->procs[slot_].app_spinning.store(0);
  segment_->procs[slot_].pid.store(0);
  CleanDeadLocked();
  if (!OthersAttached(segment_fd_)) {
    // Nobody else is attached: remove the name so nothing is left behind.
    segment_->unlinked = 1;
    shm_unlink(segment_name_.c_str());
  }
  UnlockByte(segment_fd_, LivenessByte(slot_));
}

void Fabric::Detach() {
  if (!segment_ || getpid() != attach_pid_) return;
  stop_ = true;
  ring_->MarkBlocking();
  ring_->Interrupt();
  // The progress thread leaves the fabric (LeaveLocked) before it exits.
  // (exit() called on it, which only a handler of the program could do,
  // leaves it to do so as the process ends: it cannot wait for itself.)
  if (progress_.joinable() && progress_.get_id() != std::this_thread::get_id()) progress_.join();
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
      e.accepts.store(0);
      e.pulls.store(0);
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
  e.accepts.store(0);
  e.pulls.store(0);
  e.slot.store(slot_);
  return true;
}

void Fabric::ReleaseQpn(int device_index, uint32_t qpn) {
  if (!segment_ || device_index >= kMaxDevices) return;
  DirEntry& e = segment_->devices[device_index].dir[qpn % kDirSize];
  if (e.qpn.load() == qpn) {
    e.accepts.store(0);
    // Its SENDs are withdrawn (as ibv_modify_qp to ERR does): none is pulled
    // from its buffers once ibv_destroy_qp returns.
    const bool granted = e.pulls.exchange(0, std::memory_order_seq_cst) != 0;
    e.slot.store(-1);
    e.qpn.store(0);
    if (granted) WaitUnannounced(PullTag(device_index, qpn), "ibv_destroy_qp", "reading a SEND of this QP");
    // Nothing lands through it once ibv_destroy_qp returns.
    WaitUnannounced(QpTag(device_index, qpn), "ibv_destroy_qp", "placing data through this QP", kQpTagMask);
  }
}

uint32_t Fabric::AllocKeyIndex(int device_index) {
  if (!segment_ || device_index >= kMaxDevices) return 0;
  return segment_->devices[device_index].next_key.fetch_add(1) & 0xffffff;
}

// Requires: the fabric's lock.
void Fabric::ForgetKeysLocked(int slot) {
  for (auto& dev : segment_->devices) {
    for (KeyEntry& k : dev.keys) {
      uint32_t key = k.key.load();
      if (key == ClaimMark(slot) || (key != 0 && (key & 0xff) != 0xfe && k.slot.load() == slot)) {
        k.key.compare_exchange_strong(key, 0);
      }
    }
  }
}

bool Fabric::PublishKey(int device_index, uint32_t rkey, const PublishedKey& key) {
  if (!segment_ || device_index < 0 || device_index >= kMaxDevices) return false;
  KeyEntry& k = segment_->devices[device_index].keys[(rkey >> 8) % kKeySlots];
  uint32_t expected = 0;
  if (!k.key.compare_exchange_strong(expected, ClaimMark(slot_))) return false;  // another live key's place
  k.slot.store(slot_, std::memory_order_relaxed);
  k.generation.store(generation_, std::memory_order_relaxed);
  k.access.store(key.access, std::memory_order_relaxed);
  k.addr.store(key.addr, std::memory_order_relaxed);
  k.iova.store(key.iova, std::memory_order_relaxed);
  k.length.store(key.length, std::memory_order_relaxed);
  k.pd.store(key.pd, std::memory_order_relaxed);
  k.file_fd.store(key.file_fd, std::memory_order_relaxed);
  k.file_dev.store(key.file_dev, std::memory_order_relaxed);
  k.file_ino.store(key.file_ino, std::memory_order_relaxed);
  k.file_offset.store(key.file_offset, std::memory_order_relaxed);
  k.key.store(rkey, std::memory_order_seq_cst);
  return true;
}

bool Fabric::RevokeKey(int device_index, uint32_t rkey) {
  if (!segment_ || device_index < 0 || device_index >= kMaxDevices) return false;
  KeyEntry& k = segment_->devices[device_index].keys[(rkey >> 8) % kKeySlots];
  const bool had_file = k.file_fd.load(std::memory_order_relaxed) >= 0;
  uint32_t expected = rkey;
  if (!k.key.compare_exchange_strong(expected, 0, std::memory_order_seq_cst)) return false;
  if (had_file) segment_->procs[slot_].files_revoked.fetch_add(1, std::memory_order_release);
  return true;
}

void Fabric::WaitKeyUnused(int device_index, uint32_t rkey) {
  if (!segment_) return;
  // Dekker with PlaceWrite: a writer announces the key, then looks at it; we
  // withdrew it, now look at the announcements.
  WaitUnannounced(KeyTag(device_index, rkey), "ibv_dereg_mr", "writing into this MR", kKeyTagMask);
}

void Fabric::WaitUnannounced(uint64_t tag, const char* verb, const char* doing, uint64_t mask) {
  // A process that got in first finishes its copy; a dead one never will,
  // and a stopped one is waited for only so long.
  const uint64_t deadline = MonotonicNs() + kRevokeWaitNs;
  for (int i = 0; i < kMaxProcs; ++i) {
    ProcSlot& proc = segment_->procs[i];
    for (uint64_t spins = 1; (proc.placing.load(std::memory_order_seq_cst) & mask) == tag; ++spins) {
      if (spins % 1024 == 0 && (!SlotAlive(segment_fd_, i) || MonotonicNs() > deadline)) {
        if (MonotonicNs() > deadline) {
          std::fprintf(stderr, "simverbs: %s: process %d has been %s for %llu ms (stopped?); going on anyway\n", verb,
                       proc.pid.load(), doing, static_cast<unsigned long long>(kRevokeWaitNs / 1'000'000));
        }
        break;
      }
      if (spins > 64) sched_yield();
    }
  }
}

void Fabric::GrantPullsLocked(int device_index, uint32_t qpn, uint32_t epoch) {
  if (!segment_ || device_index < 0 || device_index >= kMaxDevices) return;
  DirEntry& e = segment_->devices[device_index].dir[qpn % kDirSize];
  if (e.qpn.load() != qpn || e.slot.load() != slot_) return;
  e.pulls.store(epoch, std::memory_order_seq_cst);
}

void Fabric::RevokePullsLocked(int device_index, uint32_t qpn) {
  if (!segment_ || device_index < 0 || device_index >= kMaxDevices) return;
  DirEntry& e = segment_->devices[device_index].dir[qpn % kDirSize];
  if (e.qpn.load() != qpn || e.slot.load() != slot_) return;
  // Dekker with PullSend: a puller announces the QP, then looks at the epoch.
  if (e.pulls.exchange(0, std::memory_order_seq_cst) == 0) return;
  WaitUnannounced(PullTag(device_index, qpn), "ibv_modify_qp", "reading a SEND of this QP");
}

bool Fabric::PullsSends(int device_index, uint32_t dst_qpn) {
  if (pid_namespace_ == 0) return false;
  int slot = -1;
  Peer* peer = ReachOwner(device_index, dst_qpn, &slot);
  if (!peer) return false;
  // It reads our memory by our pid, which names us only in its own PID namespace.
  if (segment_->procs[slot].pid_namespace.load(std::memory_order_relaxed) != pid_namespace_) return false;
  const DirEntry& e = segment_->devices[device_index].dir[dst_qpn % kDirSize];
  constexpr uint32_t kRcPulls = (static_cast<uint32_t>(IBV_QPT_RC) + 1) | kAcceptsPulls;
  return (e.accepts.load(std::memory_order_relaxed) & (kAcceptsTypeMask | kAcceptsPulls)) == kRcPulls;
}

Fabric::PullResult Fabric::PullSend(int device_index, uint32_t src_qpn, uint32_t epoch, uint64_t addr,
                                    uint64_t length, const iovec* local, size_t local_count, bool staged) {
  if (!segment_ || device_index < 0 || device_index >= kMaxDevices || epoch == 0) return PullResult::kWithdrawn;
  const int slot = OwnerSlot(device_index, src_qpn);
  // The requester's QP is gone (or is ours: a SEND within a process is never pulled).
  if (slot < 0 || slot == slot_) return PullResult::kWithdrawn;
  // Its pid names it only while it is there (StillThere): not gone, nor another program.
  Peer* peer = ReachPeer(slot);
  if (!peer || !StillThere(slot, *peer)) return PullResult::kWithdrawn;
  const ProcSlot& owner = segment_->procs[slot];
  const int32_t pid = owner.pid.load();
  // Its owner left (LeaveLocked and CleanDeadLocked forget its QPs first,
  // so only a race gets here): as the QP gone, not as a refusal, which
  // would end pulls on our QP until RESET.
  if (pid <= 0) return PullResult::kWithdrawn;
  // Its pid names it only in our own PID namespace.
  if (pid_namespace_ == 0 || owner.pid_namespace.load() != pid_namespace_) return PullResult::kRefused;
  const DirEntry& e = segment_->devices[device_index].dir[src_qpn % kDirSize];
  const Announcement announced(segment_->procs[slot_].placing, PullTag(device_index, src_qpn));
  // While we announce the QP, its owner cannot withdraw the epoch and report
  // the SEND flushed (RevokePullsLocked waits for us).
  if (e.pulls.load(std::memory_order_seq_cst) != epoch || e.qpn.load() != src_qpn || e.slot.load() != slot) {
    return PullResult::kWithdrawn;
  }
  const auto refused = [] { return errno == EPERM || errno == ENOSYS ? PullResult::kRefused : PullResult::kFailed; };
  const auto still_granted = [&] { return e.pulls.load(std::memory_order_seq_cst) == epoch; };
  if (!staged) {
    const iovec remote{reinterpret_cast<void*>(addr), length};
    const ssize_t n = process_vm_readv(pid, local, local_count, &remote, 1, 0);
    if (n < 0) return refused();
    if (n != static_cast<ssize_t>(length)) return PullResult::kFailed;
    return still_granted() ? PullResult::kPulled : PullResult::kWithdrawn;
  }
  try {
    const uint64_t staging = std::min(length, kPullChunkBytes);
    if (pull_staging_.size() < staging) pull_staging_.resize(staging);
  } catch (const std::bad_alloc&) {
    return PullResult::kFailed;
  }
  if (local_count != 1 || local[0].iov_len < length) return PullResult::kFailed;
  auto* to = static_cast<uint8_t*>(local[0].iov_base);
  for (uint64_t done = 0; done < length;) {
    const uint64_t piece = std::min(length - done, kPullChunkBytes);
    const iovec staging{pull_staging_.data(), piece};
    const iovec remote{reinterpret_cast<void*>(addr + done), piece};
    const ssize_t n = process_vm_readv(pid, &staging, 1, &remote, 1, 0);
    if (n < 0) return refused();
    if (n != static_cast<ssize_t>(piece)) return PullResult::kFailed;
    if (!still_granted()) return PullResult::kWithdrawn;
    std::memcpy(to + done, pull_staging_.data(), piece);
    done += piece;
  }
  return PullResult::kPulled;
}

void Fabric::PublishQpLocked(int device_index, uint32_t qpn, uint64_t pd, uint32_t accepts, uint32_t peer,
                             uint32_t rq_psn) {
  if (!segment_ || device_index < 0 || device_index >= kMaxDevices) return;
  DirEntry& e = segment_->devices[device_index].dir[qpn % kDirSize];
  if (e.qpn.load() != qpn || e.slot.load() != slot_) return;
  e.pd.store(pd);
  e.peer.store(peer);
  e.rq_psn.store(rq_psn);
  const uint32_t before = e.accepts.exchange(accepts, std::memory_order_seq_cst);
  // Dekker with Place: a placer announces the QP, then looks at what it
  // accepts. Once the QP takes no more WRITEs or READs (ERR, RESET, access
  // withdrawn), none lands or is read after ibv_modify_qp returns.
  constexpr uint32_t kRemoteAccess = kAcceptsWrites | kAcceptsReads;
  if ((before & kRemoteAccess & ~accepts) != 0) {
    WaitUnannounced(QpTag(device_index, qpn), "ibv_modify_qp", "placing data through this QP", kQpTagMask);
  }
}

int Fabric::OwnerSlot(int device_index, uint32_t qpn) const {
  if (!segment_ || device_index < 0 || device_index >= kMaxDevices) return -1;
  const DirEntry& e = segment_->devices[device_index].dir[qpn % kDirSize];
  const int slot = e.slot.load();
  // Any process writes the directory: a slot out of range is nobody.
  return e.qpn.load() == qpn && slot >= 0 && slot < kMaxProcs ? slot : -1;
}

inline Fabric::Peer* Fabric::ReachOwner(int device_index, uint32_t qpn, int* slot) {
  *slot = OwnerSlot(device_index, qpn);
  return *slot >= 0 && *slot != slot_ ? ReachPeer(*slot) : nullptr;
}

bool Fabric::PeerAlive(int slot) const { return SlotAlive(segment_fd_, slot); }

bool Fabric::StillThere(int slot, Peer& peer) {
  const uint64_t now = CoarseMonotonicNs();
  if (peer.alive_asked_ns != 0 && now - peer.alive_asked_ns < kAliveReaskNs) return true;
  if (!PeerAlive(slot)) return false;
  peer.alive_asked_ns = now;
  return true;
}

bool Fabric::PlaceWrite(const Connection& from, int device_index, uint32_t dst_qpn, ibv_qp_type type, uint32_t rkey,
                        uint64_t va, uint64_t length, const iovec* local, size_t local_count, bool one_packet) {
  return Place(from, kAcceptsWrites, device_index, dst_qpn, type, rkey, va, length, local, local_count, one_packet);
}

bool Fabric::PlaceRead(const Connection& from, int device_index, uint32_t dst_qpn, uint32_t rkey, uint64_t va,
                       uint64_t length, const iovec* local, size_t local_count) {
  return Place(from, kAcceptsReads, device_index, dst_qpn, IBV_QPT_RC, rkey, va, length, local, local_count, false);
}

bool Fabric::Place(const Connection& from, uint32_t direction, int device_index, uint32_t dst_qpn, ibv_qp_type type,
                   uint32_t rkey, uint64_t va, uint64_t length, const iovec* local, size_t local_count,
                   bool one_packet) {
  if (length == 0 || pid_namespace_ == 0) return false;
  const bool write = direction == kAcceptsWrites;
  int slot = -1;
  Peer* peer = ReachOwner(device_index, dst_qpn, &slot);
  if (!peer || peer->placement_denied || !StillThere(slot, *peer)) return false;
  const ProcSlot& owner = segment_->procs[slot];
  // Its pid names it only in our own PID namespace.
  const int32_t pid = owner.pid.load();
  if (pid <= 0 || owner.pid_namespace.load() != pid_namespace_) return false;
  DeviceState& d = segment_->devices[device_index];
  const DirEntry& e = d.dir[dst_qpn % kDirSize];
  const Announcement announced(segment_->procs[slot_].placing, PlaceTag(device_index, rkey, dst_qpn));
  // While we announce the key and the QP, the owner can neither withdraw the
  // key and reuse its entry (WaitKeyUnused) nor stop the QP taking this
  // access (PublishQpLocked): both wait for us. Another process may write
  // the entries all the same: each field is read once, checked, and only the
  // checked copy is used.
  // Of that type, and takes this kind of access now.
  if ((e.accepts.load(std::memory_order_seq_cst) & (kAcceptsTypeMask | direction)) !=
      ((static_cast<uint32_t>(type) + 1) | direction)) {
    return false;
  }
  const uint64_t pd = e.pd.load();
  // RC: the responder takes requests from us, and expected first the PSN we
  // sent first, so it takes this message's PSNs (the two advance together):
  // otherwise it would refuse the message (a sequence NAK, or a duplicate's
  // ACK), and nothing may land.
  const bool connected = type != IBV_QPT_RC || (e.peer.load() == from.peer && e.rq_psn.load() == from.first_psn);
  // Still the QP OwnerSlot found: an entry freed and taken by another QP
  // meanwhile would lend us that QP's type and PD.
  if (!connected || e.qpn.load() != dst_qpn || e.slot.load() != slot) return false;
  const KeyEntry& k = d.keys[(rkey >> 8) % kKeySlots];
  bool placed = false;
  const uint32_t key = k.key.load(std::memory_order_seq_cst);
  const int32_t key_slot = k.slot.load(std::memory_order_relaxed);
  const uint32_t generation = k.generation.load(std::memory_order_relaxed);
  const uint32_t access = k.access.load(std::memory_order_relaxed);
  const uint64_t addr = k.addr.load(std::memory_order_relaxed);
  const uint64_t iova = k.iova.load(std::memory_order_relaxed);
  const uint64_t key_length = k.length.load(std::memory_order_relaxed);
  const uint64_t key_pd = k.pd.load(std::memory_order_relaxed);
  const FileWindowKey file = PublishedFile(k, device_index, rkey, key_length);
  // Read again: the fields were all of the publication of `rkey` (another
  // process may claim a withdrawn entry and fill it in meanwhile).
  std::atomic_thread_fence(std::memory_order_acquire);
  const uint32_t key_after = k.key.load(std::memory_order_relaxed);
  if (!peer->windows.empty()) DropStaleWindows(slot, *peer);
  if (key == rkey && key_after == rkey && key_slot == slot && generation == peer->generation && key_pd == pd &&
      (access & (write ? IBV_ACCESS_REMOTE_WRITE : IBV_ACCESS_REMOTE_READ)) && va >= iova && length <= key_length &&
      va - iova <= key_length - length &&
      addr + key_length >= addr) {
    if (file.fd >= 0) {
      // The program mapped the MR's pages from a file: copy through our own
      // mapping of it (no system call once mapped).
      const FileWindow* window = nullptr;
      try {
        window = &WindowFor(*peer, pid, file);
      } catch (const std::bad_alloc&) {
        // No room for the window: process_vm_writev (or _readv) below.
      }
      if (window && window->usable()) {
        if (write) {
          window->Write(va - iova, length, local, local_count);
        } else {
          window->Read(va - iova, length, local, local_count);
        }
        return true;
      }
    }
    // The owner's progress thread takes packets as they come (a stream to a
    // program that does not poll): through its ring a one-packet WRITE costs
    // neither side a system call, and its two copies beat one
    // process_vm_writev. (Not a longer one: 16 KiB WRITEs went 15-40% slower
    // through the ring, and 64 KiB ones either twice as fast or half.)
    if (one_packet && peer->ring->owner_looking()) return false;
    const iovec remote{reinterpret_cast<void*>(addr + (va - iova)), length};
    const ssize_t n = write ? process_vm_writev(pid, local, local_count, &remote, 1, 0)
                            : process_vm_readv(pid, local, local_count, &remote, 1, 0);
    if (n < 0 && (errno == EPERM || errno == ENOSYS)) peer->placement_denied = true;
    // A short write (the owner unmapped registered memory) is written again,
    // whole, by the copying path; a short read is read again by it.
    placed = n == static_cast<ssize_t>(length);
  }
  return placed;
}

void Fabric::DropStaleWindows(int slot, Peer& peer) {
  const uint32_t revoked = segment_->procs[slot].files_revoked.load(std::memory_order_acquire);
  if (revoked == peer.files_revoked_seen) return;
  peer.files_revoked_seen = revoked;
  // A window whose key is no longer published as it was maps pages the owner
  // may have given back: unmapped, they are freed.
  for (size_t i = 0; i < peer.windows.size();) {
    const FileWindowKey& w = peer.windows[i].key();
    const KeyEntry& k = segment_->devices[w.device].keys[(w.rkey >> 8) % kKeySlots];
    const bool current = k.key.load(std::memory_order_acquire) == w.rkey &&
                         k.slot.load(std::memory_order_relaxed) == slot &&
                         PublishedFile(k, w.device, w.rkey, k.length.load(std::memory_order_relaxed)) == w;
    if (current) {
      ++i;
    } else {
      peer.windows.erase(peer.windows.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
}

void Fabric::SweepWindowsLocked() {
  bool open = false;
  for (int slot = 0; slot < kMaxProcs; ++slot) {
    Peer* peer = peers_[slot].get();
    if (!peer || peer->windows.empty()) continue;
    const ProcSlot& proc = segment_->procs[slot];
    if (proc.generation.load() != peer->generation || proc.pid.load() == 0) {
      peer->windows.clear();  // it left (or died): its keys are gone
    } else {
      DropStaleWindows(slot, *peer);
    }
    open |= !peer->windows.empty();
  }
  windows_open_.store(open, std::memory_order_relaxed);
}

const FileWindow& Fabric::WindowFor(Peer& peer, pid_t pid, const FileWindowKey& key) {
  for (const FileWindow& window : peer.windows) {
    if (window.key() == key) return window;
  }
  // A window of the same publication slot that no longer matches is stale.
  for (size_t i = 0; i < peer.windows.size(); ++i) {
    const FileWindowKey& old = peer.windows[i].key();
    if (old.device == key.device && old.rkey == key.rkey) {
      peer.windows.erase(peer.windows.begin() + static_cast<std::ptrdiff_t>(i));
      break;
    }
  }
  if (peer.windows.size() >= kMaxFileWindows) peer.windows.erase(peer.windows.begin());
  peer.windows.push_back(FileWindow::Open(pid, key));
  windows_open_.store(true, std::memory_order_relaxed);
  return peer.windows.back();
}

std::atomic<uint64_t>* Fabric::XmitDiscardsCounter(int device_index, int port) const {
  if (!segment_ || device_index < 0 || device_index >= kMaxDevices || port < 1 || port > kMaxPorts) return nullptr;
  return &segment_->devices[device_index].port_xmit_discards[port - 1];
}

void Fabric::CountXmitDiscard(int device_index, int port) {
  if (auto* counter = XmitDiscardsCounter(device_index, port)) counter->fetch_add(1, std::memory_order_relaxed);
}

uint64_t Fabric::XmitDiscards(int device_index, int port) const {
  const auto* counter = XmitDiscardsCounter(device_index, port);
  return counter ? counter->load(std::memory_order_relaxed) : 0;
}

Fabric::Peer* Fabric::ReachPeer(int slot) {
  std::unique_ptr<Peer>& peer = peers_[slot];
  if (!peer) peer = std::make_unique<Peer>();
  const uint32_t generation = segment_->procs[slot].generation.load();
  if (peer->generation != generation) {
    // The slot belongs to another process now.
    if (peer->ring) munmap(peer->ring, sizeof(PacketRing));
    peer->ring = nullptr;
    peer->pushed = false;
    peer->placement_denied = false;
    peer->alive_asked_ns = 0;
    peer->windows.clear();
    peer->files_revoked_seen = 0;
    peer->ring_refused = false;
    peer->backlog.clear();
    peer->discarding = false;
    peer->generation = generation;
  }
  if (!peer->ring && !peer->ring_refused) {
    const ShmMapping m = OpenShm(RingName(segment_name_, slot), sizeof(PacketRing));
    if (!m.addr) {
      // Not there (the process left), or not ours: the packet is lost. A
      // refusal is said once, and not tried again for this process.
      if (m.err != ENOENT) {
        std::fprintf(stderr, "simverbs: %s\n", m.error.c_str());
        peer->ring_refused = true;
      }
      return nullptr;
    }
    peer->ring = static_cast<PacketRing*>(m.addr);
  }
  return peer->ring ? peer.get() : nullptr;
}

namespace {

// A peer's own work (a request, a READ's or an atomic's answer, XRC), not a
// bare ACK or NAK: what tells a stream from a ping-pong (PushNow).
bool IsWork(Packet::Kind kind) { return kind != Packet::Kind::kAck && kind != Packet::Kind::kNak; }

// A transport whose lost packets nobody sends again (RequestMayGo).
bool Unreliable(ibv_qp_type transport) { return transport == IBV_QPT_UD || transport == IBV_QPT_UC; }

}  // namespace

inline void Fabric::PushedLocked(int slot, Peer& peer, const PacketRing::Owed& owed, uint64_t pos, bool work,
                                 uint32_t payload_len) {
  peer.last_pushed = pos;
  peer.pushed = true;
  // Nothing of the peer's taken since our previous packet to it: a stream,
  // whose later packets' slot lines we may ask for now. (Bare ACKs and NAKs
  // count on neither side: a ping-pong's reply follows the ACK of the
  // request it answers.)
  if (work) {
    if (peer.work_taken_at_push == work_taken_) peer.ring->PrefetchSlotAfterNext(pos, payload_len);
    peer.work_taken_at_push = work_taken_;
  }
  // A look owed is taken at our next settling (packet_ring.h: publishing).
  OweLocked(slot, peer, owed, pos);
}

bool Fabric::PushNow(int slot, Peer& peer, const Packet& pkt, int src_device) {
  uint64_t pos = 0;
  PacketRing::Owed owed;
  if (!peer.backlog.empty() || !peer.ring->Push(pkt, src_device, &pos, Sender(), &owed)) return false;
  PushedLocked(slot, peer, owed, pos, IsWork(pkt.kind), static_cast<uint32_t>(pkt.payload.size()));
  return true;
}

bool Fabric::PushLine(int device_index, uint32_t dst_qpn, const WirePacket::Line& line, uint32_t psn,
                      const uint8_t* bytes, const WirePacket::Addressing* read_addressing) {
  int slot = -1;
  Peer* peer = ReachOwner(device_index, dst_qpn, &slot);
  if (!peer || !peer->backlog.empty()) return false;
  uint64_t pos = 0;
  PacketRing::Owed owed;
  if (!peer->ring->PushLine(line, psn, bytes, &pos, Sender(), &owed, read_addressing)) return false;
  PushedLocked(slot, *peer, owed, pos, IsWork(static_cast<Packet::Kind>(line.kind)), line.payload_len);
  return true;
}

bool Fabric::PushesNow(int device_index, uint32_t qpn) {
  int slot = -1;
  Peer* peer = ReachOwner(device_index, qpn, &slot);
  return peer && peer->backlog.empty() && peer->ring->HasRoom();
}

bool Fabric::SendRemote(int device_index, const Packet& pkt) {
  int slot = -1;
  Peer* peer = ReachOwner(device_index, pkt.dst_qpn, &slot);
  if (!peer) return false;
  const int src_device = pkt.src_device ? pkt.src_device->index() : 0;
  if (!pkt.stream && PushNow(slot, *peer, pkt, src_device)) {
    peer->discarding = false;  // it takes packets again
    return true;
  }
  if (pkt.stream && peer->backlog.empty()) {
    // A READ answer goes out as far as the peer's ring takes it now; only the
    // rest waits in the backlog (no entry, no allocation, for one that fits).
    Packet part;
    for (;;) {
      if (!CutResponse(pkt, &part)) return true;  // all sent, or the responder can no longer answer
      if (!PushNow(slot, *peer, part, src_device)) break;
      Engine::Get().RecyclePayload(part.payload.TakeBuffer());
    }
    // `part` is cut and found no room: it goes first, with its bytes as they
    // were read now, and the rest of the answer behind it.
    part.payload.Own();
    backlogged_.push_back(slot);
    peer->ring->SetWaiting(slot_, generation_);
    peer->backlog.push_back(std::move(part));
    peer->backlog.push_back(pkt);
    backlog_empty_ = false;
    return true;
  }
  QueueForPeerLocked(slot, *peer, pkt, src_device);
  return true;
}

void Fabric::QueueForPeerLocked(int slot, Peer& peer, const Packet& pkt, int src_device) {
  // The peer's ring is full. A packet waits in order, within a bound (beyond
  // it a reliable one is recovered by the requester's retransmission); an
  // unreliable one (UD, UC) is discarded only while the peer has held its
  // ring full for a head-of-queue lifetime (RequestMayGo). A READ answer (a stream) waits
  // as one entry and is cut into packets as room appears.
  // (A lossless packet is never dropped: nobody would send it again. An
  // answered WRITE waits here only when it lost a race for the last slots:
  // PushesNow said no to the rest.)
  if (!pkt.Lossless() && ((Unreliable(pkt.transport) && peer.discarding) || peer.backlog.size() >= kMaxBacklog)) {
    CountXmitDiscard(src_device, pkt.src_port);
    return;
  }
  const bool started = peer.backlog.empty();
  if (started) {
    backlogged_.push_back(slot);
    peer.ring->SetWaiting(slot_, generation_);
    peer.held_since_ns = MonotonicNs();
  }
  peer.backlog.push_back(pkt);
  backlog_empty_ = false;
  if (started && pkt.stream) FlushPeerLocked(slot, peer);
}

void Fabric::SendToAllPeers(const Packet& pkt) {
  if (!segment_) return;
  const int src_device = pkt.src_device ? pkt.src_device->index() : 0;
  for (int slot = 0; slot < kMaxProcs; ++slot) {
    if (slot == slot_ || segment_->procs[slot].pid.load() == 0) continue;
    Peer* peer = ReachPeer(slot);
    if (!peer) continue;
    if (PushNow(slot, *peer, pkt, src_device)) {
      peer->discarding = false;  // it takes packets again
    } else {
      QueueForPeerLocked(slot, *peer, pkt, src_device);
    }
  }
}

bool Fabric::MulticastMayGo(int src_device, uint32_t src_qpn) {
  // A copy goes to every process: the sender waits while any of them has a
  // backlog it still takes packets from (one discarding is passed by).
  bool may_go = true;
  for (const int slot : backlogged_) {
    Peer* peer = peers_[slot].get();
    if (peer && !HoldSenderLocked(*peer, HeldSender{src_device, src_qpn})) may_go = false;
  }
  return may_go;
}

bool Fabric::HoldSenderLocked(Peer& peer, const HeldSender& sender) {
  if (peer.backlog.empty() || peer.discarding) return true;
  auto& waiters = peer.held_senders;
  if (std::find(waiters.begin(), waiters.end(), sender) == waiters.end()) {
    try {
      waiters.push_back(sender);
    } catch (const std::bad_alloc&) {
      return true;  // no memory to wait: it goes now (into the bounded backlog)
    }
  }
  return false;
}

bool Fabric::FlushPeerLocked(int slot, Peer& peer) {
  bool moved = false;
  uint64_t pos = 0;
  PacketRing::Owed owed;
  while (!peer.backlog.empty() && peer.ring) {
    Packet& front = peer.backlog.front();
    const int src_device = front.src_device ? front.src_device->index() : 0;
    if (front.stream) {
      Packet part;
      if (!CutResponse(front, &part)) {
        peer.backlog.pop_front();  // all of it sent, or the responder can no longer answer
        continue;
      }
      if (!peer.ring->Push(part, src_device, &pos, Sender(), &owed)) {
        part.payload.Own();  // its bytes as they were read now, not when room appears
        peer.backlog.push_front(std::move(part));  // made already: it goes first
        break;
      }
      Engine::Get().RecyclePayload(part.payload.TakeBuffer());
    } else {
      if (!peer.ring->Push(front, src_device, &pos, Sender(), &owed)) break;
      Engine::Get().RecyclePayload(front.payload.TakeBuffer());
      peer.backlog.pop_front();
    }
    peer.last_pushed = pos;
    peer.pushed = true;
    moved = true;
  }
  OweLocked(slot, peer, owed, peer.last_pushed);
  if (peer.look_owed) LookNowLocked(slot, peer);  // one fence for all that moved
  if (peer.backlog.empty() && peer.ring) peer.ring->SetWaiting(slot_, 0);
  return moved;
}

bool Fabric::FlushBacklogLocked() {
  if (backlog_empty_) return false;
  bool moved = false;
  for (size_t i = 0; i < backlogged_.size();) {
    const int slot = backlogged_[i];
    Peer& peer = *peers_[slot];
    if (peer.generation != segment_->procs[slot].generation.load()) peer.backlog.clear();  // another process's now
    const bool moved_peer = FlushPeerLocked(slot, peer);
    moved |= moved_peer;
    if (moved_peer) peer.discarding = false;
    // Still no room: is anyone there to make some? (A system call: not on every poll.)
    if (!peer.backlog.empty()) {
      const uint64_t now = MonotonicNs();
      if (moved_peer) {
        peer.held_since_ns = now;
      } else if (!peer.discarding && now - peer.held_since_ns >= kHeadOfQueueLifetimeNs) {
        DiscardUnreliableLocked(peer);
      }
      if (now >= peer.next_alive_check_ns) {
        peer.next_alive_check_ns = now + 1'000'000;
        if (!PeerAlive(slot)) peer.backlog.clear();  // the peer is gone: what it did not take is lost
      }
    }
    if ((peer.backlog.empty() || peer.discarding) && !peer.held_senders.empty()) {
      // Requests held back for it may go now (or be discarded). (No memory
      // to list them: they stay listed, for the next flush.)
      try {
        resume_.insert(resume_.end(), peer.held_senders.begin(), peer.held_senders.end());
        peer.held_senders.clear();
      } catch (const std::bad_alloc&) {
      }
    }
    if (peer.backlog.empty()) {
      backlogged_[i] = backlogged_.back();
      backlogged_.pop_back();
    } else {
      ++i;
    }
  }
  backlog_empty_ = backlogged_.empty();
  // Last: sending may backlog packets again (backlogged_ changes), and a QP
  // that must wait again lists itself again.
  if (!resume_.empty()) {
    std::vector<HeldSender> resume;
    resume.swap(resume_);
    const auto& devices = DeviceList::Get().devices();
    for (const HeldSender& w : resume) {
      if (w.device < 0 || static_cast<size_t>(w.device) >= devices.size()) continue;
      if (Qp* qp = devices[w.device]->FindQp(w.qpn)) qp->ResumeSendLocked();  // (gone meanwhile: nothing waits)
    }
    resume.clear();
    if (resume_.empty()) resume_.swap(resume);  // its buffer, for next time
  }
  return moved;
}

void Fabric::DiscardUnreliableLocked(Peer& peer) {
  peer.discarding = true;
  for (auto it = peer.backlog.begin(); it != peer.backlog.end();) {
    if (!Unreliable(it->transport) || it->Lossless()) {
      ++it;
      continue;
    }
    CountXmitDiscard(it->src_device ? it->src_device->index() : 0, it->src_port);
    Engine::Get().RecyclePayload(it->payload.TakeBuffer());
    it = peer.backlog.erase(it);
  }
}

bool Fabric::RequestMayGo(int device_index, uint32_t qpn, int src_device, uint32_t src_qpn) {
  int slot = -1;
  Peer* peer = ReachOwner(device_index, qpn, &slot);
  return !peer || HoldSenderLocked(*peer, HeldSender{src_device, src_qpn});
}

namespace {

// The engine lock for the progress thread: while the application is active
// only if it is free (the returned lock may not own it), otherwise waited for.
std::unique_lock<DataPathMutex> LockForProgress(bool app_active) {
  return app_active ? TryLockSpinning(Engine::Get().mu(), 0) : LockSpinningFirst(Engine::Get().mu());
}

}  // namespace

bool Fabric::AskForRoom(bool app_active) {
  const auto lock = LockForProgress(app_active);
  if (!lock.owns_lock()) return false;  // looked at again after the nap
  bool room = false;
  for (const int slot : backlogged_) {
    Peer& peer = *peers_[slot];
    if (!peer.ring || peer.backlog.empty()) continue;
    room |= peer.ring->WantRoom(slot_);
  }
  return room;
}

bool Fabric::DeliveryPending(int device_index, uint32_t qpn) {
  const int slot = OwnerSlot(device_index, qpn);
  if (slot < 0 || slot == slot_) return false;
  // The peer holds packets for us that wait for room in our ring (a READ's
  // answer, say), or ours for it still wait in its ring or our backlog.
  bool pending = ring_ && ring_->Waiting(slot, segment_->procs[slot].generation.load());
  if (!pending && peers_[slot]) {
    const Peer& peer = *peers_[slot];
    pending = peer.ring && peer.pushed && !(peer.backlog.empty() && peer.ring->Consumed(peer.last_pushed));
  }
  return pending && PeerAlive(slot);
}

bool Fabric::OwnerAlive(int device_index, uint32_t qpn) {
  const int slot = OwnerSlot(device_index, qpn);
  if (slot < 0) return false;
  return slot == slot_ || PeerAlive(slot);
}

void Fabric::PollInbound() {
  if (!ring_) return;
  ring_->MarkPolled();
  DrainInbound(kPollDrainReceives);
  // Owed wakes are looked at every kPollsPerOwedLook-th poll only: a look
  // takes the engine lock and reads the peer's ring, and a poller waiting
  // for an answer would otherwise pay both on every poll.
  thread_local uint32_t polls = 0;
  const bool look = wake_owed_.load(std::memory_order_relaxed) && ++polls % kPollsPerOwedLook == 0;
  if (!backlog_empty_ || look) {
    std::lock_guard<DataPathMutex> lock(Engine::Get().mu());
    FlushBacklogLocked();
    if (look) SettleOwedWakesLocked(false);
  }
}

void Fabric::PostedWork() {
  if (ring_) ring_->MarkPolled();
}

void Fabric::PollFoundWork() {
  if (ring_) ring_->MarkLeftPollLoop();
}

void Fabric::PollFoundNothing() {
  if (!oversubscribed_.load(std::memory_order_relaxed)) return;
  // More programs poll in a loop than there are CPUs: whoever we wait for may
  // be waiting for this CPU. Spinning on would hold it for the rest of a
  // scheduler time slice (milliseconds); every few microseconds of empty
  // polls, let another runnable thread have it.
  thread_local uint32_t empty_polls = 0;
  if (++empty_polls % kEmptyPollsBeforeYield == 0) sched_yield();
}

void Fabric::LookForOversubscription(bool app_polling) {
  segment_->procs[slot_].app_spinning.store(app_polling ? 1 : 0, std::memory_order_relaxed);
  int spinning = 0;
  uint64_t cpus = 0;  // the CPUs the pollers may run on, together
  if (app_polling) {
    // Each value is only a hint (shared memory): a wrong one costs yields or
    // a time slice, nothing else.
    for (const ProcSlot& proc : segment_->procs) {
      if (proc.app_spinning.load(std::memory_order_relaxed) != 1 || proc.pid.load(std::memory_order_relaxed) == 0) {
        continue;
      }
      ++spinning;
      cpus |= proc.cpus.load(std::memory_order_relaxed);
    }
  }
  oversubscribed_.store(app_polling && spinning > __builtin_popcountll(cpus), std::memory_order_relaxed);
}

void Fabric::BeforeBlocking() {
  if (!ring_) return;
  ring_->MarkBlocking();
  DrainInbound(UINT32_MAX);
  // We will not poll to look again: wake now whoever still has our packets.
  if (wake_owed_.load(std::memory_order_relaxed)) {
    std::lock_guard<DataPathMutex> lock(Engine::Get().mu());
    SettleOwedWakesLocked(true);
  }
}

void Fabric::OweLocked(int slot, Peer& peer, const PacketRing::Owed& owed, uint64_t pos) {
  if (!owed.wake && !owed.look) return;
  if (!peer.owed_listed) {
    peer.owed_listed = true;
    owed_.push_back(slot);
    wake_owed_.store(true, std::memory_order_relaxed);
  }
  if (owed.look) peer.look_owed = true;
  if (!owed.wake) return;
  if (!peer.wake_owed) {
    peer.wake_owed = true;
    peer.owed_polls = 0;
    peer.owner_polls_known = false;
  }
  peer.owed_pos = pos;
}

void Fabric::LookNowLocked(int slot, Peer& peer) {
  PacketRing::FenceUnfencedPublishes();
  peer.look_owed = false;
  PacketRing::Owed found;
  if (peer.ring) peer.ring->LookAfterPublish(&found);
  OweLocked(slot, peer, found, peer.last_pushed);
}

void Fabric::SettleOwedWakesLocked(bool now) {
  for (size_t i = 0; i < owed_.size();) {
    const int slot = owed_[i];
    Peer* peer = peers_[slot].get();
    if (peer && peer->look_owed) LookNowLocked(slot, *peer);
    bool settled = true;
    if (peer && peer->wake_owed && peer->ring && !peer->HeardConsumed(peer->owed_pos)) {
      peer->owed_polls += kPollsPerOwedLook;
      if (!now && !peer->owner_polls_known && peer->owed_polls < kOwedHearPolls) {
        settled = false;  // it has not said yet: its own lines are not read before it had the time
      } else if (peer->ring->Consumed(peer->owed_pos)) {
        // taken
      } else if (const uint64_t owner_polls = peer->ring->polls();
                 !now && (!peer->owner_polls_known || owner_polls != peer->owner_polls_seen)) {
        peer->owner_polls_seen = owner_polls;  // still polling or posting (or first look): it may drain
        peer->owner_polls_known = true;
        peer->owed_polls = 0;
        settled = false;
      } else if (!now && peer->owed_polls < kOwedWakePolls) {
        settled = false;
      } else {
        peer->ring->WakeIfSleeping();
      }
    }
    if (!settled) {
      ++i;
      continue;
    }
    if (peer) {
      peer->wake_owed = false;
      peer->owed_listed = false;
    }
    owed_[i] = owed_.back();
    owed_.pop_back();
  }
  wake_owed_.store(!owed_.empty(), std::memory_order_relaxed);
}

WireSender Fabric::Sender() const {
  // The packet being delivered now counts as taken: its answers (a READ's
  // response, an ACK not held back) say so.
  return {slot_, generation_, ring_ ? ring_->tail() + (taking_ ? 1 : 0) : 0};
}

void Fabric::HearSender(int slot, uint32_t generation, uint32_t consumed) {
  // A hint from shared memory: a wrong one only delays a wake until the
  // owner's progress thread looks (SettleOwedWakesLocked).
  if (slot < 0 || slot >= kMaxFabricProcesses || slot == slot_) return;
  Peer* peer = peers_[slot].get();
  if (!peer || peer->generation != generation) return;
  peer->consumed_heard = consumed;
  peer->heard = true;
  // It took our packet: the wake owed for it is settled now, so our next
  // polls need not take the engine lock to look (a ping-pong's ACK or reply).
  if (!peer->wake_owed || peer->look_owed || !peer->HeardConsumed(peer->owed_pos)) return;
  peer->wake_owed = false;
  peer->owed_listed = false;
  if (const auto listed = std::find(owed_.begin(), owed_.end(), slot); listed != owed_.end()) owed_.erase(listed);
  wake_owed_.store(!owed_.empty(), std::memory_order_relaxed);
}

bool Fabric::DrainInbound(uint32_t max_receives) {
  if (ring_->Empty()) return false;
  ring_->PrefetchNextPacket();
  std::lock_guard<DataPathMutex> lock(Engine::Get().mu());
  DrainInboundLocked(true, max_receives);
  return true;
}

void Fabric::DrainInboundLocked(bool flush_backlog, uint32_t max_receives) {
  if (!ring_ || draining_inbound_) return;  // (a delivery that polls again: the outer loop goes on)
  if (flush_backlog) FlushBacklogLocked();
  const auto& devices = DeviceList::Get().devices();
  Packet* pkt = &inbound_;
  Packet* held = &held_ack_;  // a positive ACK not delivered yet, while `holding`
  bool holding = false;
  WirePacket::Line held_line{};  // the line `held` was made from
  pkt->payload = Engine::Get().PayloadBuffer();
  uint32_t popped = 0;
  uint32_t receives = 0;  // messages delivered that take a receive WQE
  draining_inbound_ = true;
  // The ACKs of a burst of packets go out together (Engine::BeginBurst); a
  // burst is cut short so that a producer that keeps the ring busy still
  // hears from us while it has room in its send queue.
  constexpr uint32_t kBurstPackets = 32;
  // At most a ring's worth per drain: a producer that keeps our ring full
  // (or writes anything into it) cannot keep the engine lock, and every verb
  // of this process waiting for it; the next poll or look goes on.
  constexpr uint32_t kMaxPops = PacketRing::kSlots;
  Engine::Get().BeginBurst();
  while (receives < max_receives && popped < kMaxPops && ring_->Pop([&](const WirePacket& wp) {
    const int32_t src_device = ReadOnce(wp.src_device);
    HearSender(ReadOnce(wp.sender_slot), ReadOnce(wp.sender_generation), ReadOnce(wp.sender_consumed));
    uint32_t psn = 0;
    const WirePacket::Line line = wp.ReadLine(&psn);
    // An ACK that ReplacesAck would take for the held one's successor, and
    // whose Packet would differ from it in the PSN alone: only that is taken.
    if (holding && line.PlainAck() && line == held_line && ((psn - held->psn) & 0xffffff) < 0xffffff / 2) {
      held->psn = psn;
      return;
    }
    if (line.PlainSend() && !Engine::Get().delivering()) {
      // (A SEND never replaces an ACK: the held one goes first, as below.)
      if (holding) DeliverTaken(held, false);
      holding = false;
      if (TakeWholeSendLocked(line, psn, wp.payload)) {
        ++work_taken_;
        ++receives;
        return;
      }
    }
    // (A READ to a GID the profile does not name has it on the addressing
    // line: routed by its Packet.)
    if (line.PlainRead() && !Engine::Get().delivering() &&
        (!line.dst_is_global || line.dgid_number != ProfileGids::kUnnamed)) {
      if (holding) DeliverTaken(held, false);
      holding = false;
      const bool addressed = line.flags & WirePacket::kAddressing;
      const WholeRead read{static_cast<ibv_qp_type>(line.transport), psn,
                           addressed ? ReadOnce(wp.addressing.remote_addr) : 0,
                           addressed ? ReadOnce(wp.addressing.rkey) : 0,
                           addressed ? ReadOnce(wp.addressing.dma_length) : 0};
      if (TakeWholeReadLocked(line, read)) {
        ++work_taken_;
        return;
      }
    }
    if (line.PlainReadResponse() && !Engine::Get().delivering()) {
      // (A response never replaces an ACK: the held one goes first, as below.)
      if (holding) DeliverTaken(held, false);
      holding = false;
      if (TakeWholeReadResponseLocked(line, psn, wp.payload)) {
        ++work_taken_;
        return;
      }
    }
    Device* src = src_device >= 0 && static_cast<size_t>(src_device) < devices.size() ? devices[src_device].get()
                                                                                       : nullptr;
    // Delivered before Transmit returns unless the engine is delivering
    // already (then it is queued, and must own its bytes): only then may the
    // payload stay in the slot, which is ours until the callback returns.
    // (ToPacket sets every field: `pkt` needs no reset between packets.)
    try {
      wp.ToPacket(src, pkt, !Engine::Get().delivering());
    } catch (const std::bad_alloc&) {
      return;  // no memory for its bytes: lost, as on a wire (nothing may leave Pop: its slot must go back)
    }
    pkt->from_peer = true;
    work_taken_ += IsWork(pkt->kind);
    placed_one_packet_taken_ += pkt->answered && pkt->psn_count == 1;
    // (A message's first packet takes the receive WQE.)
    receives += pkt->kind == Packet::Kind::kRequest && pkt->first && ConsumesRecv(pkt->op);
    // A stream's ACKs, back to back in the ring (the responder answered each
    // message): the last covers the messages of all, so only it is delivered.
    // What the requester does with it is what it would have done with each
    // in turn, without taking every earlier message's ACK on the way.
    if (holding && !ReplacesAck(*held, *pkt)) DeliverTaken(held, false);
    holding = false;
    if (IsPlainAck(*pkt)) {
      std::swap(pkt, held);
      // (Read again after ToPacket: a writer that changed the slot meanwhile
      // gets an ACK delivered that it could have written itself, no more.)
      uint32_t reread_psn = 0;
      held_line = wp.ReadLine(&reread_psn);
      holding = true;
      return;
    }
    DeliverTaken(pkt, true);
  })) {
    if (++popped % kBurstPackets == 0) {
      Engine::Get().EndBurst();
      Engine::Get().BeginBurst();
    }
  }
  if (holding) DeliverTaken(held, false);
  Engine::Get().EndBurst();
  draining_inbound_ = false;
  Engine::Get().RecyclePayload(pkt->payload.TakeBuffer());
  Engine::Get().RecyclePayload(held->payload.TakeBuffer());
  // Producers that went to sleep holding packets for us: there is room now.
  if (popped) {
    ring_->WakeRoomWanted([this](int slot) {
      if (slot == slot_) return;
      if (Peer* peer = ReachPeer(slot)) peer->ring->Interrupt();
    });
  }
}

template <typename Take>
bool Fabric::TakeWholeLocked(const WirePacket::Line& line, Take&& take) {
  // A fault armed for delivery sees the Packet (Engine::DeliverOrDropLocked).
  if (FaultPoints::Get().AnyArmed()) return false;
  Engine& engine = Engine::Get();
  Device* dev = engine.Route(line.Destination());
  Qp* qp = dev ? dev->FindQp(line.dst_qpn) : nullptr;
  if (!qp) return false;  // another process's QP, or none: the Packet says what becomes of it
  bool taken = false;
  taking_ = true;
  engine.DeliverInPlace([&] {
    try {
      taken = take(qp);
    } catch (...) {
      taken = true;  // out of memory while it was delivered: lost, as DeliverOrDropLocked loses a Packet
    }
  });
  taking_ = false;
  return taken;
}

bool Fabric::TakeWholeSendLocked(const WirePacket::Line& line, uint32_t psn, const uint8_t* payload) {
  const WholeSend send{static_cast<ibv_qp_type>(line.transport),
                       WirePacket::OpOf(line.op),
                       psn,
                       line.imm_data,
                       (line.flags & WirePacket::kSolicited) != 0,
                       payload,
                       std::min<uint32_t>(line.payload_len, WirePacket::kMaxPayload)};  // (clamped as ToPacket does)
  return TakeWholeLocked(line, [&](Qp* qp) { return qp->ReceiveWholeSendLocked(send); });
}

bool Fabric::TakeWholeReadLocked(const WirePacket::Line& line, const WholeRead& read) {
  return TakeWholeLocked(line, [&](Qp* qp) { return qp->ReceiveWholeReadLocked(read); });
}

bool Fabric::TakeWholeReadResponseLocked(const WirePacket::Line& line, uint32_t psn, const uint8_t* payload) {
  const uint32_t length = std::min<uint32_t>(line.payload_len, WirePacket::kMaxPayload);  // (clamped as ToPacket does)
  return TakeWholeLocked(line, [&](Qp* qp) {
    return qp->ReceiveWholeReadResponseLocked(static_cast<ibv_qp_type>(line.transport), psn, payload, length);
  });
}

void Fabric::DeliverTaken(Packet* pkt, bool at_tail) {
  taking_ = at_tail;  // (a held ACK was taken with an earlier slot: the tail has moved on)
  if (!Engine::Get().DeliverInPlace(*pkt)) {
    Engine::Get().Transmit(std::move(*pkt));
    pkt->payload = Engine::Get().PayloadBuffer();
  }
  taking_ = false;
}

namespace {

// How long the progress thread keeps looking at its ring after it found work,
// and how many turns it spins on the ring alone between two looks (a turn is
// a pause instruction and a read of a line of our own: tens of nanoseconds).
constexpr uint64_t kLookAfterWorkNs = 50'000;
// Longer when the work was a stream of one-packet WRITEs that their
// requester placed with process_vm_writev (at least kPlacedWritesForStream
// at once): that requester sends the next ones through our ring instead, with
// no system call, if it sees us looking (PlaceWrite). It may decide only a
// send queue's worth of WRITEs later: a burst of placed WRITEs fills our ring
// with their packets (which do not wake us), the rest wait in its backlog
// until its next poll, and we drain them all at once. With 50 us, ib_write_bw
// 64 B stayed placed (0.26-0.31 Mpps) in 3 runs of 8; a burst of 128 takes
// about 300 us. (A few placed WRITEs now and then do not make us spin longer.)
constexpr uint64_t kLookAfterPlacedWritesNs = 1'000'000;
constexpr uint32_t kPlacedWritesForStream = 32;
constexpr int kSpinTurnsPerLook = 64;
// How soon the progress thread looks again at packets it left to an
// application that polls: if it has not polled once by then, they are taken
// here (one short nap per millisecond at most while it does poll).
constexpr int kLookAgainAtPacketsLeftUs = 50;

}  // namespace

void Fabric::ProgressThread(FabricSegment* seg, std::promise<JoinResult>* joined) {
  {
    JoinResult join;
    {
      SegmentLock lock(segment_fd_);
      if (!lock.locked()) {
        join.error = SegmentLock::kNotLocked;
        join.err = EAGAIN;
      } else if (!seg->unlinked) {
        join.error = JoinLocked(seg, &join.err);
        if (!join.error.empty() && !OthersAttached(segment_fd_)) {
          // We could not join a fabric nobody is in (likely one we just made): leave nothing behind.
          seg->unlinked = 1;
          shm_unlink(segment_name_.c_str());
        }
      }
    }
    const bool ok = segment_ != nullptr;
    joined->set_value(join);  // `joined` is gone after this
    if (!ok) return;
  }
  // A producer that died between claiming a slot of our ring and publishing
  // it. Most often the claim is a live producer's, between its claim and its
  // publish (a few hundred nanoseconds; we spin after work and see it): the
  // kernel is asked (PeerAlive, a system call) only once the same claim has
  // waited kDeadClaimGraceNs.
  uint64_t now = 0;
  uint64_t claim_pos = ~uint64_t{0};
  uint64_t claim_seen_at = 0;
  const auto producer_dead = [&](int slot, uint32_t generation) {
    if (segment_->procs[slot].generation.load() != generation) return true;
    if (const uint64_t pos = ring_->tail(); pos != claim_pos) {
      claim_pos = pos;
      claim_seen_at = now;
      return false;
    }
    return now - claim_seen_at >= kDeadClaimGraceNs && !PeerAlive(slot);
  };
  uint64_t look_until = 0;
  uint64_t app_polls_seen = 0;
  uint64_t app_polled_at = 0;
  int room_retries = 0;  // bounds the loop when a peer's ring says it has room but takes nothing
  uint64_t windows_swept_at = 0;
  bool spin_found_packet = false;
  // Packets left to an application that polls (app_drains), and where the
  // ring's tail stood then.
  bool left_to_app = false;
  uint64_t left_tail = 0;
  for (;;) {
    const uint32_t seq = ring_->WakeSeq();
    if (stop_) break;
    HandleFaults();
    // When the application last polled or posted, by our clock (its poll
    // loop reads no clock, it only counts its polls). Not read when the spin
    // below just saw a packet: the clock then is the last look's, at most a
    // few microseconds old, and a read would delay the packet's delivery.
    if (!spin_found_packet) now = MonotonicNs();
    spin_found_packet = false;
    if (const uint64_t polls = ring_->polls(); polls != app_polls_seen) {
      app_polls_seen = polls;
      app_polled_at = now;
    }
    const bool app_polled_lately = now - app_polled_at < 10'000'000;
    // An application that polled or posted lately, and is not blocking,
    // drains the ring and flushes our backlogs at each of its polls. Within
    // the last millisecond: we leave the backlogs to it. Within the last 10:
    // we take the engine lock only if it is free, never wait for it (a
    // bandwidth client that outruns its peer's ring, or one preempted inside
    // a verb, would otherwise pay a wake-up system call at its next unlock).
    const bool app_may_poll = ring_->app_may_poll();  // read once: shared memory
    const bool app_active = app_may_poll && app_polled_lately;
    const bool app_flushes = app_may_poll && now - app_polled_at < 1'000'000;
    const bool flush = !backlog_empty_ && !app_flushes;
    bool worked = false;
    bool placed_stream = false;  // the work included a stream of placed one-packet WRITEs
    bool lock_busy = false;
    // An application that polls takes its packets itself, at most
    // kPollDrainReceives receive WQEs' worth a poll; taking them here too
    // would fill its receive queue faster than it reposts (perftest reposts
    // what it polls) and run it dry: RNR NAKs, or lost datagrams.
    bool app_drains = app_flushes && !ring_->Empty();
    // But an application that polls only between waits elsewhere (UCX polls
    // between poll(2) calls on its sockets) may leave them there: a READ or
    // an atomic, which an HCA answers without the target's CPU, would wait
    // for its next poll. Left once, they are looked at again after a short
    // nap; if nobody has taken a packet from the ring meanwhile, we take them
    // (a process whose one thread only posts, which counts as polling, while
    // another waits for completion events, takes none).
    bool look_again_soon = false;
    if (app_drains) {
      const uint64_t tail = ring_->tail();
      if (left_to_app && tail == left_tail) {
        app_drains = false;
        left_to_app = false;
      } else {
        look_again_soon = !left_to_app;  // (seen taking packets since: the usual nap)
        left_to_app = true;
        left_tail = tail;
      }
    } else {
      left_to_app = false;
    }
    const bool inbound = !ring_->Empty() && !app_drains;
    if (inbound) ring_->PrefetchNextPacket();
    if (flush || inbound) {
      const auto lock = LockForProgress(app_active);
      if (!lock.owns_lock()) {
        lock_busy = true;
      } else {
        if (flush) worked |= FlushBacklogLocked();
        if (!ring_->Empty()) {
          DrainInboundLocked(false);
          worked = true;
        }
        placed_stream = placed_one_packet_taken_ >= kPlacedWritesForStream;
        placed_one_packet_taken_ = 0;
      }
    }
    if (!worked && ring_->SkipDeadClaim(producer_dead)) worked = true;
    if (worked) now = MonotonicNs();
    // A peer streaming to a program that does not poll (a bandwidth server
    // asleep in a socket read): keep looking a moment before sleeping, so the
    // stream costs the producer no wake-up system call per burst, nor us a
    // context switch. A program that polls drains the ring itself: then we
    // stay out of its way.
    if (worked) look_until = now + (placed_stream ? kLookAfterPlacedWritesNs : kLookAfterWorkNs);
    const bool looking = now < look_until && !app_polled_lately;
    ring_->MarkLooking(looking);
    if (looking) {
      // Between two looks round the loop (each reads the clock: a system
      // call in a VM without a vDSO clock source), spin on our ring alone.
      for (int turn = 0; turn < kSpinTurnsPerLook && ring_->Empty() && !stop_.load(std::memory_order_relaxed); ++turn) {
        CpuRelax();
      }
      spin_found_packet = !ring_->Empty();
      continue;
    }
    // Packets that wait for room in a peer's ring: ask the peer to wake us
    // when it has made some, unless it has already.
    if (flush && !backlog_empty_ && AskForRoom(app_active) && ++room_retries <= 64) continue;
    room_retries = 0;
    // While the application polls, producers do not wake us: look again
    // every millisecond in case it stopped just after a producer looked
    // (and while a backlog waits for room in a peer's ring). Otherwise look
    // again every 20 ms all the same: an application that polls once more
    // after we went to sleep, and stops right after a producer looked, would
    // leave that packet in the ring for good.
    const bool app_polling = ring_->in_poll_loop() && app_polled_lately;
    LookForOversubscription(app_polling);
    // Windows onto the files of peers that left, or withdrew those keys,
    // and to which we write no more: unmapped, their pages are freed.
    if (windows_open_.load(std::memory_order_relaxed) && now - windows_swept_at > kWindowSweepNs) {
      const auto lock = LockForProgress(app_active);
      if (lock.owns_lock()) {
        SweepWindowsLocked();
        windows_swept_at = now;
      }
    }
    // Wakes owed by packets we sent: nobody may poll here to look again.
    if (wake_owed_.load(std::memory_order_relaxed)) {
      // (An active application settles them at its polls: no waiting for it.)
      const auto lock = LockForProgress(app_active);
      if (lock.owns_lock()) SettleOwedWakesLocked(true);
    }
    if (app_drains && look_again_soon) {
      ring_->NapMicros(seq, kLookAgainAtPacketsLeftUs);
    } else if (lock_busy || app_drains) {
      ring_->Nap(seq, 1);  // (Sleep would return at once: the ring holds packets)
    } else {
      ring_->Sleep(seq, app_polling || !backlog_empty_ ? 1 : 20);
    }
  }
  ring_->MarkLooking(false);
  // Leave the fabric (LeaveLocked gives up our liveness byte last).
  {
    // Not locked in time: the others clean our slot once we are gone.
    SegmentLock lock(segment_fd_);
    if (lock.locked()) LeaveLocked();
  }
}

}  // namespace simverbs

// ---- Faults from outside: the mailbox (fault/mailbox.h).

namespace simverbs {

// Requires: the fabric's lock, segment_ set.
void Fabric::TakeFaultStateLocked() {
  FaultMailbox& box = segment_->faults;
  faults_seen_ = box.last_seq.load(std::memory_order_acquire);
  const auto& devices = DeviceList::Get().devices();
  for (size_t d = 0; d < devices.size() && d < FaultMailbox::kMaxDevices; ++d) {
    for (int port = 1; port <= devices[d]->port_count() && port <= FaultMailbox::kMaxPorts; ++port) {
      const int32_t state = box.port_state[d][port - 1].load();
      if (state == IBV_PORT_DOWN || state == IBV_PORT_ACTIVE) {
        devices[d]->SetPortState(port, static_cast<ibv_port_state>(state));
      }
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
    if (delivered == kNotRaised) {
      request.not_raised.fetch_add(1);
    } else {
      request.delivered.fetch_add(static_cast<uint32_t>(delivered));
    }
    request.answered[slot_ / 64].fetch_or(uint64_t{1} << (slot_ % 64), std::memory_order_release);
  }
}

namespace {

// A running fabric, opened from outside (simverbs inject, counters) without joining it.
class RunningFabric {
 public:
  explicit RunningFabric(const std::string& fabric) : name_(SegmentPrefix() + fabric) {
    if (!ValidFabricName(fabric)) {
      error_ = "fabric \"" + fabric + "\": no such name (a fabric's name has letters, digits, '-', '_' and '.' only)";
      return;
    }
    const ShmMapping m = OpenShm(name_, sizeof(FabricSegment), true);
    if (!m.addr) {
      error_ = m.err == ENOENT ? "no fabric \"" + fabric +
                                     "\" is running: no process has opened a simulated device with SIMVERBS_FABRIC=" +
                                     fabric + " (start the program with 'simverbs run' and the same SIMVERBS_FABRIC, "
                                     "or set --fabric)"
                               : m.error;
      return;
    }
    seg_ = static_cast<FabricSegment*>(m.addr);
    fd_ = m.fd;
    if (seg_->magic != kMagic) error_ = "shared memory " + ShmPath(name_) + " is not a fabric of this simverbs version";
  }
  ~RunningFabric() {
    if (seg_) munmap(seg_, sizeof(FabricSegment));
    if (fd_ >= 0) close(fd_);
  }
  RunningFabric(const RunningFabric&) = delete;
  RunningFabric& operator=(const RunningFabric&) = delete;

  const std::string& error() const { return error_; }  // empty: opened
  const std::string& name() const { return name_; }
  FabricSegment* segment() const { return seg_; }
  int fd() const { return fd_; }
  // The profile the fabric runs, as its first process wrote it.
  std::string ProfilePath() const {
    char profile[sizeof seg_->profile_path];
    std::memcpy(profile, seg_->profile_path, sizeof profile);
    profile[sizeof profile - 1] = 0;
    return profile;
  }

 private:
  std::string name_;
  std::string error_;
  FabricSegment* seg_ = nullptr;
  int fd_ = -1;
};

}  // namespace

FabricCounters Fabric::ReadCounters(const std::string& fabric) {
  FabricCounters counters;
  const RunningFabric running(fabric);
  counters.error = running.error();
  if (!counters.error.empty()) return counters;
  counters.profile_path = running.ProfilePath();
  counters.port_xmit_discards.resize(kMaxDevices);
  for (int d = 0; d < kMaxDevices; ++d) {
    for (const auto& value : running.segment()->devices[d].port_xmit_discards) {
      counters.port_xmit_discards[d].push_back(value.load(std::memory_order_relaxed));
    }
  }
  return counters;
}

FaultPost Fabric::PostFault(const std::string& fabric,
                            const std::function<std::string(const std::string&, FaultRequest*)>& fill,
                            int timeout_ms) {
  FaultPost post;
  const RunningFabric running(fabric);
  post.error = running.error();
  if (!post.error.empty()) return post;
  FabricSegment* seg = running.segment();
  const int fd = running.fd();
  const std::string& name = running.name();
  std::vector<bool> waiting(kMaxProcs);  // process slots that must answer
  int expected = 0;
  FaultRequest* request = nullptr;
  uint64_t seq = 0;
  {
    SegmentLock lock(fd);
    if (!lock.locked()) {
      post.error = SegmentLock::kNotLocked;
      return post;
    }
    for (int i = 0; i < kMaxProcs; ++i) {
      waiting[i] = seg->procs[i].pid.load() != 0 && SlotAlive(fd, i);
      expected += waiting[i];
    }
    FaultRequest fields{};
    if (seg->unlinked || expected == 0) {
      post.error = "no process is attached to fabric \"" + fabric +
                   "\" (its programs have ended; start them with 'simverbs run' and the same SIMVERBS_FABRIC)";
    } else {
      post.error = fill(running.ProfilePath(), &fields);
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
      request->count = fields.count;
      request->argument = fields.argument;
      for (auto& word : request->answered) word.store(0);
      request->delivered.store(0);
      request->not_raised.store(0);
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
  if (!post.error.empty()) return post;
  // Wake every progress thread: each handles the request on its own.
  for (int i = 0; i < kMaxProcs; ++i) {
    if (!waiting[i]) continue;
    const ShmMapping ring = OpenShm(RingName(name, i), sizeof(PacketRing));
    if (!ring.addr) continue;
    static_cast<PacketRing*>(ring.addr)->Interrupt();
    munmap(ring.addr, sizeof(PacketRing));
  }
  const uint64_t deadline = MonotonicNs() + static_cast<uint64_t>(timeout_ms) * 1'000'000;
  const auto answered = [&](int i) {
    return (request->answered[i / 64].load(std::memory_order_acquire) >> (i % 64)) & 1;
  };
  while (request->seq.load(std::memory_order_acquire) == seq && MonotonicNs() <= deadline) {
    bool all = true;
    for (int i = 0; i < kMaxProcs; ++i) {
      if (!waiting[i] || answered(i)) continue;
      // A process that exits meanwhile will never answer.
      if (!SlotAlive(fd, i)) {
        waiting[i] = false;
        ++post.exited;
      } else {
        all = false;
      }
    }
    if (all) break;
    usleep(1000);
  }
  for (int i = 0; i < kMaxProcs; ++i) {
    if (!waiting[i]) continue;
    ++post.processes;  // without those that exited meanwhile
    if (answered(i)) {
      ++post.answered;
    } else {
      post.silent += (post.silent.empty() ? "" : " ") + std::to_string(seg->procs[i].pid.load());
    }
  }
  post.delivered = request->delivered.load();
  post.not_raised = request->not_raised.load();
  return post;
}

// ---- What dead programs left in /dev/shm.

namespace {

struct ShmEntry {
  std::string name;  // "/simverbs-<uid>-..."
  uint64_t size;
};

// This user's fabric objects in /dev/shm (by name and owner).
std::vector<ShmEntry> ListOurs(const std::string& prefix) {
  std::vector<ShmEntry> entries;
  DIR* dir = opendir("/dev/shm");
  if (!dir) return entries;
  while (const dirent* d = readdir(dir)) {
    const std::string name = "/" + std::string(d->d_name);
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    struct stat st {};
    if (fstatat(dirfd(dir), d->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
    if (st.st_uid != geteuid()) continue;
    entries.push_back(ShmEntry{name, static_cast<uint64_t>(st.st_size)});
  }
  closedir(dir);
  return entries;
}

}  // namespace

SweepReport Fabric::Sweep(const std::string& keep, int lock_wait_ms) {
  SweepReport report;
  const std::string prefix = SegmentPrefix();
  const std::vector<ShmEntry> entries = ListOurs(prefix);
  const auto remove = [&](const ShmEntry& e) {
    if (shm_unlink(e.name.c_str()) == 0) {
      report.removed.push_back(ShmPath(e.name));
      report.bytes += e.size;
    }
  };
  // Segments first: a fabric none of whose processes is alive goes whole.
  // Whether one is alive is asked of the kernel (its locks on the file), not
  // read from the segment: garbage written into it, or a creator that died
  // before it was ready, must not keep it forever.
  for (const ShmEntry& e : entries) {
    if (e.size != sizeof(FabricSegment) || e.name == keep) continue;
    const ShmMapping m = OpenShm(e.name, sizeof(FabricSegment), true);
    if (!m.addr) {
      if (m.err != ENOENT) report.refused.push_back(m.error);
      continue;
    }
    auto* seg = static_cast<FabricSegment*>(m.addr);
    int alive = 0;
    bool busy = false;
    if (JudgedByLocks(seg->magic)) {
      // A fabric whose lock stays taken is in use: judged another time. Under
      // it the name stays this file's (every process removing a fabric's name
      // holds its lock and marks it unlinked first, so one about to join
      // makes a new fabric).
      SegmentLock lock(m.fd, lock_wait_ms);
      busy = !lock.locked();
      for (int i = 0; lock.locked() && i < kMaxProcs; ++i) alive += SlotAlive(m.fd, i);
      struct stat ours {}, named {};
      const bool same = fstat(m.fd, &ours) == 0 && stat(ShmPath(e.name).c_str(), &named) == 0 &&
                        ours.st_dev == named.st_dev && ours.st_ino == named.st_ino;
      if (lock.locked() && same && alive == 0 && !OthersAttached(m.fd)) {
        seg->unlinked = 1;
        remove(e);
      }
    }
    munmap(seg, sizeof(FabricSegment));
    close(m.fd);
    if (alive > 0 || busy) {
      const std::string why =
          busy ? "its lock is held" : std::to_string(alive) + " process" + (alive == 1 ? "" : "es");
      report.kept.push_back("\"" + e.name.substr(prefix.size()) + "\" (" + why + ")");
    }
  }
  // Then rings ("<segment>+p<slot>"; earlier versions' "<segment>-p<slot>",
  // and their memory objects "<ring>-mr+<n>") whose fabric is gone. Looked
  // up now, not in the listing: a fabric may have been created since. An
  // earlier version's name may be a fabric's of ours ("job-p1"): what has a
  // segment's size is not taken for one.
  for (const ShmEntry& e : entries) {
    std::string segment = e.name;
    size_t p = segment.rfind(kRingSeparator);
    if (p == std::string::npos) {
      // (Nor one of size 0: a segment being made, not yet sized.)
      if (e.size == sizeof(FabricSegment) || e.size == 0) continue;
      const size_t mr = segment.rfind("-mr+");
      if (mr != std::string::npos) segment.resize(mr);
      p = segment.rfind("-p");
    }
    if (p == std::string::npos || p + 2 == segment.size() ||
        segment.find_first_not_of("0123456789", p + 2) != std::string::npos) {
      continue;  // not a ring or an object of ours
    }
    segment.resize(p);
    struct stat st {};
    if (segment.size() > prefix.size() && stat(ShmPath(segment).c_str(), &st) != 0 && errno == ENOENT) remove(e);
  }
  return report;
}

}  // namespace simverbs
