// Fast token + position embedding (position table optional: null wpe / dwpe, as in Llama). The
// backward scatters into rows chosen by the tokens, and repeated tokens hit the same row, so it
// splits the work by columns, not by tokens.
#include <algorithm>

#include "backend/cpu/kernels.h"

namespace strata::cpu {

namespace {
// Columns per backward task: C = 768 gives 12 tasks, enough for a few threads.
constexpr int64_t kEmbedColumnBlock = 64;
}  // namespace

void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                       int64_t B, int64_t T, int64_t C) {
#pragma omp parallel for schedule(static) if (B * T * C >= kMinParallelWork)
  for (int64_t bt = 0; bt < B * T; bt++) {
    const float* e = wte + static_cast<int64_t>(tokens[bt]) * C;
    float* o = out + bt * C;
    if (wpe == nullptr) {  // no learned positions (Llama)
      std::copy(e, e + C, o);
      continue;
    }
    const float* p = wpe + (bt % T) * C;
    for (int64_t c = 0; c < C; c++) o[c] = e[c] + p[c];
  }
}

// Each task owns a block of columns of dwte and dwpe and walks all tokens in order: no two
// threads touch the same element, and every element receives its contributions in token
// order, whatever the thread count (Note [Deterministic reductions]).
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                        int64_t B, int64_t T, int64_t C) {
  const int64_t blocks = (C + kEmbedColumnBlock - 1) / kEmbedColumnBlock;
#pragma omp parallel for schedule(static) if (B * T * C >= kMinParallelWork)
  for (int64_t blk = 0; blk < blocks; blk++) {
    const int64_t c0 = blk * kEmbedColumnBlock;
    const int64_t c1 = std::min(C, c0 + kEmbedColumnBlock);
    for (int64_t bt = 0; bt < B * T; bt++) {
      const float* d = dout + bt * C;
      float* e = dwte + static_cast<int64_t>(tokens[bt]) * C;
      if (dwpe == nullptr) {  // no learned positions (Llama)
        for (int64_t c = c0; c < c1; c++) e[c] += d[c];
        continue;
      }
      float* p = dwpe + (bt % T) * C;
      for (int64_t c = c0; c < c1; c++) {
        e[c] += d[c];
        p[c] += d[c];
      }
    }
  }
}

}  // namespace strata::cpu
