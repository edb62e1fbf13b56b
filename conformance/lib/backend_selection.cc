#include "conformance/lib/backend_selection.h"

#include <sys/utsname.h>

#include <filesystem>

namespace conformance {
namespace {

// rxe lives in the kernel, so its answers are per kernel series:
// "6.1.0-18-amd64" -> "rxe-6.1". Falls back to plain "rxe" when there is
// no file for this series.
std::string RxeFileStem(const std::string& kernel, const std::string& backends_dir) {
  const size_t first_dot = kernel.find('.');
  if (first_dot != std::string::npos) {
    size_t end = first_dot + 1;
    while (end < kernel.size() && kernel[end] >= '0' && kernel[end] <= '9') ++end;
    const std::string stem = "rxe-" + kernel.substr(0, end);
    if (std::filesystem::exists(std::filesystem::path(backends_dir) / (stem + ".json"))) return stem;
  }
  return "rxe";
}

}  // namespace

std::string KernelRelease() {
  utsname name = {};
  if (uname(&name) != 0) return "unknown";
  return name.release;
}

BackendSelection SelectBackend(const std::string& override_name, bool sim_api_present, const std::string& device_name,
                               const std::string& backends_dir) {
  BackendSelection selection;
  if (!override_name.empty()) {
    selection.name = override_name;
    selection.how = "--backend";
  } else if (sim_api_present) {
    selection.name = "sim";
    selection.how = "detected: simverbs_version resolves";
  } else if (device_name.rfind("rxe", 0) == 0) {
    selection.name = "rxe";
    selection.how = "detected: device name starts with rxe";
  } else {
    selection.name = "hw";
    selection.how = "detected: not the simulator, not rxe";
  }
  std::string stem = selection.name;
  if (selection.name == "rxe" || selection.name.rfind("rxe-", 0) == 0) {
    selection.kernel = KernelRelease();
    if (selection.name == "rxe") stem = RxeFileStem(selection.kernel, backends_dir);
  }
  selection.path = (std::filesystem::path(backends_dir) / (stem + ".json")).string();
  return selection;
}

}  // namespace conformance
