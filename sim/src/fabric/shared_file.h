#pragma once

// The file behind registered memory that the program itself mapped shared
// (MAP_SHARED of a tmpfs or hugetlbfs file, a memfd, `ib_write_bw --mmap`):
// a peer that maps the same file writes an RDMA WRITE's bytes into our MR
// with a memcpy, as an HCA writes into the pages, instead of one
// process_vm_writev per message (fabric/file_window.h). Neither the memory's
// content nor its mappings change: the program chose to share those pages,
// and the peer writes only within the MR, as the copying path would.
// (Registration makes sure each page of the range exists, as pinning does.)
//
// The owner holds a descriptor of the file while the MR is published, so a
// peer can open it through /proc/<pid>/fd/<fd> (the same ptrace rule as
// process_vm_writev) even when the program closed its own or the file has no
// name (a memfd). One descriptor per file, shared by its MRs.

#include <cstddef>
#include <cstdint>

namespace simverbs {

struct SharedFile {
  int fd = -1;          // ours (O_CLOEXEC); -1: the range is not in such a file
  uint64_t dev = 0;     // the file's st_dev and st_ino: what a peer checks it opened
  uint64_t ino = 0;
  uint64_t offset = 0;  // the file offset of the range's first byte
};

// When [addr, addr + length) lies in one shared, writable mapping of a
// regular file that our effective uid owns, on tmpfs or hugetlbfs (memory: a
// store into any other file system may wait for its I/O), that file, its
// descriptor held until ReleaseSharedFile; otherwise fd -1 (and nothing is
// held). Every page of the range is populated first (as a registration pins
// its pages), so a peer's store never needs one the file system cannot give.
// Reads /proc/self/maps: for registration, not the data path.
SharedFile HoldSharedFile(const void* addr, size_t length) noexcept;
void ReleaseSharedFile(const SharedFile& file);

// A new read-write descriptor (O_CLOEXEC) of the file `path` names, if that
// is the file (dev, ino), a regular file of our effective uid of at least
// `min_size` bytes, on tmpfs or hugetlbfs; otherwise -1. It is looked at
// before it is opened (through an O_PATH descriptor, then opened
// non-blocking through that): a path from elsewhere may name a device file,
// whose open can do things (a watchdog starts, a line waits for carrier).
int OpenSharedFile(const char* path, uint64_t dev, uint64_t ino, uint64_t min_size);

}  // namespace simverbs
