// Fast elementwise kernels: GELU, residual adds, dtype conversions, and the sum of squares used
// for gradient-norm clipping. Plain loops under `omp parallel for` that the compiler vectorizes.
#include <algorithm>
#include <memory>

#include "backend/cpu/kernels.h"

namespace strata::cpu {

namespace {
// Elements per sum_squares chunk (Note [Deterministic reductions]).
constexpr int64_t kSumChunk = 65536;
}  // namespace

// GELU via the identity 0.5 * (1 + tanh(u)) = 1 / (1 + exp(-2u)) = sigmoid(2u): one exp_fast
// (vectorized) instead of tanhf, with no cancellation near u = 0.
//   gelu(x)  = x * sig,                 sig = 1 / (1 + e),  e = exp(-2u)
//   gelu'(x) = sig + x * 2 sig (1 - sig) du/dx,  with 1 - sig = e * sig computed without
//              the cancellation of 1 - sig when sig is close to 1.
void gelu_forward(float* out, const float* inp, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= kMinParallelWork)
  for (int64_t i = 0; i < n; i++) {
    const float x = inp[i];
    const float u = kGeluScale * (x + kGeluCubic * x * x * x);
    out[i] = x / (1.0f + exp_fast(-2.0f * u));
  }
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= kMinParallelWork)
  for (int64_t i = 0; i < n; i++) {
    const float x = inp[i];
    const float u = kGeluScale * (x + kGeluCubic * x * x * x);
    const float du_dx = kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
    const float e = exp_fast(-2.0f * u);
    const float sig = 1.0f / (1.0f + e);
    const float grad = sig + 2.0f * x * (e * sig * sig) * du_dx;
    dinp[i] += grad * dout[i];
  }
}

void add(float* out, const float* a, const float* b, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= kMinParallelWork)
  for (int64_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

// y + alpha * x rounded twice, exactly as the reference (no fused multiply-add).
void scaled_add(float* y, const float* x, float alpha, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= kMinParallelWork)
  for (int64_t i = 0; i < n; i++) y[i] += alpha * x[i];
}

// Row by row; each element as the reference (alpha * x, then the add), so the bits agree.
void scaled_copy_2d(float* y, int64_t ldy, const float* x, int64_t ldx, int64_t rows, int64_t cols,
                    float alpha, bool accumulate) {
#pragma omp parallel for schedule(static) if (rows * cols >= kMinParallelWork)
  for (int64_t i = 0; i < rows; i++) {
    float* yr = y + i * ldy;
    const float* xr = x + i * ldx;
    if (accumulate) {
      for (int64_t j = 0; j < cols; j++) yr[j] += alpha * xr[j];
    } else {
      for (int64_t j = 0; j < cols; j++) yr[j] = alpha * xr[j];
    }
  }
}

void dropout_apply(float* out, const float* inp, int64_t n, const DropoutMask& m, bool accumulate) {
#pragma omp parallel for schedule(static) if (n >= kMinParallelWork)
  for (int64_t i = 0; i < n; i++) {
    const float v = dropout_keeps(m, i) ? inp[i] * m.scale : 0.0f;
    out[i] = accumulate ? out[i] + v : v;
  }
}

void convert_f32_to_bf16(bf16_t* out, const float* inp, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= kMinParallelWork)
  for (int64_t i = 0; i < n; i++) out[i] = f32_to_bf16(inp[i]);
}

void convert_bf16_to_f32(float* out, const bf16_t* inp, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= kMinParallelWork)
  for (int64_t i = 0; i < n; i++) out[i] = bf16_to_f32(inp[i]);
}

// Chunk partials in double, in parallel; then one thread adds them in chunk order.
void sum_squares(double* out, const float* x, int64_t n) {
  const int64_t chunks = (n + kSumChunk - 1) / kSumChunk;
  std::unique_ptr<double[]> partials(new double[std::max<int64_t>(chunks, 1)]);
#pragma omp parallel for schedule(static) if (n >= kMinParallelWork)
  for (int64_t chunk = 0; chunk < chunks; chunk++) {
    const float* p = x + chunk * kSumChunk;
    const int64_t len = std::min(kSumChunk, n - chunk * kSumChunk);
    double sum = 0.0;
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < len; i++) sum += static_cast<double>(p[i]) * p[i];
    partials[chunk] = sum;
  }
  double total = 0.0;
  for (int64_t chunk = 0; chunk < chunks; chunk++) total += partials[chunk];
  out[0] = total;
}

}  // namespace strata::cpu
