#pragma once

// Shared-memory objects of the fabric, created and opened so that neither
// another local user nor a stale or hostile object can get in.
//
// /dev/shm is writable by every user: another user can create a fabric's name
// first (mode 0666) and read whatever a process that joins it sends. So an
// object is created only if the name does not exist (O_EXCL), with mode 0600,
// and its pages are reserved at once (posix_fallocate: a full /dev/shm fails
// here with an error, not later with SIGBUS on a write). An existing object is
// mapped only after fstat shows it is ours: owned by our effective uid, no
// group or other permission bits, and exactly the size we expect.

#include <cstddef>
#include <functional>
#include <string>

namespace simverbs {

struct ShmMapping {
  void* addr = nullptr;  // nullptr on failure
  int fd = -1;           // the open object, when asked to keep it (O_CLOEXEC); the caller closes it
  int err = 0;           // errno for the verb that needed the object
  std::string error;     // what went wrong, for the user: names the object and what to do
};

// "/dev/shm<name>", as the user sees it.
std::string ShmPath(const std::string& name);

// Creates `name` (it must not exist), reserves `size` bytes and maps them.
ShmMapping CreateShm(const std::string& name, size_t size, bool keep_fd = false);

// The same, but `name` appears only once `init` has filled the object in (an
// unnamed file, linked under the name at the end): nobody ever opens it
// half-made, and a creator killed before the end leaves nothing behind.
// EEXIST when the name exists by then.
ShmMapping CreateShmInitialized(const std::string& name, size_t size, const std::function<void(void*)>& init,
                                bool keep_fd = false);

// Maps an existing object after checking owner, mode and size (see above).
ShmMapping OpenShm(const std::string& name, size_t size, bool keep_fd = false);

}  // namespace simverbs
