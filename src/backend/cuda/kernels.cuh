// CUDA op launchers: one per Device op except matmul, matmul_bf16, copy, fill_zero and adamw
// (those live in cuda_device.* / adamw.cu). Same arguments, in the same order, as the Device op
// after its Stream& (see backend.h for shapes and Note [Backward accumulates]; the CPU kernels in
// cpu/kernels.h are the specification, cpu/kernels_ref.cpp the naive reference).
//
// Every launcher only *enqueues* work on `stream`: no device synchronization, no host
// allocation, no host reads of device memory. The one device allocation is sum_squares' 2 KiB of
// partials, taken from and returned to the stream-ordered pool (cudaMallocAsync/cudaFreeAsync on
// `stream`). The attention launchers set cudaFuncAttributeMaxDynamicSharedMemorySize (a host-side
// attribute, no synchronization): up to 113.5 KiB of shared memory per block for hs > 96 and
// 89.5 KiB for hs <= 96 (A100, H100, H200: any hs <= 128; sm_86/sm_89 with 99 KiB: hs <= 96;
// a GPU that refuses aborts with the size it asked for). Launch errors abort with file:line
// through STRATA_CUDA_LAUNCH_CHECK. Sizes are int64_t at the API; kernels index with int64_t
// wherever a product of dimensions can pass 2^31.
//
// Note [Deterministic CUDA reductions]
// No kernel here uses atomics, and no result depends on the GPU's SM count or on timing: every
// reduction has a fixed shape (fixed block sizes, fixed grid for sum_squares, fixed-order tree
// within a block, partials combined in index order). The same op on the same inputs gives the
// same bits on every run and on every GPU of one architecture, whatever its SM count (sm_80 and
// sm_90 run different machine code, whose fused multiply-adds may differ). Where the summation
// order differs from the CPU's (layernorm, bias and sum_squares reductions, the softmaxes,
// attention and attention_decode, GELU's tanhf, rmsnorm, SwiGLU's expf), CPU and CUDA agree to
// rounding; add, scaled_add, the conversions, embedding forward/backward, the cross-entropy
// backward, rope and repeat_kv reproduce cpu::ref bit for bit.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dropout_mask.h"
#include "core/dtype.h"

// In namespace strata itself (not strata::cuda): a nested `cuda` namespace would shadow CCCL's
// ::cuda (cuda::std) for code inside strata.
namespace strata {

// ---- reductions over rows (kernels_reduce.cu) -------------------------------------------------
void cuda_bias_backward(cudaStream_t stream,
                        float* dbias,       // (N) +=
                        const float* dout,  // (M,N)
                        int64_t M, int64_t N);
void cuda_sum_squares(cudaStream_t stream,
                      double* out,     // (1) device memory: sum of x[i]^2, in double
                      const float* x,  // (n)
                      int64_t n);

// ---- kernels_layernorm.cu -----------------------------------------------------------------------
void cuda_layernorm_forward(cudaStream_t stream,
                            float* out,           // (N,C)
                            float* mean,          // (N)
                            float* rstd,          // (N)  1/sqrt(var + 1e-5), biased variance
                            const float* inp,     // (N,C)
                            const float* weight,  // (C)
                            const float* bias,    // (C)
                            int64_t N, int64_t C);
void cuda_layernorm_backward(cudaStream_t stream,
                             float* dinp,          // (N,C) +=
                             float* dweight,       // (C) +=
                             float* dbias,         // (C) +=
                             const float* dout,    // (N,C)
                             const float* inp,     // (N,C)
                             const float* weight,  // (C)
                             const float* mean,    // (N)  from layernorm_forward
                             const float* rstd,    // (N)  from layernorm_forward
                             int64_t N, int64_t C);

// ---- kernels_elementwise.cu ---------------------------------------------------------------------
void cuda_gelu_forward(cudaStream_t stream,
                       float* out,        // (n)
                       const float* inp,  // (n)
                       int64_t n);
void cuda_gelu_backward(cudaStream_t stream,
                        float* dinp,        // (n) +=
                        const float* inp,   // (n)  the forward's input
                        const float* dout,  // (n)
                        int64_t n);
void cuda_add(cudaStream_t stream,
              float* out,      // (n) = a + b; may alias a or b
              const float* a,  // (n)
              const float* b,  // (n)
              int64_t n);
void cuda_scaled_add(cudaStream_t stream,
                     float* y,        // (n) += alpha * x
                     const float* x,  // (n)
                     float alpha, int64_t n);
void cuda_scaled_copy_2d(cudaStream_t stream,
                         float* y,        // (rows, cols at stride ldy) = [y +] alpha * x
                         int64_t ldy,     //
                         const float* x,  // (rows, cols at stride ldx)
                         int64_t ldx, int64_t rows, int64_t cols, float alpha, bool accumulate);
void cuda_dropout_apply(cudaStream_t stream,
                        float* out,        // (n) = [out +] mask(inp) (core/dropout_mask.h)
                        const float* inp,  // (n)
                        int64_t n, const DropoutMask& m, bool accumulate);
void cuda_convert_f32_to_bf16(cudaStream_t stream,
                              bf16_t* out,       // (n)  round to nearest even, as core/dtype.h
                              const float* inp,  // (n)
                              int64_t n);
void cuda_convert_bf16_to_f32(cudaStream_t stream,
                              float* out,         // (n)
                              const bf16_t* inp,  // (n)
                              int64_t n);

// ---- kernels_attention.cu -----------------------------------------------------------------------
// Fused causal attention (flash-attention style, never materializes T x T). att holds the
// per-row log-sum-exp of the scaled scores; scratch holds D_i = sum_j P_ij dP_ij.
// (Their sizes: DeviceTraits in backend/backend.h.)
// Head sizes the fused kernels run (hs = C/NH): 1..128; internally padded to 16, 32, 64, 80,
// 96 or 128 columns.
bool cuda_attention_supports_head_size(int64_t hs);
void cuda_attention_forward(cudaStream_t stream,
                            float* out,        // (B,T,C)
                            float* att,        // (B,NH,T) log-sum-exp of each query row
                            const float* qkv,  // (B,T,3C)  q | k | v per token
                            int64_t B, int64_t T, int64_t C, int64_t NH);
void cuda_attention_backward(cudaStream_t stream,
                             float* dqkv,        // (B,T,3C) +=
                             float* scratch,     // (B,NH,T) overwritten
                             const float* dout,  // (B,T,C)
                             const float* qkv,   // (B,T,3C)
                             const float* att,   // (B,NH,T) from cuda_attention_forward
                             int64_t B, int64_t T, int64_t C, int64_t NH);

// ---- kernels_attention_decode.cu ----------------------------------------------------------------
// One new query against a key/value cache (Device::attention_decode; Note [Decode attention on
// CUDA] there). Any hs >= 1; T >= 1, T <= 65535 * 128.
void cuda_attention_decode(cudaStream_t stream,
                           float* out,       // (NH*hs)
                           float* scratch,   // (NH,T) overwritten: scores, then probabilities
                           const float* q,   // (NH*hs)
                           const float* kv,  // (T, 2*NKV*hs)  NKV key heads | NKV value heads
                           int64_t T, int64_t NH, int64_t NKV, int64_t hs);

// ---- kernels_loss.cu ----------------------------------------------------------------------------
void cuda_softmax_cross_entropy_forward(cudaStream_t stream,
                                        float* losses,           // (N)  -log probs[i][targets[i]]
                                        float* probs,            // (N,V)
                                        const float* logits,     // (N,V)
                                        const int32_t* targets,  // (N)  in [0, V)
                                        int64_t N, int64_t V);
void cuda_softmax_cross_entropy_backward(cudaStream_t stream,
                                         float* dlogits,          // (N,V) +=
                                         const float* probs,      // (N,V)
                                         const int32_t* targets,  // (N)
                                         float dloss,             // d(loss)/d(losses[i]), all i
                                         int64_t N, int64_t V);

// ---- kernels_embedding.cu -----------------------------------------------------------------------
void cuda_embedding_forward(cudaStream_t stream,
                            float* out,             // (B,T,C)
                            const int32_t* tokens,  // (B,T)  in [0, V)
                            const float* wte,       // (V,C)
                            const float* wpe,       // (maxT,C), maxT >= T; or null
                            int64_t B, int64_t T, int64_t C);
void cuda_embedding_backward(cudaStream_t stream,
                             float* dwte,            // (V,C) +=
                             float* dwpe,            // (maxT,C) +=; or null: skipped
                             const float* dout,      // (B,T,C)
                             const int32_t* tokens,  // (B,T)
                             int64_t B, int64_t T, int64_t C);

// ---- kernels_llama.cu ---------------------------------------------------------------------------
void cuda_rmsnorm_forward(cudaStream_t stream,
                          float* out,           // (N,C)
                          float* rstd,          // (N)  1/sqrt(mean(inp^2) + eps)
                          const float* inp,     // (N,C)
                          const float* weight,  // (C)
                          int64_t N, int64_t C, float eps);
void cuda_rmsnorm_backward(cudaStream_t stream,
                           float* dinp,          // (N,C) +=
                           float* dweight,       // (C) +=
                           const float* dout,    // (N,C)
                           const float* inp,     // (N,C)
                           const float* weight,  // (C)
                           const float* rstd,    // (N)  from rmsnorm_forward
                           int64_t N, int64_t C);
void cuda_rope_forward(cudaStream_t stream,
                       float* out,         // (B,T,row); may be inp
                       const float* inp,   // (B,T,row)
                       const float* rope,  // (>=T, hs/2, 2)  cos, sin
                       int64_t B, int64_t T, int64_t row, int64_t n_rot_heads, int64_t hs);
void cuda_rope_backward(cudaStream_t stream,
                        float* dinp,        // (B,T,row) +=
                        const float* dout,  // (B,T,row)
                        const float* rope,  // (>=T, hs/2, 2)  cos, sin
                        int64_t B, int64_t T, int64_t row, int64_t n_rot_heads, int64_t hs);
void cuda_swiglu_forward(cudaStream_t stream,
                         float* out,       // (N,F)
                         const float* gu,  // (N,2F)  gate | up
                         int64_t N, int64_t F);
void cuda_swiglu_backward(cudaStream_t stream,
                          float* dgu,         // (N,2F) +=
                          const float* gu,    // (N,2F)
                          const float* dout,  // (N,F)
                          int64_t N, int64_t F);
void cuda_repeat_kv_forward(cudaStream_t stream,
                            float* out,        // (B,T,3*NH*hs)  q | k' | v'
                            const float* inp,  // (B,T,(NH+2*NKV)*hs)  q | k | v
                            int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t hs);
void cuda_repeat_kv_backward(cudaStream_t stream,
                             float* dinp,        // (B,T,(NH+2*NKV)*hs) +=
                             const float* dout,  // (B,T,3*NH*hs)
                             int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t hs);

}  // namespace strata
