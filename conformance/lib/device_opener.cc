#include "conformance/lib/device_opener.h"

#include <cerrno>

#include "conformance/lib/errno_capture.h"

namespace conformance {

std::vector<std::string> DeviceNames() {
  std::vector<std::string> names;
  int count = 0;
  DeviceListPtr list(ibv_get_device_list(&count));
  if (!list) return names;
  for (int i = 0; i < count && list[i] != nullptr; ++i) {
    const char* name = ibv_get_device_name(list[i]);
    names.emplace_back(name ? name : "");
  }
  return names;
}

ContextPtr OpenDeviceByName(const std::string& name, std::string* error) {
  int count = 0;
  errno = 0;
  DeviceListPtr list(ibv_get_device_list(&count));
  if (!list) {
    *error = "ibv_get_device_list failed: " + ErrnoName(errno);
    return nullptr;
  }
  std::string seen;
  for (int i = 0; i < count && list[i] != nullptr; ++i) {
    const char* device_name = ibv_get_device_name(list[i]);
    const std::string current = device_name ? device_name : "";
    if (name.empty() || current == name) {
      errno = 0;
      ContextPtr context(ibv_open_device(list[i]));
      if (!context) *error = "ibv_open_device(" + current + ") failed: " + ErrnoName(errno);
      return context;
    }
    seen += (seen.empty() ? "" : ", ") + current;
  }
  if (name.empty()) {
    *error = "no RDMA device found (ibv_get_device_list returned an empty list)";
  } else {
    *error = "no RDMA device named '" + name + "'; devices: " + (seen.empty() ? "none" : seen);
  }
  return nullptr;
}

}  // namespace conformance
