// Scalar AdamW: the reference of Note [AdamW operation order] (kernels_adamw.h), and the per-call
// constants every backend's AdamW starts from (backend/adamw_hyper.h). One statement per rounded
// operation, in the order the SIMD kernels use; the build's -ffp-contract=off
// (Note [No FMA contraction]) keeps the compiler from fusing any of them.
#include "backend/cpu/kernels_adamw.h"

#include <cmath>

#include "core/check.h"

namespace strata {
namespace detail {

AdamWConstants adamw_constants(const AdamWHyper& h) {
  STRATA_CHECK_MSG(h.step >= 1, "AdamW step count is 1-based");
  const double step = static_cast<double>(h.step);
  const double bias_correction1 = 1.0 - std::pow(static_cast<double>(h.beta1), step);
  const double bias_correction2 = 1.0 - std::pow(static_cast<double>(h.beta2), step);
  AdamWConstants c;
  c.beta1 = h.beta1;
  c.one_minus_beta1 = static_cast<float>(1.0 - static_cast<double>(h.beta1));
  c.beta2 = h.beta2;
  c.one_minus_beta2 = static_cast<float>(1.0 - static_cast<double>(h.beta2));
  c.eps = h.eps;
  c.grad_scale = h.grad_scale;
  c.decay = static_cast<float>(1.0 - static_cast<double>(h.lr) * h.weight_decay);
  c.step_size = static_cast<float>(static_cast<double>(h.lr) / bias_correction1);
  c.bc2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  return c;
}

void adamw_span_scalar(float* param, float* m, float* v, bf16_t* param_bf16, const float* grad,
                       int64_t n, const AdamWConstants& c) {
  for (int64_t i = 0; i < n; i++) {
    const float g = grad[i] * c.grad_scale;

    const float m_old = c.beta1 * m[i];
    const float m_new_part = c.one_minus_beta1 * g;
    const float m_new = m_old + m_new_part;

    const float v_old = c.beta2 * v[i];
    float v_new_part = c.one_minus_beta2 * g;
    v_new_part = v_new_part * g;
    const float v_new = v_old + v_new_part;

    const float decayed = param[i] * c.decay;

    float denom = std::sqrt(v_new);
    denom = denom / c.bc2_sqrt;
    denom = denom + c.eps;

    float update = c.step_size * m_new;
    update = update / denom;
    const float p_new = decayed - update;

    m[i] = m_new;
    v[i] = v_new;
    param[i] = p_new;
    if (param_bf16 != nullptr) param_bf16[i] = f32_to_bf16(p_new);
  }
}

}  // namespace detail

void adamw_step_ref(float* param, float* m, float* v, bf16_t* param_bf16, const float* grad,
                    int64_t n, const AdamWHyper& h) {
  STRATA_CHECK(n >= 0);
  detail::adamw_span_scalar(param, m, v, param_bf16, grad, n, detail::adamw_constants(h));
}

const char* simd_level_name(SimdLevel level) {
  switch (level) {
    case SimdLevel::scalar:
      return "scalar";
    case SimdLevel::avx2:
      return "avx2";
    case SimdLevel::avx512:
      return "avx512";
  }
  return "unknown";
}

}  // namespace strata
