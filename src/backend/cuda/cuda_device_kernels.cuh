// Launchers for the kernels the CUDA device itself needs, besides the op kernels of kernels.cuh:
// the GEMM bias fallback and AdamW. Same conventions as kernels.cuh: enqueue on `stream` only,
// outputs first, then inputs, then sizes (int64_t).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/adamw_hyper.h"
#include "core/dtype.h"

namespace strata {

// gemm_bias.cu: for GEMMs whose bias cuBLASLt's epilogue cannot add.
void cuda_add_row_bias(cudaStream_t stream,
                       float* out,         // (M,N) += bias broadcast over rows
                       const float* bias,  // (N)
                       int64_t M, int64_t N);

// adamw.cu: Note [AdamW operation order] (backend/cpu/kernels_adamw.h), bit for bit; c from
// detail::adamw_constants.
void cuda_adamw_step(cudaStream_t stream,
                     float* param,        // (n) updated in place
                     float* m,            // (n) updated in place
                     float* v,            // (n) updated in place
                     bf16_t* param_bf16,  // (n) f32_to_bf16(updated param), or null
                     const float* grad,   // (n)
                     int64_t n, const detail::AdamWConstants& c);

}  // namespace strata
