#pragma once

// What a JSON parse error says, for a person: nlohmann's text without the
// "[json.exception.parse_error.101] " tag that names its exception class.

#include <nlohmann/json.hpp>

#include <string>

namespace simverbs {

inline std::string JsonErrorText(const nlohmann::json::exception& e) {
  std::string text = e.what();
  if (text.rfind("[json.exception.", 0) == 0) {
    const size_t end = text.find("] ");
    if (end != std::string::npos) text.erase(0, end + 2);
  }
  return text;
}

}  // namespace simverbs
