#include "core/format.h"

#include <cstdio>

#include "core/utf8.h"

namespace strata {

std::string format_bytes(int64_t bytes) {
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024 && bytes > -1024) return std::to_string(bytes) + " B";
  double v = static_cast<double>(bytes) / 1024.0;
  int u = 0;
  while ((v >= 1024.0 || v <= -1024.0) && u < 3) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}

namespace {

// The length of the well-formed UTF-8 sequence that starts at s[i], or 0 when none does.
size_t utf8_sequence_length(std::string_view s, size_t i) {
  const Utf8Char c = decode_utf8(s, i);
  return c.cp == kInvalidCodePoint ? 0 : c.len;
}

}  // namespace

std::string printable(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const char ch = s[i];
    const auto u = static_cast<unsigned char>(ch);
    const size_t len = utf8_sequence_length(s, i);
    if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f || len == 0) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      out += buf;
    } else {
      out.append(s.substr(i, len));
      i += len;
      continue;
    }
    i++;
  }
  return out;
}

std::string excerpt(std::string_view s, size_t max_bytes) {
  if (s.size() <= max_bytes) return printable(s);
  size_t cut = max_bytes;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xc0) == 0x80) cut--;  // continuation
  return printable(s.substr(0, cut)) + "...(" + std::to_string(s.size()) + " bytes)";
}

int64_t invalid_utf8_offset(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t len = utf8_sequence_length(s, i);
    if (len == 0) return static_cast<int64_t>(i);
    i += len;
  }
  return -1;
}

}  // namespace strata
