// Fast matmul and bias gradient. The product itself is OpenBLAS sgemm; this file only maps the
// row-major (trans_a, trans_b, bias, accumulate) contract onto it.
#include <cblas.h>

#include <algorithm>
#include <climits>
#include <memory>

#include "backend/cpu/kernels.h"
#include "core/check.h"

namespace strata::cpu {

namespace {
// bias_backward: rows per partial sum (Note [Deterministic reductions]), and columns per task
// when the partials are combined.
constexpr int64_t kBiasRowChunk = 64;
constexpr int64_t kBiasColumnBlock = 256;
}  // namespace

void matmul(float* out, const float* a, const float* b, const float* bias, int64_t M, int64_t N,
            int64_t K, bool trans_a, bool trans_b, bool accumulate) {
  STRATA_CHECK(M >= 0 && N >= 0 && K >= 0);
  STRATA_CHECK_MSG(M <= INT_MAX && N <= INT_MAX && K <= INT_MAX, "cblas takes int dims");
  if (M == 0 || N == 0) return;
  // With a bias, put it (plus the old contents when accumulating) into out first and let sgemm
  // add the product on top with beta = 1; that costs one pass over out and no extra buffer.
  float beta = accumulate ? 1.0f : 0.0f;
  if (bias) {
#pragma omp parallel for schedule(static) if (M * N >= kMinParallelWork)
    for (int64_t i = 0; i < M; i++) {
      float* row = out + i * N;
      if (accumulate) {
        for (int64_t j = 0; j < N; j++) row[j] += bias[j];
      } else {
        for (int64_t j = 0; j < N; j++) row[j] = bias[j];
      }
    }
    beta = 1.0f;
  }
  // Leading dimensions of the row-major operands as stored; BLAS rejects 0 even when K == 0.
  const int64_t lda = std::max<int64_t>(1, trans_a ? M : K);
  const int64_t ldb = std::max<int64_t>(1, trans_b ? K : N);
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(M), static_cast<int>(N),
              static_cast<int>(K), 1.0f, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta,
              out, static_cast<int>(N));
}

// Row chunks in parallel, each summed in row order into its own partial, then the partials
// added into dbias in chunk order (Note [Deterministic reductions]). Chunks stream through
// contiguous rows; giving each thread a block of columns instead reads only a short run of every
// row, which measured 4x slower at M = 4096, N = 3072.
void bias_backward(float* dbias, const float* dout, int64_t M, int64_t N) {
  if (M == 0 || N == 0) return;
  const int64_t chunks = (M + kBiasRowChunk - 1) / kBiasRowChunk;
  std::unique_ptr<float[]> partials(new float[chunks * N]);  // (chunks, N)
#pragma omp parallel for schedule(static) if (M * N >= kMinParallelWork)
  for (int64_t chunk = 0; chunk < chunks; chunk++) {
    float* p = partials.get() + chunk * N;
    const int64_t i0 = chunk * kBiasRowChunk;
    const int64_t i1 = std::min(M, i0 + kBiasRowChunk);
    std::copy(dout + i0 * N, dout + (i0 + 1) * N, p);
    for (int64_t i = i0 + 1; i < i1; i++) {
      const float* row = dout + i * N;
      for (int64_t j = 0; j < N; j++) p[j] += row[j];
    }
  }
  const int64_t blocks = (N + kBiasColumnBlock - 1) / kBiasColumnBlock;
#pragma omp parallel for schedule(static) if (chunks * N >= kMinParallelWork)
  for (int64_t blk = 0; blk < blocks; blk++) {
    const int64_t j0 = blk * kBiasColumnBlock;
    const int64_t j1 = std::min(N, j0 + kBiasColumnBlock);
    for (int64_t chunk = 0; chunk < chunks; chunk++) {
      const float* p = partials.get() + chunk * N;
      for (int64_t j = j0; j < j1; j++) dbias[j] += p[j];
    }
  }
}

}  // namespace strata::cpu
