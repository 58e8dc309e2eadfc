// AdamW over the parameter layout: the hyperparameters of one step from the config, and a step
// over any element range of a slab, tensor by tensor (each with its own weight decay). Shared by
// the in-memory trainer (whole slabs) and the offloaded one (blocks split in parts, Note
// [Optimizer split] in sched/schedule_spec.h): AdamW is elementwise, so any split of a slab gives
// the bits of one whole step.
#pragma once

#include <algorithm>
#include <cstdint>

#include "backend/adamw_hyper.h"
#include "core/config.h"
#include "model/layout.h"

namespace strata {

// lr, step (1-based) and grad_scale are this step's; the rest comes from the config. The weight
// decay is left to adamw_slab_range (per tensor).
AdamWHyper adamw_hyper(const OptimConfig& optim, float lr, int64_t step, float grad_scale);

// The elements [lo, hi) of `slab` (slab-relative): master, m, v and grad point at element lo.
// Tensors decay by `weight_decay` when ParamTensor::decay, else not; frozen ones are skipped.
// master_bf16, when not null, points at element lo too and receives the updated master rounded to
// bf16 in the same pass (bf16 working weights, Note [Precision modes] in train/trainer.h).
void adamw_slab_range(const ParamLayout& layout, int64_t slab, int64_t lo, int64_t hi,
                      float* master, float* m, float* v, bf16_t* master_bf16, const float* grad,
                      AdamWHyper h, float weight_decay);

// The tensor pieces adamw_slab_range steps: fn(a, b, h') for each tensor's part [a, b) of
// [lo, hi) (slab-relative), in layout order, h' being h with the tensor's weight decay. For
// steppers other than the host's (a device's AdamW), so that the split is written once.
template <typename Fn>
void for_each_tensor_range(const ParamLayout& layout, int64_t slab, int64_t lo, int64_t hi,
                           AdamWHyper h, float weight_decay, Fn&& fn) {
  const Slab& s = layout.slabs[static_cast<size_t>(slab)];
  for (int64_t i = s.first_tensor; i < s.first_tensor + s.tensor_count; ++i) {
    const ParamTensor& t = layout.tensors[static_cast<size_t>(i)];
    if (t.frozen) continue;  // Note [LoRA]: never stepped, so its bits never change
    const int64_t a = std::max(t.offset - s.offset, lo);
    const int64_t b = std::min(t.offset - s.offset + t.numel(), hi);
    if (b <= a) continue;
    h.weight_decay = t.decay ? weight_decay : 0.0f;
    fn(a, b, static_cast<const AdamWHyper&>(h));
  }
}

}  // namespace strata
