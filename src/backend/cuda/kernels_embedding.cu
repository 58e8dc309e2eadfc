// Token + position embedding; the position table may be null (Llama: wte only, and the backward
// skips dwpe). The forward is a gather; the backward scatters rows chosen by the tokens, and
// repeated tokens hit the same dwte row, so it is organized to need no atomics and to add each
// element's contributions in token order, exactly as the CPU reference does: both results are
// bit-identical to cpu::ref.
//
// Tokens must lie in [0, V) (V is not an argument, as on the CPU): the forward would read and
// the backward write outside wte/dwte otherwise. The backward skips negative tokens.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/kernels.cuh"
#include "backend/cuda/kernels_common.cuh"

namespace strata {

namespace {

constexpr int kThreads = 256;
// Note [Embedding backward by token bucket]
// Block (g, tile) owns dwte rows whose token id is congruent to g modulo kBuckets, and the
// kThreads columns of `tile`; thread x owns one column. Each warp walks all B*T tokens in order,
// 32 at a time: a ballot marks the tokens in its bucket, and the warp applies them one by one in
// increasing position (lowest set bit first). So each dwte element is updated by a single thread,
// in token order, whatever the GPU: no atomics, no sort, no workspace. A token that fills the
// batch serializes its bucket, which is slow but still correct; on text the buckets are even.
constexpr uint32_t kBuckets = 128;

__global__ void embedding_forward_kernel(float* __restrict__ out,             // (B,T,C)
                                         const int32_t* __restrict__ tokens,  // (B,T)
                                         const float* __restrict__ wte,       // (V,C)
                                         const float* __restrict__ wpe,       // (maxT,C) or null
                                         int64_t T, int64_t C) {
  const int64_t bt = blockIdx.x;  // one block per token
  const float* e = wte + static_cast<int64_t>(tokens[bt]) * C;
  float* o = out + bt * C;
  if (wpe == nullptr) {  // no learned positions (Llama)
    for (int64_t c = threadIdx.x; c < C; c += kThreads) o[c] = e[c];
    return;
  }
  const float* p = wpe + (bt % T) * C;
  for (int64_t c = threadIdx.x; c < C; c += kThreads) o[c] = e[c] + p[c];
}

__global__ void embedding_backward_wte_kernel(float* __restrict__ dwte,            // (V,C) +=
                                              const float* __restrict__ dout,      // (B,T,C)
                                              const int32_t* __restrict__ tokens,  // (B,T)
                                              int64_t BT, int64_t C) {
  const uint32_t bucket = blockIdx.x;
  const int64_t col = static_cast<int64_t>(blockIdx.y) * kThreads + threadIdx.x;
  const int lane = threadIdx.x % 32;
  // No early return for col >= C: the whole warp must take part in the ballots and shuffles.
  for (int64_t base = 0; base < BT; base += 32) {
    const int32_t tok = base + lane < BT ? tokens[base + lane] : -1;
    const bool mine = tok >= 0 && static_cast<uint32_t>(tok) % kBuckets == bucket;
    uint32_t pending = __ballot_sync(0xffffffffu, mine);
    while (pending != 0) {  // uniform across the warp: every lane holds the same mask
      const int src = __ffs(pending) - 1;
      pending &= pending - 1;
      const int64_t t = __shfl_sync(0xffffffffu, tok, src);
      if (col < C) dwte[t * C + col] += dout[(base + src) * C + col];
    }
  }
}

// dwpe[t][c] += sum over b of dout[b][t][c], in b order: one thread per (t, c).
__global__ void embedding_backward_wpe_kernel(float* __restrict__ dwpe,        // (maxT,C) +=
                                              const float* __restrict__ dout,  // (B,T,C)
                                              int64_t B, int64_t T, int64_t C) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < T * C;
       i += stride) {
    float acc = dwpe[i];
    for (int64_t b = 0; b < B; b++) acc += dout[b * T * C + i];
    dwpe[i] = acc;
  }
}

}  // namespace

void cuda_embedding_forward(cudaStream_t stream, float* out, const int32_t* tokens,
                            const float* wte, const float* wpe, int64_t B, int64_t T, int64_t C) {
  if (B <= 0 || T <= 0 || C <= 0) return;
  embedding_forward_kernel<<<static_cast<unsigned>(B * T), kThreads, 0, stream>>>(out, tokens, wte,
                                                                                  wpe, T, C);
  STRATA_CUDA_LAUNCH_CHECK();
}

void cuda_embedding_backward(cudaStream_t stream, float* dwte, float* dwpe, const float* dout,
                             const int32_t* tokens, int64_t B, int64_t T, int64_t C) {
  if (B <= 0 || T <= 0 || C <= 0) return;
  const dim3 wte_grid(kBuckets, static_cast<unsigned>((C + kThreads - 1) / kThreads));
  embedding_backward_wte_kernel<<<wte_grid, kThreads, 0, stream>>>(dwte, dout, tokens, B * T, C);
  STRATA_CUDA_LAUNCH_CHECK();
  if (dwpe == nullptr) return;  // no learned positions (Llama)
  embedding_backward_wpe_kernel<<<kernels_detail::elementwise_blocks(T * C),
                                  kernels_detail::kElementwiseThreads, 0, stream>>>(dwpe, dout, B,
                                                                                    T, C);
  STRATA_CUDA_LAUNCH_CHECK();
}

}  // namespace strata
