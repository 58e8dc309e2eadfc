// LoRA adapters over a frozen base (Note [LoRA]): which linear layers of a block a run adapts,
// their shapes, and the checks of the lora.* config against the model.
//
// Note [LoRA]
// lora.rank r > 0 turns each targeted linear layer y = W x (+ b) of every block into
//   y = W x (+ b) + (alpha / r) B (A dropout(x)),   A (r, in), B (out, r),
// PEFT's LoRA (dropout: Note [Adapter dropout]). A and B are f32 tensors at the end of the block's
// slab (model/layout.h), A ~ U(-1/sqrt(in), 1/sqrt(in)) (PEFT's kaiming_uniform with a = sqrt(5))
// from the run's seed and B = 0, so step 0 computes the base model exactly. Every other tensor is
// frozen (ParamTensor::frozen) unless lora.modules_to_save names it: no gradient is accumulated
// into it and AdamW skips it (optim/adamw_layout.h), so its bits never change. Llama's fused q|k|v
// and gate|up take one adapter per part, each adding into its own rows of the fused output. The
// adapters compute in f32 from the working weights (bf16-rounded in precision bf16, as the base).
//
// Note [Adapter dropout]
// lora.dropout p > 0 drops elements of each adapter's input, as PEFT's lora_dropout: the update
// is (alpha / r) B A dropout(x); the base's W x sees x whole. The masks are functions of the
// position, never of a generator's state, so every schedule, placement, device and the backward's
// recomputation draw the same ones: micro-batch m (counted over the step's micro-batches of all
// ranks) of step s (0-based) in layer l has key = h(h(h(h(seed) ^ s) ^ m) ^ l), h SplitMix64
// (core/dropout_mask.h); slot k's mask is the stream h(key ^ k), element i of the (rows, in)
// input kept when h(stream + i) >> 40 >= floor(p 2^24), then scaled by 1 / (1 - p). Evaluation
// and sampling do not drop. tools/torch_lora.py draws the same masks.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/status.h"

namespace strata {

// The four linear layers of a block (model/block.h's BlockView): q|k|v, the attention output, the
// MLP's first matmul (GPT-2 fc, Llama gate|up) and its second (fcproj, Llama down).
enum class BlockLinear : uint8_t { qkv, proj, fc, fcproj };

// The linear modules LoRA can target, as Hugging Face names them inside a layer. A block has at
// most kLoraSlots of them; a module's slot is its index in its architecture's list.
inline constexpr int kLoraSlots = 7;
struct LoraModule {
  const char* hf_path;  // "self_attn.q_proj", "attn.c_attn"
  BlockLinear linear;   // the block linear it adds into
};
// The modules of an architecture, in slab order: Llama q, k, v, o, gate, up, down; GPT-2 c_attn,
// attn.c_proj, c_fc, mlp.c_proj.
const std::vector<LoraModule>& lora_modules(ModelArch arch);

// One adapter's place in its linear: it reads the linear's input (in features) and adds into
// rows [out_begin, out_begin + out) of its output (out_width wide).
struct LoraGeometry {
  BlockLinear linear = BlockLinear::qkv;
  int64_t in = 0, out_begin = 0, out = 0, out_width = 0;
};
LoraGeometry lora_geometry(const ModelConfig& m, int slot);

// Which slots lora.targets picks (all-linear: all; else each name matches the modules whose path
// is it or ends in "." + it, as PEFT matches). Only for a config check_lora accepts.
std::array<bool, kLoraSlots> lora_targeted(const ModelConfig& m, const LoraConfig& lora);

// lora.* against the model: rank at most each targeted matrix's smaller side, every target a
// block's linear layer of this architecture, modules_to_save the embeddings or the LM head, no
// setting this build does not have. invalid_argument naming the key, one line.
Status check_lora(const TrainConfig& cfg);

// Whether modules_to_save trains the token embedding / an untied LM head in full (a tied head is
// the token embedding).
struct LoraSaved {
  bool wte = false, lm_head = false;
};
LoraSaved lora_saved(const ModelConfig& m, const LoraConfig& lora);

// Note [Adapter dropout]: where a training micro-batch is, and its key in one layer.
struct LoraDropoutAt {
  uint64_t seed = 0;
  int64_t step = 0;         // 0-based optimizer step
  int64_t micro_batch = 0;  // over the step's micro-batches of every rank
};
uint64_t lora_dropout_key(const LoraDropoutAt& at, int64_t layer);
// Slot `slot`'s mask stream under a layer's key.
uint64_t lora_dropout_stream(uint64_t key, int slot);

}  // namespace strata
