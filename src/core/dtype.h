// Element types and the f32 <-> bf16 conversions every backend must reproduce bit for bit. The
// conversions are host and device functions under nvcc, so the CUDA kernels call these very
// functions.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define STRATA_HOST_DEVICE __host__ __device__
#else
#define STRATA_HOST_DEVICE
#endif

namespace strata {

enum class DType : uint8_t { f32 = 0, bf16 = 1 };

inline int64_t dtype_size(DType t) {
  return t == DType::f32 ? 4 : 2;
}
inline const char* dtype_name(DType t) {
  return t == DType::f32 ? "f32" : "bf16";
}

using bf16_t = uint16_t;  // the upper 16 bits of an IEEE f32

// Round to nearest, ties to even; NaN stays a (quiet) NaN.
STRATA_HOST_DEVICE inline bf16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<bf16_t>((u >> 16) | 0x40u);
  uint32_t rounding_bias = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<bf16_t>((u + rounding_bias) >> 16);
}

STRATA_HOST_DEVICE inline float bf16_to_f32(bf16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// f rounded to the nearest bf16, as f32: what a bf16 working weight widens back to.
STRATA_HOST_DEVICE inline float bf16_round(float f) {
  return bf16_to_f32(f32_to_bf16(f));
}

// out[i] = bf16_round(in[i]) for i < n (out may be in): a bf16 mode's working weights, kept as f32
// where compute reads them directly (the in-memory trainer, the embed group on the device).
inline void round_to_bf16(float* out, const float* in, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_round(in[i]);
}

}  // namespace strata
