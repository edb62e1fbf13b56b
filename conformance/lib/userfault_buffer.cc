#include "conformance/lib/userfault_buffer.h"

#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace conformance {

UserfaultBuffer::UserfaultBuffer(size_t length) : length_(length) {
  fd_ = static_cast<int>(syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK));
  if (fd_ < 0) {
    error_ = std::string("userfaultfd: ") + std::strerror(errno) +
             " (handling the kernel's own accesses needs root, or sysctl vm.unprivileged_userfaultfd=1)";
    return;
  }
  uffdio_api api = {};
  api.api = UFFD_API;
  if (ioctl(fd_, UFFDIO_API, &api) != 0) {
    error_ = std::string("UFFDIO_API: ") + std::strerror(errno);
    return;
  }
  void* mem = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    error_ = std::string("mmap: ") + std::strerror(errno);
    return;
  }
  addr_ = mem;
  uffdio_register reg = {};
  reg.range.start = reinterpret_cast<uintptr_t>(mem);
  reg.range.len = length;
  reg.mode = UFFDIO_REGISTER_MODE_MISSING;
  if (ioctl(fd_, UFFDIO_REGISTER, &reg) != 0) error_ = std::string("UFFDIO_REGISTER: ") + std::strerror(errno);
}

UserfaultBuffer::~UserfaultBuffer() {
  Release();
  if (addr_) munmap(addr_, length_);
}

bool UserfaultBuffer::WaitForAccess(std::chrono::milliseconds timeout) {
  if (fd_ < 0) return false;
  pollfd p = {fd_, POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(timeout.count())) != 1) return false;
  uffd_msg msg = {};
  return read(fd_, &msg, sizeof msg) == static_cast<ssize_t>(sizeof msg) && msg.event == UFFD_EVENT_PAGEFAULT;
}

void UserfaultBuffer::Release() {
  if (fd_ < 0) return;
  // Fill every missing page with zeros (which wakes the accesses waiting on
  // it), then end the guard. Closing the descriptor alone is not enough: a
  // child of fork() holds a copy of it, which keeps the guard in force.
  if (addr_) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    for (size_t offset = 0; offset < length_; offset += page) {
      uffdio_zeropage zero = {};
      zero.range.start = reinterpret_cast<uintptr_t>(addr_) + offset;
      zero.range.len = page;
      ioctl(fd_, UFFDIO_ZEROPAGE, &zero);  // EEXIST: the page is there already
    }
    uffdio_range range = {reinterpret_cast<uintptr_t>(addr_), length_};
    ioctl(fd_, UFFDIO_UNREGISTER, &range);
  }
  close(fd_);
  fd_ = -1;
}

}  // namespace conformance
