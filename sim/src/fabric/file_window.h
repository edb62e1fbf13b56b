#pragma once

// A writer's (or reader's) mapping of part of a peer's file
// (fabric/shared_file.h): the pages of one of the peer's MRs, mapped here, so
// that an RDMA WRITE into that MR, or a READ from it, is placed with a memcpy
// and no system call.
//
// The file is opened through /proc/<pid>/fd/<fd> of the owner, and mapped
// only when it is the file the owner published (st_dev, st_ino), a regular
// file of our effective uid, and long enough for the MR (a mapping beyond
// the end of a file raises SIGBUS on access). Each window belongs to one
// (device, rkey) publication and is checked against it on every use. A
// writer keeps at most a few per peer (Fabric::kMaxFileWindows) and unmaps
// those whose keys the owner withdrew at its next WRITE to that owner
// (Fabric::DropStaleWindows), so it does not hold for long the pages of a
// file the owner has given back.
// (Should the owner shrink the file under a registered MR afterwards, a write
// into the lost pages raises SIGBUS here, as a store by the owner itself
// would; an HCA would write into pages the file no longer has.)

#include <sys/types.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <utility>

namespace simverbs {

// What the owner published about the file behind an MR.
struct FileWindowKey {
  int device = 0;
  uint32_t rkey = 0;
  int32_t fd = -1;       // the owner's descriptor
  uint64_t dev = 0;
  uint64_t ino = 0;
  uint64_t offset = 0;   // file offset of the MR's first byte
  uint64_t length = 0;   // the MR's
  bool operator==(const FileWindowKey&) const = default;
};

class FileWindow {
 public:
  FileWindow() = default;
  FileWindow(const FileWindow&) = delete;
  FileWindow& operator=(const FileWindow&) = delete;
  FileWindow(FileWindow&& other) noexcept { *this = std::move(other); }
  FileWindow& operator=(FileWindow&& other) noexcept;
  ~FileWindow() { Close(); }

  // Maps the file `key` names from the owner `pid`. A window that could not
  // be opened is kept all the same (usable() false): it is not tried again
  // for the same publication.
  static FileWindow Open(pid_t pid, const FileWindowKey& key);

  const FileWindowKey& key() const { return key_; }
  bool usable() const { return mr_ != nullptr; }
  // Copies `local` (our memory) to the MR's bytes [at, at + length).
  // Requires: usable(), and the range within the MR.
  void Write(uint64_t at, uint64_t length, const iovec* local, size_t local_count) const;
  // Copies the MR's bytes [at, at + length) to `local`.
  // Requires: usable(), and the range within the MR.
  void Read(uint64_t at, uint64_t length, const iovec* local, size_t local_count) const;
  // Unmaps.
  void Close();
  // Forgets the mapping without unmapping it: in a child of fork(), which
  // does not inherit it (MADV_DONTFORK), and where something else may be
  // mapped at its address by now.
  void Forget();

 private:
  FileWindowKey key_;
  void* map_ = nullptr;
  size_t map_length_ = 0;
  uint8_t* mr_ = nullptr;  // the MR's first byte in map_
};

}  // namespace simverbs
