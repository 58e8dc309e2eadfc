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

// Note [Attention in phases]
// Each kernel runs in three phases over all (batch, head) pairs: sgemms, one OpenMP softmax
// over all rows, sgemms. Going head by head instead would switch between the OpenBLAS and the
// OpenMP thread pools 2*B*NH times per call, and on two cores a switch can cost milliseconds
// while the pool just left still spins. Measured at B=1, T=1024, C=768 on the 2-core machine
// with the default OMP_WAIT_POLICY: forward 33-120 ms head by head, 28-34 ms in phases (both
// ~25 ms with OMP_WAIT_POLICY=passive). The price is that the T x T blocks go through memory
// between phases instead of staying in cache.

// Note [Decode attention]
// attention_decode is one query row against a key/value cache: the last row (t = T-1) of
// attention_forward, with the forward's float operations in the forward's order wherever that
// order is this file's to choose:
//  - score s_t = (q . k_t) * scale: an FMA chain over i = 0, 1, ..., hs-1 from +0, then one
//    multiply by scale, as an sgemm micro-kernel computes one element of alpha * q k^T;
//  - the softmax: causal_softmax_row itself, on the row of T scores;
//  - out = sum_t p_t v_t: each element an FMA chain over t = 0, 1, ..., T-1 from +0.
// The order inside the forward's two sgemms is OpenBLAS's (by CPU, shape and thread split), so
// decode agrees with the forward's last row to rounding, not bit for bit: the bound and the
// measurements are in tests/test_kernels_decode.cpp. The reference pair (cpu::ref, plain loops in
// one order) agrees bit for bit. The thread count changes no bit (attention_decode says why).
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <memory>

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

// fn(b0, b1) for each block [b0, b1) of kRowBlock rows (or columns) of 0 .. T-1, in order.
template <typename Fn>
void for_each_block(int64_t T, Fn fn) {
  for (int64_t b0 = 0; b0 < T; b0 += kRowBlock) fn(b0, std::min(T, b0 + kRowBlock));
}

// The three block-triangular products of Note [Block-triangular attention], for one head: x, y
// and out are (T,hs) with leading dimensions ldx, ldy, ldo; s is (T,T) with leading dimension T.

// s[r0:r1, 0:r1] = alpha * x[r0:r1] @ y[0:r1]^T for each row block: the lower triangle of
// alpha x y^T, and the small triangles above it on the diagonal.
void block_scores(float* s, const float* x, int64_t ldx, const float* y, int64_t ldy, int64_t T,
                  int64_t hs, float alpha) {
  for_each_block(T, [&](int64_t r0, int64_t r1) {
    sgemm(false, true, r1 - r0, r1, hs, alpha, x + r0 * ldx, ldx, y, ldy, 0.0f, s + r0 * T, T);
  });
}

// out[r0:r1] = beta * out[r0:r1] + alpha * s[r0:r1, 0:r1] @ y[0:r1] for each row block: out =
// alpha s y (+ out) for an s that is zero above the diagonal.
void block_s_times(float* out, int64_t ldo, const float* s, const float* y, int64_t ldy, int64_t T,
                   int64_t hs, float alpha, float beta) {
  for_each_block(T, [&](int64_t r0, int64_t r1) {
    sgemm(false, false, r1 - r0, hs, r1, alpha, s + r0 * T, T, y, ldy, beta, out + r0 * ldo, ldo);
  });
}

// out[c0:c1] += alpha * s[c0:T, c0:c1]^T @ y[c0:T] for each column block: out += alpha s^T y for
// an s that is zero above the diagonal.
void block_st_times(float* out, int64_t ldo, const float* s, const float* y, int64_t ldy, int64_t T,
                    int64_t hs, float alpha) {
  for_each_block(T, [&](int64_t c0, int64_t c1) {
    sgemm(true, false, c1 - c0, hs, T - c0, alpha, s + c0 * T + c0, T, y + c0 * ldy, ldy, 1.0f,
          out + c0 * ldo, ldo);
  });
}

// Where head h of batch b lives: its q columns in qkv (and dqkv), k at +C and v at +2C, each
// (T,hs) with leading dimension 3C; its (T,T) matrix in att (and scratch); its (T,hs) columns in
// out (and dout), leading dimension C.
struct HeadOffsets {
  int64_t qkv, tt, out;
};

// The shape checks of attention_forward and attention_backward (sgemm takes int sizes), and
// their scale 1/sqrt(hs).
float checked_scale(int64_t T, int64_t C, int64_t NH) {
  STRATA_CHECK(NH > 0 && C % NH == 0);
  STRATA_CHECK(3 * C <= INT32_MAX && T <= INT32_MAX);
  return 1.0f / std::sqrt(static_cast<float>(C / NH));
}

// fn(offsets) for every (batch, head), in order.
template <typename Fn>
void for_each_head(int64_t B, int64_t T, int64_t C, int64_t NH, Fn fn) {
  const int64_t hs = C / NH;
  for (int64_t b = 0; b < B; b++) {
    for (int64_t h = 0; h < NH; h++) {
      fn(HeadOffsets{b * T * 3 * C + h * hs, (b * NH + h) * T * T, b * T * C + h * hs});
    }
  }
}

// Note [Decode attention]: keys per score task (SIMD lanes of the FMA chains) and output columns
// per weighted-sum task.
constexpr int64_t kDecodeKeyTile = 32;
constexpr int64_t kDecodeColumns = 64;

// acc[u] = fma(a[i], b[i*ldb + u], acc[u]) for i = 0 .. n-1 in order, u < width: width FMA
// chains side by side, one per SIMD lane (Note [Decode attention]).
[[gnu::always_inline]] inline void fma_chains(float* acc, const float* a, const float* b,
                                              int64_t ldb, int64_t n, int64_t width) {
  for (int64_t i = 0; i < n; i++) {
    const float ai = a[i];
    const float* bi = b + i * ldb;
#pragma omp simd
    for (int64_t u = 0; u < width; u++) acc[u] = std::fma(ai, bi[u], acc[u]);
  }
}

// Scores of the n <= kDecodeKeyTile keys from t0 for the query heads h0 .. h0+heads-1, which all
// read the key head that starts at k:
//   scratch[h*T + t0 + u] = (q_h . k_{t0+u}) * scale, the dot product an FMA chain over i.
[[gnu::noinline]] void decode_score_tile(float* scratch,  // (NH,T)  columns t0 .. t0+n written
                                         float* kt,       // (hs, kDecodeKeyTile) overwritten
                                         const float* q,  // (NH*hs)
                                         const float* k,  // key head of position 0; ld apart
                                         int64_t ld, int64_t T, int64_t t0, int64_t n, int64_t h0,
                                         int64_t heads, int64_t hs, float scale) {
  // kt[i][u] = key t0+u, element i; lanes u >= n hold 0 and are never stored.
  for (int64_t u = 0; u < n; u++) {
    const float* key = k + (t0 + u) * ld;
    for (int64_t i = 0; i < hs; i++) kt[i * kDecodeKeyTile + u] = key[i];
  }
  for (int64_t u = n; u < kDecodeKeyTile; u++) {
    for (int64_t i = 0; i < hs; i++) kt[i * kDecodeKeyTile + u] = 0.0f;
  }
  for (int64_t h = h0; h < h0 + heads; h++) {
    float acc[kDecodeKeyTile] = {};
    fma_chains(acc, q + h * hs, kt, kDecodeKeyTile, hs, kDecodeKeyTile);
    float* row = scratch + h * T + t0;
    for (int64_t u = 0; u < n; u++) row[u] = acc[u] * scale;
  }
}

// o[c] = sum over t of p[t] * v[t*ld + c], c < width (kDecodeColumns when kFull): each an FMA
// chain over t = 0 .. T-1 from 0. With kFull the accumulators are a fixed set of registers.
template <bool kFull>
[[gnu::noinline]] void decode_weighted_sum(float* o,        // (width)
                                           const float* p,  // (T)  probabilities
                                           const float* v,  // value head of position 0; ld apart
                                           int64_t ld, int64_t T, int64_t width) {
  const int64_t w = kFull ? kDecodeColumns : width;
  float acc[kDecodeColumns] = {};
  fma_chains(acc, p, v, ld, T, w);
  std::copy(acc, acc + w, o);
}

}  // namespace

void attention_forward(float* out, float* att, const float* qkv, int64_t B, int64_t T, int64_t C,
                       int64_t NH) {
  const float scale = checked_scale(T, C, NH);
  if (B == 0 || T == 0 || C == 0) return;
  const int64_t hs = C / NH;
  // att[b,h][r0:r1, 0:r1] = scale * q[r0:r1] @ k[0:r1]^T
  for_each_head(B, T, C, NH, [&](const HeadOffsets& o) {
    const float* q = qkv + o.qkv;  // (T,hs), ld 3C
    const float* k = q + C;        // (T,hs), ld 3C
    block_scores(att + o.tt, q, 3 * C, k, 3 * C, T, hs, scale);
  });
  // Full rows: att must be zero above the diagonal, also beyond the computed blocks.
  const int64_t rows = B * NH * T;
#pragma omp parallel for schedule(static, kSoftmaxRowChunk) if (rows * T >= kMinParallelWork)
  for (int64_t row = 0; row < rows; row++) causal_softmax_row(att + row * T, row % T, T);
  // out[b][r0:r1, head h] = att[b,h][r0:r1, 0:r1] @ v[0:r1]
  for_each_head(B, T, C, NH, [&](const HeadOffsets& o) {
    const float* v = qkv + o.qkv + 2 * C;  // (T,hs), ld 3C
    block_s_times(out + o.out, C, att + o.tt, v, 3 * C, T, hs, 1.0f, 0.0f);
  });
}

void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                        const float* att, int64_t B, int64_t T, int64_t C, int64_t NH) {
  const float scale = checked_scale(T, C, NH);
  if (B == 0 || T == 0 || C == 0) return;
  const int64_t hs = C / NH;
  for_each_head(B, T, C, NH, [&](const HeadOffsets& o) {
    const float* v = qkv + o.qkv + 2 * C;  // (T,hs), ld 3C
    const float* dy = dout + o.out;        // (T,hs), ld C
    // datt[r0:r1, 0:r1] = dy[r0:r1] @ v[0:r1]^T, into scratch
    block_scores(scratch + o.tt, dy, C, v, 3 * C, T, hs, 1.0f);
    // dv[c0:c1] += a[c0:T, c0:c1]^T @ dy[c0:T]   (a is zero above the diagonal)
    block_st_times(dqkv + o.qkv + 2 * C, 3 * C, att + o.tt, dy, C, T, hs, 1.0f);
  });
  // scratch: datt -> dscores, row by row.
  const int64_t rows = B * NH * T;
#pragma omp parallel for schedule(static, kSoftmaxRowChunk) if (rows * T >= kMinParallelWork)
  for (int64_t row = 0; row < rows; row++) {
    const int64_t t = row % T;
    causal_softmax_backward_row(scratch + row * T, att + row * T, t, block_end(t, T));
  }
  for_each_head(B, T, C, NH, [&](const HeadOffsets& o) {
    const float* q = qkv + o.qkv;      // (T,hs), ld 3C
    const float* k = q + C;            // (T,hs), ld 3C
    float* dq = dqkv + o.qkv;          // (T,hs), ld 3C
    const float* ds = scratch + o.tt;  // (T,T)
    // dq[r0:r1] += scale * ds[r0:r1, 0:r1] @ k[0:r1]
    block_s_times(dq, 3 * C, ds, k, 3 * C, T, hs, scale, 1.0f);
    // dk[c0:c1] += scale * ds[c0:T, c0:c1]^T @ q[c0:T]
    block_st_times(dq + C, 3 * C, ds, q, 3 * C, T, hs, scale);
  });
}

// Note [Decode attention]. Three work-shared loops in one parallel region (the barriers between
// them order scores -> softmax -> weighted sum). The scores go by (kv head, tile of
// kDecodeKeyTile keys): the tile is transposed once into a small buffer, so that the FMA chains of
// its keys run in SIMD lanes, and serves all NH/NKV query heads that read that kv head. The
// softmax goes by query head, the weighted sum by (query head, block of kDecodeColumns output
// columns). Every score and output element is one chain in the Note's fixed order whichever
// thread computes it: the result does not depend on the thread count. No cblas calls (Note [Fast
// kernels and the sgemm thread pool]).
void attention_decode(float* out, float* scratch, const float* q, const float* kv, int64_t T,
                      int64_t NH, int64_t NKV, int64_t hs) {
  STRATA_CHECK(T >= 1 && NKV > 0 && NH % NKV == 0 && hs > 0);
  const int64_t rep = NH / NKV, ld = 2 * NKV * hs;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const int64_t key_tiles = (T + kDecodeKeyTile - 1) / kDecodeKeyTile;
  const int64_t column_blocks = (hs + kDecodeColumns - 1) / kDecodeColumns;
#pragma omp parallel if (NH * T * hs >= kMinParallelWork)
  {
    std::unique_ptr<float[]> kt(new float[hs * kDecodeKeyTile]);  // (hs, kDecodeKeyTile)
#pragma omp for schedule(static)
    for (int64_t task = 0; task < NKV * key_tiles; task++) {
      const int64_t g = task / key_tiles, t0 = (task % key_tiles) * kDecodeKeyTile;
      decode_score_tile(scratch, kt.get(), q, kv + g * hs, ld, T, t0,
                        std::min(kDecodeKeyTile, T - t0), g * rep, rep, hs, scale);
    }
#pragma omp for schedule(static)
    for (int64_t h = 0; h < NH; h++) causal_softmax_row(scratch + h * T, T - 1, T);
#pragma omp for schedule(static)
    for (int64_t task = 0; task < NH * column_blocks; task++) {
      const int64_t h = task / column_blocks, c0 = (task % column_blocks) * kDecodeColumns;
      const int64_t width = std::min(kDecodeColumns, hs - c0);
      float* o = out + h * hs + c0;                     // (width)
      const float* p = scratch + h * T;                 // (T)
      const float* v = kv + (NKV + h / rep) * hs + c0;  // (T, width), ld apart
      if (width == kDecodeColumns) {
        decode_weighted_sum<true>(o, p, v, ld, T, width);
      } else {
        decode_weighted_sum<false>(o, p, v, ld, T, width);
      }
    }
  }
}

}  // namespace strata::cpu
