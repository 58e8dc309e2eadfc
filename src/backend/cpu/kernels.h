// CPU kernels: synchronous free functions, outputs first, then inputs, then dims.
// strata::cpu::*      fast versions: OpenBLAS sgemm for matmuls, OpenMP elsewhere.
// strata::cpu::ref::* naive single-threaded loops: the specification the tests hold the fast
//                     versions to. Same signatures, same semantics (see backend.h for shapes and
//                     Note [Backward accumulates]).
//
// Note [Deterministic reductions]
// A reduction over rows (layernorm dweight/dbias, rmsnorm dweight, bias_backward, sum_squares)
// is split into fixed-size chunks whose size does not depend on the thread count; each chunk's
// partial is computed in row order, and partials are combined in chunk order by one thread. The
// result is therefore bit-identical for any OMP_NUM_THREADS. No atomics.
//
// embedding_backward, which scatters rows by token, instead gives each task a fixed block of
// columns and walks all tokens in order; every output element is then summed in token order,
// which is just as independent of the thread count.
//
// sgemm is the exception: OpenBLAS splits the output between threads, and elements at the seams
// go through different micro-kernels, so its bits depend on the number of threads it uses
// (measured with 0.3.21). Runs that must agree bit for bit use the same OMP_NUM_THREADS.

// Note [Fast kernels and the sgemm thread pool]
// We link OpenBLAS's OpenMP build (Note [OpenBLAS on OpenMP] in CMakeLists.txt), so sgemm and
// the OpenMP kernels use one thread team. The fast kernels still call cblas_sgemm only from
// outside OpenMP parallel regions (no nested parallelism), and keep the number of switches small
// (Note [Attention in phases] in kernels_attention.cpp).
//
// Kernels run on whichever thread calls them (the CPU device's stream workers): that thread's
// OpenMP settings apply, and it gets its own OpenMP team.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <memory>

#include "core/dropout_mask.h"
#include "core/dtype.h"

namespace strata::cpu {

// GELU tanh approximation constants shared by both versions.
inline constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
inline constexpr float kGeluCubic = 0.044715f;
inline constexpr float kLayerNormEps = 1e-5f;

// ---- fast kernels (kernels_<concern>.cpp) -------------------------------------------------------

// kernels_matmul.cpp
void matmul(float* out,         // (M,N); read too when accumulate
            const float* a,     // (M,K), or (K,M) when trans_a
            const float* b,     // (K,N), or (N,K) when trans_b
            const float* bias,  // (N) or null
            int64_t M, int64_t N, int64_t K, bool trans_a, bool trans_b, bool accumulate);
void bias_backward(float* dbias,       // (N) +=
                   const float* dout,  // (M,N)
                   int64_t M, int64_t N);

// kernels_layernorm.cpp
void layernorm_forward(float* out,           // (N,C)
                       float* mean,          // (N)
                       float* rstd,          // (N)  1/sqrt(var + kLayerNormEps)
                       const float* inp,     // (N,C)
                       const float* weight,  // (C)
                       const float* bias,    // (C)
                       int64_t N, int64_t C);
void layernorm_backward(float* dinp,          // (N,C) +=
                        float* dweight,       // (C) +=
                        float* dbias,         // (C) +=
                        const float* dout,    // (N,C)
                        const float* inp,     // (N,C)
                        const float* weight,  // (C)
                        const float* mean,    // (N)  from layernorm_forward
                        const float* rstd,    // (N)  from layernorm_forward
                        int64_t N, int64_t C);

// kernels_elementwise.cpp
void gelu_forward(float* out,        // (n)
                  const float* inp,  // (n)
                  int64_t n);
void gelu_backward(float* dinp,        // (n) +=
                   const float* inp,   // (n)  the forward's input
                   const float* dout,  // (n)
                   int64_t n);
void add(float* out,      // (n) = a + b; may alias a or b
         const float* a,  // (n)
         const float* b,  // (n)
         int64_t n);
void scaled_add(float* y,        // (n) += alpha * x
                const float* x,  // (n)
                float alpha, int64_t n);
void scaled_copy_2d(float* y,        // (rows, cols at stride ldy) = [y +] alpha * x
                    int64_t ldy,     //
                    const float* x,  // (rows, cols at stride ldx)
                    int64_t ldx, int64_t rows, int64_t cols, float alpha, bool accumulate);
void dropout_apply(float* out,        // (n) = [out +] mask(inp) (core/dropout_mask.h)
                   const float* inp,  // (n)
                   int64_t n, const DropoutMask& m, bool accumulate);
void convert_f32_to_bf16(bf16_t* out,       // (n)  round to nearest even
                         const float* inp,  // (n)
                         int64_t n);
void convert_bf16_to_f32(float* out,         // (n)
                         const bf16_t* inp,  // (n)
                         int64_t n);
void sum_squares(double* out,     // (1)  sum of x[i]^2, in double
                 const float* x,  // (n)
                 int64_t n);

// kernels_attention.cpp
void attention_forward(float* out,        // (B,T,C)   head h in columns h*hs..(h+1)*hs
                       float* att,        // (B,NH,T,T) softmax probabilities, 0 above diagonal
                       const float* qkv,  // (B,T,3C)  q | k | v per token
                       int64_t B, int64_t T, int64_t C, int64_t NH);
void attention_backward(float* dqkv,        // (B,T,3C) +=
                        float* scratch,     // (B,NH,T,T) overwritten
                        const float* dout,  // (B,T,C)
                        const float* qkv,   // (B,T,3C)
                        const float* att,   // (B,NH,T,T) from attention_forward
                        int64_t B, int64_t T, int64_t C, int64_t NH);
// One new query against a key/value cache (KV-cached sampling); Note [Decode attention] in
// kernels_attention.cpp. Query head h reads kv head h / (NH/NKV); every cached position is seen.
void attention_decode(
    float* out,       // (NH*hs)
    float* scratch,   // (NH,T) overwritten: scores, then probabilities
    const float* q,   // (NH*hs)  the newest position's query heads
    const float* kv,  // (T, 2*NKV*hs)  per position NKV key heads | NKV value heads
    int64_t T,        // cached positions, the newest included; >= 1
    int64_t NH, int64_t NKV, int64_t hs);

// kernels_loss.cpp
void softmax_cross_entropy_forward(float* losses,           // (N)  -log probs[i][targets[i]]
                                   float* probs,            // (N,V)
                                   const float* logits,     // (N,V)
                                   const int32_t* targets,  // (N)  in [0, V) or kIgnoreTarget
                                   int64_t N, int64_t V);
void softmax_cross_entropy_backward(float* dlogits,          // (N,V) +=
                                    const float* probs,      // (N,V)
                                    const int32_t* targets,  // (N)  kIgnoreTarget: row unchanged
                                    float dloss,             // d(loss)/d(losses[i]), all i
                                    int64_t N, int64_t V);

// kernels_embedding.cpp
void embedding_forward(float* out,             // (B,T,C)
                       const int32_t* tokens,  // (B,T)  in [0, V)
                       const float* wte,       // (V,C)
                       const float* wpe,       // (maxT,C), maxT >= T; or null: out = wte[tokens]
                       int64_t B, int64_t T, int64_t C);
void embedding_backward(float* dwte,            // (V,C) +=
                        float* dwpe,            // (maxT,C) +=; or null: skipped
                        const float* dout,      // (B,T,C)
                        const int32_t* tokens,  // (B,T)
                        int64_t B, int64_t T, int64_t C);

// kernels_llama.cpp: the ops of a Llama block (backend.h states the formulas). rmsnorm sums
// each row in index order in both versions, so forward and dinp equal the reference bit for bit;
// dweight sums rows in chunks (Note [Deterministic reductions]). rope and repeat_kv are
// bit-identical to the reference; swiglu uses exp_fast where the reference uses std::exp.
void rmsnorm_forward(float* out,           // (N,C)
                     float* rstd,          // (N)  1/sqrt(mean(inp^2) + eps)
                     const float* inp,     // (N,C)
                     const float* weight,  // (C)
                     int64_t N, int64_t C, float eps);
void rmsnorm_backward(float* dinp,          // (N,C) +=
                      float* dweight,       // (C) +=
                      const float* dout,    // (N,C)
                      const float* inp,     // (N,C)
                      const float* weight,  // (C)
                      const float* rstd,    // (N)  from rmsnorm_forward
                      int64_t N, int64_t C);
void rope_forward(float* out,         // (B,T,row); may be inp
                  const float* inp,   // (B,T,row)  heads 0..n_rot_heads-1 of hs floats rotated
                  const float* rope,  // (>=T, hs/2, 2)  cos, sin
                  int64_t B, int64_t T, int64_t row, int64_t n_rot_heads, int64_t hs);
void rope_backward(float* dinp,        // (B,T,row) +=
                   const float* dout,  // (B,T,row)
                   const float* rope,  // (>=T, hs/2, 2)  cos, sin
                   int64_t B, int64_t T, int64_t row, int64_t n_rot_heads, int64_t hs);
void swiglu_forward(float* out,       // (N,F)  silu(gate) * up
                    const float* gu,  // (N,2F)  gate | up per row
                    int64_t N, int64_t F);
void swiglu_backward(float* dgu,         // (N,2F) +=  d gate | d up
                     const float* gu,    // (N,2F)
                     const float* dout,  // (N,F)
                     int64_t N, int64_t F);
void repeat_kv_forward(float* out,        // (B,T,3*NH*hs)  q | k' | v'
                       const float* inp,  // (B,T,(NH+2*NKV)*hs)  q | k | v
                       int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t hs);
void repeat_kv_backward(float* dinp,        // (B,T,(NH+2*NKV)*hs) +=
                        const float* dout,  // (B,T,3*NH*hs)
                        int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t hs);

// ---- references (kernels_ref.cpp): same arguments as above ------------------------------------

namespace ref {
void matmul(float* out, const float* a, const float* b, const float* bias, int64_t M, int64_t N,
            int64_t K, bool trans_a, bool trans_b, bool accumulate);
void bias_backward(float* dbias, const float* dout, int64_t M, int64_t N);
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t N, int64_t C);
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int64_t N, int64_t C);
void gelu_forward(float* out, const float* inp, int64_t n);
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n);
void attention_forward(float* out, float* att, const float* qkv, int64_t B, int64_t T, int64_t C,
                       int64_t NH);
void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                        const float* att, int64_t B, int64_t T, int64_t C, int64_t NH);
void attention_decode(float* out, float* scratch, const float* q, const float* kv, int64_t T,
                      int64_t NH, int64_t NKV, int64_t hs);
void softmax_cross_entropy_forward(float* losses, float* probs, const float* logits,
                                   const int32_t* targets, int64_t N, int64_t V);
void softmax_cross_entropy_backward(float* dlogits, const float* probs, const int32_t* targets,
                                    float dloss, int64_t N, int64_t V);
void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                       int64_t B, int64_t T, int64_t C);
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                        int64_t B, int64_t T, int64_t C);
void add(float* out, const float* a, const float* b, int64_t n);
void scaled_add(float* y, const float* x, float alpha, int64_t n);
void scaled_copy_2d(float* y, int64_t ldy, const float* x, int64_t ldx, int64_t rows, int64_t cols,
                    float alpha, bool accumulate);
void dropout_apply(float* out, const float* inp, int64_t n, const DropoutMask& m, bool accumulate);
void convert_f32_to_bf16(bf16_t* out, const float* inp, int64_t n);
void convert_bf16_to_f32(float* out, const bf16_t* inp, int64_t n);
void sum_squares(double* out, const float* x, int64_t n);
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N,
                     int64_t C, float eps);
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int64_t N, int64_t C);
void rope_forward(float* out, const float* inp, const float* rope, int64_t B, int64_t T,
                  int64_t row, int64_t n_rot_heads, int64_t hs);
void rope_backward(float* dinp, const float* dout, const float* rope, int64_t B, int64_t T,
                   int64_t row, int64_t n_rot_heads, int64_t hs);
void swiglu_forward(float* out, const float* gu, int64_t N, int64_t F);
void swiglu_backward(float* dgu, const float* gu, const float* dout, int64_t N, int64_t F);
void repeat_kv_forward(float* out, const float* inp, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                       int64_t hs);
void repeat_kv_backward(float* dinp, const float* dout, int64_t B, int64_t T, int64_t NH,
                        int64_t NKV, int64_t hs);
}  // namespace ref

// ---- helpers shared by the fast kernels -------------------------------------------------------

// Below this many elements of work a fast kernel runs on the calling thread only (OpenMP `if`
// clause): waking the team costs microseconds, and far more when the cores are oversubscribed.
// Results do not depend on it (Note [Deterministic reductions]).
inline constexpr int64_t kMinParallelWork = int64_t{1} << 15;

// The norms' weight-gradient reduction (layernorm_backward, rmsnorm_backward): rows per chunk,
// each chunk writing its own partial. Fixed, so the summation order is too; small enough that
// (B*T)/kNormRowChunk chunks keep both threads busy, large enough that the partials (C or 2*C
// floats per chunk) stay a small fraction of the traffic.
inline constexpr int64_t kNormRowChunk = 32;
// Columns per task when those partials are combined, in chunk order.
inline constexpr int64_t kNormColumnBlock = 256;

// That reduction, for rows of C floats: chunk(i0, i1, partial) runs once per chunk of
// kNormRowChunk rows [i0, i1), in parallel, and adds the chunk's rows into its own partial
// (width floats, zeroed first). The partials are then summed in chunk order, columns split
// between threads; the first `width` floats of the returned buffer hold the total.
template <typename ChunkFn>
std::unique_ptr<float[]> sum_row_chunks(int64_t N, int64_t C, int64_t width, ChunkFn chunk) {
  const int64_t chunks = (N + kNormRowChunk - 1) / kNormRowChunk;
  std::unique_ptr<float[]> partials(new float[chunks * width]);  // (chunks, width)
#pragma omp parallel for schedule(static) if (N * C >= kMinParallelWork)
  for (int64_t k = 0; k < chunks; k++) {
    float* p = partials.get() + k * width;  // (width)
    std::fill(p, p + width, 0.0f);
    chunk(k * kNormRowChunk, std::min(N, (k + 1) * kNormRowChunk), p);
  }
  float* total = partials.get();  // (width): chunk 0's partial, then the sum
#pragma omp parallel for schedule(static) if (chunks * C >= kMinParallelWork)
  for (int64_t c0 = 0; c0 < width; c0 += kNormColumnBlock) {
    const int64_t c1 = std::min(width, c0 + kNormColumnBlock);
    for (int64_t k = 1; k < chunks; k++) {
      const float* p = partials.get() + k * width;
      for (int64_t c = c0; c < c1; c++) total[c] += p[c];
    }
  }
  return partials;
}

// exp(x) within ~2 ulp, written with plain float arithmetic so that GCC vectorizes loops that
// call it (glibc's expf has no vector variant without -ffast-math, and the softmaxes and GELU
// would otherwise spend most of their time in it). Range reduction x = n*ln2 + r, |r| <= ln2/2,
// then a degree-7 Taylor polynomial for e^r (truncation < 0.1 ulp) scaled by 2^n built from
// exponent bits. Saturates instead of overflowing: returns 0 for x < -87 (skipping the denormal
// range) and about 1.6e38 for x > 88, so callers never see inf.
inline float exp_fast(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693145751953125f;  // ln2 split so that n*kLn2Hi is exact
  constexpr float kLn2Lo = 1.42860682030941723e-6f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  // Written so that GCC's if-conversion succeeds under the default -ftrapping-math, or the
  // caller's loop is not vectorized: selects and min/max only, and no plain multiply right after
  // the clamp (GCC duplicates it into the clamp's branches; the fma keeps it whole).
  const float xc = std::min(std::max(x, -87.0f), 88.0f);
  const float t = std::fma(xc, kLog2e, kRound);  // kRound + round(xc * log2e)
  const float n = t - kRound;
  float r = std::fma(n, -kLn2Hi, xc);
  r = std::fma(n, -kLn2Lo, r);
  float p = 1.0f / 5040.0f;
  p = std::fma(p, r, 1.0f / 720.0f);
  p = std::fma(p, r, 1.0f / 120.0f);
  p = std::fma(p, r, 1.0f / 24.0f);
  p = std::fma(p, r, 1.0f / 6.0f);
  p = std::fma(p, r, 0.5f);
  p = std::fma(p, r, 1.0f);
  p = std::fma(p, r, 1.0f);
  // 2^n from exponent bits (n sits in the low mantissa bits of t); a zero scale flushes the
  // result to 0 below the clamp.
  const int32_t n_int = std::bit_cast<int32_t>(t) - std::bit_cast<int32_t>(kRound);
  const int32_t scale_bits = x < -87.0f ? 0 : (n_int + 127) << 23;
  return p * std::bit_cast<float>(scale_bits);
}

}  // namespace strata::cpu
