// Fast softmax cross-entropy over the vocabulary, rows in parallel.
#include <cmath>

#include "backend/cpu/kernels.h"
#include "core/check.h"
#include "core/targets.h"

namespace strata::cpu {

void softmax_cross_entropy_forward(float* losses, float* probs, const float* logits,
                                   const int32_t* targets, int64_t N, int64_t V) {
#pragma omp parallel for schedule(static) if (N * V >= kMinParallelWork)
  for (int64_t i = 0; i < N; i++) {
    const float* x = logits + i * V;
    float* p = probs + i * V;
    const bool counted = targets[i] != kIgnoreTarget;  // Note [Ignored targets]
    STRATA_CHECK(!counted || (targets[i] >= 0 && targets[i] < V));
    float max = -INFINITY;
#pragma omp simd reduction(max : max)
    for (int64_t v = 0; v < V; v++) max = x[v] > max ? x[v] : max;
    // The sum runs over ~50k terms, so it is kept in double; the exps themselves are f32.
    double sum = 0.0;
#pragma omp simd reduction(+ : sum)
    for (int64_t v = 0; v < V; v++) {
      p[v] = exp_fast(x[v] - max);
      sum += p[v];
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t v = 0; v < V; v++) p[v] *= inv;
    // -log(softmax[target]) as log(sum) - (x[target] - max): no log of a rounded probability,
    // so a tiny probability still gives an accurate loss.
    losses[i] = counted
                    ? static_cast<float>(std::log(sum) - (static_cast<double>(x[targets[i]]) - max))
                    : 0.0f;
  }
}

void softmax_cross_entropy_backward(float* dlogits, const float* probs, const int32_t* targets,
                                    float dloss, int64_t N, int64_t V) {
#pragma omp parallel for schedule(static) if (N * V >= kMinParallelWork)
  for (int64_t i = 0; i < N; i++) {
    const float* p = probs + i * V;
    float* d = dlogits + i * V;
    const int64_t target = targets[i];
    if (target == kIgnoreTarget) continue;  // no loss, no gradient
    // (p - onehot) * dloss, with the target split out so that the loops vectorize; p - 0 == p,
    // so this rounds exactly as the reference does.
    for (int64_t v = 0; v < target; v++) d[v] += p[v] * dloss;
    d[target] += (p[target] - 1.0f) * dloss;
    for (int64_t v = target + 1; v < V; v++) d[v] += p[v] * dloss;
  }
}

}  // namespace strata::cpu
