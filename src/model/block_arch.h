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
// Its backward: dx += dy @ W; dW += dy^T @ x; db += colsum(dy) when db is not null.
void linear_backward(Device& dev, Stream& s, float* dx, float* dW, float* db, const float* dy,
                     const float* x, const float* W, int64_t rows, int64_t in_features,
                     int64_t out_features, const BlockGemm* gemm);

}  // namespace strata
