// Helpers shared by the kernels_*.cu files (private to them: cuda_device.* includes kernels.cuh
// only). Launch sizing for grid-stride loops and row-per-warp kernels, and the fixed-order
// reductions of Note [Deterministic CUDA reductions] (kernels.cuh).
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

// A grid-stride loop: for (i = grid_start(); i < n; i += grid_stride()).
__device__ __forceinline__ int64_t grid_start() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_stride() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

// Row-per-warp kernels (layernorm, rmsnorm): blocks of kRowThreads threads, 8 warps, warp w of
// block b owning row b * kRowsPerBlock + w of an (N, C) input.
inline constexpr int kRowThreads = 256;
inline constexpr int kRowsPerBlock = kRowThreads / 32;

inline unsigned row_blocks(int64_t N) {
  return static_cast<unsigned>((N + kRowsPerBlock - 1) / kRowsPerBlock);
}
// The row of the calling thread's warp.
__device__ __forceinline__ int64_t warp_row() {
  return static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
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

// Note [Column-tile reduction]
// A block of (kTileCols, kLanes) threads owns kTileCols adjacent columns and all M rows: thread
// (x, y) sums rows y, y + kLanes, y + 2 kLanes, ... of column x in row order, then the kLanes
// partials of a column are added in a fixed tree through shared memory. No other block touches
// those columns, so no atomics and no workspace; each warp reads 32 adjacent floats of one row
// (coalesced). The grid is ceil(N/32) blocks, enough for the bias widths of a GPT (C..4C
// columns); each block keeps 32 warps of loads in flight. bias_backward and the norms'
// dweight/dbias use it.
inline constexpr int kTileCols = 32;
inline constexpr int kLanes = 32;

// The tree: thread (x, y) hands in its partial `sum` of column x; thread (x, 0) gets the column's
// total back. Every thread of the block calls it (it synchronizes); `partial` is shared memory.
__device__ __forceinline__ float column_tile_sum(float (&partial)[kLanes][kTileCols], float sum) {
  const int x = threadIdx.x, y = threadIdx.y;
  partial[y][x] = sum;
  __syncthreads();
  // 16 + 16, then 8 + 8, ... ; lane 0 ends with the column's sum.
  for (int stride = kLanes / 2; stride > 0; stride /= 2) {
    if (y < stride) partial[y][x] += partial[y + stride][x];
    __syncthreads();
  }
  return partial[0][x];
}

}  // namespace strata::kernels_detail
