// Fast causal self-attention. For each (batch, head) the products are sgemm calls on strided
// views of qkv (q, k, v of head h are the columns h*hs.. of the three C-wide thirds of each
// row, leading dimension 3C), and only the row-wise softmax runs under OpenMP.
//
// Note [Block-triangular attention]
// Only the lower triangle of the T x T score matrix matters. The products work on row blocks of
// kRowBlock queries: block [r0, r1) needs keys 0..r1 only, and column block [c0, c1) of
// att^T (for dv, dk) needs query rows c0..T only. That skips about half of the full square at
// the cost of the small triangles on the diagonal, which the softmax (backward) zeroes above
// the diagonal before anything reads them.
#include <cblas.h>

#include <algorithm>
#include <cmath>

#include "backend/cpu/kernels.h"
#include "core/check.h"

namespace strata::cpu {

namespace {

// Queries per sgemm block (Note [Block-triangular attention]). Smaller blocks skip more of the
// upper triangle but make more, smaller sgemm calls.
constexpr int64_t kRowBlock = 128;

// Rows per OpenMP task in the softmaxes: row t costs O(t), so interleave small chunks to
// balance threads.
constexpr int kSoftmaxRowChunk = 16;

void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
           const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
           int64_t ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(M), static_cast<int>(N),
              static_cast<int>(K), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb),
              beta, c, static_cast<int>(ldc));
}

// row[0..t] holds scaled scores on entry and probabilities on exit; row(t..end) is zeroed.
void causal_softmax_row(float* row, int64_t t, int64_t end) {
  float max = -INFINITY;
#pragma omp simd reduction(max : max)
  for (int64_t j = 0; j <= t; j++) max = row[j] > max ? row[j] : max;
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j <= t; j++) {
    row[j] = exp_fast(row[j] - max);
    sum += row[j];
  }
  const float inv = 1.0f / sum;
  for (int64_t j = 0; j <= t; j++) row[j] *= inv;
  std::fill(row + t + 1, row + end, 0.0f);
}

// Softmax backward for one row: ds[0..t] holds datt on entry and dscores on exit,
// ds[j] = p[j] * (datt[j] - sum_i p[i] * datt[i]); ds(t..end) is zeroed.
void causal_softmax_backward_row(float* ds, const float* p, int64_t t, int64_t end) {
  float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
  for (int64_t j = 0; j <= t; j++) dot += p[j] * ds[j];
  for (int64_t j = 0; j <= t; j++) ds[j] = p[j] * (ds[j] - dot);
  std::fill(ds + t + 1, ds + end, 0.0f);
}

// End of the row block holding row t.
int64_t block_end(int64_t t, int64_t T) { return std::min(T, (t / kRowBlock + 1) * kRowBlock); }

}  // namespace

void attention_forward(float* out, float* att, const float* qkv, int64_t B, int64_t T, int64_t C,
                       int64_t NH) {
  STRATA_CHECK(NH > 0 && C % NH == 0);
  STRATA_CHECK(3 * C <= INT32_MAX && T <= INT32_MAX);
  if (B == 0 || T == 0 || C == 0) return;
  const int64_t hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  for (int64_t b = 0; b < B; b++) {
    for (int64_t h = 0; h < NH; h++) {
      const float* q = qkv + b * T * 3 * C + h * hs;  // (T,hs), ld 3C
      const float* k = q + C;                         // (T,hs), ld 3C
      const float* v = q + 2 * C;                     // (T,hs), ld 3C
      float* a = att + (b * NH + h) * T * T;          // (T,T)
      float* o = out + b * T * C + h * hs;            // (T,hs), ld C
      // a[r0:r1, 0:r1] = scale * q[r0:r1] @ k[0:r1]^T
      for (int64_t r0 = 0; r0 < T; r0 += kRowBlock) {
        const int64_t r1 = std::min(T, r0 + kRowBlock);
        sgemm(false, true, r1 - r0, r1, hs, scale, q + r0 * 3 * C, 3 * C, k, 3 * C, 0.0f,
              a + r0 * T, T);
      }
      // Full rows: att must be zero above the diagonal, also beyond the computed blocks.
#pragma omp parallel for schedule(static, kSoftmaxRowChunk)
      for (int64_t t = 0; t < T; t++) causal_softmax_row(a + t * T, t, T);
      // o[r0:r1] = a[r0:r1, 0:r1] @ v[0:r1]
      for (int64_t r0 = 0; r0 < T; r0 += kRowBlock) {
        const int64_t r1 = std::min(T, r0 + kRowBlock);
        sgemm(false, false, r1 - r0, hs, r1, 1.0f, a + r0 * T, T, v, 3 * C, 0.0f, o + r0 * C, C);
      }
    }
  }
}

void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                        const float* att, int64_t B, int64_t T, int64_t C, int64_t NH) {
  STRATA_CHECK(NH > 0 && C % NH == 0);
  STRATA_CHECK(3 * C <= INT32_MAX && T <= INT32_MAX);
  if (B == 0 || T == 0 || C == 0) return;
  const int64_t hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  for (int64_t b = 0; b < B; b++) {
    for (int64_t h = 0; h < NH; h++) {
      const float* q = qkv + b * T * 3 * C + h * hs;  // (T,hs), ld 3C
      const float* k = q + C;                         // (T,hs), ld 3C
      const float* v = q + 2 * C;                     // (T,hs), ld 3C
      float* dq = dqkv + b * T * 3 * C + h * hs;      // (T,hs), ld 3C
      float* dk = dq + C;                             // (T,hs), ld 3C
      float* dv = dq + 2 * C;                         // (T,hs), ld 3C
      const float* a = att + (b * NH + h) * T * T;    // (T,T)
      float* ds = scratch + (b * NH + h) * T * T;     // (T,T): datt, then dscores
      const float* dy = dout + b * T * C + h * hs;    // (T,hs), ld C
      // datt[r0:r1, 0:r1] = dy[r0:r1] @ v[0:r1]^T
      for (int64_t r0 = 0; r0 < T; r0 += kRowBlock) {
        const int64_t r1 = std::min(T, r0 + kRowBlock);
        sgemm(false, true, r1 - r0, r1, hs, 1.0f, dy + r0 * C, C, v, 3 * C, 0.0f, ds + r0 * T,
              T);
      }
      // dv[c0:c1] += a[c0:T, c0:c1]^T @ dy[c0:T]   (a is zero above the diagonal)
      for (int64_t c0 = 0; c0 < T; c0 += kRowBlock) {
        const int64_t c1 = std::min(T, c0 + kRowBlock);
        sgemm(true, false, c1 - c0, hs, T - c0, 1.0f, a + c0 * T + c0, T, dy + c0 * C, C, 1.0f,
              dv + c0 * 3 * C, 3 * C);
      }
#pragma omp parallel for schedule(static, kSoftmaxRowChunk)
      for (int64_t t = 0; t < T; t++) {
        causal_softmax_backward_row(ds + t * T, a + t * T, t, block_end(t, T));
      }
      // dq[r0:r1] += scale * ds[r0:r1, 0:r1] @ k[0:r1]
      for (int64_t r0 = 0; r0 < T; r0 += kRowBlock) {
        const int64_t r1 = std::min(T, r0 + kRowBlock);
        sgemm(false, false, r1 - r0, hs, r1, scale, ds + r0 * T, T, k, 3 * C, 1.0f,
              dq + r0 * 3 * C, 3 * C);
      }
      // dk[c0:c1] += scale * ds[c0:T, c0:c1]^T @ q[c0:T]
      for (int64_t c0 = 0; c0 < T; c0 += kRowBlock) {
        const int64_t c1 = std::min(T, c0 + kRowBlock);
        sgemm(true, false, c1 - c0, hs, T - c0, scale, ds + c0 * T + c0, T, q + c0 * 3 * C,
              3 * C, 1.0f, dk + c0 * 3 * C, 3 * C);
      }
    }
  }
}

}  // namespace strata::cpu
