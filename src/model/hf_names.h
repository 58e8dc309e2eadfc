// Hugging Face names and layouts for Strata's parameters, so checkpoints and exports load in
// other tools: GPT-2 as transformers' GPT2Model state dict (without the "transformer." prefix),
// Llama as LlamaForCausalLM's ("model.layers.{l}.self_attn.q_proj.weight", ..., "lm_head.weight"
// when untied; HF's Linear is (out, in) like Strata's, so nothing is transposed). The names are
// set where the layout is made (model/layout.cpp), beside each tensor.
//
// Note [Hugging Face GPT-2 layout]
// HF's GPT-2 holds its four matrices per block as Conv1D weights, (in_features, out_features): the
// transpose of Strata's (out_features, in_features) Linear layout. Embeddings, biases and LayerNorm
// parameters are stored as they are. model/layout.cpp names each tensor (blk.{l}.ln1.weight is
// h.{l}.ln_1.weight, lnf.bias is ln_f.bias, ...) and marks the four Conv1D weights transposed:
//   blk.{l}.attn_qkv.weight (3C, C)  <->  h.{l}.attn.c_attn.weight (C, 3C)
//   blk.{l}.attn_proj.weight (C, C)  <->  h.{l}.attn.c_proj.weight (C, C)
//   blk.{l}.mlp_fc.weight (4C, C)    <->  h.{l}.mlp.c_fc.weight (C, 4C)
//   blk.{l}.mlp_proj.weight (C, 4C)  <->  h.{l}.mlp.c_proj.weight (4C, C)
// The q|k|v column blocks of c_attn are Strata's row blocks of attn_qkv, so the transpose is the
// whole conversion. Transposing is a permutation: converting and back gives the same bits.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/layout.h"

namespace strata {

struct HfTensor {
  std::string name;            // "h.3.attn.c_attn.weight"
  std::vector<int64_t> shape;  // HF's shape
  bool transposed = false;     // a Conv1D weight: HF holds Strata's matrix transposed
};

// The HF name and shape of layout.tensors[index].
HfTensor hf_tensor(const ParamLayout& layout, int64_t index);

// hf (numel) <- Strata's values of tensor t (numel), transposing Conv1D weights.
void to_hf_layout(const ParamTensor& t, const float* strata, float* hf);
// strata (numel) <- HF's values.
void from_hf_layout(const ParamTensor& t, const float* hf, float* strata);

}  // namespace strata
