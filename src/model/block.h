// One transformer block, forward and backward, written against Device ops only. Two
// architectures (model.arch), one interface:
//   GPT-2 (pre-LN):  res2 = inp + attn_proj(attention(ln1(inp)))
//                    out  = res2 + mlp_proj(gelu(mlp_fc(ln2(res2))))
//   Llama:           res2 = inp + o(attention(rope(qkv(rmsnorm1(inp)))))
//                    out  = res2 + down(silu(gate(rmsnorm2(res2))) * up(rmsnorm2(res2)))
// Everything here is enqueued on one stream (Note [Asynchronous by contract]).
//
// Note [Llama blocks]
// A Llama block reuses the GPT-2 block's structure and buffers by role (BlockView, BlockActs):
//  - q|k|v is one matmul with the packed (C + 2 Ckv, C) matrix (model/layout.h); rope_forward
//    rotates its q and k heads (HF's rotate-half, model/rope.h's table); repeat_kv_forward gives
//    every query head its key/value head for the multi-head attention op. The backward runs the
//    chain in reverse (repeat_kv_backward sums the repeats in a fixed order).
//  - gate|up is one matmul with the packed (2F, C) matrix; swiglu_forward makes the (B, T, F)
//    hidden. Norms are RMSNorm (model/norm.h, model.norm_eps); no biases anywhere.
// The saved set (Note [Saved activations]) holds the rotated q|k|v, not the repeated one: the
// backward repeats it again into scratch, so a GQA block saves only its own width. The
// forward-only tensors (q|k|v before rotation, the repeated q|k|v) follow the saved set, as
// attproj and fcproj do.
#pragma once

#include <cstdint>

#include "backend/backend.h"
#include "model/layout.h"

namespace strata {

struct BlockDims {
  ModelArch arch = ModelArch::gpt2;
  int64_t B = 0, T = 0, C = 0, NH = 0;
  int64_t NKV = 0;              // key/value heads (GPT-2: NH)
  int64_t F = 0;                // the MLP's hidden width (GPT-2: 4C)
  int64_t qkv_width = 0;        // the q|k|v row: 3C (GPT-2), C + 2 Ckv (Llama)
  float norm_eps = 1e-5f;       // Llama's RMSNorm epsilon
  const float* rope = nullptr;  // Llama: the device's cos/sin table (model/rope.h)
  int64_t att_saved = 0;        // floats attention_forward saves (Device::attention_saved_floats)
  int64_t att_scratch = 0;      // floats of attention_backward's workspace
  // Note [LoRA] (model/lora.h): rank 0 without adapters; a slot computes where its BlockView has
  // an A. widest_out: the largest output range of a targeted slot.
  int64_t lora_rank = 0;
  float lora_scale = 0;  // alpha / rank
  int64_t lora_widest_out = 0;
  int64_t lora_widest_in = 0;  // with dropout: the largest input of a targeted slot
  double lora_dropout = 0;     // Note [Adapter dropout]
  std::array<LoraGeometry, kLoraSlots> lora_slots{};
};
inline bool block_is_llama(const BlockDims& d) {
  return d.arch == ModelArch::llama;
}
// The MLP's first matmul's output width: 4C (GPT-2, where F = 4C), gate|up 2F (Llama).
inline int64_t block_fc_width(const BlockDims& d) {
  return block_is_llama(d) ? 2 * d.F : d.F;
}

// rope may be null where only sizes are needed (a Llama forward then must not run). lora: the
// run's adapters (Note [LoRA]), as make_param_layout was given them.
BlockDims block_dims(const DeviceTraits& dev, const ModelConfig& model, int64_t B, int64_t T,
                     const float* rope = nullptr, const LoraConfig& lora = {});
inline BlockDims block_dims(const Device& dev, const ModelConfig& model, int64_t B, int64_t T,
                            const float* rope = nullptr, const LoraConfig& lora = {}) {
  return block_dims(device_traits(dev), model, B, T, rope, lora);
}

// Hands out consecutive float ranges of one buffer. With a null base it only counts, so one
// function both sizes and lays out a set of activations (no second list to keep in step).
class FloatCarver {
 public:
  explicit FloatCarver(float* base) : base_(base) {}
  float* take(int64_t n) {
    float* r = base_ != nullptr ? base_ + used_ : nullptr;
    used_ += n;
    return r;
  }
  int64_t used() const { return used_; }

 private:
  float* base_;
  int64_t used_ = 0;
};

// What the forward saves for the backward. One set per block in the in-memory schedule.
// Note [Saved activations]: the tensors block_backward reads come first, in one contiguous range
// of block_saved_floats(d) floats (the "saved set" an offloaded schedule stores, each tensor once;
// the block's input is not in it: it is the block checkpoint, stored once already); the
// forward-only tensors follow. Shapes are GPT-2's, Llama's where they differ (Note [Llama
// blocks]); a tensor an architecture does not have is null.
struct BlockActs {
  // saved set
  float* ln1;       // (B, T, C)
  float* ln1_mean;  // (B, T)   GPT-2 only
  float* ln1_rstd;  // (B, T)
  float* qkv;       // (B, T, qkv_width)   Llama: q and k rotated
  float* atty;      // (B, T, C)   attention output, heads side by side
  float* att;       // (att_saved) attention state for the backward (probabilities on CPU)
  float* res2;      // (B, T, C)   inp + attention branch
  float* ln2;       // (B, T, C)
  float* ln2_mean;  // (B, T)   GPT-2 only
  float* ln2_rstd;  // (B, T)
  float* fch;       // (B, T, 4C)  Llama: gate|up (B, T, 2F)
  float* fch_gelu;  // (B, T, 4C)  Llama: silu(gate) * up (B, T, F)
  // forward-only
  float* attproj;  // (B, T, C)
  float* fcproj;   // (B, T, C)
  float* qkv_pre;  // (B, T, qkv_width)  Llama only: q|k|v before rotation
  float* qkv_rep;  // (B, T, 3C)         Llama only: k and v heads repeated for attention
  float* lora_t;   // (B, T, r)           LoRA only: A x of one adapter
  float* lora_u;   // (B, T, widest out)  LoRA only: B A x of one adapter
  float* lora_x;   // (B, T, widest in)   LoRA with dropout only: an adapter's dropped input
  // Note [Adapter dropout]: this micro-batch's and block's masks (lora_dropout_key); without
  // lora_drop (evaluation, sampling) no dropout.
  uint64_t lora_key;
  bool lora_drop;
};
BlockActs block_acts_carve(FloatCarver& c, const BlockDims& d);
// a with layer `layer`'s dropout key for a training micro-batch at `drop` (null: a unchanged).
inline BlockActs with_dropout(BlockActs a, const LoraDropoutAt* drop, int64_t layer) {
  if (drop != nullptr) {
    a.lora_key = lora_dropout_key(*drop, layer);
    a.lora_drop = true;
  }
  return a;
}
inline int64_t block_acts_floats(const BlockDims& d) {
  FloatCarver counter(nullptr);
  block_acts_carve(counter, d);
  return counter.used();
}
// The saved set's floats: the prefix of block_acts_carve before the forward-only tensors.
int64_t block_saved_floats(const BlockDims& d);

// Gradient scratch for one block's backward, reused block after block.
struct BlockGradScratch {
  float* dres2;      // (B, T, C)
  float* datty;      // (B, T, C)
  float* dqkv;       // (B, T, 3C)   gradient of the attention op's q|k|v
  float* dln;        // (B, T, C)   dln2, then dln1
  float* dfch;       // (B, T, 4C)  Llama: (B, T, 2F)
  float* dfch_gelu;  // (B, T, 4C)  Llama: (B, T, F)
  float* datt;       // (att_scratch) attention backward workspace
  float* qkv_rep;    // (B, T, 3C)         Llama only: the saved q|k|v repeated again
  float* dqkv_rot;   // (B, T, qkv_width)  Llama only: repeats summed, before un-rotating
  float* dqkv_pre;   // (B, T, qkv_width)  Llama only: gradient of the q|k|v matmul's output
  float* lora_dy;    // (B, T, widest out)  LoRA only: scale times an adapter's rows of dy
  float* lora_t;     // (B, T, r)           LoRA only: A x, recomputed
  float* lora_dt;    // (B, T, r)           LoRA only: its gradient
  float* lora_x;  // (B, T, widest in)   LoRA with dropout only: the dropped input, then dx's part
};
BlockGradScratch block_grad_scratch_carve(FloatCarver& c, const BlockDims& d);
inline int64_t block_grad_scratch_floats(const BlockDims& d) {
  FloatCarver counter(nullptr);
  block_grad_scratch_carve(counter, d);
  return counter.used();
}

// Note [bf16 GEMMs]
// With train.matmul bf16 (Note [Precision modes] in train/trainer.h) a block's four weight GEMMs
// and their backward take bf16 operands: the weights are the block's bf16 working weights
// themselves, and the other operand (an activation, or in the backward the output's gradient) is
// rounded to bf16 (f32_to_bf16, nearest even) into a scratch just before the GEMM. Products and
// sums stay f32, and so do the GEMMs' outputs, the biases and every other op. On CUDA these are
// tensor-core GEMMs (cuBLASLt); the CPU widens both operands exactly and runs its f32 matmul:
// the same arithmetic up to the order of the sums. Without a BlockGemm (null) every GEMM is f32.
struct BlockGemm {
  // The working weights as bf16, laid out as the f32 memory the BlockView points into, which
  // starts at f32_base: the bf16 twin of the f32 matrix at w is weights + (w - f32_base).
  const bf16_t* weights = nullptr;
  const float* f32_base = nullptr;
  bf16_t* scratch = nullptr;  // (block_gemm_scratch_elems(d)) the rounded operands
};
// bf16 elements of BlockGemm::scratch: a GEMM's two rounded operands at the widest layer.
int64_t block_gemm_scratch_elems(const BlockDims& d);

// out (B,T,C) <- inp (B,T,C); fills acts. gemm: Note [bf16 GEMMs].
void block_forward(Device& dev, Stream& s, float* out, const BlockActs& acts, const float* inp,
                   const BlockView& w, const BlockDims& d, const BlockGemm* gemm = nullptr);

// dinp (B,T,C) += ; grads += ; from dout (B,T,C). acts and inp as left by block_forward.
void block_backward(Device& dev, Stream& s, float* dinp, const BlockView& grads,
                    const BlockGradScratch& g, const float* dout, const float* inp,
                    const BlockActs& acts, const BlockView& w, const BlockDims& d,
                    const BlockGemm* gemm = nullptr);

}  // namespace strata
