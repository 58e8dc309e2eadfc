// LR schedule: warmup ramp, cosine decay, and the edges of both.
#include <gtest/gtest.h>

#include <cstdint>

#include "optim/lr_schedule.h"

namespace strata {
namespace {

const LrSchedule kSchedule{
    .max_lr = 6e-4f, .warmup_steps = 10, .total_steps = 110, .min_lr_ratio = 0.1f};

TEST(LrSchedule, WarmupRampsLinearly) {
  const LrSchedule& s = kSchedule;
  // Hand-derived: step k of the warmup is (k+1)/10 of the peak.
  EXPECT_FLOAT_EQ(lr_at(s, 0), 6e-5f);
  EXPECT_FLOAT_EQ(lr_at(s, 4), 3e-4f);
  const float first_increment = lr_at(s, 1) - lr_at(s, 0);
  EXPECT_GT(first_increment, 0.0f);
  for (int64_t k = 1; k < s.warmup_steps; k++) {
    EXPECT_NEAR(lr_at(s, k) - lr_at(s, k - 1), first_increment, 1e-10f) << k;
  }
}

TEST(LrSchedule, PeakAtWarmupEnd) {
  const LrSchedule& s = kSchedule;
  EXPECT_EQ(lr_at(s, s.warmup_steps - 1), s.max_lr);  // last warmup step: (w/w) * max
  EXPECT_EQ(lr_at(s, s.warmup_steps), s.max_lr);      // first decay step: cos(0) = 1
  for (int64_t k = 0; k < 200; k++) EXPECT_LE(lr_at(s, k), s.max_lr) << k;
}

TEST(LrSchedule, CosineDecayToMin) {
  const LrSchedule& s = kSchedule;
  const float min_lr = s.max_lr * s.min_lr_ratio;
  // Hand-derived: halfway through the decay, cos(pi/2) = 0 gives the mean of max and min.
  EXPECT_FLOAT_EQ(lr_at(s, 60), (s.max_lr + min_lr) / 2);
  EXPECT_FLOAT_EQ(lr_at(s, s.total_steps), min_lr);
  EXPECT_FLOAT_EQ(lr_at(s, s.total_steps + 1000), min_lr);  // clamped past the end
  for (int64_t k = s.warmup_steps + 1; k <= s.total_steps; k++) {
    EXPECT_LT(lr_at(s, k), lr_at(s, k - 1)) << k;  // strictly decreasing while decaying
  }
  for (int64_t k = s.total_steps + 1; k < s.total_steps + 20; k++) {
    EXPECT_EQ(lr_at(s, k), lr_at(s, k - 1)) << k;
  }
}

TEST(LrSchedule, NoWarmup) {
  const LrSchedule s{.max_lr = 1.0f, .warmup_steps = 0, .total_steps = 4, .min_lr_ratio = 0.0f};
  EXPECT_EQ(lr_at(s, 0), 1.0f);
  // Hand-derived: progress 1/4 gives 0.5 * (1 + cos(pi/4)).
  EXPECT_FLOAT_EQ(lr_at(s, 1), 0.5f * (1.0f + 0.70710678f));
  EXPECT_FLOAT_EQ(lr_at(s, 2), 0.5f);
  EXPECT_NEAR(lr_at(s, 4), 0.0f, 1e-7f);
}

TEST(LrSchedule, TotalEqualsWarmup) {
  // No decay span: the denominator is clamped to 1, so the step after warmup ends drops
  // straight to min_lr; nothing divides by zero.
  const LrSchedule s{.max_lr = 2e-3f, .warmup_steps = 5, .total_steps = 5, .min_lr_ratio = 0.25f};
  EXPECT_FLOAT_EQ(lr_at(s, 0), 4e-4f);
  EXPECT_EQ(lr_at(s, 4), s.max_lr);
  EXPECT_EQ(lr_at(s, 5), s.max_lr);
  EXPECT_FLOAT_EQ(lr_at(s, 6), 5e-4f);
  EXPECT_FLOAT_EQ(lr_at(s, 100), 5e-4f);
}

TEST(LrSchedule, MinRatioOneIsConstantAfterWarmup) {
  const LrSchedule s{.max_lr = 1e-3f, .warmup_steps = 3, .total_steps = 50, .min_lr_ratio = 1.0f};
  for (int64_t k = 2; k < 60; k++) EXPECT_EQ(lr_at(s, k), s.max_lr) << k;
}

}  // namespace
}  // namespace strata
