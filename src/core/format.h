// Human-readable figures for messages and logs.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace strata {

// "512 B", "3.0 KiB", "1.5 GiB": binary units, one decimal.
std::string format_bytes(int64_t bytes);

// `s` with control characters written as \n, \t or \xNN, for one-line messages.
std::string printable(std::string_view s);

}  // namespace strata
