#include "fabric/packet_ring.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <new>

namespace simverbs {
namespace {

// A futex on shared memory (not FUTEX_PRIVATE): it works across processes.
void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, int timeout_ms) {
  timespec ts{timeout_ms / 1000, (timeout_ms % 1000) * 1000000L};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, timeout_ms < 0 ? nullptr : &ts,
          nullptr, 0);
}

void FutexWake(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, 1, nullptr, nullptr, 0);
}

// An owner that polled this recently is in its poll loop and will find the
// packet. A program that spins on memory instead (ib_write_lat) polls its CQ
// only now and then: a short window makes such a program's progress thread
// wake up at once rather than at its next nap.
constexpr uint64_t kPollingWindowNs = 2000;

}  // namespace

uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);  // vDSO: no system call
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

PacketRing* PacketRing::Init(void* memory) {
  auto* ring = static_cast<PacketRing*>(memory);
  ring->head_.store(0);
  ring->tail_.store(0);
  ring->sleeping_.store(0);
  ring->wake_seq_.store(0);
  ring->last_poll_ns_.store(0);
  for (uint32_t i = 0; i < kSlots; ++i) ring->slots_[i].seq.store(i);
  return ring;
}

bool PacketRing::Push(const Packet& pkt, int src_device_index, uint64_t* pushed_at) {
  uint64_t pos = head_.load(std::memory_order_relaxed);
  Slot* slot;
  for (;;) {
    slot = &slots_[pos % kSlots];
    const uint64_t seq = slot->seq.load(std::memory_order_acquire);
    const int64_t diff = static_cast<int64_t>(seq) - static_cast<int64_t>(pos);
    if (diff == 0) {
      if (head_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) break;
    } else if (diff < 0) {
      return false;  // full
    } else {
      pos = head_.load(std::memory_order_relaxed);
    }
  }
  slot->pkt.From(pkt, src_device_index);
  // Dekker with Sleep(): publish, then look whether the consumer sleeps. Both
  // sides use seq_cst operations rather than fences (the same instructions on
  // x86, and ThreadSanitizer understands them).
  slot->seq.store(pos + 1, std::memory_order_seq_cst);
  if (pushed_at) *pushed_at = pos;
  if (sleeping_.load(std::memory_order_seq_cst) && MonotonicNs() - last_poll_ns() > kPollingWindowNs) {
    wake_seq_.fetch_add(1, std::memory_order_release);
    FutexWake(&wake_seq_);
  }
  return true;
}

bool PacketRing::Pop(WirePacket* out) {
  for (;;) {
    const uint64_t pos = tail_.load(std::memory_order_relaxed);
    Slot* slot = &slots_[pos % kSlots];
    if (slot->seq.load(std::memory_order_acquire) != pos + 1) return false;
    // Header and payload only: a small packet must not cost a 4 KiB copy.
    std::memcpy(static_cast<void*>(out), &slot->pkt, offsetof(WirePacket, payload));
    // Another process wrote the header: a length beyond the payload area is
    // corrupt, and the packet is dropped. The length is our copy's, which
    // the writer cannot change any more.
    const bool sane = out->payload_len <= WirePacket::kMaxPayload;
    if (sane) std::memcpy(out->payload, slot->pkt.payload, out->payload_len);
    slot->seq.store(pos + kSlots, std::memory_order_release);
    tail_.store(pos + 1, std::memory_order_relaxed);
    if (sane) return true;
  }
}

bool PacketRing::Empty() const {
  const uint64_t pos = tail_.load(std::memory_order_relaxed);
  return slots_[pos % kSlots].seq.load(std::memory_order_acquire) != pos + 1;
}

void PacketRing::Sleep(uint32_t seq, int timeout_ms) {
  sleeping_.store(1, std::memory_order_seq_cst);
  const uint64_t pos = tail_.load(std::memory_order_relaxed);  // the consumer's own
  if (slots_[pos % kSlots].seq.load(std::memory_order_seq_cst) != pos + 1) FutexWait(&wake_seq_, seq, timeout_ms);
  sleeping_.store(0, std::memory_order_relaxed);
}

}  // namespace simverbs

namespace simverbs {

void PacketRing::Interrupt() {
  wake_seq_.fetch_add(1, std::memory_order_release);
  FutexWake(&wake_seq_);
}

}  // namespace simverbs
