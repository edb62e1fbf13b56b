#include "fabric/shared_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "fork_locks.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; an older kernel refuses it (EINVAL): no file is published
#endif

namespace simverbs {
namespace {

// The mapping of /proc/self/maps that holds a range.
struct MapsLine {
  uint64_t start = 0;
  uint64_t end = 0;
  bool writable = false;
  bool shared = false;
  uint64_t offset = 0;
  uint64_t dev = 0;
  uint64_t ino = 0;
  std::string path;  // may end in " (deleted)"
};

// The line of /proc/self/maps whose mapping holds [begin, end), if one does.
bool FindMapping(uint64_t begin, uint64_t end, MapsLine* out) {
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen("/proc/self/maps", "re"), &std::fclose);
  FILE* maps = file.get();
  if (!maps) return false;
  bool found = false;
  char* line = nullptr;
  struct FreeLine {
    char** line;
    ~FreeLine() { std::free(*line); }
  } free_line{&line};
  size_t capacity = 0;
  while (!found && getline(&line, &capacity, maps) > 0) {
    MapsLine m;
    char perms[5] = {};
    unsigned major = 0, minor = 0;
    int path_at = 0;
    if (std::sscanf(line, "%" SCNx64 "-%" SCNx64 " %4s %" SCNx64 " %x:%x %" SCNu64 " %n", &m.start, &m.end, perms,
                    &m.offset, &major, &minor, &m.ino, &path_at) < 7) {
      continue;
    }
    if (m.start > begin || end > m.end) continue;
    m.writable = perms[1] == 'w';
    m.shared = perms[3] == 's';
    m.dev = makedev(major, minor);
    m.path = line + path_at;
    while (!m.path.empty() && m.path.back() == '\n') m.path.pop_back();
    *out = m;
    found = true;
  }
  return found;
}

// `st` is the file (dev, ino): a regular file of our effective uid, at
// least `min_size` bytes long.
bool IsOurFile(const struct stat& st, uint64_t dev, uint64_t ino, uint64_t min_size = 0) {
  return S_ISREG(st.st_mode) && st.st_dev == dev && st.st_ino == ino && st.st_uid == geteuid() &&
         st.st_size >= 0 && static_cast<uint64_t>(st.st_size) >= min_size;
}
bool IsOurFile(int fd, uint64_t dev, uint64_t ino, uint64_t min_size = 0) {
  struct stat st {};
  return fstat(fd, &st) == 0 && IsOurFile(st, dev, ino, min_size);
}

// Memory, not storage: a store into a shared mapping of any other file
// system may wait for its I/O, or fail with SIGBUS when that fails.
bool InMemoryFileSystem(int fd) {
  struct statfs fs {};
  return fstatfs(fd, &fs) == 0 && (fs.f_type == TMPFS_MAGIC || fs.f_type == HUGETLBFS_MAGIC);
}

}  // namespace

int OpenSharedFile(const char* path, uint64_t dev, uint64_t ino, uint64_t min_size) {
  // An O_PATH descriptor opens nothing (no driver's open runs); once it shows
  // the file is the one, that very inode is opened through it: `path` cannot
  // name something else in between.
  const int path_fd = open(path, O_PATH | O_CLOEXEC);
  if (path_fd < 0) return -1;
  int fd = -1;
  if (IsOurFile(path_fd, dev, ino, min_size)) {
    char again[64];
    std::snprintf(again, sizeof again, "/proc/self/fd/%d", path_fd);
    fd = open(again, O_RDWR | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  }
  close(path_fd);
  if (fd >= 0 && IsOurFile(fd, dev, ino, min_size) && InMemoryFileSystem(fd)) return fd;
  if (fd >= 0) close(fd);
  return -1;
}

namespace {

// A new descriptor of (dev, ino), read-write: by its name when it has one,
// else through a descriptor of ours that names it (a memfd, or an unlinked
// file the program still holds). -1 when neither works.
int OpenFile(const MapsLine& m) {
  if (!m.path.empty() && m.path[0] == '/') {
    const int fd = OpenSharedFile(m.path.c_str(), m.dev, m.ino, 0);
    if (fd >= 0) return fd;
  }
  std::unique_ptr<DIR, int (*)(DIR*)> opened(opendir("/proc/self/fd"), &closedir);
  DIR* dir = opened.get();
  if (!dir) return -1;
  int found = -1;
  while (const dirent* d = readdir(dir)) {
    if (d->d_name[0] < '0' || d->d_name[0] > '9') continue;
    const int candidate = std::atoi(d->d_name);
    if (candidate == dirfd(dir) || !IsOurFile(candidate, m.dev, m.ino)) continue;
    // Reopened: our own description, read-write whatever the program's is,
    // and still ours when the program closes its descriptor.
    char link[64];
    std::snprintf(link, sizeof link, "/proc/self/fd/%d", candidate);
    found = OpenSharedFile(link, m.dev, m.ino, 0);
    if (found >= 0) break;
  }
  return found;
}

// The descriptors held, one per file, and how many MRs hold each.
struct HeldFile {
  uint64_t dev;
  uint64_t ino;
  int fd;
  int holders;
};
std::mutex held_mu;
// A leaf lock: held across fork (fork_locks.h).
const bool held_across_fork = (HoldAcrossFork([] { held_mu.lock(); }, [] { held_mu.unlock(); }), true);
std::vector<HeldFile>& Held() {
  static auto* held = new std::vector<HeldFile>();  // never destroyed: MRs may outlive static destruction
  return *held;
}

}  // namespace

SharedFile HoldSharedFile(const void* addr, size_t length) noexcept {
  SharedFile file;
  const auto begin = reinterpret_cast<uintptr_t>(addr);
  if (length == 0 || begin + length < begin) return file;
  try {
    MapsLine m;
    if (!FindMapping(begin, begin + length, &m) || !m.writable || !m.shared || m.ino == 0) return file;
    // Every page of the range exists from now on, as a registration pins
    // them: a peer's store into a page the file system cannot provide (a full
    // /dev/shm, an empty huge page pool) would kill that peer with SIGBUS.
    const uintptr_t into_page = begin % static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    if (madvise(reinterpret_cast<void*>(begin - into_page), length + into_page, MADV_POPULATE_WRITE) != 0) {
      return file;
    }
    std::lock_guard<std::mutex> lock(held_mu);
    for (HeldFile& h : Held()) {
      if (h.dev == m.dev && h.ino == m.ino) {
        ++h.holders;
        file.fd = h.fd;
        break;
      }
    }
    if (file.fd < 0) {
      const int fd = OpenFile(m);
      if (fd < 0) return file;
      try {
        Held().push_back(HeldFile{m.dev, m.ino, fd, 1});
      } catch (...) {
        close(fd);
        throw;
      }
      file.fd = fd;
    }
    file.dev = m.dev;
    file.ino = m.ino;
    file.offset = m.offset + (begin - m.start);
    return file;
  } catch (const std::exception&) {
    return SharedFile{};  // out of memory: the MR is written into by the other paths
  }
}

void ReleaseSharedFile(const SharedFile& file) {
  if (file.fd < 0) return;
  std::lock_guard<std::mutex> lock(held_mu);
  std::vector<HeldFile>& held = Held();
  for (size_t i = 0; i < held.size(); ++i) {
    if (held[i].fd != file.fd || held[i].dev != file.dev || held[i].ino != file.ino) continue;
    if (--held[i].holders == 0) {
      // Unless the program closed it meanwhile (closing every descriptor it
      // does not know) and the number is another file's now, or another
      // description of the same file (ours alone is non-blocking).
      const int flags = fcntl(held[i].fd, F_GETFL);
      if (flags >= 0 && (flags & O_NONBLOCK) && IsOurFile(held[i].fd, held[i].dev, held[i].ino)) close(held[i].fd);
      held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
    }
    return;
  }
}

}  // namespace simverbs
