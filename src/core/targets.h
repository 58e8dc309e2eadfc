// Targets that do not count in the loss.
//
// Note [Ignored targets]
// A target of kIgnoreTarget (-100, Hugging Face's and PyTorch's ignore_index) marks a position
// whose prediction is not trained: a chat prompt's tokens, a pad. The cross-entropy kernels give
// it loss 0 and leave its dlogits row as it is; the loss is the mean over the counted targets of
// the whole step (every micro-batch of every rank), as Hugging Face's num_items_in_batch makes
// it, so d loss / d a position's loss is 1 / (counted targets). With every target counted this is
// 1 / (ranks x M x B x T) and the step's bits are those of a run without the convention.
#pragma once

#include <cstdint>

namespace strata {

inline constexpr int32_t kIgnoreTarget = -100;

// The targets of `n` that count.
inline int64_t counted_targets(const int32_t* targets, int64_t n) {
  int64_t c = 0;
  for (int64_t i = 0; i < n; ++i) c += targets[i] != kIgnoreTarget;
  return c;
}

// The mean loss over the counted targets from the mean over all `positions` (ignored ones are
// 0): exactly mean_over_all when every target counts (the factor is 1.0), 0 when none does.
inline double counted_mean(double mean_over_all, int64_t positions, int64_t counted) {
  if (counted == 0) return 0.0;
  return mean_over_all * (static_cast<double>(positions) / static_cast<double>(counted));
}

}  // namespace strata
