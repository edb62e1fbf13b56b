#pragma once

#include <string>

namespace conformance {

// Which backend file a run loads.
struct BackendSelection {
  std::string name;    // "sim", "rxe", "hw" or what --backend said
  std::string how;     // "detected: ..." or "--backend"
  std::string path;    // <backends-dir>/<file>.json
  std::string kernel;  // uname -r, for rxe (its behaviour follows the kernel)
};

// The simulator when its control API resolves; else rxe when the device name
// starts with "rxe"; else hw. --backend (override, non-empty) wins.
BackendSelection SelectBackend(const std::string& override_name, bool sim_api_present, const std::string& device_name,
                               const std::string& backends_dir);

// The kernel release (uname -r), or "unknown".
std::string KernelRelease();

}  // namespace conformance
