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
namespace {

// Rows [i0, i1) of the backward: dinp += their gradient, their dweight contribution added into
// pw (C).
void rmsnorm_backward_rows(float* dinp, float* pw, const float* dout, const float* inp,
                           const float* weight, const float* rstd, int64_t i0, int64_t i1,
                           int64_t C) {
  for (int64_t i = i0; i < i1; i++) {
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

}  // namespace

// Each chunk of kNormRowChunk rows updates its dinp rows and adds into its own dweight partial
// (sum_row_chunks); then every column adds the partials in chunk order.
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int64_t N, int64_t C) {
  if (N <= 0 || C <= 0) return;
  const std::unique_ptr<float[]> total =
      sum_row_chunks(N, C, C, [&](int64_t i0, int64_t i1, float* partial) {
        rmsnorm_backward_rows(dinp, partial, dout, inp, weight, rstd, i0, i1, C);
      });
  if (dweight == nullptr) return;  // a frozen norm (Note [LoRA] in model/lora.h)
  for (int64_t c = 0; c < C; c++) dweight[c] += total[c];
}

// ---- RoPE ---------------------------------------------------------------------------------------

namespace {

void check_rope_dims(int64_t row, int64_t n_rot_heads, int64_t hs) {
  STRATA_CHECK_MSG(hs > 0 && hs % 2 == 0 && n_rot_heads >= 0 && n_rot_heads * hs <= row,
                   "rope: hs must be even and n_rot_heads * hs <= row");
}

// One token per iteration: pair(y1, y2, x1, x2, c, s) for each rotated pair, (x1, x2) =
// (src[h*hs + i], src[h*hs + i + hs/2]) of the token's row, (y1, y2) the same floats of dst,
// (c, s) = rope[t, i]; then tail(y, x, n) for the n unrotated floats at the row's end. Each pair
// is read before either of its floats is written, so dst may be src.
template <typename Pair, typename Tail>
void rope_rows(float* dst, const float* src, const float* rope, int64_t B, int64_t T, int64_t row,
               int64_t n_rot_heads, int64_t hs, Pair pair, Tail tail) {
  check_rope_dims(row, n_rot_heads, hs);
  const int64_t half = hs / 2;
#pragma omp parallel for schedule(static) if (B * T * row >= kMinParallelWork)
  for (int64_t bt = 0; bt < B * T; bt++) {
    const float* x = src + bt * row;
    float* y = dst + bt * row;
    const float* r = rope + (bt % T) * half * 2;  // (hs/2, 2) of position t
    for (int64_t h = 0; h < n_rot_heads; h++) {
      const float* xh = x + h * hs;
      float* yh = y + h * hs;
      for (int64_t i = 0; i < half; i++) {
        pair(yh[i], yh[i + half], xh[i], xh[i + half], r[2 * i], r[2 * i + 1]);
      }
    }
    tail(y + n_rot_heads * hs, x + n_rot_heads * hs, row - n_rot_heads * hs);
  }
}

}  // namespace

void rope_forward(float* out, const float* inp, const float* rope, int64_t B, int64_t T,
                  int64_t row, int64_t n_rot_heads, int64_t hs) {
  rope_rows(
      out, inp, rope, B, T, row, n_rot_heads, hs,
      [](float& y1, float& y2, float x1, float x2, float c, float s) {
        y1 = x1 * c - x2 * s;
        y2 = x2 * c + x1 * s;
      },
      [](float* y, const float* x, int64_t n) {
        if (y != x) std::copy(x, x + n, y);
      });
}

// The transpose of the rotation [[c, -s], [s, c]]: [[c, s], [-s, c]].
void rope_backward(float* dinp, const float* dout, const float* rope, int64_t B, int64_t T,
                   int64_t row, int64_t n_rot_heads, int64_t hs) {
  rope_rows(
      dinp, dout, rope, B, T, row, n_rot_heads, hs,
      [](float& dx1, float& dx2, float d1, float d2, float c, float s) {
        dx1 += d1 * c + d2 * s;
        dx2 += d2 * c - d1 * s;
      },
      [](float* dx, const float* dy, int64_t n) {
        for (int64_t j = 0; j < n; j++) dx[j] += dy[j];
      });
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

// repeat_kv's shapes: query heads per kv head, and the floats per token of its input
// (NH+2*NKV)*hs and of its output 3*NH*hs.
struct RepeatKvDims {
  int64_t rep, in_row, out_row;
};

RepeatKvDims repeat_kv_dims(int64_t NH, int64_t NKV, int64_t hs) {
  STRATA_CHECK_MSG(NKV > 0 && NH % NKV == 0, "repeat_kv: NH must be a multiple of NKV");
  return {NH / NKV, (NH + 2 * NKV) * hs, 3 * NH * hs};
}

}  // namespace

void repeat_kv_forward(float* out, const float* inp, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                       int64_t hs) {
  const RepeatKvDims dims = repeat_kv_dims(NH, NKV, hs);
#pragma omp parallel for schedule(static) if (B * T * dims.out_row >= kMinParallelWork)
  for (int64_t bt = 0; bt < B * T; bt++) {
    const float* x = inp + bt * dims.in_row;
    float* y = out + bt * dims.out_row;
    std::copy(x, x + NH * hs, y);  // q
    for (int64_t h = 0; h < NH; h++) {
      const float* k = x + (NH + h / dims.rep) * hs;
      const float* v = x + (NH + NKV + h / dims.rep) * hs;
      std::copy(k, k + hs, y + (NH + h) * hs);
      std::copy(v, v + hs, y + (2 * NH + h) * hs);
    }
  }
}

// For k and v: kv head j receives the sum of query heads j*rep .. j*rep + rep-1's gradients,
// summed from 0 in that order, then added to dinp (backend.h): the reference's order exactly.
void repeat_kv_backward(float* dinp, const float* dout, int64_t B, int64_t T, int64_t NH,
                        int64_t NKV, int64_t hs) {
  const RepeatKvDims dims = repeat_kv_dims(NH, NKV, hs);
#pragma omp parallel for schedule(static) if (B * T * dims.out_row >= kMinParallelWork)
  for (int64_t bt = 0; bt < B * T; bt++) {
    const float* dy = dout + bt * dims.out_row;
    float* dx = dinp + bt * dims.in_row;
    for (int64_t i = 0; i < NH * hs; i++) dx[i] += dy[i];  // q
    for (int64_t part = 1; part <= 2; part++) {            // k, then v
      for (int64_t j = 0; j < NKV; j++) {
        float* d = dx + (NH + (part - 1) * NKV + j) * hs;
        const float* g = dy + (part * NH + j * dims.rep) * hs;  // rep heads of hs floats
        for (int64_t i = 0; i < hs; i++) {
          float sum = 0.0f;
          for (int64_t r = 0; r < dims.rep; r++) sum += g[r * hs + i];
          d[i] += sum;
        }
      }
    }
  }
}

}  // namespace strata::cpu
