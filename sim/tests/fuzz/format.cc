#include "format.h"

#include <cstdarg>
#include <cstdio>

namespace verbs_fuzz {

std::string Format(const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

}  // namespace verbs_fuzz
