// Fast causal self-attention. The products are sgemm calls on strided views of qkv (q, k, v of
// head h are the columns h*hs.. of the three C-wide thirds of each row, leading dimension 3C);
// only the row-wise softmax runs under OpenMP.
//
// Note [Block-triangular attention]
// Only the lower triangle of the T x T score matrix matters. The products work on row blocks of
// kRowBlock queries: block [r0, r1) needs keys 0..r1 only, and column block [c0, c1) of
// att^T (for dv, dk) needs query rows c0..T only. That skips about half of the full square at
// the cost of the small triangles on the diagonal, which the softmax (backward) zeroes above
// the diagonal before anything reads them.
//
// Note [Attention in phases]
// Each kernel runs in three phases over all (batch, head) pairs: sgemms, one OpenMP softmax
// over all rows, sgemms. Going head by head instead would switch between the OpenBLAS and the
// OpenMP thread pools 2*B*NH times per call, and on two cores a switch can cost milliseconds
// while the pool just left still spins. Measured at B=1, T=1024, C=768 on the 2-core machine
// with the default OMP_WAIT_POLICY: forward 33-120 ms head by head, 28-34 ms in phases (both
// ~25 ms with OMP_WAIT_POLICY=passive). The price is that the T x T blocks go through memory
// between phases instead of staying in cache.
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
// balance threads (any split gives the same bits: rows are independent).
constexpr int kSoftmaxRowChunk = 16;

void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(M), static_cast<int>(N),
              static_cast<int>(K), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta,
              c, static_cast<int>(ldc));
}

// The row functions are noinline: inlined into the OpenMP-outlined loop, GCC left their loops
// scalar (the softmax took 4x longer).

// row[0..t] holds scaled scores on entry and probabilities on exit; row(t..end) is zeroed.
[[gnu::noinline]] void causal_softmax_row(float* row, int64_t t, int64_t end) {
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
[[gnu::noinline]] void causal_softmax_backward_row(float* ds, const float* p, int64_t t,
                                                   int64_t end) {
  float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
  for (int64_t j = 0; j <= t; j++) dot += p[j] * ds[j];
  for (int64_t j = 0; j <= t; j++) ds[j] = p[j] * (ds[j] - dot);
  std::fill(ds + t + 1, ds + end, 0.0f);
}

// End of the row block holding row t.
int64_t block_end(int64_t t, int64_t T) {
  return std::min(T, (t / kRowBlock + 1) * kRowBlock);
}

}  // namespace

void attention_forward(float* out, float* att, const float* qkv, int64_t B, int64_t T, int64_t C,
                       int64_t NH) {
  STRATA_CHECK(NH > 0 && C % NH == 0);
  STRATA_CHECK(3 * C <= INT32_MAX && T <= INT32_MAX);
  if (B == 0 || T == 0 || C == 0) return;
  const int64_t hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  // att[b,h][r0:r1, 0:r1] = scale * q[r0:r1] @ k[0:r1]^T
  for (int64_t b = 0; b < B; b++) {
    for (int64_t h = 0; h < NH; h++) {
      const float* q = qkv + b * T * 3 * C + h * hs;  // (T,hs), ld 3C
      const float* k = q + C;                         // (T,hs), ld 3C
      float* a = att + (b * NH + h) * T * T;          // (T,T)
      for (int64_t r0 = 0; r0 < T; r0 += kRowBlock) {
        const int64_t r1 = std::min(T, r0 + kRowBlock);
        sgemm(false, true, r1 - r0, r1, hs, scale, q + r0 * 3 * C, 3 * C, k, 3 * C, 0.0f,
              a + r0 * T, T);
      }
    }
  }
  // Full rows: att must be zero above the diagonal, also beyond the computed blocks.
  const int64_t rows = B * NH * T;
#pragma omp parallel for schedule(static, kSoftmaxRowChunk) if (rows * T >= kMinParallelWork)
  for (int64_t row = 0; row < rows; row++) causal_softmax_row(att + row * T, row % T, T);
  // out[b][r0:r1, head h] = att[b,h][r0:r1, 0:r1] @ v[0:r1]
  for (int64_t b = 0; b < B; b++) {
    for (int64_t h = 0; h < NH; h++) {
      const float* v = qkv + b * T * 3 * C + 2 * C + h * hs;  // (T,hs), ld 3C
      const float* a = att + (b * NH + h) * T * T;            // (T,T)
      float* o = out + b * T * C + h * hs;                    // (T,hs), ld C
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
      const float* v = qkv + b * T * 3 * C + 2 * C + h * hs;  // (T,hs), ld 3C
      float* dv = dqkv + b * T * 3 * C + 2 * C + h * hs;      // (T,hs), ld 3C
      const float* a = att + (b * NH + h) * T * T;            // (T,T)
      float* ds = scratch + (b * NH + h) * T * T;             // (T,T)
      const float* dy = dout + b * T * C + h * hs;            // (T,hs), ld C
      // datt[r0:r1, 0:r1] = dy[r0:r1] @ v[0:r1]^T, into scratch
      for (int64_t r0 = 0; r0 < T; r0 += kRowBlock) {
        const int64_t r1 = std::min(T, r0 + kRowBlock);
        sgemm(false, true, r1 - r0, r1, hs, 1.0f, dy + r0 * C, C, v, 3 * C, 0.0f, ds + r0 * T, T);
      }
      // dv[c0:c1] += a[c0:T, c0:c1]^T @ dy[c0:T]   (a is zero above the diagonal)
      for (int64_t c0 = 0; c0 < T; c0 += kRowBlock) {
        const int64_t c1 = std::min(T, c0 + kRowBlock);
        sgemm(true, false, c1 - c0, hs, T - c0, 1.0f, a + c0 * T + c0, T, dy + c0 * C, C, 1.0f,
              dv + c0 * 3 * C, 3 * C);
      }
    }
  }
  // scratch: datt -> dscores, row by row.
  const int64_t rows = B * NH * T;
#pragma omp parallel for schedule(static, kSoftmaxRowChunk) if (rows * T >= kMinParallelWork)
  for (int64_t row = 0; row < rows; row++) {
    const int64_t t = row % T;
    causal_softmax_backward_row(scratch + row * T, att + row * T, t, block_end(t, T));
  }
  for (int64_t b = 0; b < B; b++) {
    for (int64_t h = 0; h < NH; h++) {
      const float* q = qkv + b * T * 3 * C + h * hs;     // (T,hs), ld 3C
      const float* k = q + C;                            // (T,hs), ld 3C
      float* dq = dqkv + b * T * 3 * C + h * hs;         // (T,hs), ld 3C
      float* dk = dq + C;                                // (T,hs), ld 3C
      const float* ds = scratch + (b * NH + h) * T * T;  // (T,T)
      // dq[r0:r1] += scale * ds[r0:r1, 0:r1] @ k[0:r1]
      for (int64_t r0 = 0; r0 < T; r0 += kRowBlock) {
        const int64_t r1 = std::min(T, r0 + kRowBlock);
        sgemm(false, false, r1 - r0, hs, r1, scale, ds + r0 * T, T, k, 3 * C, 1.0f, dq + r0 * 3 * C,
              3 * C);
      }
      // dk[c0:c1] += scale * ds[c0:T, c0:c1]^T @ q[c0:T]
      for (int64_t c0 = 0; c0 < T; c0 += kRowBlock) {
        const int64_t c1 = std::min(T, c0 + kRowBlock);
        sgemm(true, false, c1 - c0, hs, T - c0, scale, ds + c0 * T + c0, T, q + c0 * 3 * C, 3 * C,
              1.0f, dk + c0 * 3 * C, 3 * C);
      }
    }
  }
}

}  // namespace strata::cpu
