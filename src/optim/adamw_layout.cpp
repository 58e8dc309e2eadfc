#include "optim/adamw_layout.h"

#include <algorithm>

#include "backend/cpu/kernels_adamw.h"

namespace strata {

AdamWHyper adamw_hyper(const OptimConfig& optim, float lr, int64_t step, float grad_scale) {
  AdamWHyper h{};
  h.lr = lr;
  h.beta1 = optim.beta1;
  h.beta2 = optim.beta2;
  h.eps = optim.eps;
  h.weight_decay = 0.0f;
  h.step = step;
  h.grad_scale = grad_scale;
  return h;
}

void adamw_slab_range(const ParamLayout& layout, int64_t slab, int64_t lo, int64_t hi,
                      float* master, float* m, float* v, bf16_t* master_bf16, const float* grad,
                      AdamWHyper h, float weight_decay) {
  for_each_tensor_range(
      layout, slab, lo, hi, h, weight_decay, [&](int64_t a, int64_t b, const AdamWHyper& th) {
        bf16_t* out_bf16 = master_bf16 != nullptr ? master_bf16 + (a - lo) : nullptr;
        adamw_step(master + (a - lo), m + (a - lo), v + (a - lo), out_bf16, grad + (a - lo), b - a,
                   th);
      });
}

}  // namespace strata
