#include "sysfs_namespace.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

namespace simverbs {
namespace {

constexpr const char* kClassDir = "/sys/class";
constexpr const char* kInfinibandDir = "/sys/class/infiniband";
constexpr const char* kDevDir = "/dev";
constexpr const char* kDevInfinibandDir = "/dev/infiniband";

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

bool WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.flush();
  return static_cast<bool>(out);
}

// A user namespace in which we are ourselves (and hold the capabilities a mount namespace needs).
std::string EnterUserNamespace() {
  const uid_t uid = geteuid();
  const gid_t gid = getegid();
  if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) {
    return Errno("unshare(CLONE_NEWUSER | CLONE_NEWNS)") +
           " (--sysfs needs unprivileged user namespaces: sysctl kernel.unprivileged_userns_clone=1 and "
           "user.max_user_namespaces > 0, or run as root)";
  }
  if (!WriteFile("/proc/self/setgroups", "deny") ||
      !WriteFile("/proc/self/uid_map", std::to_string(uid) + " " + std::to_string(uid) + " 1\n") ||
      !WriteFile("/proc/self/gid_map", std::to_string(gid) + " " + std::to_string(gid) + " 1\n")) {
    return Errno("writing the user namespace's uid/gid maps");
  }
  return "";
}

// `parent`/`name` as an empty directory of ours (`what` names the tmpfs on
// it). When it exists (a real RDMA stack is loaded) a tmpfs on it hides
// its entries, as the simulator's libibverbs hides the real devices. When it
// does not, neither sysfs nor /dev may get a new directory (sysfs takes none,
// and one made in /dev would show outside the namespace too): a tmpfs on
// `parent` holds every entry of the real one (directories and nodes
// bind-mounted from it, links copied) plus an empty `name`. An entry that
// cannot be kept fails the whole, unless `optional` says it may be left out.
std::string EmptyDirOfOurOwn(const std::string& parent, const std::string& name, const std::string& what,
                             bool (*optional)(const std::string& entry)) {
  const std::string path = parent + "/" + name;
  struct stat st = {};
  if (stat(path.c_str(), &st) == 0) {
    if (mount(("simverbs-" + what).c_str(), path.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755") != 0) {
      return Errno("mounting a tmpfs on " + path);
    }
    return "";
  }
  const int real = open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (real < 0) return Errno("open " + parent);
  struct Entry {
    std::string name;
    unsigned char type;
  };
  std::vector<Entry> entries;
  if (DIR* dir = fdopendir(dup(real))) {
    while (dirent* entry = readdir(dir)) {
      const std::string entry_name = entry->d_name;
      if (entry_name != "." && entry_name != "..") entries.push_back({entry_name, entry->d_type});
    }
    closedir(dir);
  }
  std::string error;
  const std::string parent_what = "simverbs-" + parent.substr(parent.rfind('/') + 1);  // simverbs-class, -dev
  if (mount(parent_what.c_str(), parent.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755") != 0) {
    error = Errno("mounting a tmpfs on " + parent);
  }
  for (size_t i = 0; error.empty() && i < entries.size(); ++i) {
    const std::string target = parent + "/" + entries[i].name;
    const std::string source = "/proc/self/fd/" + std::to_string(real) + "/" + entries[i].name;
    if (entries[i].type == DT_LNK) {
      char link[4096];
      const ssize_t n = readlinkat(real, entries[i].name.c_str(), link, sizeof link - 1);
      if (n < 0) continue;  // gone meanwhile
      link[n] = '\0';
      if (symlink(link, target.c_str()) != 0) error = Errno("symlink " + target);
      continue;
    }
    const bool dir = entries[i].type == DT_DIR;
    const int made = dir ? mkdir(target.c_str(), 0755) : mknod(target.c_str(), S_IFREG | 0600, 0);
    if (made != 0 || mount(source.c_str(), target.c_str(), nullptr, MS_BIND | (dir ? MS_REC : 0), nullptr) != 0) {
      if (!optional(entries[i].name)) {
        error = Errno("bind-mounting " + target);
      } else if (made == 0) {
        dir ? rmdir(target.c_str()) : unlink(target.c_str());
      }
    }
  }
  close(real);
  if (error.empty() && mkdir(path.c_str(), 0755) != 0) error = Errno("mkdir " + path);
  return error;
}

// Every class of /sys/class is kept.
bool NoClassOptional(const std::string&) { return false; }
// /dev/shm holds the fabric: without it the program would be on a fabric of
// its own. Another /dev entry that cannot be had is left out.
bool DevEntryOptional(const std::string& entry) { return entry != "shm"; }

// /dev/infiniband/uverbsN for the simulated devices: programs such as UCX use
// a device only when its uverbs node is a character device they may open for
// reading and writing. Each is /dev/null bind-mounted (mknod is refused in a
// user namespace); nothing reads it, the verbs go to the simulator.
std::string MakeUverbsNodes(size_t count) {
  if (std::string error = EmptyDirOfOurOwn(kDevDir, "infiniband", "uverbs", DevEntryOptional); !error.empty()) {
    return error;
  }
  for (size_t i = 0; i < count; ++i) {
    const std::string node = std::string(kDevInfinibandDir) + "/uverbs" + std::to_string(i);
    if (mknod(node.c_str(), S_IFREG | 0600, 0) != 0 && errno != EEXIST) return Errno("creating " + node);
    if (mount("/dev/null", node.c_str(), nullptr, MS_BIND, nullptr) != 0) return Errno("bind-mounting " + node);
  }
  return "";
}

// Makes the mount that holds `path` private, with every mount below it:
// nothing mounted there from now on reaches another namespace. Looks at
// `path`, then each parent, for the mount point (making a directory that is
// none private fails with EINVAL).
std::string MakeMountHoldingPrivate(std::string path) {
  for (;;) {
    if (mount(nullptr, path.c_str(), nullptr, MS_REC | MS_PRIVATE, nullptr) == 0) return "";
    if (errno != EINVAL || path == "/") return Errno("making the mount that holds " + path + " private");
    const size_t slash = path.rfind('/');
    path = slash == 0 ? "/" : path.substr(0, slash);
  }
}

// Nothing mounted on `paths` may reach the rest of the system: all of / is
// made private, or, where / is no mount point (a chroot), each mount that
// holds one of `paths`.
std::string MakeMountsPrivate(const std::vector<std::string>& paths) {
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0) return "";
  if (errno != EINVAL) return Errno("making / private");
  for (const std::string& path : paths) {
    if (std::string error = MakeMountHoldingPrivate(path); !error.empty()) {
      return error + " (/ is no mount point: in a chroot, mount /sys and /dev in it first)";
    }
  }
  return "";
}

}  // namespace

// ports/<n>/gid_attrs of `device` (a directory of ours): each GID's type as
// the kernel names it, and on an Ethernet port its net device.
std::string WriteGidAttributes(const std::string& device, const DeviceProfile& profile) {
  for (size_t p = 0; p < profile.ports.size(); ++p) {
    const PortProfile& port = profile.ports[p];
    const bool ethernet = port.attr.link_layer == IBV_LINK_LAYER_ETHERNET;
    const std::string attrs = device + "/ports/" + std::to_string(p + 1) + "/gid_attrs";
    for (const std::string& path : {device + "/ports", device + "/ports/" + std::to_string(p + 1), attrs,
                                    attrs + "/types", attrs + "/ndevs"}) {
      if (mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) return Errno("mkdir " + path);
    }
    for (size_t i = 0; i < port.gids.size(); ++i) {
      const std::string type = ethernet && port.gids[i].kind == GidKind::kRoceV2 ? "RoCE v2\n" : "IB/RoCE v1\n";
      const std::string index = std::to_string(i);
      if (!WriteFile(attrs + "/types/" + index, type) || (ethernet && !WriteFile(attrs + "/ndevs/" + index, "lo\n"))) {
        return Errno("writing " + attrs + "/*/" + index);
      }
    }
  }
  return "";
}

std::string EnterSysfsNamespace(const std::vector<DeviceProfile>& devices) {
  // Root needs only a mount namespace; in a container without CAP_SYS_ADMIN a
  // user namespace may still give one.
  if (geteuid() != 0 || unshare(CLONE_NEWNS) != 0) {
    if (std::string error = EnterUserNamespace(); !error.empty()) return error;
  }
  if (std::string error = MakeMountsPrivate({kClassDir, kDevDir}); !error.empty()) return error;
  if (std::string error = EmptyDirOfOurOwn(kClassDir, "infiniband", "infiniband", NoClassOptional); !error.empty()) {
    return error;
  }
  for (const DeviceProfile& profile : devices) {
    const std::string device = std::string(kInfinibandDir) + "/" + profile.name;
    for (const std::string& path : {device, device + "/device", device + "/device/net", device + "/device/net/lo"}) {
      if (mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) return Errno("mkdir " + path);
    }
    if (std::string error = WriteGidAttributes(device, profile); !error.empty()) return error;
  }
  return MakeUverbsNodes(devices.size());
}

}  // namespace simverbs
