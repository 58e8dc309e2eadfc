// Learning-rate schedule: linear warmup, then cosine decay to max_lr * min_lr_ratio.
// The Python reference re-implements lr_at formula for formula (see lr_schedule.cpp).
#pragma once

#include <cstdint>

namespace strata {

struct LrSchedule {
  float max_lr;
  int64_t warmup_steps;  // steps 0..warmup_steps-1 ramp up; 0 disables warmup
  int64_t total_steps;   // the decay reaches min_lr here and stays there
  float min_lr_ratio;    // min_lr = max_lr * min_lr_ratio
};

// The learning rate of 0-based optimizer step `step`:
//   step < warmup_steps: max_lr * (step+1) / warmup_steps
//   otherwise:           progress = clamp((step - warmup_steps) / max(1, total_steps -
//                        warmup_steps), 0, 1); min_lr = max_lr * min_lr_ratio;
//                        lr = min_lr + 0.5 * (max_lr - min_lr) * (1 + cos(pi * progress))
// Computed in double (left to right, as written), returned as float.
float lr_at(const LrSchedule& s, int64_t step);

}  // namespace strata
