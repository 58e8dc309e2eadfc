// Block quantization on the CPU (Note [Quantized tensor format] in backend/quant.h): quantize,
// run once on the host when a frozen base is imported, and dequantize, the CPU device's op.
// strata::cpu::*      fast versions: a midpoint search for quantize, a 16-entry table per block
//                     for dequantize, OpenMP over blocks.
// strata::cpu::ref::* naive scalar loops, the specification. Both give the same bytes and bits
// (tests/test_quant.cpp), and the CUDA kernel the same dequantized bits.
//
// Note [Double quantization]
// nf4_dq stores the blocks' absmax values a_b as QLoRA's double quantization does, with int8 in
// place of its 8-bit float: mean = (float)(sum of a_b in double, index order / blocks); in each
// group of 256 blocks, c_b = a_b - mean (f32), scale = max |c_b|, q_b = the int8 formula of c_b
// with that scale (0 where scale is 0); absmax'_b = q_b * scale / 127 + mean, three f32
// roundings in that order. Codes are chosen with the exact a_b (as bitsandbytes), and dequant is
// kNf4Codes[c] * absmax'_b. Per element 4.13 bits instead of nf4's 4.5.
#pragma once

#include <cmath>
#include <cstdint>

#include "backend/quant.h"
#include "core/status.h"

namespace strata::cpu {

// out (quantized_bytes(fmt, n)) <- x (n). invalid_argument, naming the index, for a NaN or an
// infinity (nothing meaningful to scale by); out is then unspecified.
Status quantize(void* out, const float* x, QuantFormat fmt, int64_t n);
// out (n) <- q (quantized_bytes(fmt, n)).
void dequantize(float* out, const void* q, QuantFormat fmt, int64_t n);

namespace ref {
Status quantize(void* out, const float* x, QuantFormat fmt, int64_t n);
void dequantize(float* out, const void* q, QuantFormat fmt, int64_t n);
}  // namespace ref

// The int8 formulas of Note [Quantized tensor format], shared by both versions. nearbyint
// rounds half to even in the default rounding mode, which Strata never changes.
inline int8_t quant_int8(float x, float absmax) {
  if (absmax == 0.0f) return 0;
  const float r = std::nearbyint((x / absmax) * 127.0f);
  return static_cast<int8_t>(r > 127.0f ? 127.0f : (r < -127.0f ? -127.0f : r));
}
inline float dequant_int8(int8_t q, float absmax) {
  return (static_cast<float>(q) * absmax) / 127.0f;
}

}  // namespace strata::cpu
