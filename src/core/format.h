// Human-readable figures and text for messages and logs.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace strata {

// "512 B", "3.0 KiB", "1.5 GiB": binary units, one decimal.
std::string format_bytes(int64_t bytes);

// `s` with control characters, and bytes that are not UTF-8, written as \n, \t or \xNN, for
// one-line messages.
std::string printable(std::string_view s);

// Note [Bounded echoes]
// An error that quotes a value the user gave (a config string, a key, a --set, a path) quotes it
// through excerpt: printable, and cut after max_bytes (at a UTF-8 boundary) with "...(N bytes)"
// saying how long it was, so a 100 MB value makes a one-line message, not a 100 MB one. Paths
// take kMaxShownPath: a longer one names no file (PATH_MAX), and a shorter one is shown whole.
inline constexpr size_t kMaxShownValue = 80;
inline constexpr size_t kMaxShownPath = 4096;
std::string excerpt(std::string_view s, size_t max_bytes = kMaxShownValue);

// The byte offset of the first byte of `s` that does not start a well-formed UTF-8 sequence
// (overlong forms, surrogates and code points above U+10FFFF are not well-formed), or -1 when all
// of `s` is UTF-8. JSON text is UTF-8: nlohmann's dump throws on a string that is not, so a value
// that will be written back out as JSON (the config in a checkpoint) is checked when it comes in.
int64_t invalid_utf8_offset(std::string_view s);

}  // namespace strata
