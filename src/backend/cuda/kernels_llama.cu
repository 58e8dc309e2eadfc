// The ops of a Llama block: RMSNorm, rotary position embedding (RoPE), SwiGLU, and the key/value
// head repetition of grouped-query attention (formulas in backend.h; cpu/kernels_llama.cpp and
// cpu/kernels_ref.cpp are the specification).
//
// RMSNorm gives one warp to each row (as layernorm) and sums dweight over rows with the
// column-tile reduction of Note [Column-tile reduction] (kernels_common.cuh): deterministic, no
// atomics, but its sums go in another order than the CPU's index order, so CPU and CUDA agree to
// rounding. 1 / sqrtf (IEEE, not rsqrtf) as the CPU. SwiGLU uses CUDA's expf (within 2 ulp) and
// so agrees to rounding too. RoPE and repeat_kv reproduce the CPU bit for bit: every product and
// sum is an explicit _rn intrinsic (nvcc would otherwise fuse them into fmas), and repeat_kv's
// backward adds the repeats from 0 in repeat order, as the CPU.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/kernels.cuh"
#include "backend/cuda/kernels_common.cuh"
#include "core/check.h"

namespace strata {

namespace {

using kernels_detail::column_tile_sum;
using kernels_detail::elementwise_blocks;
using kernels_detail::grid_start;
using kernels_detail::grid_stride;
using kernels_detail::group_sum;
using kernels_detail::kElementwiseThreads;
using kernels_detail::kLanes;
using kernels_detail::kRowThreads;
using kernels_detail::kTileCols;
using kernels_detail::row_blocks;
using kernels_detail::warp_row;

// ---- RMSNorm ------------------------------------------------------------------------------------

// One warp per row: lane l sums the squares of columns l, l + 32, ... (each square rounded, as
// the CPU), the lanes' sums are combined by a butterfly, so every lane holds the same rstd.
__global__ void rmsnorm_forward_kernel(float* __restrict__ out,           // (N,C)
                                       float* __restrict__ rstd,          // (N)
                                       const float* __restrict__ inp,     // (N,C)
                                       const float* __restrict__ weight,  // (C)
                                       int64_t N, int64_t C, float eps) {
  const int lane = threadIdx.x % 32;
  const int64_t row = warp_row();
  if (row >= N) return;  // whole warps leave together: the shuffles below stay full-warp
  const float* x = inp + row * C;
  float* y = out + row * C;
  float sum = 0.0f;
  for (int64_t c = lane; c < C; c += 32) sum = __fadd_rn(sum, __fmul_rn(x[c], x[c]));
  const float ms = group_sum(sum) / static_cast<float>(C);
  // 1/sqrt rounded twice (IEEE sqrtf, then division), as the CPU; rsqrtf is approximate.
  const float s = 1.0f / sqrtf(ms + eps);
  for (int64_t c = lane; c < C; c += 32) y[c] = x[c] * s * weight[c];
  if (lane == 0) rstd[row] = s;
}

// dinp, one warp per row. With norm = x * rstd and dnorm = dout * weight:
//   dx = rstd * (dnorm - norm * mean(dnorm * norm))
__global__ void rmsnorm_backward_dinp_kernel(float* __restrict__ dinp,          // (N,C) +=
                                             const float* __restrict__ dout,    // (N,C)
                                             const float* __restrict__ inp,     // (N,C)
                                             const float* __restrict__ weight,  // (C)
                                             const float* __restrict__ rstd,    // (N)
                                             int64_t N, int64_t C) {
  const int lane = threadIdx.x % 32;
  const int64_t row = warp_row();
  if (row >= N) return;
  const float* x = inp + row * C;
  const float* dy = dout + row * C;
  float* dx = dinp + row * C;
  const float s = rstd[row];
  float dot = 0.0f;
  for (int64_t c = lane; c < C; c += 32) dot += (weight[c] * dy[c]) * (x[c] * s);
  const float dot_mean = group_sum(dot) / static_cast<float>(C);
  for (int64_t c = lane; c < C; c += 32) {
    const float norm = x[c] * s;
    const float dnorm = weight[c] * dy[c];
    dx[c] += s * (dnorm - norm * dot_mean);
  }
}

// dweight (C) += sum over rows of (inp * rstd) * dout: a block owns kTileCols columns and walks
// every row (Note [Column-tile reduction]), partials added in a fixed tree.
__global__ void rmsnorm_backward_dweight_kernel(float* __restrict__ dweight,     // (C) +=
                                                const float* __restrict__ dout,  // (N,C)
                                                const float* __restrict__ inp,   // (N,C)
                                                const float* __restrict__ rstd,  // (N)
                                                int64_t N, int64_t C) {
  __shared__ float partial[kLanes][kTileCols];  // (lanes, columns)
  const int x = threadIdx.x, y = threadIdx.y;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kTileCols + x;
  float sum = 0.0f;
  if (col < C) {
    for (int64_t row = y; row < N; row += kLanes)
      sum += (inp[row * C + col] * rstd[row]) * dout[row * C + col];
  }
  sum = column_tile_sum(partial, sum);
  if (y == 0 && col < C) dweight[col] += sum;
}

// ---- RoPE ---------------------------------------------------------------------------------------
// Work items per token: its n_rot_heads * hs/2 rotated pairs, then its row - n_rot_heads * hs
// unrotated floats. A thread owns a whole pair (reads both, then writes both), so out may be
// inp; the tail is a plain copy (or add).

// The grid-stride loop over those items of BT tokens: pair(y1, y2, x1, x2, c, s) for a rotated
// pair, (x1, x2) = (src[h*hs + i], src[h*hs + i + hs/2]) of the token's row, (y1, y2) the same
// floats of dst, (c, s) = rope[t, i]; tail(y, x) for an unrotated float.
template <typename Pair, typename Tail>
__device__ __forceinline__ void rope_items(float* dst, const float* src, const float* rope,
                                           int64_t BT, int64_t T, int64_t row, int64_t n_rot_heads,
                                           int64_t hs, Pair pair, Tail tail) {
  const int64_t half = hs / 2;
  const int64_t pairs = n_rot_heads * half;
  const int64_t per_token = row - pairs;
  const int64_t n = BT * per_token;
  for (int64_t idx = grid_start(); idx < n; idx += grid_stride()) {
    const int64_t bt = idx / per_token, k = idx % per_token;
    const float* x = src + bt * row;
    float* y = dst + bt * row;
    if (k < pairs) {
      const int64_t h = k / half, i = k % half;
      const float* r = rope + ((bt % T) * half + i) * 2;
      pair(y[h * hs + i], y[h * hs + i + half], x[h * hs + i], x[h * hs + i + half], r[0], r[1]);
    } else {
      const int64_t j = n_rot_heads * hs + (k - pairs);
      tail(y[j], x[j]);
    }
  }
}

__global__ void rope_forward_kernel(float* out,         // (B,T,row); may be inp
                                    const float* inp,   // (B,T,row)
                                    const float* rope,  // (>=T, hs/2, 2)
                                    int64_t BT, int64_t T, int64_t row, int64_t n_rot_heads,
                                    int64_t hs) {
  rope_items(
      out, inp, rope, BT, T, row, n_rot_heads, hs,
      [](float& y1, float& y2, float x1, float x2, float c, float s) {
        y1 = __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s));
        y2 = __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s));
      },
      [](float& y, float x) { y = x; });
}

__global__ void rope_backward_kernel(float* __restrict__ dinp,        // (B,T,row) +=
                                     const float* __restrict__ dout,  // (B,T,row)
                                     const float* __restrict__ rope,  // (>=T, hs/2, 2)
                                     int64_t BT, int64_t T, int64_t row, int64_t n_rot_heads,
                                     int64_t hs) {
  rope_items(
      dinp, dout, rope, BT, T, row, n_rot_heads, hs,
      [](float& dx1, float& dx2, float d1, float d2, float c, float s) {
        dx1 = __fadd_rn(dx1, __fadd_rn(__fmul_rn(d1, c), __fmul_rn(d2, s)));
        dx2 = __fadd_rn(dx2, __fsub_rn(__fmul_rn(d2, c), __fmul_rn(d1, s)));
      },
      [](float& dx, float dy) { dx += dy; });
}

// ---- SwiGLU -------------------------------------------------------------------------------------
// silu(g) = g / (1 + expf(-g)); silu'(g) = sig * (1 + g * (1 - sig)), sig = 1 / (1 + expf(-g)).

__global__ void swiglu_forward_kernel(float* __restrict__ out,       // (N,F)
                                      const float* __restrict__ gu,  // (N,2F)
                                      int64_t N, int64_t F) {
  for (int64_t idx = grid_start(); idx < N * F; idx += grid_stride()) {
    const int64_t i = idx / F, j = idx % F;
    const float g = gu[i * 2 * F + j];
    const float u = gu[i * 2 * F + F + j];
    out[idx] = g / (1.0f + expf(-g)) * u;
  }
}

__global__ void swiglu_backward_kernel(float* __restrict__ dgu,         // (N,2F) +=
                                       const float* __restrict__ gu,    // (N,2F)
                                       const float* __restrict__ dout,  // (N,F)
                                       int64_t N, int64_t F) {
  for (int64_t idx = grid_start(); idx < N * F; idx += grid_stride()) {
    const int64_t i = idx / F, j = idx % F;
    const float g = gu[i * 2 * F + j];
    const float u = gu[i * 2 * F + F + j];
    const float e = expf(-g);
    const float sig = 1.0f / (1.0f + e);
    const float silu = g / (1.0f + e);
    const float dsilu = sig * (1.0f + g * (1.0f - sig));
    const float dy = dout[idx];
    dgu[i * 2 * F + j] += dy * u * dsilu;
    dgu[i * 2 * F + F + j] += dy * silu;
  }
}

// ---- repeat_kv ----------------------------------------------------------------------------------

// One thread per output float: q copied, k'/v' head h read from kv head h / rep.
__global__ void repeat_kv_forward_kernel(float* __restrict__ out,        // (B,T,3*NH*hs)
                                         const float* __restrict__ inp,  // (B,T,(NH+2NKV)*hs)
                                         int64_t BT, int64_t NH, int64_t NKV, int64_t hs) {
  const int64_t rep = NH / NKV;
  const int64_t in_row = (NH + 2 * NKV) * hs, out_row = 3 * NH * hs, width = NH * hs;
  for (int64_t idx = grid_start(); idx < BT * out_row; idx += grid_stride()) {
    const int64_t bt = idx / out_row, k = idx % out_row;
    const int64_t part = k / width, h = (k % width) / hs, i = k % hs;  // part: 0 q, 1 k, 2 v
    const int64_t src = part == 0 ? k : (NH + (part - 1) * NKV + h / rep) * hs + i;
    out[idx] = inp[bt * in_row + src];
  }
}

// One thread per input float: q gets its own gradient; kv head j of k (or v) the sum of the
// gradients of repeats j*rep .. j*rep + rep-1, from 0 in that order, as the CPU.
__global__ void repeat_kv_backward_kernel(float* __restrict__ dinp,        // (B,T,(NH+2NKV)*hs)
                                          const float* __restrict__ dout,  // (B,T,3*NH*hs)
                                          int64_t BT, int64_t NH, int64_t NKV, int64_t hs) {
  const int64_t rep = NH / NKV;
  const int64_t in_row = (NH + 2 * NKV) * hs, out_row = 3 * NH * hs;
  for (int64_t idx = grid_start(); idx < BT * in_row; idx += grid_stride()) {
    const int64_t bt = idx / in_row, k = idx % in_row;
    const float* dy = dout + bt * out_row;
    if (k < NH * hs) {
      dinp[idx] += dy[k];
      continue;
    }
    const int64_t part = k < (NH + NKV) * hs ? 1 : 2;  // 1 k, 2 v
    const int64_t j = (k - (NH + (part - 1) * NKV) * hs) / hs, i = k % hs;
    const float* g = dy + (part * NH + j * rep) * hs + i;
    float sum = 0.0f;
    for (int64_t r = 0; r < rep; r++) sum += g[r * hs];
    dinp[idx] += sum;
  }
}

void check_rope_dims(int64_t row, int64_t n_rot_heads, int64_t hs) {
  STRATA_CHECK_MSG(hs > 0 && hs % 2 == 0 && n_rot_heads >= 0 && n_rot_heads * hs <= row,
                   "rope: hs must be even and n_rot_heads * hs <= row");
}

// One work item per thread of the grid-stride loop (see RoPE above).
void launch_rope(void (*kernel)(float*, const float*, const float*, int64_t, int64_t, int64_t,
                                int64_t, int64_t),
                 cudaStream_t stream, float* dst, const float* src, const float* rope, int64_t B,
                 int64_t T, int64_t row, int64_t n_rot_heads, int64_t hs) {
  check_rope_dims(row, n_rot_heads, hs);
  const int64_t n = B * T * (row - n_rot_heads * (hs / 2));
  if (n <= 0) return;
  kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, stream>>>(dst, src, rope, B * T, T, row,
                                                                    n_rot_heads, hs);
  STRATA_CUDA_LAUNCH_CHECK();
}

void check_kv_heads(int64_t NH, int64_t NKV) {
  STRATA_CHECK_MSG(NKV > 0 && NH % NKV == 0, "repeat_kv: NH must be a multiple of NKV");
}

}  // namespace

void cuda_rmsnorm_forward(cudaStream_t stream, float* out, float* rstd, const float* inp,
                          const float* weight, int64_t N, int64_t C, float eps) {
  if (N <= 0 || C <= 0) return;
  rmsnorm_forward_kernel<<<row_blocks(N), kRowThreads, 0, stream>>>(out, rstd, inp, weight, N, C,
                                                                    eps);
  STRATA_CUDA_LAUNCH_CHECK();
}

void cuda_rmsnorm_backward(cudaStream_t stream, float* dinp, float* dweight, const float* dout,
                           const float* inp, const float* weight, const float* rstd, int64_t N,
                           int64_t C) {
  if (N <= 0 || C <= 0) return;
  rmsnorm_backward_dinp_kernel<<<row_blocks(N), kRowThreads, 0, stream>>>(dinp, dout, inp, weight,
                                                                          rstd, N, C);
  STRATA_CUDA_LAUNCH_CHECK();
  if (dweight == nullptr) return;  // a frozen norm (Note [LoRA] in model/lora.h)
  const dim3 block(kTileCols, kLanes);
  const auto blocks = static_cast<unsigned>((C + kTileCols - 1) / kTileCols);
  rmsnorm_backward_dweight_kernel<<<blocks, block, 0, stream>>>(dweight, dout, inp, rstd, N, C);
  STRATA_CUDA_LAUNCH_CHECK();
}

void cuda_rope_forward(cudaStream_t stream, float* out, const float* inp, const float* rope,
                       int64_t B, int64_t T, int64_t row, int64_t n_rot_heads, int64_t hs) {
  launch_rope(rope_forward_kernel, stream, out, inp, rope, B, T, row, n_rot_heads, hs);
}

void cuda_rope_backward(cudaStream_t stream, float* dinp, const float* dout, const float* rope,
                        int64_t B, int64_t T, int64_t row, int64_t n_rot_heads, int64_t hs) {
  launch_rope(rope_backward_kernel, stream, dinp, dout, rope, B, T, row, n_rot_heads, hs);
}

void cuda_swiglu_forward(cudaStream_t stream, float* out, const float* gu, int64_t N, int64_t F) {
  if (N <= 0 || F <= 0) return;
  swiglu_forward_kernel<<<elementwise_blocks(N * F), kElementwiseThreads, 0, stream>>>(out, gu, N,
                                                                                       F);
  STRATA_CUDA_LAUNCH_CHECK();
}

void cuda_swiglu_backward(cudaStream_t stream, float* dgu, const float* gu, const float* dout,
                          int64_t N, int64_t F) {
  if (N <= 0 || F <= 0) return;
  swiglu_backward_kernel<<<elementwise_blocks(N * F), kElementwiseThreads, 0, stream>>>(dgu, gu,
                                                                                        dout, N, F);
  STRATA_CUDA_LAUNCH_CHECK();
}

void cuda_repeat_kv_forward(cudaStream_t stream, float* out, const float* inp, int64_t B, int64_t T,
                            int64_t NH, int64_t NKV, int64_t hs) {
  check_kv_heads(NH, NKV);
  const int64_t n = B * T * 3 * NH * hs;
  if (n <= 0) return;
  repeat_kv_forward_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, stream>>>(
      out, inp, B * T, NH, NKV, hs);
  STRATA_CUDA_LAUNCH_CHECK();
}

void cuda_repeat_kv_backward(cudaStream_t stream, float* dinp, const float* dout, int64_t B,
                             int64_t T, int64_t NH, int64_t NKV, int64_t hs) {
  check_kv_heads(NH, NKV);
  const int64_t n = B * T * (NH + 2 * NKV) * hs;
  if (n <= 0) return;
  repeat_kv_backward_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, stream>>>(
      dinp, dout, B * T, NH, NKV, hs);
  STRATA_CUDA_LAUNCH_CHECK();
}

}  // namespace strata
