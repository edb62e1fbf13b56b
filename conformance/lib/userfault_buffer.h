#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace conformance {

// Anonymous memory whose pages are missing and guarded by userfaultfd(2): the
// first access to it, by the program or by the kernel on its behalf (a
// process_vm_writev reading it), waits until Release(). It makes "a process
// stuck in the middle of a copy" something a test can hold at will.
class UserfaultBuffer {
 public:
  explicit UserfaultBuffer(size_t length);
  ~UserfaultBuffer();  // releases, then unmaps
  UserfaultBuffer(const UserfaultBuffer&) = delete;
  UserfaultBuffer& operator=(const UserfaultBuffer&) = delete;

  // Empty when the buffer is guarded; otherwise why not (userfaultfd for
  // kernel accesses needs CAP_SYS_PTRACE or vm.unprivileged_userfaultfd=1).
  const std::string& error() const { return error_; }
  void* addr() const { return addr_; }

  // True once something touched the buffer (and now waits), within `timeout`.
  bool WaitForAccess(std::chrono::milliseconds timeout);
  // Lets every waiting and later access through (the pages read as zero).
  void Release();

 private:
  size_t length_;
  void* addr_ = nullptr;
  int fd_ = -1;
  std::string error_;
};

}  // namespace conformance
