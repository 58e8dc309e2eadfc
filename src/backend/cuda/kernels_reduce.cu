// Reductions over many values: bias_backward (column sums) and sum_squares (one double).
// Both follow Note [Deterministic CUDA reductions] (kernels.cuh): no atomics, and a reduction
// tree whose shape depends only on the sizes, never on the GPU.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/kernels.cuh"
#include "backend/cuda/kernels_common.cuh"

namespace strata {

namespace {

using kernels_detail::block_sum;
using kernels_detail::column_tile_sum;
using kernels_detail::kLanes;
using kernels_detail::kTileCols;

// ---- bias_backward ------------------------------------------------------------------------------
// Note [Column-tile reduction] (kernels_common.cuh).
__global__ void bias_backward_kernel(float* __restrict__ dbias,       // (N) +=
                                     const float* __restrict__ dout,  // (M,N)
                                     int64_t M, int64_t N) {
  __shared__ float partial[kLanes][kTileCols];  // (lanes, columns): one partial per thread
  const int x = threadIdx.x, y = threadIdx.y;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kTileCols + x;
  float sum = 0.0f;
  if (col < N) {
    for (int64_t row = y; row < M; row += kLanes) sum += dout[row * N + col];
  }
  sum = column_tile_sum(partial, sum);
  if (y == 0 && col < N) dbias[col] += sum;
}

// ---- sum_squares ------------------------------------------------------------------------------
// Two passes with a grid that is a constant, not a function of the GPU: pass 1 runs exactly
// kSumBlocks blocks; thread g of the grid sums x[g], x[g + G], x[g + 2G], ... (G = the total
// thread count) in double, and each block reduces its threads in a fixed tree into partials[b].
// Pass 2, one block, reduces the kSumBlocks partials in a fixed tree. The same n gives the same
// bits on every GPU. x^2 of a float is exact in double (48 significant bits), so fma contraction
// of sum += x * x cannot change a result either.
constexpr int kSumBlocks = 256;
constexpr int kSumThreads = 256;

__global__ void sum_squares_partial_kernel(double* __restrict__ partials,  // (kSumBlocks)
                                           const float* __restrict__ x,    // (n)
                                           int64_t n) {
  __shared__ double shared[32];
  const int64_t stride = static_cast<int64_t>(kSumBlocks) * kSumThreads;
  double sum = 0.0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kSumThreads + threadIdx.x; i < n;
       i += stride) {
    const double v = x[i];
    sum += v * v;
  }
  sum = block_sum<kSumThreads>(sum, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

__global__ void sum_squares_final_kernel(double* __restrict__ out,               // (1)
                                         const double* __restrict__ partials) {  // (kSumBlocks)
  static_assert(kSumBlocks == kSumThreads, "one partial per thread");
  __shared__ double shared[32];
  const double sum = block_sum<kSumThreads>(partials[threadIdx.x], shared);
  if (threadIdx.x == 0) out[0] = sum;
}

}  // namespace

void cuda_bias_backward(cudaStream_t stream, float* dbias, const float* dout, int64_t M,
                        int64_t N) {
  if (M <= 0 || N <= 0) return;
  const dim3 block(kTileCols, kLanes);
  const auto blocks = static_cast<unsigned>((N + kTileCols - 1) / kTileCols);
  bias_backward_kernel<<<blocks, block, 0, stream>>>(dbias, dout, M, N);
  STRATA_CUDA_LAUNCH_CHECK();
}

// The partials need kSumBlocks doubles of device memory that outlive pass 1, and the op has no
// workspace argument. They come from the device's stream-ordered pool (cudaMallocAsync on the
// same stream, freed right after pass 2 in stream order): safe when several streams run
// sum_squares at once, and after the first call the pool serves it without a driver allocation.
// 2 KiB, outside the Device's budget accounting.
void cuda_sum_squares(cudaStream_t stream, double* out, const float* x, int64_t n) {
  void* partials = nullptr;
  STRATA_CUDA_CHECK(cudaMallocAsync(&partials, kSumBlocks * sizeof(double), stream));
  // n == 0 still runs: every partial is 0 and out[0] receives 0, as on the CPU.
  sum_squares_partial_kernel<<<kSumBlocks, kSumThreads, 0, stream>>>(static_cast<double*>(partials),
                                                                     x, n < 0 ? 0 : n);
  STRATA_CUDA_LAUNCH_CHECK();
  sum_squares_final_kernel<<<1, kSumThreads, 0, stream>>>(out, static_cast<double*>(partials));
  STRATA_CUDA_LAUNCH_CHECK();
  STRATA_CUDA_CHECK(cudaFreeAsync(partials, stream));
}

}  // namespace strata
