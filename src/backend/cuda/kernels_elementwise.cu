// Elementwise kernels: GELU, residual adds, dtype conversions. Grid-stride loops over n with
// int64_t indices; every element is computed independently, so the grid size never changes a
// result. add, scaled_add and the conversions round exactly as the CPU reference (bit for bit);
// GELU uses CUDA's tanhf, so it agrees with the CPU to a few ulp.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/kernels.cuh"
#include "backend/cuda/kernels_common.cuh"

namespace strata {

namespace {

using kernels_detail::elementwise_blocks;
using kernels_detail::grid_start;
using kernels_detail::grid_stride;
using kernels_detail::kElementwiseThreads;

// GELU tanh approximation constants, as cpu::kGeluScale / kGeluCubic (cpu/kernels.h).
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluCubic = 0.044715f;

// gelu(x) = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)   (the reference formula)
__global__ void gelu_forward_kernel(float* __restrict__ out,        // (n)
                                    const float* __restrict__ inp,  // (n)
                                    int64_t n) {
  for (int64_t i = grid_start(); i < n; i += grid_stride()) {
    const float x = inp[i];
    const float u = kGeluScale * (x + kGeluCubic * x * x * x);
    out[i] = 0.5f * x * (1.0f + tanhf(u));
  }
}

// gelu'(x) = 0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) du/dx
__global__ void gelu_backward_kernel(float* __restrict__ dinp,        // (n) +=
                                     const float* __restrict__ inp,   // (n)
                                     const float* __restrict__ dout,  // (n)
                                     int64_t n) {
  for (int64_t i = grid_start(); i < n; i += grid_stride()) {
    const float x = inp[i];
    const float u = kGeluScale * (x + kGeluCubic * x * x * x);
    const float du_dx = kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
    const float th = tanhf(u);
    const float grad = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du_dx;
    dinp[i] += grad * dout[i];
  }
}

// No __restrict__: out may alias a or b (the residual stream updated in place).
__global__ void add_kernel(float* out, const float* a, const float* b, int64_t n) {
  for (int64_t i = grid_start(); i < n; i += grid_stride()) out[i] = a[i] + b[i];
}

// y + alpha * x rounded twice, as the reference: the explicit _rn intrinsics stop nvcc from
// contracting the pair into one fma, which would round once and differ from the CPU.
__global__ void scaled_add_kernel(float* __restrict__ y, const float* __restrict__ x, float alpha,
                                  int64_t n) {
  for (int64_t i = grid_start(); i < n; i += grid_stride())
    y[i] = __fadd_rn(y[i], __fmul_rn(alpha, x[i]));
}

// One element per thread of a grid-stride loop over rows x cols; _rn as scaled_add.
__global__ void scaled_copy_2d_kernel(float* __restrict__ y, int64_t ldy,
                                      const float* __restrict__ x, int64_t ldx, int64_t rows,
                                      int64_t cols, float alpha, bool accumulate) {
  const int64_t n = rows * cols;
  for (int64_t k = grid_start(); k < n; k += grid_stride()) {
    const int64_t i = k / cols, j = k - i * cols;
    const float v = __fmul_rn(alpha, x[i * ldx + j]);
    y[i * ldy + j] = accumulate ? __fadd_rn(y[i * ldy + j], v) : v;
  }
}

// core/dropout_mask.h's mask itself (a host and device function under nvcc).
__global__ void dropout_apply_kernel(float* __restrict__ out, const float* __restrict__ inp,
                                     int64_t n, DropoutMask m, bool accumulate) {
  for (int64_t i = grid_start(); i < n; i += grid_stride()) {
    const float v = dropout_keeps(m, i) ? __fmul_rn(inp[i], m.scale) : 0.0f;
    out[i] = accumulate ? __fadd_rn(out[i], v) : v;
  }
}

// core/dtype.h's conversions themselves (host and device functions under nvcc).
__global__ void convert_f32_to_bf16_kernel(bf16_t* __restrict__ out,       // (n)
                                           const float* __restrict__ inp,  // (n)
                                           int64_t n) {
  for (int64_t i = grid_start(); i < n; i += grid_stride()) out[i] = f32_to_bf16(inp[i]);
}

__global__ void convert_bf16_to_f32_kernel(float* __restrict__ out,         // (n)
                                           const bf16_t* __restrict__ inp,  // (n)
                                           int64_t n) {
  for (int64_t i = grid_start(); i < n; i += grid_stride()) out[i] = bf16_to_f32(inp[i]);
}

}  // namespace

void cuda_gelu_forward(cudaStream_t stream, float* out, const float* inp, int64_t n) {
  if (n <= 0) return;
  gelu_forward_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, stream>>>(out, inp, n);
  STRATA_CUDA_LAUNCH_CHECK();
}

void cuda_gelu_backward(cudaStream_t stream, float* dinp, const float* inp, const float* dout,
                        int64_t n) {
  if (n <= 0) return;
  gelu_backward_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, stream>>>(dinp, inp, dout,
                                                                                  n);
  STRATA_CUDA_LAUNCH_CHECK();
}

void cuda_add(cudaStream_t stream, float* out, const float* a, const float* b, int64_t n) {
  if (n <= 0) return;
  add_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, stream>>>(out, a, b, n);
  STRATA_CUDA_LAUNCH_CHECK();
}

void cuda_scaled_add(cudaStream_t stream, float* y, const float* x, float alpha, int64_t n) {
  if (n <= 0) return;
  scaled_add_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, stream>>>(y, x, alpha, n);
  STRATA_CUDA_LAUNCH_CHECK();
}

void cuda_scaled_copy_2d(cudaStream_t stream, float* y, int64_t ldy, const float* x, int64_t ldx,
                         int64_t rows, int64_t cols, float alpha, bool accumulate) {
  const int64_t n = rows * cols;
  if (n <= 0) return;
  scaled_copy_2d_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, stream>>>(
      y, ldy, x, ldx, rows, cols, alpha, accumulate);
  STRATA_CUDA_LAUNCH_CHECK();
}

void cuda_dropout_apply(cudaStream_t stream, float* out, const float* inp, int64_t n,
                        const DropoutMask& m, bool accumulate) {
  if (n <= 0) return;
  dropout_apply_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, stream>>>(out, inp, n, m,
                                                                                  accumulate);
  STRATA_CUDA_LAUNCH_CHECK();
}

void cuda_convert_f32_to_bf16(cudaStream_t stream, bf16_t* out, const float* inp, int64_t n) {
  if (n <= 0) return;
  convert_f32_to_bf16_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, stream>>>(out, inp,
                                                                                        n);
  STRATA_CUDA_LAUNCH_CHECK();
}

void cuda_convert_bf16_to_f32(cudaStream_t stream, float* out, const bf16_t* inp, int64_t n) {
  if (n <= 0) return;
  convert_bf16_to_f32_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, stream>>>(out, inp,
                                                                                        n);
  STRATA_CUDA_LAUNCH_CHECK();
}

}  // namespace strata
