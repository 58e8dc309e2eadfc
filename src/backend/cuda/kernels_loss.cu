// Softmax cross-entropy over the vocabulary: one block per row (V ~ 50k, so a row is
// ~100 elements per thread). Block reductions are the fixed trees of kernels_common.cuh.
//
// Targets: the CPU aborts (STRATA_CHECK) on a target outside [0, V). A kernel cannot abort the
// caller, so a bad target poisons its row instead: the loss is NaN in the forward and the whole
// dlogits row gets NaN in the backward, which never indexes probs with it. The NaN reaches the
// loss the host reads, and the trainer's finite checks. kIgnoreTarget (Note [Ignored targets] in
// core/targets.h) is no bad target: loss 0 and the dlogits row left as it is.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "backend/cuda/kernels.cuh"
#include "backend/cuda/kernels_common.cuh"
#include "core/targets.h"

namespace strata {

namespace {

using kernels_detail::block_max;
using kernels_detail::block_sum;

constexpr int kLossThreads = 512;

__device__ __forceinline__ bool valid_target(int32_t target, int64_t V) {
  return target >= 0 && target < V;
}

// probs = exp(x - max) / sum, sum accumulated in double (as the CPU: ~50k terms); the exps are
// f32 (expf, full precision). loss = log(sum) - (x[target] - max) in double: no log of a rounded
// probability, so a tiny probability still gives an accurate loss.
__global__ void softmax_cross_entropy_forward_kernel(float* __restrict__ losses,           // (N)
                                                     float* __restrict__ probs,            // (N,V)
                                                     const float* __restrict__ logits,     // (N,V)
                                                     const int32_t* __restrict__ targets,  // (N)
                                                     int64_t V) {
  __shared__ float shared_f[32];
  __shared__ double shared_d[32];
  const int64_t row = blockIdx.x;
  const float* x = logits + row * V;
  float* p = probs + row * V;

  float max = -INFINITY;
  for (int64_t v = threadIdx.x; v < V; v += kLossThreads) max = fmaxf(max, x[v]);
  max = block_max<kLossThreads>(max, shared_f);

  double sum = 0.0;
  for (int64_t v = threadIdx.x; v < V; v += kLossThreads) {
    const float e = expf(x[v] - max);
    p[v] = e;
    sum += e;
  }
  sum = block_sum<kLossThreads>(sum, shared_d);

  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t v = threadIdx.x; v < V; v += kLossThreads) p[v] *= inv;  // own elements only

  if (threadIdx.x == 0) {
    const int32_t target = targets[row];
    losses[row] = target == kIgnoreTarget ? 0.0f
                  : valid_target(target, V)
                      ? static_cast<float>(log(sum) - (static_cast<double>(x[target]) - max))
                      : NAN;
  }
}

// dlogits += (probs - onehot(target)) * dloss, rounded as the reference: the _rn intrinsics keep
// nvcc from fusing the multiply and add, so the result is bit-identical to the CPU's.
__global__ void softmax_cross_entropy_backward_kernel(float* __restrict__ dlogits,      // (N,V) +=
                                                      const float* __restrict__ probs,  // (N,V)
                                                      const int32_t* __restrict__ targets,  // (N)
                                                      float dloss, int64_t V) {
  const int64_t row = blockIdx.x;
  const int32_t target = targets[row];
  if (target == kIgnoreTarget) return;  // no loss, no gradient: the row is left as it is
  const bool valid = valid_target(target, V);
  const float* p = probs + row * V;
  float* d = dlogits + row * V;
  for (int64_t v = threadIdx.x; v < V; v += kLossThreads) {
    const float indicator = v == target ? 1.0f : 0.0f;
    const float grad = valid ? __fmul_rn(__fsub_rn(p[v], indicator), dloss) : NAN;
    d[v] = __fadd_rn(d[v], grad);
  }
}

}  // namespace

void cuda_softmax_cross_entropy_forward(cudaStream_t stream, float* losses, float* probs,
                                        const float* logits, const int32_t* targets, int64_t N,
                                        int64_t V) {
  if (N <= 0 || V <= 0) return;
  softmax_cross_entropy_forward_kernel<<<static_cast<unsigned>(N), kLossThreads, 0, stream>>>(
      losses, probs, logits, targets, V);
  STRATA_CUDA_LAUNCH_CHECK();
}

void cuda_softmax_cross_entropy_backward(cudaStream_t stream, float* dlogits, const float* probs,
                                         const int32_t* targets, float dloss, int64_t N,
                                         int64_t V) {
  if (N <= 0 || V <= 0) return;
  softmax_cross_entropy_backward_kernel<<<static_cast<unsigned>(N), kLossThreads, 0, stream>>>(
      dlogits, probs, targets, dloss, V);
  STRATA_CUDA_LAUNCH_CHECK();
}

}  // namespace strata
