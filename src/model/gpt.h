// The whole model (GPT-2 or Llama, model.arch): embeddings -> L blocks -> final norm -> LM head
// (tied to the embedding, or its own) -> softmax cross-entropy, forward and backward, for the
// in-memory schedule (every block's activations kept). Offloaded schedules drive
// block_forward/block_backward themselves.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "model/block.h"
#include "model/layout.h"
#include "model/lm_head.h"
#include "model/norm.h"

namespace strata {

// Activations and backward scratch of one forward+backward over a (B, T) batch.
struct GptActs {
  int64_t B = 0, T = 0;
  BlockDims dims{};
  float* residual = nullptr;      // (L+1, B, T, C) input of block l at l; model output at L
  std::vector<BlockActs> blocks;  // L
  HeadActs head;                  // N = B T rows: lnf (B, T, C), logits, probs (B, T, V), ...
  // backward scratch
  float* dres_a = nullptr;  // (B, T, C)  ping-pong gradients of block boundaries
  float* dres_b = nullptr;  // (B, T, C)
  BlockGradScratch scratch;
};

// Lays the activations out in `base` (gpt_acts_floats floats); a null base only counts. rope:
// a Llama model's cos/sin table on the device (model/rope.h); null for GPT-2. lora: the adapters'
// scratch (Note [LoRA]).
GptActs gpt_acts_at(const Device& dev, float* base, const ModelConfig& cfg, int64_t B, int64_t T,
                    const float* rope, const LoraConfig& lora = {});
int64_t gpt_acts_floats(const Device& dev, const ModelConfig& cfg, int64_t B, int64_t T,
                        const LoraConfig& lora = {});

// tokens, targets (B, T) int32 on the device; params laid out by `layout`.
// After it, acts.head.losses holds the per-position losses and acts.head.logits the logits.
// gemm: the blocks' GEMMs in bf16 (Note [bf16 GEMMs] in model/block.h; its f32_base is params),
// or null for f32; the head's GEMM is f32 either way.
// drop: a training micro-batch's place (Note [Adapter dropout] in model/lora.h), or null: no
// adapter dropout (evaluation).
void gpt_forward(Device& dev, Stream& s, const GptActs& acts, const ParamLayout& layout,
                 float* params, const int32_t* tokens, const int32_t* targets,
                 const BlockGemm* gemm = nullptr, const LoraDropoutAt* drop = nullptr);

// grads (layout.total_elems) += d(sum of losses * dloss)/d(params). Needs gpt_forward's acts.
void gpt_backward(Device& dev, Stream& s, const GptActs& acts, const ParamLayout& layout,
                  float* params, float* grads, const int32_t* tokens, const int32_t* targets,
                  float dloss, const BlockGemm* gemm = nullptr,
                  const LoraDropoutAt* drop = nullptr);

// Matmul weights of one block, for FLOP counts: q|k|v, the output projection and the MLP's.
double block_matmul_params(const ModelConfig& cfg);

// Model FLOPs of one forward+backward over `tokens` tokens (6N per token plus attention),
// for the model FLOP/s figure.
double gpt_train_flops(const ModelConfig& cfg, int64_t T, int64_t tokens);

}  // namespace strata
