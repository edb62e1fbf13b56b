#include "fabric/shared_regions.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace simverbs {
namespace {

struct Mapping {
  uintptr_t start = 0;
  uintptr_t end = 0;
  std::string perms;
  uint64_t offset = 0;
  uint64_t inode = 0;
  std::string path;
};

// The process's mappings, from /proc/self/maps.
std::vector<Mapping> ReadMaps() {
  std::vector<Mapping> maps;
  const int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return maps;
  std::string text;
  char buf[16384];
  for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
  close(fd);
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    const std::string line = text.substr(pos, eol - pos);
    pos = eol + 1;
    // start-end perms offset dev inode [path]
    Mapping m;
    char* p = nullptr;
    m.start = std::strtoull(line.c_str(), &p, 16);
    if (*p != '-') continue;
    m.end = std::strtoull(p + 1, &p, 16);
    while (*p == ' ') ++p;
    const char* perms = p;
    while (*p && *p != ' ') ++p;
    m.perms.assign(perms, static_cast<size_t>(p - perms));
    m.offset = std::strtoull(p, &p, 16);
    while (*p == ' ') ++p;
    while (*p && *p != ' ') ++p;  // device
    m.inode = std::strtoull(p, &p, 10);
    while (*p == ' ') ++p;
    m.path = p;
    maps.push_back(std::move(m));
  }
  return maps;
}

uintptr_t PageSize() { return static_cast<uintptr_t>(sysconf(_SC_PAGESIZE)); }

}  // namespace

SharedRegions& SharedRegions::Get() {
  static SharedRegions* regions = new SharedRegions();  // leaked: used from atexit
  return *regions;
}

SharedRegions::SharedRegions() {
  // No lock of its own: the engine's fork handlers hold the engine lock across fork().
  pthread_atfork(nullptr, nullptr, [] { Get().ForkedChild(); });
}

std::string SharedRegions::ObjectName(const std::string& prefix, uint32_t object) {
  return ObjectPrefix(prefix) + std::to_string(object);
}

bool SharedRegions::StillMapped(const Region& r) {
  uintptr_t covered = r.start;
  for (const Mapping& m : ReadMaps()) {
    if (m.end <= covered || m.start > covered) continue;
    if (m.inode != r.inode || m.perms != "rw-s" || m.offset != m.start - r.start) return false;
    // "/dev/shm/<name>", with " (deleted)" once the name is removed.
    const std::string path = "/dev/shm" + r.name;
    if (m.path.compare(0, path.size(), path) != 0 || (m.path.size() > path.size() && m.path[path.size()] != ' ')) {
      return false;
    }
    covered = m.end;
    if (covered >= r.end) return true;
  }
  return false;
}

void SharedRegions::MakePrivate(const Region& r) {
  const size_t size = r.end - r.start;
  void* copy = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (copy == MAP_FAILED) return;  // the range stays shared
  std::memcpy(copy, reinterpret_cast<void*>(r.start), size);
  if (mremap(copy, size, size, MREMAP_MAYMOVE | MREMAP_FIXED, reinterpret_cast<void*>(r.start)) == MAP_FAILED) {
    munmap(copy, size);
  }
}

bool SharedRegions::Acquire(const std::string& prefix, void* addr, size_t length, Share* out) {
  if (length == 0 || !addr) return false;
  const uintptr_t page = PageSize();
  const uintptr_t begin = reinterpret_cast<uintptr_t>(addr);
  const uintptr_t start = begin & ~(page - 1);
  const uintptr_t end = (begin + length + page - 1) & ~(page - 1);
  if (end <= start) return false;
  for (auto it = regions_.begin(); it != regions_.end(); ++it) {
    if (it->end <= start || it->start >= end) continue;
    if (it->start > start || it->end < end) return false;  // a partial overlap
    if (!StillMapped(*it)) {
      // The program unmapped it: forget the object, try the range afresh.
      shm_unlink(it->name.c_str());
      regions_.erase(it);
      break;
    }
    ++it->users;
    out->object = it->object;
    out->object_size = it->end - it->start;
    out->offset = begin - it->start;
    return true;
  }
  if (begin != start || begin + length != end) return false;  // shares pages with other data
  bool anonymous = false;
  for (const Mapping& m : ReadMaps()) {
    if (m.start <= start && end <= m.end) {
      anonymous = m.perms == "rw-p" && m.inode == 0 && m.path.empty();
      break;
    }
  }
  if (!anonymous) return false;
  const size_t size = end - start;
  const uint32_t object = next_object_++;
  const std::string name = ObjectName(prefix, object);
  const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  struct stat st {};
  void* staging = MAP_FAILED;
  // Reserved now: a full /dev/shm must fail here, not raise SIGBUS on a later write.
  if (posix_fallocate(fd, 0, static_cast<off_t>(size)) == 0 && fstat(fd, &st) == 0) {
    staging = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  bool ok = false;
  if (staging != MAP_FAILED) {
    std::memcpy(staging, reinterpret_cast<void*>(start), size);
    ok = mmap(reinterpret_cast<void*>(start), size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) !=
         MAP_FAILED;
    munmap(staging, size);
  }
  close(fd);
  if (!ok) {
    shm_unlink(name.c_str());
    return false;
  }
  regions_.push_back(Region{object, start, end, static_cast<uint64_t>(st.st_ino), 1, name});
  out->object = object;
  out->object_size = size;
  out->offset = 0;
  return true;
}

void SharedRegions::Release(uint32_t object) {
  for (auto it = regions_.begin(); it != regions_.end(); ++it) {
    if (it->object != object) continue;
    if (--it->users > 0) return;
    // The program may have unmapped the range (and mapped something else
    // there): only a range still backed by our object is touched.
    if (StillMapped(*it)) MakePrivate(*it);
    shm_unlink(it->name.c_str());
    regions_.erase(it);
    return;
  }
}

void SharedRegions::ForkedChild() {
  // The objects are the parent's: the child gets private copies instead.
  for (const Region& r : regions_) {
    if (StillMapped(r)) MakePrivate(r);
  }
  regions_.clear();
}

}  // namespace simverbs
