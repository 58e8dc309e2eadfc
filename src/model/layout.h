// The layer-major parameter layout (docs/design.md §2): one contiguous slab per unit of offload
// (embeddings, each transformer block, the final norm and an untied LM head), each slab starting on
// a 4 KiB boundary in both f32 and bf16, so "block l" is a single extent on any tier.
//
// The same layout (in elements) serves params, gradients and AdamW m and v; only the element
// size differs. Padding between tensors and at slab ends is zero and never updated.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/tensor.h"
#include "model/lora.h"

namespace strata {

// Slab starts are multiples of this many elements: 8 KiB in f32, 4 KiB in bf16.
inline constexpr int64_t kSlabAlignElems = 2048;
// Tensor starts inside a slab: 64 bytes in f32, so SIMD loads of a tensor's start are aligned.
inline constexpr int64_t kTensorAlignElems = 16;

// The tensors of one GPT-2 block, in slab order.
enum BlockTensor : int {
  kLn1Weight,       // (C)
  kLn1Bias,         // (C)
  kAttnQkvWeight,   // (3C, C)
  kAttnQkvBias,     // (3C)
  kAttnProjWeight,  // (C, C)
  kAttnProjBias,    // (C)
  kLn2Weight,       // (C)
  kLn2Bias,         // (C)
  kMlpFcWeight,     // (4C, C)
  kMlpFcBias,       // (4C)
  kMlpProjWeight,   // (C, 4C)
  kMlpProjBias,     // (C)
  kBlockTensorCount
};

// The tensors of one Llama block, in slab order (Note [Llama blocks] in model/block.h). Ckv =
// n_kv_head * head size, F = ffn_hidden. q, k, v follow one another with no padding, and so do
// gate and up, so each group is one matrix for one matmul: (C + 2 Ckv, C) and (2F, C).
enum LlamaBlockTensor : int {
  kAttnNormWeight,  // (C)
  kAttnQWeight,     // (C, C)
  kAttnKWeight,     // (Ckv, C)   packed after q
  kAttnVWeight,     // (Ckv, C)   packed after k
  kAttnOutWeight,   // (C, C)
  kMlpNormWeight,   // (C)
  kMlpGateWeight,   // (F, C)
  kMlpUpWeight,     // (F, C)     packed after gate
  kMlpDownWeight,   // (C, F)
  kLlamaBlockTensorCount
};

// How a tensor is initialised from the seed (model/init.h): zeros (biases), ones (norm gains),
// N(0, 0.02), or N(0, 0.02 / sqrt(2 L)) (GPT-2's residual projections).
// kaiming_uniform: U(-1/sqrt(in), 1/sqrt(in)) for an (out, in) matrix, a LoRA A (Note [LoRA]).
enum class ParamInit : uint8_t { zeros, ones, normal, residual_normal, kaiming_uniform };

struct ParamTensor {
  std::string name;  // "blk.3.attn_qkv.weight", "wte.weight", ...
  Shape shape;
  int64_t offset = 0;  // elements from the start of the whole parameter space
  int64_t slab = 0;    // index into ParamLayout::slabs
  bool decay = false;  // AdamW weight decay applies (matrices and embeddings, not biases/norms)
  ParamInit init = ParamInit::zeros;
  // Its Hugging Face name ("h.3.attn.c_attn.weight", "model.layers.3.self_attn.q_proj.weight")
  // and whether HF stores it transposed (GPT-2's Conv1D); see model/hf_names.h.
  std::string hf_name;
  bool hf_transposed = false;
  // Note [LoRA]: a frozen tensor gets no gradient and no AdamW update. An adapter tensor names its
  // slot (model/lora.h) and whether it is A (r, in) or B (out, r); -1 for the base's tensors.
  bool frozen = false;
  // Its initial values' seed index (model/init.h): its index among the base's tensors, so a LoRA
  // layout's base starts as the same layout without adapters; adapters count from 2^32.
  uint64_t seed_index = 0;
  int8_t lora_slot = -1;
  bool lora_b = false;
  int64_t numel() const { return shape.numel(); }
};

struct Slab {
  std::string name;    // "embed", "blk.3", "final"
  int64_t offset = 0;  // elements, multiple of kSlabAlignElems
  int64_t numel = 0;   // elements including padding, multiple of kSlabAlignElems
  int64_t first_tensor = 0;
  int64_t tensor_count = 0;
};

struct ParamLayout {
  ModelConfig config;
  LoraConfig lora;                         // rank 0: no adapters, nothing frozen
  std::array<bool, kLoraSlots> lora_on{};  // the slots (model/lora.h) each block adapts
  std::vector<ParamTensor> tensors;        // slab order: embed, blk.0 .. blk.L-1, final
  std::vector<Slab> slabs;
  int64_t total_elems = 0;      // all slabs, padding included
  int64_t parameter_count = 0;  // real parameters, padding excluded
  int64_t trainable_count = 0;  // of those, the ones not frozen (all, without LoRA)

  int64_t embed_slab() const { return 0; }
  int64_t block_slab(int64_t layer) const { return 1 + layer; }
  int64_t final_slab() const { return 1 + config.n_layer; }
  // index into `tensors`, or -1
  int64_t find(const std::string& name) const;
};

// With lora.rank > 0 (check_lora must accept it), each block's slab ends with its adapters' A and
// B, slot by slot, and the base is frozen (Note [LoRA]).
ParamLayout make_param_layout(const ModelConfig& config, const LoraConfig& lora = {});

// Typed views of one slab's tensors inside a flat f32 buffer laid out by ParamLayout (params,
// gradients, or optimizer state alike). The two architectures share them by role; a tensor an
// architecture lacks is null.
struct EmbedView {
  float* wte;  // (V, C), also the LM head when tied
  float* wpe;  // (context_length, C); null for Llama (rotary positions)
};
// GPT-2: LayerNorms with biases, qkv (3C, C), fc (4C, C), fcproj (C, 4C), every bias.
// Llama: RMSNorm gains only (ln1_b, ln2_b null); qkv_w is q|k|v (C + 2 Ckv, C); proj_w is o;
// fc_w is gate|up (2F, C); fcproj_w is down (C, F); no biases (all *_b null).
// A LoRA adapter's A (r, in) and B (out, r); null where the slot is not adapted.
struct LoraPair {
  float* A;
  float* B;
};
struct BlockView {
  float* ln1_w;                           // (C)
  float* ln1_b;                           // (C)
  float* qkv_w;                           // (3C, C)            Llama: (C + 2 Ckv, C)
  float* qkv_b;                           // (3C)
  float* proj_w;                          // (C, C)
  float* proj_b;                          // (C)
  float* ln2_w;                           // (C)
  float* ln2_b;                           // (C)
  float* fc_w;                            // (4C, C)            Llama: (2F, C)
  float* fc_b;                            // (4C)
  float* fcproj_w;                        // (C, 4C)            Llama: (C, F)
  float* fcproj_b;                        // (C)
  std::array<LoraPair, kLoraSlots> lora;  // by slot (model/lora.h); all null without LoRA
};
struct FinalView {
  float* lnf_w;    // (C)
  float* lnf_b;    // (C); null for Llama (RMSNorm)
  float* lm_head;  // (V, C) an untied head; null when tied (the head is EmbedView::wte)
};

// The LM head's (V, C) weight: the untied head, or the token embedding.
inline float* lm_head_of(const EmbedView& e, const FinalView& f) {
  return f.lm_head != nullptr ? f.lm_head : e.wte;
}

// What a view is of: the params, or their gradients, where a frozen tensor is null (Note [LoRA]:
// nothing accumulates into it).
enum class ViewOf : uint8_t { params, grads };
EmbedView embed_view(const ParamLayout& layout, float* base, ViewOf of = ViewOf::params);
BlockView block_view(const ParamLayout& layout, float* base, int64_t layer,
                     ViewOf of = ViewOf::params);
FinalView final_view(const ParamLayout& layout, float* base, ViewOf of = ViewOf::params);
// The same views over a buffer that holds one slab alone (slab_base points at its first
// element), as the offloaded schedules keep them.
EmbedView embed_slab_view(const ParamLayout& layout, float* slab_base, ViewOf of = ViewOf::params);
BlockView block_slab_view(const ParamLayout& layout, float* slab_base, int64_t layer,
                          ViewOf of = ViewOf::params);
FinalView final_slab_view(const ParamLayout& layout, float* slab_base, ViewOf of = ViewOf::params);
// The gradient view of a block over a buffer that holds its slab from element `first` on (the
// offloaded schedules' gradient of a partly frozen block: Note [Frozen base] in
// sched/schedule_spec.h); every tensor before `first` must be frozen (frozen_elems_for makes it
// so, once per run).
BlockView block_slab_grad_view(const ParamLayout& layout, float* grads, int64_t layer,
                               int64_t first);

}  // namespace strata
