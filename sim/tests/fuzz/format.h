#pragma once

#include <string>

namespace verbs_fuzz {

// printf into a std::string (messages of up to 1 KiB).
std::string Format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace verbs_fuzz
