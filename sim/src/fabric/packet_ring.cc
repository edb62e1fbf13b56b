#include "fabric/packet_ring.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <new>

namespace simverbs {
namespace {

// A futex on shared memory (not FUTEX_PRIVATE): it works across processes.
void FutexWaitMicros(std::atomic<uint32_t>* word, uint32_t expected, int64_t timeout_us) {
  timespec ts{static_cast<time_t>(timeout_us / 1000000), static_cast<long>(timeout_us % 1000000) * 1000L};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, timeout_us < 0 ? nullptr : &ts,
          nullptr, 0);
}

void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, int timeout_ms) {
  FutexWaitMicros(word, expected, timeout_ms < 0 ? -1 : int64_t{timeout_ms} * 1000);
}

void FutexWake(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, 1, nullptr, nullptr, 0);
}

#if defined(__x86_64__)
// PREFETCHW: CPUID 0x80000001, ECX bit 8 (AMD since K8, Intel since Broadwell).
bool CpuHasPrefetchw() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(0x80000001, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 8));
}
const bool kCpuHasPrefetchw = CpuHasPrefetchw();
#endif

// Asks for the line at `p` to be ours to write. GCC makes a read prefetch of
// __builtin_prefetch(p, 1) unless the target has PREFETCHW, which x86-64's
// baseline has not: the line then comes shared, and the store still waits
// for the other CPUs to give it up.
void PrefetchForWrite(const void* p) {
#if defined(__x86_64__)
  if (kCpuHasPrefetchw) {
    asm volatile("prefetchw %0" ::"m"(*static_cast<const char*>(p)));
    return;
  }
#endif
  __builtin_prefetch(p, 1, 3);
}

}  // namespace

uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);  // vDSO: no system call
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

uint64_t CoarseMonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

PacketRing* PacketRing::Init(void* memory) {
  auto* ring = static_cast<PacketRing*>(memory);
  ring->head_.store(0);
  ring->tail_.store(0);
  ring->sleeping_.store(0);
  ring->wake_seq_.store(0);
  ring->polls_.store(0);
  ring->poll_state_.store(kNotPolling);
  ring->blocking_.store(1);
  ring->looking_.store(0);
  for (Announcement& c : ring->claims_) {
    c.pos_plus_1.store(0);
    c.generation.store(0);
  }
  for (auto& w : ring->waiting_) w.store(0);
  for (auto& w : ring->room_wanted_) w.store(0);
  ring->room_asked_.store(0);
  for (uint32_t i = 0; i < kSlots; ++i) ring->slots_[i].seq.store(i);
  return ring;
}

bool PacketRing::Claim(uint64_t* claimed, const WireSender& producer) { return ClaimSlot(claimed, producer); }

bool PacketRing::ClaimSlot(uint64_t* claimed, const WireSender& producer) {
  Announcement* claim = producer.slot >= 0 && producer.slot < kMaxFabricProcesses ? &claims_[producer.slot] : nullptr;
  if (claim) claim->generation.store(producer.generation, std::memory_order_relaxed);
  uint64_t pos = head_.load(std::memory_order_relaxed);
  // Another process may have written anything here: a bounded number of tries.
  for (int tries = 0; tries < 4096; ++tries) {
    const uint64_t seq = slots_[pos % kSlots].seq.load(std::memory_order_acquire);
    const int64_t diff = static_cast<int64_t>(seq) - static_cast<int64_t>(pos);
    if (diff == 0) {
      // Announce before claiming: the owner must be able to tell who holds a
      // slot. No fence of its own: the claiming compare-and-swap releases it,
      // and the owner reads head_ with acquire before it reads the claims.
      if (claim) claim->pos_plus_1.store(pos + 1, std::memory_order_release);
      if (head_.compare_exchange_weak(pos, pos + 1, std::memory_order_seq_cst)) {
        *claimed = pos;
        return true;
      }
    } else if (diff < 0) {
      break;  // full
    } else {
      pos = head_.load(std::memory_order_relaxed);
    }
  }
  if (claim) claim->pos_plus_1.store(0, std::memory_order_release);
  return false;
}

bool PacketRing::Push(const Packet& pkt, int src_device_index, uint64_t* pushed_at, const WireSender& producer,
                      Owed* owed) {
  uint64_t pos = 0;
  if (!ClaimSlot(&pos, producer) || !Publish(pos, pkt, src_device_index, producer, owed)) return false;
  if (pushed_at) *pushed_at = pos;
  return true;
}

bool PacketRing::PushLine(const WirePacket::Line& line, uint32_t psn, const uint8_t* bytes, uint64_t* pushed_at,
                          const WireSender& producer, Owed* owed, const WirePacket::Addressing* read_addressing) {
  uint64_t pos = 0;
  if (!ClaimSlot(&pos, producer)) return false;
  if (read_addressing) {
    slots_[pos % kSlots].pkt.FromReadLine(line, psn, *read_addressing, producer);
  } else {
    slots_[pos % kSlots].pkt.FromLine(line, psn, bytes, producer);
  }
  if (!PublishWritten(pos, false, true, producer, owed)) return false;
  *pushed_at = pos;
  return true;
}

bool PacketRing::Publish(uint64_t pos, const Packet& pkt, int src_device_index, const WireSender& producer,
                         Owed* owed) {
  slots_[pos % kSlots].pkt.From(pkt, src_device_index, producer);
  return PublishWritten(pos, pkt.answered, pkt.last, producer, owed);
}

bool PacketRing::PublishWritten(uint64_t pos, bool answered, bool last, const WireSender& producer, Owed* owed) {
  Slot* slot = &slots_[pos % kSlots];
  // Unfenced (see the top), or Dekker with Sleep() at once: publish, then
  // look whether the consumer sleeps. Both sides use seq_cst operations
  // rather than fences there (the same instructions on x86, and
  // ThreadSanitizer understands them). The owner may have skipped the slot,
  // taking us for dead: a compare-and-swap, or a look just before the plain
  // store.
  const bool unfenced = kUnfencedPublish && owed && !blocking_.load(std::memory_order_relaxed);
  bool published;
  if (unfenced) {
    published = slot->seq.load(std::memory_order_relaxed) == pos;
    if (published) slot->seq.store(pos + 1, std::memory_order_release);
  } else {
    uint64_t expected = pos;
    published = slot->seq.compare_exchange_strong(expected, pos + 1, std::memory_order_seq_cst);
  }
  if (producer.slot >= 0 && producer.slot < kMaxFabricProcesses) {
    claims_[producer.slot].pos_plus_1.store(0, std::memory_order_release);
  }
  if (!published) return false;
  // An answered WRITE needs nothing of the owner: no wake for it, unless the
  // ring is filling up.
  if (answered && head_.load(std::memory_order_relaxed) - tail_.load(std::memory_order_relaxed) < kSlots / 2) {
    return true;
  }
  if (unfenced) {
    owed->look = true;
  } else {
    LookAfterPublish(owed);
  }
  // A message's last packet, most often followed by a wait for the answer or
  // by the next message: ask meanwhile for the payload line of the slot after
  // it, which the owner read when it last went round and does not read again
  // until it is published, so the next message's copy does not wait for it.
  // (Not after every packet: within a message the next copy follows at once,
  // and the hint only competes with it.)
  if (last) PrefetchForWrite(slots_[(pos + 1) % kSlots].pkt.payload);
  return true;
}

void PacketRing::LookAfterPublish(Owed* owed) {
  if (!sleeping_.load(std::memory_order_seq_cst)) return;
  // An owner that polls (or just did) is not asked whether it made progress
  // since our previous packet: that would read two lines it writes on every
  // poll and pop, a cache miss each per packet. A producer that can wait
  // looks at its own next polls instead (Owed::wake).
  if (owed && !blocking_.load(std::memory_order_relaxed)) {
    owed->wake = true;
  } else {
    wake_seq_.fetch_add(1, std::memory_order_release);
    FutexWake(&wake_seq_);
  }
}

void PacketRing::FenceUnfencedPublishes() {
#if !defined(__SANITIZE_THREAD__)  // (no unfenced publishes there: kUnfencedPublish)
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

void PacketRing::WakeIfSleeping() {
  if (!sleeping_.load(std::memory_order_seq_cst)) return;
  wake_seq_.fetch_add(1, std::memory_order_release);
  FutexWake(&wake_seq_);
}

bool PacketRing::Empty() const {
  const uint64_t pos = tail_.load(std::memory_order_relaxed);
  return slots_[pos % kSlots].seq.load(std::memory_order_acquire) != pos + 1;
}

void PacketRing::PrefetchNextPacket() const {
  const Slot& slot = slots_[tail_.load(std::memory_order_relaxed) % kSlots];
  constexpr uint32_t kLines = 4;
  const uint32_t bytes = std::min<uint32_t>(slot.pkt.payload_len, kLines * 64);
  for (uint32_t offset = 0; offset < bytes; offset += 64) __builtin_prefetch(slot.pkt.payload + offset, 0, 3);
  const uint8_t flags = slot.pkt.flags;
  if (flags & WirePacket::kAddressing) __builtin_prefetch(&slot.pkt.addressing, 0, 3);
  if (flags & WirePacket::kExtended) __builtin_prefetch(&slot.pkt.extended, 0, 3);
}

void PacketRing::PrefetchSlotAfterNext(uint64_t pos, uint32_t payload_len) const {
  if (payload_len > kMaxStreamPrefetch) return;
  const Slot& slot = slots_[(pos + 2) % kSlots];
  PrefetchForWrite(&slot);
  for (uint32_t offset = 0; offset < payload_len; offset += 64) PrefetchForWrite(slot.pkt.payload + offset);
}

bool PacketRing::HasRoom() const {
  const uint64_t pos = head_.load(std::memory_order_relaxed);
  return slots_[pos % kSlots].seq.load(std::memory_order_seq_cst) == pos;
}

void PacketRing::SetWaiting(int producer_slot, uint32_t producer_generation) {
  if (producer_slot < 0 || producer_slot >= kMaxFabricProcesses) return;
  waiting_[producer_slot].store(producer_generation, std::memory_order_release);
}

bool PacketRing::Waiting(int producer_slot, uint32_t producer_generation) const {
  if (producer_slot < 0 || producer_slot >= kMaxFabricProcesses || producer_generation == 0) return false;
  return waiting_[producer_slot].load(std::memory_order_acquire) == producer_generation;
}

bool PacketRing::WantRoom(int producer_slot) {
  if (producer_slot < 0 || producer_slot >= kMaxFabricProcesses) return HasRoom();
  room_wanted_[producer_slot / 64].fetch_or(uint64_t{1} << (producer_slot % 64), std::memory_order_relaxed);
  room_asked_.fetch_add(1, std::memory_order_acq_rel);
  return HasRoom();
}

void PacketRing::Sleep(uint32_t seq, int timeout_ms) {
  sleeping_.store(1, std::memory_order_seq_cst);
  const uint64_t pos = tail_.load(std::memory_order_relaxed);  // the consumer's own
  if (slots_[pos % kSlots].seq.load(std::memory_order_seq_cst) != pos + 1) FutexWait(&wake_seq_, seq, timeout_ms);
  sleeping_.store(0, std::memory_order_relaxed);
}

}  // namespace simverbs

namespace simverbs {

void PacketRing::Nap(uint32_t seq, int timeout_ms) { FutexWait(&wake_seq_, seq, timeout_ms); }

void PacketRing::NapMicros(uint32_t seq, int timeout_us) { FutexWaitMicros(&wake_seq_, seq, timeout_us); }

void PacketRing::Interrupt() {
  wake_seq_.fetch_add(1, std::memory_order_release);
  FutexWake(&wake_seq_);
}

}  // namespace simverbs
