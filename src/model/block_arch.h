// The two architectures' block forward and backward behind block_forward / block_backward
// (model/block.h), which pick one by BlockDims::arch. Internal to src/model.
#pragma once

#include "model/block.h"

namespace strata {

// Each architecture's pair has the signature of block_forward and block_backward (model/block.h),
// written once here as function types; the definitions in block_gpt2.cpp and block_llama.cpp spell
// it out.
using BlockForwardFn = void(Device& dev, Stream& s, float* out, const BlockActs& a,
                            const float* inp, const BlockView& w, const BlockDims& d,
                            const BlockGemm* gemm);
using BlockBackwardFn = void(Device& dev, Stream& s, float* dinp, const BlockView& gw,
                             const BlockGradScratch& g, const float* dout, const float* inp,
                             const BlockActs& a, const BlockView& w, const BlockDims& d,
                             const BlockGemm* gemm);

BlockForwardFn gpt2_block_forward, llama_block_forward;
BlockBackwardFn gpt2_block_backward, llama_block_backward;

// A linear layer y (rows, out_features) = x (rows, in_features) @ W^T (+ b), W (out_features,
// in_features); in bf16 when gemm is not null (Note [bf16 GEMMs]).
void linear_forward(Device& dev, Stream& s, float* y, const float* x, const float* W,
                    const float* b, int64_t rows, int64_t in_features, int64_t out_features,
                    const BlockGemm* gemm);
// Its backward: dx += dy @ W; dW += dy^T @ x when dW is not null (null: a frozen weight, Note
// [LoRA]); db += colsum(dy) when db is not null.
void linear_backward(Device& dev, Stream& s, float* dx, float* dW, float* db, const float* dy,
                     const float* x, const float* W, int64_t rows, int64_t in_features,
                     int64_t out_features, const BlockGemm* gemm);

// Note [LoRA]: y (rows, out of `linear`) += scale B (A x) for every adapted slot of `linear`, each
// into its own rows of y; x (rows, in). Uses a.lora_t and a.lora_u.
void lora_forward(Device& dev, Stream& s, float* y, const float* x, BlockLinear linear,
                  const BlockView& w, const BlockActs& a, const BlockDims& d, int64_t rows);
// Its backward from dy (rows, out of `linear`): dx (rows, in) += , and the adapters' gradients
// in gw += (where not null). Uses g.lora_dy, g.lora_t and g.lora_dt.
void lora_backward(Device& dev, Stream& s, float* dx, const BlockView& gw, const float* dy,
                   const float* x, BlockLinear linear, const BlockView& w, const BlockActs& a,
                   const BlockGradScratch& g, const BlockDims& d, int64_t rows);

}  // namespace strata
