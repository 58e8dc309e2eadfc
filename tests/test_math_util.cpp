// core/math_util.h: the one round_up every module uses for sizes, offsets and element counts.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

#include "core/math_util.h"

namespace strata {
namespace {

// constexpr: usable for compile-time sizes.
static_assert(round_up(int64_t{0}, 16) == 0);
static_assert(round_up(uint64_t{4096}, 4096) == 4096);

TEST(RoundUp, SignedAndUnsignedSizes) {
  EXPECT_EQ(round_up(int64_t{1}, 16), 16);
  EXPECT_EQ(round_up(int64_t{17}, 16), 32);
  EXPECT_EQ(round_up(int64_t{2048}, 2048), 2048);
  EXPECT_EQ(round_up(uint64_t{1}, 4096), 4096u);
  EXPECT_EQ(round_up(uint64_t{4097}, 4096), 8192u);
  EXPECT_EQ(round_up(int64_t{10}, 3), 12);  // any positive multiple, not only powers of two
  // Beyond 32 bits.
  EXPECT_EQ(round_up(uint64_t{5} << 40, uint64_t{1} << 30), uint64_t{5} << 40);
  EXPECT_EQ(round_up((int64_t{5} << 40) + 1, int64_t{1} << 30), (int64_t{5} << 40) + (1 << 30));
  // The largest value that still rounds without overflowing.
  constexpr uint64_t kTop = std::numeric_limits<uint64_t>::max() / 4096 * 4096;
  EXPECT_EQ(round_up(kTop - 4095, 4096), kTop);
}

TEST(RoundUpDeathTest, BrokenPreconditionsAbortInsteadOfReturningAWrongSize) {
  EXPECT_DEATH((void)round_up(int64_t{5}, 0), "multiple must be positive");
  EXPECT_DEATH((void)round_up(int64_t{-5}, 4), "must not be negative");
  EXPECT_DEATH((void)round_up(std::numeric_limits<uint64_t>::max() - 10, 4096), "overflows");
}

}  // namespace
}  // namespace strata
