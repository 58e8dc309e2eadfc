// One GPT-2 transformer block (pre-LN), forward and backward, written against Device ops only:
//   res2 = inp + attn_proj(attention(ln1(inp)))
//   out  = res2 + mlp_proj(gelu(mlp_fc(ln2(res2))))
// Everything here is enqueued on one stream (Note [Asynchronous by contract]).
#pragma once

#include <cstdint>

#include "backend/backend.h"
#include "model/layout.h"

namespace strata {

struct BlockDims {
  int64_t B, T, C, NH;
  int64_t att_saved;    // floats attention_forward saves (Device::attention_saved_floats)
  int64_t att_scratch;  // floats of attention_backward's workspace
};
BlockDims block_dims(const Device& dev, int64_t B, int64_t T, int64_t C, int64_t NH);

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
// the block's input is not in it: it is the block checkpoint, stored once already); attproj and
// fcproj, which only the forward uses, follow.
struct BlockActs {
  // saved set
  float* ln1;       // (B, T, C)
  float* ln1_mean;  // (B, T)
  float* ln1_rstd;  // (B, T)
  float* qkv;       // (B, T, 3C)
  float* atty;      // (B, T, C)   attention output, heads side by side
  float* att;       // (att_saved) attention state for the backward (probabilities on CPU)
  float* res2;      // (B, T, C)   inp + attention branch
  float* ln2;       // (B, T, C)
  float* ln2_mean;  // (B, T)
  float* ln2_rstd;  // (B, T)
  float* fch;       // (B, T, 4C)
  float* fch_gelu;  // (B, T, 4C)
  // forward-only
  float* attproj;  // (B, T, C)
  float* fcproj;   // (B, T, C)
};
BlockActs block_acts_carve(FloatCarver& c, const BlockDims& d);
inline int64_t block_acts_floats(const BlockDims& d) {
  FloatCarver counter(nullptr);
  block_acts_carve(counter, d);
  return counter.used();
}
// The saved set's floats: block_acts_floats minus the forward-only tensors.
inline int64_t block_saved_floats(const BlockDims& d) {
  return block_acts_floats(d) - 2 * d.B * d.T * d.C;
}

// Gradient scratch for one block's backward, reused block after block.
struct BlockGradScratch {
  float* dres2;      // (B, T, C)
  float* datty;      // (B, T, C)
  float* dqkv;       // (B, T, 3C)
  float* dln;        // (B, T, C)   dln2, then dln1
  float* dfch;       // (B, T, 4C)
  float* dfch_gelu;  // (B, T, 4C)
  float* datt;       // (att_scratch) attention backward workspace
};
BlockGradScratch block_grad_scratch_carve(FloatCarver& c, const BlockDims& d);
inline int64_t block_grad_scratch_floats(const BlockDims& d) {
  FloatCarver counter(nullptr);
  block_grad_scratch_carve(counter, d);
  return counter.used();
}

// out (B,T,C) <- inp (B,T,C); fills acts.
void block_forward(Device& dev, Stream& s, float* out, const BlockActs& acts, const float* inp,
                   const BlockView& w, const BlockDims& d);

// dinp (B,T,C) += ; grads += ; from dout (B,T,C). acts and inp as left by block_forward.
void block_backward(Device& dev, Stream& s, float* dinp, const BlockView& grads,
                    const BlockGradScratch& g, const float* dout, const float* inp,
                    const BlockActs& acts, const BlockView& w, const BlockDims& d);

}  // namespace strata
