// AdamW with decoupled weight decay on the CPU: a scalar reference (kernels_adamw.cpp) and SIMD
// versions (kernels_adamw_simd.cpp: AVX2, AVX-512) that are bit-identical to it, element by
// element, including the bf16 copy of the params. The optimizer layer (optim/adamw_layout.h)
// steps the parameter layout with them; the CPU devices run them on their streams.
//
// Note [AdamW operation order]
// Every version, and any mirror of it (the Python parity scripts), performs exactly these
// operations. Per call, each in double and then rounded once to f32 (beta1, beta2, eps and
// grad_scale are f32 as given):
//   one_minus_beta1 = 1 - beta1;  one_minus_beta2 = 1 - beta2;  decay = 1 - lr * weight_decay
//   step_size = lr / (1 - pow(beta1, step));  bc2_sqrt = sqrt(1 - pow(beta2, step))
// Per element, each +, -, *, / and sqrt below is one IEEE f32 operation rounded to nearest, no
// FMA anywhere (so a float32 numpy/torch mirror reproduces the bits); param_bf16 only when given:
//   g = grad * grad_scale;  m = beta1 * m + one_minus_beta1 * g;  p = param * decay
//   v = beta2 * v + (one_minus_beta2 * g) * g;  denom = sqrt(v) / bc2_sqrt + eps
//   param = p - (step_size * m) / denom;  param_bf16 = f32_to_bf16(param)  (core/dtype.h)
// This is torch.optim.AdamW's single-tensor CPU path (decay first, then param.addcdiv_), except
// that PyTorch updates m with lerp; the two agree to an ulp of m.
#pragma once

#include <cstdint>

#include "backend/adamw_hyper.h"
#include "core/dtype.h"

namespace strata {

// param, m, v (n) f32, updated in place; grad (n) read only;
// param_bf16 (n) may be null; when given it receives f32_to_bf16(updated param) in the same pass.
// Single-threaded; the specification the SIMD versions are held to bit for bit.
void adamw_step_ref(float* param, float* m, float* v, bf16_t* param_bf16, const float* grad,
                    int64_t n, const AdamWHyper& h);

enum class SimdLevel { scalar, avx2, avx512 };

// The widest level this CPU (and OS) supports.
SimdLevel adamw_best_simd_level();
const char* simd_level_name(SimdLevel level);

// Multi-threaded (OpenMP) over contiguous chunks; the result does not depend on the thread
// count. `level` must be supported by this CPU.
void adamw_step_with(SimdLevel level, float* param, float* m, float* v, bf16_t* param_bf16,
                     const float* grad, int64_t n, const AdamWHyper& h);
// adamw_step_with(adamw_best_simd_level(), ...)
void adamw_step(float* param, float* m, float* v, bf16_t* param_bf16, const float* grad, int64_t n,
                const AdamWHyper& h);

namespace detail {

// The scalar rule on n elements starting at the given pointers (param_bf16 may be null).
// adamw_step_ref is this on the whole range; the SIMD kernels use it for their tails.
void adamw_span_scalar(float* param, float* m, float* v, bf16_t* param_bf16, const float* grad,
                       int64_t n, const AdamWConstants& c);

}  // namespace detail
}  // namespace strata
