// LayerNorm over the last dimension (eps 1e-5, biased variance, as PyTorch and the CPU backend).
// Forward and the dinp part of the backward give one warp to each row; dweight/dbias, which sum
// over rows, use the column-tile reduction of Note [Column-tile reduction] (kernels_common.cuh).
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/kernels.cuh"
#include "backend/cuda/kernels_common.cuh"

namespace strata {

namespace {

using kernels_detail::column_tile_sum;
using kernels_detail::group_sum;
using kernels_detail::kLanes;
using kernels_detail::kRowThreads;
using kernels_detail::kTileCols;
using kernels_detail::row_blocks;
using kernels_detail::warp_row;

constexpr float kLayerNormEps = 1e-5f;  // as cpu::kLayerNormEps

// One warp per row. Two passes over the row (mean, then squared deviations) avoid the
// cancellation of E[x^2] - E[x]^2; the row stays in L1 between passes. Lane sums are combined by
// a butterfly, so every lane holds the same mean and rstd.
__global__ void layernorm_forward_kernel(float* __restrict__ out,           // (N,C)
                                         float* __restrict__ mean,          // (N)
                                         float* __restrict__ rstd,          // (N)
                                         const float* __restrict__ inp,     // (N,C)
                                         const float* __restrict__ weight,  // (C)
                                         const float* __restrict__ bias,    // (C)
                                         int64_t N, int64_t C) {
  const int lane = threadIdx.x % 32;
  const int64_t row = warp_row();
  if (row >= N) return;  // whole warps leave together: the shuffles below stay full-warp
  const float* x = inp + row * C;
  float* y = out + row * C;
  float sum = 0.0f;
  for (int64_t c = lane; c < C; c += 32) sum += x[c];
  const float m = group_sum(sum) / static_cast<float>(C);
  float var = 0.0f;
  for (int64_t c = lane; c < C; c += 32) {
    const float d = x[c] - m;
    var += d * d;
  }
  var = group_sum(var) / static_cast<float>(C);
  // 1/sqrt rounded twice (IEEE sqrtf, then division), as the CPU; rsqrtf is approximate.
  const float s = 1.0f / sqrtf(var + kLayerNormEps);
  for (int64_t c = lane; c < C; c += 32) y[c] = (x[c] - m) * s * weight[c] + bias[c];
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

// dinp, one warp per row. With norm = (x - mean) * rstd and dnorm = dout * weight:
//   dx = rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm))
__global__ void layernorm_backward_dinp_kernel(float* __restrict__ dinp,          // (N,C) +=
                                               const float* __restrict__ dout,    // (N,C)
                                               const float* __restrict__ inp,     // (N,C)
                                               const float* __restrict__ weight,  // (C)
                                               const float* __restrict__ mean,    // (N)
                                               const float* __restrict__ rstd,    // (N)
                                               int64_t N, int64_t C) {
  const int lane = threadIdx.x % 32;
  const int64_t row = warp_row();
  if (row >= N) return;
  const float* x = inp + row * C;
  const float* dy = dout + row * C;
  float* dx = dinp + row * C;
  const float m = mean[row];
  const float s = rstd[row];
  float dnorm_sum = 0.0f;
  float dnorm_norm_sum = 0.0f;
  for (int64_t c = lane; c < C; c += 32) {
    const float norm = (x[c] - m) * s;
    const float dnorm = weight[c] * dy[c];
    dnorm_sum += dnorm;
    dnorm_norm_sum += dnorm * norm;
  }
  const float dnorm_mean = group_sum(dnorm_sum) / static_cast<float>(C);
  const float dnorm_norm_mean = group_sum(dnorm_norm_sum) / static_cast<float>(C);
  for (int64_t c = lane; c < C; c += 32) {
    const float norm = (x[c] - m) * s;
    const float dnorm = weight[c] * dy[c];
    dx[c] += s * (dnorm - dnorm_mean - norm * dnorm_norm_mean);
  }
}

// dweight (C) += sum_rows norm * dout, dbias (C) += sum_rows dout: a block owns kTileCols
// columns and walks every row (Note [Column-tile reduction]); deterministic without atomics or
// workspace. mean/rstd loads are one address per warp (a warp is one row), so they broadcast.
__global__ void layernorm_backward_params_kernel(float* __restrict__ dweight,     // (C) +=
                                                 float* __restrict__ dbias,       // (C) +=
                                                 const float* __restrict__ dout,  // (N,C)
                                                 const float* __restrict__ inp,   // (N,C)
                                                 const float* __restrict__ mean,  // (N)
                                                 const float* __restrict__ rstd,  // (N)
                                                 int64_t N, int64_t C) {
  __shared__ float partial_w[kLanes][kTileCols];  // (lanes, columns)
  __shared__ float partial_b[kLanes][kTileCols];  // (lanes, columns)
  const int x = threadIdx.x, y = threadIdx.y;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kTileCols + x;
  float sum_w = 0.0f;
  float sum_b = 0.0f;
  if (col < C) {
    for (int64_t row = y; row < N; row += kLanes) {
      const float dy = dout[row * C + col];
      const float norm = (inp[row * C + col] - mean[row]) * rstd[row];
      sum_w += norm * dy;
      sum_b += dy;
    }
  }
  // Two trees, one per array: each column's sums are those of a joint tree.
  sum_w = column_tile_sum(partial_w, sum_w);
  sum_b = column_tile_sum(partial_b, sum_b);
  if (y == 0 && col < C) {
    dweight[col] += sum_w;
    dbias[col] += sum_b;
  }
}

}  // namespace

void cuda_layernorm_forward(cudaStream_t stream, float* out, float* mean, float* rstd,
                            const float* inp, const float* weight, const float* bias, int64_t N,
                            int64_t C) {
  if (N <= 0 || C <= 0) return;
  layernorm_forward_kernel<<<row_blocks(N), kRowThreads, 0, stream>>>(out, mean, rstd, inp, weight,
                                                                      bias, N, C);
  STRATA_CUDA_LAUNCH_CHECK();
}

void cuda_layernorm_backward(cudaStream_t stream, float* dinp, float* dweight, float* dbias,
                             const float* dout, const float* inp, const float* weight,
                             const float* mean, const float* rstd, int64_t N, int64_t C) {
  if (N <= 0 || C <= 0) return;
  layernorm_backward_dinp_kernel<<<row_blocks(N), kRowThreads, 0, stream>>>(dinp, dout, inp, weight,
                                                                            mean, rstd, N, C);
  STRATA_CUDA_LAUNCH_CHECK();
  if (dweight == nullptr) return;  // a frozen norm, dbias null too (Note [LoRA] in model/lora.h)
  const dim3 block(kTileCols, kLanes);
  const auto blocks = static_cast<unsigned>((C + kTileCols - 1) / kTileCols);
  layernorm_backward_params_kernel<<<blocks, block, 0, stream>>>(dweight, dbias, dout, inp, mean,
                                                                 rstd, N, C);
  STRATA_CUDA_LAUNCH_CHECK();
}

}  // namespace strata
