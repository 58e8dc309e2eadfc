// The norm of a block and of the model's end, by architecture: GPT-2's LayerNorm (weight and
// bias, saves mean and rstd) or Llama's RMSNorm (weight only, saves rstd; eps from
// model.norm_eps). One place decides which, so the block, the head and sampling agree.
#pragma once

#include <cstdint>

#include "backend/backend.h"
#include "core/config_enums.h"

namespace strata {

struct NormSpec {
  ModelArch arch = ModelArch::gpt2;
  float eps = 1e-5f;  // RMSNorm's; LayerNorm's is the op's fixed 1e-5
};

// out (N,C), mean (N, LayerNorm only: null for RMSNorm), rstd (N) <- inp (N,C), weight (C),
// bias (C, LayerNorm only)
void norm_forward(Device& dev, Stream& s, const NormSpec& spec, float* out, float* mean,
                  float* rstd, const float* inp, const float* weight, const float* bias, int64_t N,
                  int64_t C);
// dinp (N,C) +=, dweight (C) +=, dbias (C, LayerNorm only) +=
void norm_backward(Device& dev, Stream& s, const NormSpec& spec, float* dinp, float* dweight,
                   float* dbias, const float* dout, const float* inp, const float* weight,
                   const float* mean, const float* rstd, int64_t N, int64_t C);

}  // namespace strata
