// Widening safetensors float elements to f32; Note [Widening to f32] in safetensors_f32.h.
#include "formats/safetensors_f32.h"

#include <cstring>

#include "core/check.h"
#include "core/dtype.h"

namespace strata {

float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  uint32_t bits = 0;
  if (exponent == 0) {
    // Zero or subnormal: m * 2^-24 exactly, with the sign (which keeps -0.0).
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    std::memcpy(&bits, &magnitude, 4);
    bits |= sign;
  } else if (exponent == 31) {
    bits = sign | 0x7f800000u | (mantissa << 13);  // infinity, or NaN keeping its payload
  } else {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

bool is_float_dtype(StDType t) {
  return t == StDType::f32 || t == StDType::bf16 || t == StDType::f16;
}

void widen_to_f32(StDType t, const uint8_t* src, int64_t n, float* dst) {
  STRATA_CHECK_MSG(is_float_dtype(t), "widen_to_f32 of a dtype that is not a float");
  if (t == StDType::f32) {
    std::memcpy(dst, src, static_cast<size_t>(n) * 4);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    dst[i] = t == StDType::bf16 ? bf16_to_f32(h) : f16_to_f32(h);
  }
}

}  // namespace strata
