// Fast kernels for the ops of a Llama block: RMSNorm, rotary position embedding (RoPE), SwiGLU
// and the key/value head repetition of grouped-query attention. backend.h states the formulas;
// kernels_ref.cpp holds the references.
//
// Note [RMSNorm summation order]
// The row's sum of squares (forward) and of dnorm * norm (backward) are summed in f32 strictly
// in index order c = 0, 1, ..., C-1, one add after another: the order the Device interface
// documents, and the reference's. So rstd, out and dinp equal the reference bit for bit. The
// sequential sum is not vectorized; at C = 4096 it is a few microseconds per row, small beside
// the matmuls around it. Only dweight, a sum over rows, goes by row chunks
// (Note [Deterministic reductions]) and so differs from the reference's row order by rounding.
#include <algorithm>
#include <cmath>
#include <memory>

#include "backend/cpu/kernels.h"
#include "core/check.h"

namespace strata::cpu {

// ---- RMSNorm ------------------------------------------------------------------------------------

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N,
                     int64_t C, float eps) {
  if (C <= 0) return;
#pragma omp parallel for schedule(static) if (N * C >= kMinParallelWork)
  for (int64_t i = 0; i < N; i++) {
    const float* x = inp + i * C;
    float* y = out + i * C;
    float sum = 0.0f;  // Note [RMSNorm summation order]
    for (int64_t c = 0; c < C; c++) sum += x[c] * x[c];
    const float s = 1.0f / std::sqrt(sum / static_cast<float>(C) + eps);
    for (int64_t c = 0; c < C; c++) y[c] = x[c] * s * weight[c];
    rstd[i] = s;
  }
}

// With norm = x * rstd, y = norm * w, dnorm = dout * w (backend.h):
//   dx = rstd * (dnorm - norm * mean(dnorm * norm)),   dw += norm * dout
// Each chunk of kNormRowChunk rows updates its dinp rows and writes its own dweight partial; then
// every column adds the partials in chunk order.
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int64_t N, int64_t C) {
  if (N <= 0 || C <= 0) return;
  const int64_t chunks = (N + kNormRowChunk - 1) / kNormRowChunk;
  // partials: (chunks, C); each chunk initializes its own.
  std::unique_ptr<float[]> partials(new float[chunks * C]);
#pragma omp parallel for schedule(static) if (N * C >= kMinParallelWork)
  for (int64_t chunk = 0; chunk < chunks; chunk++) {
    float* pw = partials.get() + chunk * C;  // (C)
    std::fill(pw, pw + C, 0.0f);
    const int64_t i1 = std::min(N, (chunk + 1) * kNormRowChunk);
    for (int64_t i = chunk * kNormRowChunk; i < i1; i++) {
      const float* x = inp + i * C;
      const float* dy = dout + i * C;
      float* dx = dinp + i * C;
      const float s = rstd[i];
      float dot = 0.0f;  // Note [RMSNorm summation order]
      for (int64_t c = 0; c < C; c++) dot += (weight[c] * dy[c]) * (x[c] * s);
      const float dot_mean = dot / static_cast<float>(C);
#pragma omp simd
      for (int64_t c = 0; c < C; c++) {
        const float norm = x[c] * s;
        const float dnorm = weight[c] * dy[c];
        dx[c] += s * (dnorm - norm * dot_mean);
        pw[c] += norm * dy[c];
      }
    }
  }
  float* total = partials.get();  // (C): chunk 0's partial, then the sum
#pragma omp parallel for schedule(static) if (chunks * C >= kMinParallelWork)
  for (int64_t c0 = 0; c0 < C; c0 += kNormColumnBlock) {
    const int64_t c1 = std::min(C, c0 + kNormColumnBlock);
    for (int64_t chunk = 1; chunk < chunks; chunk++) {
      const float* p = partials.get() + chunk * C;
      for (int64_t c = c0; c < c1; c++) total[c] += p[c];
    }
  }
  for (int64_t c = 0; c < C; c++) dweight[c] += total[c];
}

// ---- RoPE ---------------------------------------------------------------------------------------

namespace {
void check_rope_dims(int64_t row, int64_t n_rot_heads, int64_t hs) {
  STRATA_CHECK_MSG(hs > 0 && hs % 2 == 0 && n_rot_heads >= 0 && n_rot_heads * hs <= row,
                   "rope: hs must be even and n_rot_heads * hs <= row");
}
}  // namespace

// One token per iteration. Each pair (x[i], x[i + hs/2]) is read before either is written, so
// out may be inp.
void rope_forward(float* out, const float* inp, const float* rope, int64_t B, int64_t T,
                  int64_t row, int64_t n_rot_heads, int64_t hs) {
  check_rope_dims(row, n_rot_heads, hs);
  const int64_t half = hs / 2;
#pragma omp parallel for schedule(static) if (B * T * row >= kMinParallelWork)
  for (int64_t bt = 0; bt < B * T; bt++) {
    const float* x = inp + bt * row;
    float* y = out + bt * row;
    const float* r = rope + (bt % T) * half * 2;  // (hs/2, 2) of position t
    for (int64_t h = 0; h < n_rot_heads; h++) {
      const float* xh = x + h * hs;
      float* yh = y + h * hs;
      for (int64_t i = 0; i < half; i++) {
        const float c = r[2 * i], s = r[2 * i + 1];
        const float x1 = xh[i], x2 = xh[i + half];
        yh[i] = x1 * c - x2 * s;
        yh[i + half] = x2 * c + x1 * s;
      }
    }
    if (y != x) std::copy(x + n_rot_heads * hs, x + row, y + n_rot_heads * hs);
  }
}

// The transpose of the rotation [[c, -s], [s, c]]: [[c, s], [-s, c]].
void rope_backward(float* dinp, const float* dout, const float* rope, int64_t B, int64_t T,
                   int64_t row, int64_t n_rot_heads, int64_t hs) {
  check_rope_dims(row, n_rot_heads, hs);
  const int64_t half = hs / 2;
#pragma omp parallel for schedule(static) if (B * T * row >= kMinParallelWork)
  for (int64_t bt = 0; bt < B * T; bt++) {
    const float* dy = dout + bt * row;
    float* dx = dinp + bt * row;
    const float* r = rope + (bt % T) * half * 2;
    for (int64_t h = 0; h < n_rot_heads; h++) {
      const float* dyh = dy + h * hs;
      float* dxh = dx + h * hs;
      for (int64_t i = 0; i < half; i++) {
        const float c = r[2 * i], s = r[2 * i + 1];
        const float d1 = dyh[i], d2 = dyh[i + half];
        dxh[i] += d1 * c + d2 * s;
        dxh[i + half] += d2 * c - d1 * s;
      }
    }
    for (int64_t j = n_rot_heads * hs; j < row; j++) dx[j] += dy[j];
  }
}

// ---- SwiGLU -------------------------------------------------------------------------------------
// silu(g) = g / (1 + e), e = exp(-g), with exp_fast (vectorized, within ~2 ulp of exp) where the
// reference calls std::exp; silu'(g) = sig * (1 + g * (1 - sig)), sig = 1 / (1 + e), with
// 1 - sig computed as e * sig (no cancellation when sig is near 1; exp_fast never returns inf,
// so e * sig stays finite).

void swiglu_forward(float* out, const float* gu, int64_t N, int64_t F) {
#pragma omp parallel for schedule(static) if (N * F >= kMinParallelWork)
  for (int64_t i = 0; i < N; i++) {
    const float* g = gu + i * 2 * F;
    const float* u = g + F;
    float* y = out + i * F;
    for (int64_t j = 0; j < F; j++) y[j] = g[j] / (1.0f + exp_fast(-g[j])) * u[j];
  }
}

void swiglu_backward(float* dgu, const float* gu, const float* dout, int64_t N, int64_t F) {
#pragma omp parallel for schedule(static) if (N * F >= kMinParallelWork)
  for (int64_t i = 0; i < N; i++) {
    const float* g = gu + i * 2 * F;
    const float* u = g + F;
    const float* dy = dout + i * F;
    float* dg = dgu + i * 2 * F;
    float* du = dg + F;
#pragma omp simd
    for (int64_t j = 0; j < F; j++) {
      const float x = g[j];
      const float e = exp_fast(-x);
      const float sig = 1.0f / (1.0f + e);
      const float silu = x / (1.0f + e);
      const float dsilu = sig * (1.0f + x * (e * sig));
      dg[j] += dy[j] * u[j] * dsilu;
      du[j] += dy[j] * silu;
    }
  }
}

// ---- repeat_kv ----------------------------------------------------------------------------------

namespace {
void check_kv_heads(int64_t NH, int64_t NKV) {
  STRATA_CHECK_MSG(NKV > 0 && NH % NKV == 0, "repeat_kv: NH must be a multiple of NKV");
}
}  // namespace

void repeat_kv_forward(float* out, const float* inp, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                       int64_t hs) {
  check_kv_heads(NH, NKV);
  const int64_t rep = NH / NKV;
  const int64_t in_row = (NH + 2 * NKV) * hs, out_row = 3 * NH * hs;
#pragma omp parallel for schedule(static) if (B * T * out_row >= kMinParallelWork)
  for (int64_t bt = 0; bt < B * T; bt++) {
    const float* x = inp + bt * in_row;
    float* y = out + bt * out_row;
    std::copy(x, x + NH * hs, y);  // q
    for (int64_t h = 0; h < NH; h++) {
      const float* k = x + (NH + h / rep) * hs;
      const float* v = x + (NH + NKV + h / rep) * hs;
      std::copy(k, k + hs, y + (NH + h) * hs);
      std::copy(v, v + hs, y + (2 * NH + h) * hs);
    }
  }
}

// For k and v: kv head j receives the sum of query heads j*rep .. j*rep + rep-1's gradients,
// summed from 0 in that order, then added to dinp (backend.h): the reference's order exactly.
void repeat_kv_backward(float* dinp, const float* dout, int64_t B, int64_t T, int64_t NH,
                        int64_t NKV, int64_t hs) {
  check_kv_heads(NH, NKV);
  const int64_t rep = NH / NKV;
  const int64_t in_row = (NH + 2 * NKV) * hs, out_row = 3 * NH * hs;
#pragma omp parallel for schedule(static) if (B * T * out_row >= kMinParallelWork)
  for (int64_t bt = 0; bt < B * T; bt++) {
    const float* dy = dout + bt * out_row;
    float* dx = dinp + bt * in_row;
    for (int64_t i = 0; i < NH * hs; i++) dx[i] += dy[i];  // q
    for (int64_t part = 1; part <= 2; part++) {            // k, then v
      for (int64_t j = 0; j < NKV; j++) {
        float* d = dx + (NH + (part - 1) * NKV + j) * hs;
        const float* g = dy + (part * NH + j * rep) * hs;  // rep heads of hs floats
        for (int64_t i = 0; i < hs; i++) {
          float sum = 0.0f;
          for (int64_t r = 0; r < rep; r++) sum += g[r * hs + i];
          d[i] += sum;
        }
      }
    }
  }
}

}  // namespace strata::cpu
