// Small integer helpers shared by every module, so each file does not carry its own copy.
#pragma once

#include <concepts>
#include <cstdint>
#include <limits>
#include <optional>
#include <type_traits>

#include "core/check.h"

namespace strata {

// The smallest multiple of `multiple` that is >= x (x itself when it already is one), for sizes,
// offsets and element counts. Preconditions, checked because breaking one silently yields a wrong
// size: multiple > 0, x >= 0, and the result fits in T. The multiple takes x's type, so
// round_up(bytes, 4096) works for int64_t and uint64_t alike.
template <std::integral T>
constexpr T round_up(T x, std::type_identity_t<T> multiple) {
  STRATA_CHECK_MSG(multiple > 0, "round_up: the multiple must be positive");
  if constexpr (std::is_signed_v<T>) {
    STRATA_CHECK_MSG(x >= 0, "round_up: x must not be negative");  // would round toward zero
  }
  STRATA_CHECK_MSG(x <= std::numeric_limits<T>::max() - (multiple - 1),
                   "round_up: the result overflows");
  return (x + multiple - 1) / multiple * multiple;
}

// a + b and a * b, or nullopt when the exact result does not fit in T: for sizes derived from
// user input, where a wrapped product would become a wrong allocation or offset. The caller turns
// nullopt into an error naming the inputs (core/config_bounds.cpp, Note [Config bounds]).
template <std::integral T>
constexpr std::optional<T> checked_add(T a, std::type_identity_t<T> b) {
  T r{};
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}
template <std::integral T>
constexpr std::optional<T> checked_mul(T a, std::type_identity_t<T> b) {
  T r{};
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// Shard r of n elements over `ranks` ranks: [begin, end). The first n % ranks shards hold one
// element more; shards are contiguous and cover [0, n). Shared by the plans (sched/) and the
// collectives (dist/).
struct Range {
  int64_t begin = 0, end = 0;
};
constexpr Range shard_range(int64_t n, int ranks, int r) {
  const int64_t base = n / ranks, extra = n % ranks;
  const int64_t begin = r * base + (r < extra ? r : extra);
  return {begin, begin + base + (r < extra ? 1 : 0)};
}

}  // namespace strata
