#include "fabric/shm_object.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

namespace simverbs {
namespace {

std::string Octal(unsigned mode) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04o", mode & 07777);
  return buf;
}

void* MapFd(int fd, size_t size, int* err) {
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    *err = errno;
    return nullptr;
  }
  return p;
}

// The owner/mode/size check of OpenShm on an open descriptor; empty when the
// object may be used.
std::string CheckShmFd(int fd, const std::string& name, size_t size, int* err) {
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    *err = errno;
    return "cannot inspect shared memory " + ShmPath(name) + ": " + strerror(errno);
  }
  if (st.st_uid != geteuid()) {
    *err = EACCES;
    return "shared memory " + ShmPath(name) + " belongs to uid " + std::to_string(st.st_uid) + ", not to this user (uid " +
           std::to_string(geteuid()) + "): another user may be trying to read this fabric's traffic; it was not used. "
           "Set SIMVERBS_FABRIC to another name, or have its owner or root remove it (rm " + ShmPath(name) + ")";
  }
  if (st.st_mode & 077) {
    *err = EACCES;
    return "shared memory " + ShmPath(name) + " has mode " + Octal(st.st_mode) +
           ", which lets other users read or write it (simverbs creates 0600): it was not used. Remove it (rm " +
           ShmPath(name) + ") or set SIMVERBS_FABRIC to another name";
  }
  if (!S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) != size) {
    *err = EINVAL;
    return "shared memory " + ShmPath(name) + " is " + std::to_string(st.st_size) + " bytes, not the " +
           std::to_string(size) + " of this simverbs version's object: it was not used. Remove it (rm " + ShmPath(name) +
           ") once no program of another simverbs version uses it, or set SIMVERBS_FABRIC to another name";
  }
  return "";
}

}  // namespace

std::string ShmPath(const std::string& name) { return "/dev/shm" + name; }


namespace {

// Reserves and maps `size` bytes of `fd`. `named`: unlink `name` on failure.
ShmMapping ReserveAndMap(int fd, const std::string& name, size_t size, bool named) {
  ShmMapping m;
  const int rc = posix_fallocate(fd, 0, static_cast<off_t>(size));
  if (rc != 0) {
    m.err = rc == ENOSPC ? ENOMEM : rc;
    m.error = "cannot reserve " + std::to_string((size + (1 << 20) - 1) >> 20) + " MiB of shared memory for " +
              ShmPath(name) + ": " + strerror(rc) +
              (rc == ENOSPC ? " (/dev/shm is full: free space there, 'simverbs clean' removes what dead simverbs "
                              "programs left, or give the container a larger /dev/shm, e.g. docker run --shm-size=1g)"
                            : "");
    if (named) shm_unlink(name.c_str());
    return m;
  }
  m.addr = MapFd(fd, size, &m.err);
  if (!m.addr) {
    m.error = "cannot map shared memory " + ShmPath(name) + ": " + strerror(m.err);
    if (named) shm_unlink(name.c_str());
  }
  return m;
}

}  // namespace

ShmMapping CreateShm(const std::string& name, size_t size, bool keep_fd) {
  // Mode 0600 (a umask can only narrow it).
  const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    ShmMapping m;
    m.err = errno;
    m.error = "cannot create shared memory " + ShmPath(name) + ": " + strerror(errno);
    if (errno == EEXIST) m.error += " (remove it, or run 'simverbs clean')";
    return m;
  }
  ShmMapping m = ReserveAndMap(fd, name, size, true);
  if (m.addr && keep_fd) {
    m.fd = fd;
  } else {
    close(fd);
  }
  return m;
}

ShmMapping CreateShmInitialized(const std::string& name, size_t size, const std::function<void(void*)>& init,
                                bool keep_fd) {
  const int fd = open("/dev/shm", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    // No O_TMPFILE here: named from the start.
    ShmMapping m = CreateShm(name, size, keep_fd);
    if (m.addr) init(m.addr);
    return m;
  }
  ShmMapping m = ReserveAndMap(fd, name, size, false);
  if (m.addr) {
    init(m.addr);
    // Named now, complete. link() fails if the name exists: O_EXCL's guarantee.
    const std::string self = "/proc/self/fd/" + std::to_string(fd);
    if (linkat(AT_FDCWD, self.c_str(), AT_FDCWD, ShmPath(name).c_str(), AT_SYMLINK_FOLLOW) != 0) {
      m.err = errno;
      m.error = "cannot create shared memory " + ShmPath(name) + ": " + strerror(errno);
      munmap(m.addr, size);
      m.addr = nullptr;
    }
  }
  if (m.addr && keep_fd) {
    m.fd = fd;
  } else {
    close(fd);
  }
  return m;
}

ShmMapping OpenShm(const std::string& name, size_t size, bool keep_fd) {
  ShmMapping m;
  const int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) {
    m.err = errno;
    m.error = "cannot open shared memory " + ShmPath(name) + ": " + strerror(errno);
    return m;
  }
  m.error = CheckShmFd(fd, name, size, &m.err);
  if (m.error.empty()) {
    m.addr = MapFd(fd, size, &m.err);
    if (!m.addr) m.error = "cannot map shared memory " + ShmPath(name) + ": " + strerror(m.err);
  }
  if (m.addr && keep_fd) {
    m.fd = fd;
  } else {
    close(fd);
  }
  return m;
}

}  // namespace simverbs
