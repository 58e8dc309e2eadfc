// AdamW on the GPU, bit-identical to adamw_step_ref (backend/cpu/kernels_adamw.h,
// Note [AdamW operation order]).
//
// Every rounded operation of the Note is one IEEE intrinsic with round-to-nearest (__fmul_rn,
// __fadd_rn, __fsub_rn, __fdiv_rn, __fsqrt_rn), which nvcc never contracts into an FMA or
// replaces with an approximation, whatever the flags. The file is also compiled with -fmad=false
// (CMakeLists.txt), so a plain operator added here later cannot be fused either. Denormals are
// kept (no -ftz), as on the CPU. The per-call constants come from detail::adamw_constants
// (backend/adamw_hyper.h), the same host function the CPU versions use.
#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device_kernels.cuh"

namespace strata {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;  // grid-stride beyond this: enough to fill any GPU

__global__ void adamw_kernel(float* param,        // (n)
                             float* m,            // (n)
                             float* v,            // (n)
                             bf16_t* param_bf16,  // (n) or null
                             const float* grad,   // (n)
                             int64_t n, detail::AdamWConstants c) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const float g = __fmul_rn(grad[i], c.grad_scale);

    const float m_old = __fmul_rn(c.beta1, m[i]);
    const float m_new_part = __fmul_rn(c.one_minus_beta1, g);
    const float m_new = __fadd_rn(m_old, m_new_part);

    const float v_old = __fmul_rn(c.beta2, v[i]);
    float v_new_part = __fmul_rn(c.one_minus_beta2, g);
    v_new_part = __fmul_rn(v_new_part, g);
    const float v_new = __fadd_rn(v_old, v_new_part);

    const float decayed = __fmul_rn(param[i], c.decay);

    float denom = __fsqrt_rn(v_new);
    denom = __fdiv_rn(denom, c.bc2_sqrt);
    denom = __fadd_rn(denom, c.eps);

    float update = __fmul_rn(c.step_size, m_new);
    update = __fdiv_rn(update, denom);
    const float p_new = __fsub_rn(decayed, update);

    m[i] = m_new;
    v[i] = v_new;
    param[i] = p_new;
    if (param_bf16 != nullptr) param_bf16[i] = f32_to_bf16(p_new);  // core/dtype.h
  }
}

}  // namespace

void cuda_adamw_step(cudaStream_t stream, float* param, float* m, float* v, bf16_t* param_bf16,
                     const float* grad, int64_t n, const detail::AdamWConstants& c) {
  if (n == 0) return;
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  adamw_kernel<<<static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks), kThreads, 0,
                 stream>>>(param, m, v, param_bf16, grad, n, c);
  STRATA_CUDA_LAUNCH_CHECK();
}

}  // namespace strata
