// core/math_util.h: the one round_up every module uses for sizes, offsets and element counts, and
// the checked add and multiply for sizes derived from user input.
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

static_assert(checked_mul(int64_t{1} << 31, int64_t{1} << 31) == int64_t{1} << 62);
static_assert(!checked_mul(int64_t{1} << 32, int64_t{1} << 31).has_value());

TEST(CheckedArithmetic, ExactResultsOrNothing) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(checked_add(int64_t{40}, 2), 42);
  EXPECT_EQ(checked_add(kMax - 1, 1), kMax);
  EXPECT_FALSE(checked_add(kMax, 1).has_value());
  EXPECT_FALSE(checked_add(std::numeric_limits<int64_t>::min(), -1).has_value());
  EXPECT_EQ(checked_mul(int64_t{-3}, 7), -21);
  EXPECT_EQ(checked_mul(kMax, 1), kMax);
  EXPECT_EQ(checked_mul(kMax, 0), 0);
  // 2^62 x 4: what `train.grad_accum=2^62` times B x T becomes; it used to wrap to 0 tokens.
  EXPECT_FALSE(checked_mul(int64_t{1} << 62, 4).has_value());
  EXPECT_FALSE(checked_mul(int64_t{3037000500}, 3037000500).has_value());  // > sqrt(2^63)
  EXPECT_EQ(checked_mul(uint64_t{1} << 63, 1), uint64_t{1} << 63);
  EXPECT_FALSE(checked_mul(uint64_t{1} << 63, 2).has_value());
}

}  // namespace
}  // namespace strata
