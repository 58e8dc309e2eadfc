// The bias add for GEMMs that cuBLASLt's bias epilogue cannot take (cuda_gemm.cpp), and for the
// empty-sum case K = 0.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device_kernels.cuh"

namespace strata {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxRowBlocks = 1024;  // each block then walks rows with this stride

// Thread x owns one column (coalesced across the warp) and adds its bias to every row
// blockIdx.y, blockIdx.y + gridDim.y, ...
__global__ void add_row_bias_kernel(float* out,         // (M,N) +=
                                    const float* bias,  // (N)
                                    int64_t M, int64_t N) {
  const int64_t col = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (col >= N) return;
  const float b = bias[col];
  for (int64_t row = blockIdx.y; row < M; row += gridDim.y) out[row * N + col] += b;
}

}  // namespace

void cuda_add_row_bias(cudaStream_t stream, float* out, const float* bias, int64_t M, int64_t N) {
  if (M == 0 || N == 0) return;
  const dim3 grid(static_cast<unsigned>((N + kThreads - 1) / kThreads),
                  static_cast<unsigned>(M < kMaxRowBlocks ? M : kMaxRowBlocks));
  add_row_bias_kernel<<<grid, kThreads, 0, stream>>>(out, bias, M, N);
  STRATA_CUDA_LAUNCH_CHECK();
}

}  // namespace strata
