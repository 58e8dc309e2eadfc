// Fast layernorm: rows in parallel; the weight and bias gradients, which sum over rows, use
// fixed-size row chunks (Note [Deterministic reductions]).
#include <algorithm>
#include <cmath>
#include <memory>

#include "backend/cpu/kernels.h"

namespace strata::cpu {

namespace {

// sum of x[0..n); `omp simd reduction` lets the compiler keep one partial sum per vector lane.
// The lane count is fixed at compile time, so the result is reproducible.
inline float row_sum(const float* x, int64_t n) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; i++) sum += x[i];
  return sum;
}

// Rows [i0, i1) of the backward: dinp += their gradient, and their dweight and dbias
// contributions added into pw and pb (C each).
void layernorm_backward_rows(float* dinp, float* pw, float* pb, const float* dout, const float* inp,
                             const float* weight, const float* mean, const float* rstd, int64_t i0,
                             int64_t i1, int64_t C) {
  for (int64_t i = i0; i < i1; i++) {
    const float* x = inp + i * C;
    const float* dy = dout + i * C;
    float* dx = dinp + i * C;
    const float m = mean[i];
    const float s = rstd[i];
    float dnorm_mean = 0.0f;
    float dnorm_norm_mean = 0.0f;
#pragma omp simd reduction(+ : dnorm_mean, dnorm_norm_mean)
    for (int64_t c = 0; c < C; c++) {
      const float norm = (x[c] - m) * s;
      const float dnorm = weight[c] * dy[c];
      dnorm_mean += dnorm;
      dnorm_norm_mean += dnorm * norm;
    }
    dnorm_mean /= static_cast<float>(C);
    dnorm_norm_mean /= static_cast<float>(C);
    // `omp simd`: with three output streams GCC would otherwise give up on the run-time
    // aliasing checks and leave the loop scalar.
#pragma omp simd
    for (int64_t c = 0; c < C; c++) {
      const float norm = (x[c] - m) * s;
      const float dnorm = weight[c] * dy[c];
      dx[c] += s * (dnorm - dnorm_mean - norm * dnorm_norm_mean);
      pw[c] += norm * dy[c];
      pb[c] += dy[c];
    }
  }
}

}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t N, int64_t C) {
#pragma omp parallel for schedule(static) if (N * C >= kMinParallelWork)
  for (int64_t i = 0; i < N; i++) {
    const float* x = inp + i * C;
    float* y = out + i * C;
    const float m = row_sum(x, C) / static_cast<float>(C);
    // Two passes (mean, then squared deviations) avoid the cancellation of E[x^2] - E[x]^2.
    float var = 0.0f;
#pragma omp simd reduction(+ : var)
    for (int64_t c = 0; c < C; c++) var += (x[c] - m) * (x[c] - m);
    var /= static_cast<float>(C);
    const float s = 1.0f / std::sqrt(var + kLayerNormEps);
    for (int64_t c = 0; c < C; c++) y[c] = (x[c] - m) * s * weight[c] + bias[c];
    mean[i] = m;
    rstd[i] = s;
  }
}

// One pass over the rows: each chunk of kNormRowChunk rows updates its dinp rows and adds into its
// own dweight/dbias partial (sum_row_chunks); afterwards every column adds the partials in chunk
// order.
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int64_t N, int64_t C) {
  if (N == 0 || C == 0) return;
  // Per chunk (2, C): dweight, then dbias.
  const std::unique_ptr<float[]> total =
      sum_row_chunks(N, C, 2 * C, [&](int64_t i0, int64_t i1, float* partial) {
        layernorm_backward_rows(dinp, partial, partial + C, dout, inp, weight, mean, rstd, i0, i1,
                                C);
      });
  for (int64_t c = 0; c < C; c++) {  // null: a frozen norm (Note [LoRA] in model/lora.h)
    if (dweight != nullptr) dweight[c] += total[c];
    if (dbias != nullptr) dbias[c] += total[C + c];
  }
}

}  // namespace strata::cpu
