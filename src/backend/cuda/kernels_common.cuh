// Helpers shared by the kernels_*.cu files (private to them: cuda_device.* includes kernels.cuh
// only). Launch sizing for grid-stride loops and the fixed-order reductions of
// Note [Deterministic CUDA reductions] (kernels.cuh).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_check.h"

namespace strata::kernels_detail {

inline constexpr int kElementwiseThreads = 256;
// Grid-stride loops cap the grid here: 4096 x 256 threads is several waves on any current GPU,
// and the cap keeps the grid inside gridDim.x for any n. Only elementwise kernels use it, so the
// cap never changes a result.
inline constexpr int64_t kMaxElementwiseBlocks = 4096;

inline unsigned elementwise_blocks(int64_t n) {
  const int64_t blocks = (n + kElementwiseThreads - 1) / kElementwiseThreads;
  return static_cast<unsigned>(blocks < kMaxElementwiseBlocks ? blocks : kMaxElementwiseBlocks);
}

// Butterfly (xor) reductions over the `width` lanes of a group (width a power of two <= 32,
// groups aligned). Every lane ends with the same bits: at each step a lane and its partner add
// the same two values (a + b == b + a exactly in IEEE arithmetic), so by induction all lanes
// hold identical partial sums. The order is fixed by the lane pattern alone: deterministic.
template <typename T, int width = 32>
__device__ __forceinline__ T group_sum(T v) {
#pragma unroll
  for (int offset = width / 2; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

template <int width = 32>
__device__ __forceinline__ float group_max(float v) {
#pragma unroll
  for (int offset = width / 2; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Sum over a whole block of kThreads threads (a multiple of 32, at most 1024) in a fixed tree:
// butterfly within each warp, then warp 0 combines the per-warp sums in the same way. All
// threads must call it (it synchronizes) and all receive the result. `shared` holds 32 T.
template <int kThreads, typename T>
__device__ T block_sum(T v, T* shared) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "block size");
  constexpr int kWarps = kThreads / 32;
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  v = group_sum<T>(v);
  __syncthreads();  // `shared` may still be read by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < kWarps ? shared[lane] : T(0);
  v = group_sum<T>(v);  // every warp reduces the same values, so all threads agree
  return v;
}

// Block-wide max, same structure as block_sum (max is exact, so only the NaN cases care).
template <int kThreads>
__device__ float block_max(float v, float* shared) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "block size");
  constexpr int kWarps = kThreads / 32;
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  v = group_max(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < kWarps ? shared[lane] : -INFINITY;
  return group_max(v);
}

}  // namespace strata::kernels_detail
