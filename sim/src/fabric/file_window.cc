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
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t start = key.offset - key.offset % page;
  const uint64_t end = key.offset + key.length;
  if (pid <= 0 || key.fd < 0 || key.length == 0 || end < key.offset || end - start > SIZE_MAX) return window;
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/fd/%d", static_cast<int>(pid), static_cast<int>(key.fd));
  // (The descriptor number comes from shared memory: the file is checked.)
  const int fd = OpenSharedFile(path, key.dev, key.ino, end);
  if (fd < 0) return window;
  void* map = mmap(nullptr, end - start, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(start));
  if (map != MAP_FAILED) {
    window.map_ = map;
    window.map_length_ = end - start;
    window.mr_ = static_cast<uint8_t*>(map) + (key.offset - start);
  }
  close(fd);
  return window;
}

void FileWindow::Write(uint64_t at, uint64_t length, const iovec* local, size_t local_count) const {
  uint8_t* out = mr_ + at;
  for (size_t i = 0; i < local_count && length > 0; ++i) {
    const size_t n = local[i].iov_len < length ? local[i].iov_len : length;
    std::memcpy(out, local[i].iov_base, n);
    out += n;
    length -= n;
  }
}

void FileWindow::Close() {
  if (map_) munmap(map_, map_length_);
  map_ = nullptr;
  map_length_ = 0;
  mr_ = nullptr;
}

}  // namespace simverbs
