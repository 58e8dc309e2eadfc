// Global-norm gradient clipping, as torch.nn.utils.clip_grad_norm_: the caller sums the squares
// of every gradient (cpu::sum_squares per tensor, added in a fixed order), checks the sum is
// finite (otherwise the step is skipped), and passes clip_scale() to AdamW as grad_scale.
#pragma once

namespace strata {

// norm = sqrt(sum_squares); min(1, max_norm / (norm + 1e-6)), computed in double.
// max_norm <= 0 disables clipping: 1. With clipping on, sum_squares must be finite and >= 0
// (check is_finite_norm first).
float clip_scale(double sum_squares, float max_norm);

// False for NaN or infinite sums: such a step must be skipped, not clipped.
bool is_finite_norm(double sum_squares);

}  // namespace strata
