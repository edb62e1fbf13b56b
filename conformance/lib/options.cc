#include "conformance/lib/options.h"

#include <charconv>
#include <string_view>

namespace conformance {
namespace {

Options& MutableOptions() {
  static Options options;
  return options;
}

bool ParseInt(std::string_view text, int min, int max, int* value) {
  int parsed = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, parsed);
  if (ec != std::errc() || ptr != end || parsed < min || parsed > max) return false;
  *value = parsed;
  return true;
}

}  // namespace

bool ParseOptions(const std::vector<std::string>& args, Options* options, std::string* error) {
  for (size_t i = 0; i < args.size(); ++i) {
    std::string name = args[i];
    std::string value;
    bool has_value = false;
    if (size_t eq = name.find('='); name.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    const bool known = name == "--device" || name == "--port" || name == "--gid-index" || name == "--backends-dir" ||
                       name == "--backend" || name == "--cm-address";
    if (!known) {
      *error = "unknown option '" + args[i] + "'";
      return false;
    }
    if (!has_value) {
      if (i + 1 >= args.size()) {
        *error = name + " needs a value";
        return false;
      }
      value = args[++i];
    }
    if (name == "--device") {
      options->device = value;
    } else if (name == "--port") {
      // Port numbers are uint8_t in the verbs API and start at 1.
      if (!ParseInt(value, 1, 255, &options->port)) {
        *error = "--port expects an integer in [1, 255], got '" + value + "'";
        return false;
      }
    } else if (name == "--gid-index") {
      if (!ParseInt(value, 0, 65535, &options->gid_index)) {
        *error = "--gid-index expects an integer in [0, 65535], got '" + value + "'";
        return false;
      }
    } else if (name == "--cm-address") {
      options->cm_address = value;
    } else if (name == "--backends-dir") {
      options->backends_dir = value;
    } else {
      options->backend = value;
    }
  }
  return true;
}

std::string OptionsUsage() {
  return "verbs-conformance options (besides --gtest_*):\n"
         "  --device NAME        device to test (default: the first one)\n"
         "  --port N             port to test (default: 1)\n"
         "  --gid-index N        GID table index to use (default: 0)\n"
         "  --backends-dir DIR   directory of <backend>.json answer files\n"
         "  --backend NAME       backend file to load instead of the detected one\n"
         "  --cm-address IPV4    the port's address for the rdma_cm tests (default: found by binding)\n";
}

const Options& CurrentOptions() { return MutableOptions(); }

void SetCurrentOptions(const Options& options) { MutableOptions() = options; }

}  // namespace conformance
