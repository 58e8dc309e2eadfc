// What a backend's AdamW is given: the hyper-parameters of one step, and the per-call constants
// derived from them. Every AdamW kernel (the CPU ones of backend/cpu/kernels_adamw.h, the CUDA
// one of backend/cuda/adamw.cu, Device::adamw_step) takes these; the optimizer layer (optim/)
// fills them from the config. Note [AdamW operation order] (backend/cpu/kernels_adamw.h) says
// how the constants are computed and used.
#pragma once

#include <cstdint>

namespace strata {

struct AdamWHyper {
  float lr;  // this step's learning rate
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
  float weight_decay;       // decoupled; 0 for tensors that do not decay
  int64_t step;             // 1-based step count, for bias correction
  float grad_scale = 1.0f;  // multiplies every gradient first (clipping factor)
};

namespace detail {

// The per-call constants of Note [AdamW operation order].
struct AdamWConstants {
  float beta1, one_minus_beta1, beta2, one_minus_beta2;
  float eps, grad_scale, decay, step_size, bc2_sqrt;
};
// One host function for every backend (defined beside the CPU reference, cpu/kernels_adamw.cpp),
// so that the CPU and CUDA kernels start from the same bits.
AdamWConstants adamw_constants(const AdamWHyper& h);

}  // namespace detail
}  // namespace strata
