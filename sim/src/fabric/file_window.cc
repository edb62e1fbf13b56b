#include "fabric/file_window.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

#include "fabric/shared_file.h"
#include "transport/copy_bytes.h"

namespace simverbs {

FileWindow& FileWindow::operator=(FileWindow&& other) noexcept {
  if (this != &other) {
    Close();
    key_ = other.key_;
    map_ = std::exchange(other.map_, nullptr);
    map_length_ = std::exchange(other.map_length_, 0);
    mr_ = std::exchange(other.mr_, nullptr);
  }
  return *this;
}

FileWindow FileWindow::Open(pid_t pid, const FileWindowKey& key) {
  FileWindow window;
  window.key_ = key;
  const uint64_t end = key.offset + key.length;
  if (pid <= 0 || key.fd < 0 || key.length == 0 || end < key.offset) return window;
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/fd/%d", static_cast<int>(pid), static_cast<int>(key.fd));
  // (The descriptor number comes from shared memory: the file is checked.)
  const int fd = OpenSharedFile(path, key.dev, key.ino, end);
  if (fd < 0) return window;
  // Whole pages of the file: its block size is its page size (a huge page
  // on hugetlbfs, where a mapping must start and end on one).
  struct stat st {};
  uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  if (fstat(fd, &st) == 0 && st.st_blksize > 0 && static_cast<uint64_t>(st.st_blksize) % page == 0) {
    page = static_cast<uint64_t>(st.st_blksize);
  }
  const uint64_t start = key.offset - key.offset % page;
  const uint64_t map_end = end % page ? end + (page - end % page) : end;
  if (map_end - start <= SIZE_MAX) {  // (end <= the file size < 2^63: no overflow)
    void* map = mmap(nullptr, map_end - start, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(start));
    if (map != MAP_FAILED) {
      // A child of fork() does not inherit it (Fabric's fork handler forgets it there).
      madvise(map, map_end - start, MADV_DONTFORK);
      window.map_ = map;
      window.map_length_ = map_end - start;
      window.mr_ = static_cast<uint8_t*>(map) + (key.offset - start);
    }
  }
  close(fd);
  return window;
}

void FileWindow::Write(uint64_t at, uint64_t length, const iovec* local, size_t local_count) const {
  uint8_t* out = mr_ + at;
  for (size_t i = 0; i < local_count && length > 0; ++i) {
    const size_t n = local[i].iov_len < length ? local[i].iov_len : length;
    CopyBytes(out, local[i].iov_base, n);
    out += n;
    length -= n;
  }
}

void FileWindow::Read(uint64_t at, uint64_t length, const iovec* local, size_t local_count) const {
  const uint8_t* in = mr_ + at;
  for (size_t i = 0; i < local_count && length > 0; ++i) {
    const size_t n = local[i].iov_len < length ? local[i].iov_len : length;
    CopyBytes(local[i].iov_base, in, n);
    in += n;
    length -= n;
  }
}

void FileWindow::Close() {
  if (map_) munmap(map_, map_length_);
  Forget();
}

void FileWindow::Forget() {
  map_ = nullptr;
  map_length_ = 0;
  mr_ = nullptr;
}

}  // namespace simverbs
