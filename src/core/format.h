// Human-readable figures for messages and logs.
#pragma once

#include <cstdint>
#include <string>

namespace strata {

// "512 B", "3.0 KiB", "1.5 GiB": binary units, one decimal.
std::string format_bytes(int64_t bytes);

}  // namespace strata
