// AdamW with decoupled weight decay on the CPU: a scalar reference (kernels_adamw.cpp) and SIMD
// versions (kernels_adamw_simd.cpp: AVX2, AVX-512) that are bit-identical to it, element by
// element, including the bf16 copy of the params. The optimizer layer (optim/adamw_layout.h)
// steps the parameter layout with them; the CPU devices run them on their streams.
//
// Note [AdamW operation order]
// Every version, and any mirror of it (the Python parity scripts), performs exactly these
// operations. Per call, in double, then rounded once to f32:
//   beta1, beta2, eps, grad_scale          as given (already f32)
//   one_minus_beta1 = f32(1 - (double)beta1)
//   one_minus_beta2 = f32(1 - (double)beta2)
//   decay           = f32(1 - (double)lr * (double)weight_decay)
//   step_size       = f32((double)lr / (1 - pow((double)beta1, step)))
//   bc2_sqrt        = f32(sqrt(1 - pow((double)beta2, step)))
// Per element, each line one IEEE f32 operation rounded to nearest (no FMA anywhere, so a
// float32 numpy/torch mirror reproduces the bits):
//   g  = grad * grad_scale
//   t1 = beta1 * m;             t2 = one_minus_beta1 * g;   m = t1 + t2
//   t3 = beta2 * v;             t4 = one_minus_beta2 * g;   t4 = t4 * g;   v = t3 + t4
//   p  = param * decay
//   s  = sqrt(v);               s = s / bc2_sqrt;           denom = s + eps
//   u  = step_size * m;         u = u / denom;              param = p - u
//   param_bf16 = f32_to_bf16(param)                          (core/dtype.h, only when given)
// This is torch.optim.AdamW's single-tensor CPU path (decay first, then
// param.addcdiv_(m, sqrt(v)/sqrt(bc2) + eps, value=-lr/bc1)), except that PyTorch updates m
// with lerp; the two agree to an ulp of m.
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
