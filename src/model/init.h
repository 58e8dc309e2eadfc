// Seeded, deterministic initialisation as Hugging Face's does it, by each tensor's ParamInit
// (model/layout.h): GPT-2's matrices and embeddings ~ N(0, 0.02), the two residual projections
// of each block ~ N(0, 0.02/sqrt(2L)), biases 0, LayerNorm weights 1; Llama's matrices and
// embeddings ~ N(0, 0.02), RMSNorm gains 1; LoRA's A ~ U(-1/sqrt(in), 1/sqrt(in)), B 0. Each tensor
// draws from its own seed (derive_seed(seed, index)), so any slab can be initialised alone,
// wherever it lives, with the same bits.
#pragma once

#include <cstdint>

#include "model/layout.h"

namespace strata {

// params: (layout.total_elems) f32, host memory; padding is zeroed.
void init_params(const ParamLayout& layout, float* params, uint64_t seed);
// One tensor alone, its numel floats at p.
void init_param_tensor(const ParamLayout& layout, int64_t tensor, float* p, uint64_t seed);
// The same for one slab only: slab_params points at the slab's first element.
void init_param_slab(const ParamLayout& layout, int64_t slab, float* slab_params, uint64_t seed);

}  // namespace strata
