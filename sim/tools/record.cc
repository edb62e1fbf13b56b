#include "record.h"

#include <arpa/inet.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "json_error.h"
#include "profile.h"

namespace simverbs {
namespace {

using Json = nlohmann::ordered_json;

constexpr const char* kQueryTool = "simverbs-query-device";

// simverbs-query-device: next to this binary (the build tree), else where it is installed.
std::string FindQueryTool() {
  std::vector<std::string> candidates;
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) candidates.push_back((self.parent_path() / kQueryTool).string());
  candidates.push_back(std::string(SIMVERBS_INSTALLED_LIBEXECDIR) + "/" + kQueryTool);
  for (const auto& path : candidates) {
    if (access(path.c_str(), X_OK) == 0) return path;
  }
  return {};
}

// Runs the query tool and returns what it printed; false when it failed (it said why on stderr).
bool RunQueryTool(const std::string& tool, const std::string& device, std::string* out) {
  int fds[2];
  if (pipe(fds) != 0) return false;
  const pid_t pid = fork();
  if (pid < 0) return false;
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    close(fds[1]);
    std::vector<const char*> argv = {tool.c_str()};
    if (!device.empty()) argv.insert(argv.end(), {"--device", device.c_str()});
    argv.push_back(nullptr);
    execv(tool.c_str(), const_cast<char* const*>(argv.data()));
    std::fprintf(stderr, "simverbs record: cannot run %s: %s\n", tool.c_str(), std::strerror(errno));
    _exit(127);
  }
  close(fds[1]);
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)) {
    if (n > 0) out->append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// The modified EUI-64 of a MAC (RFC 4291 appendix A): what RoCE derives the node GUID and the
// link-local GID from.
bool Eui64(const std::string& mac, uint8_t out[8]) {
  unsigned m[6];
  char tail = 0;
  if (std::sscanf(mac.c_str(), "%2x:%2x:%2x:%2x:%2x:%2x%c", &m[0], &m[1], &m[2], &m[3], &m[4], &m[5], &tail) != 6) {
    return false;
  }
  const uint8_t eui[8] = {static_cast<uint8_t>(m[0] ^ 0x02), static_cast<uint8_t>(m[1]), static_cast<uint8_t>(m[2]),
                          0xff, 0xfe, static_cast<uint8_t>(m[3]), static_cast<uint8_t>(m[4]),
                          static_cast<uint8_t>(m[5])};
  std::memcpy(out, eui, 8);
  return true;
}

// A device's node GUID and link-local GIDs come from a MAC that changes from boot to boot on a
// dummy netdev: replace them by those of a fixed MAC so the recorded file is stable.
void MakeIdentityStable(const uint8_t eui[8], Json* device) {
  uint64_t guid = 0;
  for (int i = 0; i < 8; ++i) guid = guid << 8 | eui[i];
  char text[32];
  std::snprintf(text, sizeof text, "0x%016llx", static_cast<unsigned long long>(guid));
  (*device)["device"]["node_guid"] = text;
  (*device)["device"]["sys_image_guid"] = text;
  for (Json& port : (*device)["ports"]) {
    for (Json& gid : port["gids"]) {
      uint8_t raw[16];
      if (inet_pton(AF_INET6, gid["gid"].get<std::string>().c_str(), raw) != 1) continue;
      if (raw[0] != 0xfe || (raw[1] & 0xc0) != 0x80) continue;  // not fe80::/10
      std::memcpy(raw + 8, eui, 8);
      char address[INET6_ADDRSTRLEN];
      inet_ntop(AF_INET6, raw, address, sizeof address);
      gid["gid"] = address;
    }
  }
}

std::string KernelRelease() {
  utsname u = {};
  return uname(&u) == 0 ? u.release : "unknown";
}

}  // namespace

int Record(const RecordOptions& options) {
  uint8_t eui[8];
  if (!options.stable_mac.empty() && !Eui64(options.stable_mac, eui)) {
    std::fprintf(stderr, "simverbs record: --stable-mac wants a MAC such as %s, not '%s'\n", kDefaultStableMac,
                 options.stable_mac.c_str());
    return 2;
  }
  const std::string tool = FindQueryTool();
  if (tool.empty()) {
    std::fprintf(stderr, "simverbs record: cannot find %s next to simverbs or in %s\n", kQueryTool,
                 SIMVERBS_INSTALLED_LIBEXECDIR);
    return 2;
  }
  std::string printed;
  if (!RunQueryTool(tool, options.device, &printed)) {
    std::fprintf(stderr, "simverbs record: %s failed (see above)\n", kQueryTool);
    return 1;
  }
  Json device;
  try {
    device = Json::parse(printed);
  } catch (const Json::exception& e) {
    std::fprintf(stderr, "simverbs record: %s printed no JSON: %s\n", kQueryTool, simverbs::JsonErrorText(e).c_str());
    return 1;
  }
  if (!options.stable_mac.empty()) MakeIdentityStable(eui, &device);

  // What the device cannot tell (the behaviour, the description) stays as the file has it.
  Json existing = Json::object();
  if (!options.output.empty() && std::filesystem::is_directory(options.output)) {
    std::fprintf(stderr, "simverbs record: %s is a directory; give the path of the .json file to write\n",
                 options.output.c_str());
    return 2;
  }
  if (!options.output.empty() && std::filesystem::exists(options.output)) {
    std::ifstream in(options.output);
    try {
      existing = Json::parse(in, nullptr, true, /*ignore_comments=*/true);
    } catch (const Json::exception& e) {
      std::fprintf(stderr, "simverbs record: %s is not JSON (%s); move it away to record afresh\n",
                   options.output.c_str(), simverbs::JsonErrorText(e).c_str());
      return 1;
    }
  }
  std::string name = options.name;
  if (name.empty() && existing.contains("profile")) name = existing["profile"].get<std::string>();
  if (name.empty() && !options.output.empty()) name = std::filesystem::path(options.output).stem().string();
  if (name.empty()) name = device["name"].get<std::string>();
  std::string description;
  if (existing.contains("description")) {
    description = existing["description"].get<std::string>();
  } else {
    description = "Recorded by simverbs record from " + device["name"].get<std::string>() + " on Linux " +
                  KernelRelease() + ".";
    if (!options.stable_mac.empty()) {
      description += " Node GUID and link-local GIDs are those of MAC " + options.stable_mac + ".";
    }
  }
  Json profile = {{"profile", name}, {"description", description}, {"devices", Json::array({device})}};
  if (existing.contains("behaviour")) profile["behaviour"] = existing["behaviour"];
  const std::string text = profile.dump(2, ' ', false) + "\n";

  // Checked by the loader the simulator uses before anything is written.
  const std::string check_path = options.output.empty()
                                     ? (std::filesystem::temp_directory_path() /
                                        ("simverbs-record." + std::to_string(getpid()) + ".json"))
                                           .string()
                                     : options.output + ".tmp";
  {
    std::ofstream out(check_path);
    out << text;
    if (!out.flush()) {
      std::fprintf(stderr, "simverbs record: cannot write %s\n", check_path.c_str());
      return 1;
    }
  }
  const ProfileLoad load = LoadProfileFile(check_path);
  if (!load.error.empty()) {
    std::fprintf(stderr, "simverbs record: the recorded profile does not load: %s\n", load.error.c_str());
    std::filesystem::remove(check_path);
    return 1;
  }
  if (options.output.empty()) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::filesystem::remove(check_path);
    return 0;
  }
  std::error_code ec;
  std::filesystem::rename(check_path, options.output, ec);
  if (ec) {
    std::fprintf(stderr, "simverbs record: cannot replace %s: %s\n", options.output.c_str(), ec.message().c_str());
    return 1;
  }
  std::fprintf(stderr, "simverbs record: wrote %s\n", options.output.c_str());
  return 0;
}

}  // namespace simverbs
