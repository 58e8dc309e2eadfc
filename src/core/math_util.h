// Small integer helpers shared by every layer.
#pragma once

#include <cstdint>

namespace strata {

// x rounded up to a multiple of `multiple` (> 0).
constexpr int64_t round_up(int64_t x, int64_t multiple) {
  return (x + multiple - 1) / multiple * multiple;
}

}  // namespace strata
