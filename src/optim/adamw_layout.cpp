#include "optim/adamw_layout.h"

#include <algorithm>

#include "backend/cpu/kernels_adamw.h"
#include "core/dtype.h"

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
  if (master_bf16 == nullptr) return;
  // The bf16 output is a whole range that the caller writes back as the working weights, so a
  // frozen tensor (Note [LoRA]) gets its unchanged master rounded, as at load: not what the buffer
  // held before (another block's weights, in the offloaded trainer's staging).
  const Slab& s = layout.slabs[static_cast<size_t>(slab)];
  for (int64_t i = s.first_tensor; i < s.first_tensor + s.tensor_count; ++i) {
    const ParamTensor& t = layout.tensors[static_cast<size_t>(i)];
    const int64_t a = std::max(t.offset - s.offset, lo);
    const int64_t b = std::min(t.offset - s.offset + t.numel(), hi);
    if (!t.frozen || b <= a) continue;
    for (int64_t k = a; k < b; ++k) master_bf16[k - lo] = f32_to_bf16(master[k - lo]);
  }
}

}  // namespace strata
