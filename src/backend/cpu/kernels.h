// CPU kernels: synchronous free functions, outputs first, then inputs, then dims.
// strata::cpu::*      fast versions: OpenBLAS sgemm for matmuls, OpenMP elsewhere.
// strata::cpu::ref::* naive single-threaded loops: the specification the tests hold the fast
//                     versions to. Same signatures, same semantics (see backend.h for shapes and
//                     Note [Backward accumulates]).
//
// Note [Deterministic reductions]
// A reduction over rows (layernorm dweight/dbias, bias_backward, embedding dwpe, sum_squares)
// is split into fixed-size chunks whose size does not depend on the thread count; each chunk's
// partial is computed in row order, and partials are combined in chunk order by one thread.
// The result is therefore bit-identical for any OMP_NUM_THREADS. No atomics.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace strata::cpu {

#define STRATA_CPU_KERNELS                                                                    \
  void matmul(float* out, const float* a, const float* b, const float* bias, int64_t M,       \
              int64_t N, int64_t K, bool trans_a, bool trans_b, bool accumulate);             \
  void bias_backward(float* dbias, const float* dout, int64_t M, int64_t N);                  \
  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,              \
                         const float* weight, const float* bias, int64_t N, int64_t C);       \
  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,        \
                          const float* inp, const float* weight, const float* mean,           \
                          const float* rstd, int64_t N, int64_t C);                           \
  void gelu_forward(float* out, const float* inp, int64_t n);                                 \
  void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n);            \
  void attention_forward(float* out, float* att, const float* qkv, int64_t B, int64_t T,      \
                         int64_t C, int64_t NH);                                              \
  void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,   \
                          const float* att, int64_t B, int64_t T, int64_t C, int64_t NH);     \
  void softmax_cross_entropy_forward(float* losses, float* probs, const float* logits,        \
                                     const int32_t* targets, int64_t N, int64_t V);           \
  void softmax_cross_entropy_backward(float* dlogits, const float* probs,                     \
                                      const int32_t* targets, float dloss, int64_t N,         \
                                      int64_t V);                                             \
  void embedding_forward(float* out, const int32_t* tokens, const float* wte,                 \
                         const float* wpe, int64_t B, int64_t T, int64_t C);                  \
  void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, \
                          int64_t B, int64_t T, int64_t C);                                   \
  void add(float* out, const float* a, const float* b, int64_t n);                            \
  void scaled_add(float* y, const float* x, float alpha, int64_t n);                          \
  void convert_f32_to_bf16(bf16_t* out, const float* inp, int64_t n);                         \
  void convert_bf16_to_f32(float* out, const bf16_t* inp, int64_t n);                         \
  void sum_squares(double* out, const float* x, int64_t n);

// Fast kernels (kernels_*.cpp).
STRATA_CPU_KERNELS

namespace ref {
// Naive references (kernels_ref.cpp).
STRATA_CPU_KERNELS
}  // namespace ref

#undef STRATA_CPU_KERNELS

// GELU tanh approximation constants shared by both versions.
inline constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
inline constexpr float kGeluCubic = 0.044715f;
inline constexpr float kLayerNormEps = 1e-5f;

}  // namespace strata::cpu
