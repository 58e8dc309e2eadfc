#include "optim/grad_clip.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace strata {

float clip_scale(double sum_squares, float max_norm) {
  if (max_norm <= 0.0f) return 1.0f;
  // A NaN or infinite sum would give a scale of NaN or 0 and silently wreck or freeze the
  // params; the caller skips such steps, so reaching here with one is a bug.
  STRATA_CHECK_MSG(is_finite_norm(sum_squares) && sum_squares >= 0.0,
                   "clip_scale needs a finite, non-negative sum of squares");
  const double norm = std::sqrt(sum_squares);
  const double scale = static_cast<double>(max_norm) / (norm + 1e-6);
  return static_cast<float>(std::min(1.0, scale));
}

bool is_finite_norm(double sum_squares) {
  return std::isfinite(sum_squares);
}

}  // namespace strata
