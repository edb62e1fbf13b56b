#include "conformance/lib/errno_capture.h"

#include <cstring>

namespace conformance {

std::string ErrnoName(int err) {
  if (err == 0) return "0";
  const char* name = strerrorname_np(err);
  std::string text = name ? name : "errno " + std::to_string(err);
  return text + " (" + std::strerror(err) + ")";
}

}  // namespace conformance
