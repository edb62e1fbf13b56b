#pragma once

// The data path's copies of message bytes (into and out of ring slots, into
// registered memory, into a peer's shared file) go in pieces of at most
// kCopyPiece bytes. glibc copies a piece that size with vector moves; from
// 2112 bytes up, on a CPU with fast short REP MOVSB, it uses `rep movsb`,
// which on AMD Zen 3 moves lines another CPU holds at half the speed or less,
// and erratically: ib_send_bw 64 KiB 6.5-16.7 GB/s (median 6.9) with it,
// 12.4-18.5 (median 14.1) without, in interleaved runs; a packet is 4 KiB, and
// each one crosses to the other CPU. (Measured on that CPU only; elsewhere
// the pieces cost a few more calls per packet.)

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace simverbs {

inline constexpr size_t kCopyPiece = 2048;

// Copies of more than kCopyPiece bytes (copy_bytes.cc).
void CopyInPieces(void* dst, const void* src, size_t n);

// memcpy: the two ranges must not overlap. Nothing to copy may come with
// null pointers (an empty vector's data()), which memcpy must not be given.
inline void CopyBytes(void* dst, const void* src, size_t n) {
  if (n <= kCopyPiece) {
    if (n != 0) std::memcpy(dst, src, n);
  } else {
    CopyInPieces(dst, src, n);
  }
}

// memmove: the ranges may overlap (a SEND or READ within one process can be
// read straight from memory that overlaps where it lands); then one memmove.
inline void MoveBytes(void* dst, const void* src, size_t n) {
  const auto d = reinterpret_cast<uintptr_t>(dst);
  const auto s = reinterpret_cast<uintptr_t>(src);
  if (n <= kCopyPiece || (d < s + n && s < d + n)) {
    if (n != 0) std::memmove(dst, src, n);
  } else {
    CopyInPieces(dst, src, n);
  }
}

}  // namespace simverbs
