// Attention for sampling: one new query against a key/value cache, on the GPU
// (Device::attention_decode). The fused training attention is kernels_attention.cu.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "backend/cuda/kernels.cuh"
#include "backend/cuda/kernels_common.cuh"
#include "core/check.h"

namespace strata {

namespace {

// Note [Decode attention on CUDA]
// Three launches on one stream, per query head h (grid.x) of the newest position, in the CPU's
// order (Note [Decode attention] in cpu/kernels_attention.cpp): the scores s_t = (q_h . k_t) *
// scale, an fmaf chain over i = 0 .. hs-1 from +0, then __fmul_rn, into scratch (NH,T); the
// softmax in place, e_t = exp_fast(s_t - max), p_t = e_t * (1 / sum); out_d = an fmaf chain over
// t = 0 .. T-1 from +0 of p_t * v_t[d]. Explicit fmaf and _rn intrinsics leave nvcc nothing to
// contract and exp_fast below is cpu::exp_fast step for step, so the scores and the exponentials
// are the CPU's bits. Only the row sum's order differs (the CPU's is GCC's vectorization of an
// OpenMP simd reduction), so p and out agree with the CPU to about an ulp. No atomics, fixed
// shapes: deterministic (Note [Deterministic CUDA reductions]). Any hs: the staging is chunked.
// Memory-bound and small; it makes no attempt at the fused forward's tiling.

constexpr int kDecodeThreads = 128;  // keys per scores block, columns per weighted-sum block
constexpr int kDecodeChunk = 32;     // key columns staged per step
constexpr int kDecodeSoftmaxThreads = 256;

// cpu::exp_fast (cpu/kernels.h), operation for operation: the same constants, clamps written as
// std::min / std::max evaluate them, fmaf for std::fma, and _rn intrinsics for the plain
// subtraction and multiply so that nvcc fuses nothing. Same input, same bits.
__device__ __forceinline__ float exp_fast(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693145751953125f;
  constexpr float kLn2Lo = 1.42860682030941723e-6f;
  constexpr float kRound = 12582912.0f;
  constexpr float kC7 = 1.0f / 5040.0f, kC6 = 1.0f / 720.0f, kC5 = 1.0f / 120.0f;
  constexpr float kC4 = 1.0f / 24.0f, kC3 = 1.0f / 6.0f;
  const float lo = x < -87.0f ? -87.0f : x;  // std::max(x, -87.0f)
  const float xc = 88.0f < lo ? 88.0f : lo;  // std::min(lo, 88.0f)
  const float t = fmaf(xc, kLog2e, kRound);
  const float n = __fsub_rn(t, kRound);
  float r = fmaf(n, -kLn2Hi, xc);
  r = fmaf(n, -kLn2Lo, r);
  float p = kC7;
  p = fmaf(p, r, kC6);
  p = fmaf(p, r, kC5);
  p = fmaf(p, r, kC4);
  p = fmaf(p, r, kC3);
  p = fmaf(p, r, 0.5f);
  p = fmaf(p, r, 1.0f);
  p = fmaf(p, r, 1.0f);
  const int32_t n_int = __float_as_int(t) - __float_as_int(kRound);
  const int32_t scale_bits = x < -87.0f ? 0 : (n_int + 127) << 23;
  return __fmul_rn(p, __int_as_float(scale_bits));
}

// grid.y tiles of kDecodeThreads keys, one key per thread; q and the key tile are staged through
// shared memory kDecodeChunk columns at a time.
__global__ void __launch_bounds__(kDecodeThreads)
    attention_decode_scores_kernel(float* __restrict__ scratch,   // (NH,T)
                                   const float* __restrict__ q,   // (NH*hs)
                                   const float* __restrict__ kv,  // (T, 2*NKV*hs)
                                   int64_t T, int64_t NKV, int64_t rep, int hs, float scale) {
  constexpr int kLd = kDecodeChunk + 1;        // odd row length: a warp's 32 rows in 32 banks
  __shared__ float k_s[kDecodeThreads * kLd];  // (kDecodeThreads, kLd)  keys t0.., columns i0..
  __shared__ float q_s[kDecodeChunk];          // (kDecodeChunk)         q_h, columns i0..
  const int64_t h = blockIdx.x;
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kDecodeThreads;
  const int64_t ld = 2 * NKV * hs;
  const float* k_g = kv + (h / rep) * hs;  // key head of position t at k_g + t*ld
  const float* q_g = q + h * hs;
  float acc = 0.0f;
  for (int i0 = 0; i0 < hs; i0 += kDecodeChunk) {
    const int width = hs - i0 < kDecodeChunk ? hs - i0 : kDecodeChunk;
    __syncthreads();  // the previous chunk is no longer read
    for (int e = threadIdx.x; e < kDecodeThreads * kDecodeChunk; e += kDecodeThreads) {
      const int r = e / kDecodeChunk, c = e % kDecodeChunk;
      const int64_t t = t0 + r;
      k_s[r * kLd + c] = t < T && c < width ? k_g[t * ld + i0 + c] : 0.0f;
    }
    if (threadIdx.x < kDecodeChunk) {
      q_s[threadIdx.x] = static_cast<int>(threadIdx.x) < width ? q_g[i0 + threadIdx.x] : 0.0f;
    }
    __syncthreads();
    const float* k_row = k_s + threadIdx.x * kLd;
    for (int c = 0; c < width; c++) acc = fmaf(q_s[c], k_row[c], acc);
  }
  const int64_t t = t0 + threadIdx.x;
  if (t < T) scratch[h * T + t] = __fmul_rn(acc, scale);
}

// One block per head. The max is exact; each thread sums its keys t = tid, tid + 256, ... in
// order, then block_sum adds those partial sums in its fixed tree.
__global__ void __launch_bounds__(kDecodeSoftmaxThreads)
    attention_decode_softmax_kernel(float* __restrict__ scratch,  // (NH,T) scores -> probabilities
                                    int64_t T) {
  __shared__ float shared[32];
  float* row = scratch + static_cast<int64_t>(blockIdx.x) * T;
  float max = -INFINITY;
  for (int64_t t = threadIdx.x; t < T; t += kDecodeSoftmaxThreads)
    max = row[t] > max ? row[t] : max;
  max = kernels_detail::block_max<kDecodeSoftmaxThreads>(max, shared);
  float sum = 0.0f;
  for (int64_t t = threadIdx.x; t < T; t += kDecodeSoftmaxThreads) {
    const float e = exp_fast(__fsub_rn(row[t], max));
    row[t] = e;
    sum = __fadd_rn(sum, e);
  }
  sum = kernels_detail::block_sum<kDecodeSoftmaxThreads>(sum, shared);
  const float inv = __fdiv_rn(1.0f, sum);
  for (int64_t t = threadIdx.x; t < T; t += kDecodeSoftmaxThreads) row[t] = __fmul_rn(row[t], inv);
}

// grid.y blocks of kDecodeThreads output columns, one column per thread.
__global__ void __launch_bounds__(kDecodeThreads)
    attention_decode_weighted_sum_kernel(float* __restrict__ out,            // (NH*hs)
                                         const float* __restrict__ scratch,  // (NH,T) probabilities
                                         const float* __restrict__ kv,       // (T, 2*NKV*hs)
                                         int64_t T, int64_t NKV, int64_t rep, int hs) {
  __shared__ float p_s[kDecodeThreads];  // probabilities t0 .. t0+kDecodeThreads
  const int64_t h = blockIdx.x;
  const int d = static_cast<int>(blockIdx.y) * kDecodeThreads + static_cast<int>(threadIdx.x);
  const int64_t ld = 2 * NKV * hs;
  const float* v_g = kv + (NKV + h / rep) * hs;  // value head of position t at v_g + t*ld
  const float* p_g = scratch + h * T;
  float acc = 0.0f;
  for (int64_t t0 = 0; t0 < T; t0 += kDecodeThreads) {
    const int n = T - t0 < kDecodeThreads ? static_cast<int>(T - t0) : kDecodeThreads;
    __syncthreads();  // the previous tile of p_s is no longer read
    if (static_cast<int>(threadIdx.x) < n) p_s[threadIdx.x] = p_g[t0 + threadIdx.x];
    __syncthreads();
    if (d < hs) {
      for (int u = 0; u < n; u++) acc = fmaf(p_s[u], v_g[(t0 + u) * ld + d], acc);
    }
  }
  if (d < hs) out[h * hs + d] = acc;
}

}  // namespace

void cuda_attention_decode(cudaStream_t stream, float* out, float* scratch, const float* q,
                           const float* kv, int64_t T, int64_t NH, int64_t NKV, int64_t hs) {
  STRATA_CHECK_MSG(T >= 1 && NKV > 0 && NH % NKV == 0 && hs > 0,
                   "attention_decode: needs T >= 1, hs > 0, NKV > 0 and NH % NKV == 0");
  if (NH == 0) return;
  const int64_t key_blocks = (T + kDecodeThreads - 1) / kDecodeThreads;
  const int64_t column_blocks = (hs + kDecodeThreads - 1) / kDecodeThreads;
  STRATA_CHECK_MSG(NH < (int64_t{1} << 31) && key_blocks <= 65535 && column_blocks <= 65535 &&
                       2 * NKV * hs <= INT32_MAX,
                   "attention_decode: NH, T or hs too large for the grid");
  const int hs32 = static_cast<int>(hs);
  const int64_t rep = NH / NKV;
  const float scale = 1.0f / sqrtf(static_cast<float>(hs));  // as the CPU
  const unsigned heads = static_cast<unsigned>(NH);
  attention_decode_scores_kernel<<<dim3(heads, static_cast<unsigned>(key_blocks)), kDecodeThreads,
                                   0, stream>>>(scratch, q, kv, T, NKV, rep, hs32, scale);
  STRATA_CUDA_LAUNCH_CHECK();
  attention_decode_softmax_kernel<<<heads, kDecodeSoftmaxThreads, 0, stream>>>(scratch, T);
  STRATA_CUDA_LAUNCH_CHECK();
  attention_decode_weighted_sum_kernel<<<dim3(heads, static_cast<unsigned>(column_blocks)),
                                         kDecodeThreads, 0, stream>>>(out, scratch, kv, T, NKV, rep,
                                                                      hs32);
  STRATA_CUDA_LAUNCH_CHECK();
}

}  // namespace strata
