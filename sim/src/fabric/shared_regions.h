#pragma once

// Registered memory that a peer process can write into. At ibv_reg_mr (on a
// fabric, for an MR that allows REMOTE_WRITE) the pages under the MR are
// re-backed by a named POSIX shared-memory object: same addresses, same
// content, now MAP_SHARED. A requester in another process maps that object
// and gathers a WRITE's data straight into it (fabric/fabric.h).
//
// Only whole pages of private anonymous read-write memory are re-backed (not
// the brk heap, not a file, not the stack), and only when the MR starts and
// ends on a page boundary: copying the content and mapping the object over it
// is not atomic, so a page shared with other data could lose a write made
// meanwhile by another thread. An MR inside a range already re-backed reuses
// it; anything else keeps the copying path.
//
// fork(): the re-backed range is MAP_SHARED, so a plain fork would share it
// with the child. The simulator reports IBV_FORK_UNNEEDED (the child gets a
// private copy of registered pages, as with the kernel's copy-on-fork of
// pinned pages), so the child's fork handler gives it back private memory
// with the content it sees then. A raw clone() without the fork handlers
// shares the range.
//
// Other differences from private memory, while registered: madvise(
// MADV_DONTNEED) keeps the content instead of zeroing it. After the last MR of
// a range is deregistered the range is private again (unless the program
// unmapped it first: then it is left alone).

#include <cstdint>
#include <string>
#include <vector>

namespace simverbs {

class SharedRegions {
 public:
  static SharedRegions& Get();

  struct Share {
    uint32_t object = 0;       // names the object: ObjectName(prefix, object)
    uint64_t object_size = 0;
    uint64_t offset = 0;       // of the MR's first byte in the object
  };

  // The object names of one process: "<prefix>-mr+<object>" ('+' is not
  // allowed in fabric names, so the prefix of a slot's objects is unique).
  static std::string ObjectName(const std::string& prefix, uint32_t object);
  static std::string ObjectPrefix(const std::string& prefix) { return prefix + "-mr+"; }

  // Re-backs (or finds re-backed) the pages of [addr, addr + length), naming
  // new objects after `prefix`. False: the MR keeps the copying path.
  // Requires: engine lock (it orders this table, and no packet of ours
  // writes into the pages while their content moves).
  bool Acquire(const std::string& prefix, void* addr, size_t length, Share* out);
  // One MR less on `object`; the last one makes the range private again.
  // Requires: engine lock.
  void Release(uint32_t object);

 private:
  SharedRegions();
  void ForkedChild();
  struct Region {
    uint32_t object;
    uintptr_t start;
    uintptr_t end;
    uint64_t inode;
    int users;
    std::string name;
  };
  // Whether [r.start, r.end) is still mapped from r's object.
  static bool StillMapped(const Region& r);
  // Replaces the shared mapping by private memory with the same content.
  static void MakePrivate(const Region& r);

  std::vector<Region> regions_;
  uint32_t next_object_ = 1;
};

}  // namespace simverbs
