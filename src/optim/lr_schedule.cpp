#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace strata {

// Every quantity is a double; max_lr and min_lr_ratio enter as their exact f32 values, so a
// Python mirror must start from float32-rounded values to match bit for bit.
float lr_at(const LrSchedule& s, int64_t step) {
  const double max_lr = s.max_lr;
  if (step < s.warmup_steps) {
    return static_cast<float>(max_lr * static_cast<double>(step + 1) /
                              static_cast<double>(s.warmup_steps));
  }
  const int64_t decay_steps = std::max<int64_t>(1, s.total_steps - s.warmup_steps);
  double progress = static_cast<double>(step - s.warmup_steps) / static_cast<double>(decay_steps);
  progress = std::clamp(progress, 0.0, 1.0);
  const double min_lr = max_lr * static_cast<double>(s.min_lr_ratio);
  const double lr =
      min_lr + 0.5 * (max_lr - min_lr) * (1.0 + std::cos(std::numbers::pi * progress));
  return static_cast<float>(lr);
}

}  // namespace strata
