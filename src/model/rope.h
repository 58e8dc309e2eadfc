// Rotary position embeddings' cos/sin table for Llama blocks (Note [Llama blocks] in
// model/block.h), computed the way Hugging Face's LlamaRotaryEmbedding computes it, so that
// Strata's logits agree with transformers' on the same weights:
//   inv_freq[i] = 1 / theta^(2i / hs)                          float32, i < hs/2
//   (rope_scaling llama3: low frequencies divided by factor, a smooth blend in between, as
//    HF's _compute_llama3_parameters)
//   angle[t][i] = float32(t) * inv_freq[i]                     one float32 rounding
//   table[t][i] = (cos(angle), sin(angle))                     rounded to float32
// HF computes in float32 tensors; here each float32 step is rounded the same way and cos/sin are
// taken in double of the float32 angle, so entries agree with HF's to about an ulp.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "core/config.h"

namespace strata {

// inv_freq (hs/2), scaling applied.
std::vector<float> rope_inv_freq(const ModelConfig& model);
// (positions, hs/2, 2) cos, sin of positions 0 .. positions - 1: the ones a run uses (training:
// train.seq_len; sampling: its window), never the model's whole context_length (Llama 3.1's
// 131072 would be 64 MiB for nothing).
std::vector<float> rope_table(const ModelConfig& model, int64_t positions);
// The table on `dev` (device memory), ready when the call returns; an empty Buffer for a model
// without rotary embeddings (GPT-2). out_of_memory naming the budget as alloc does.
Result<Buffer> upload_rope_table(Device& dev, const ModelConfig& model, int64_t positions);

}  // namespace strata
