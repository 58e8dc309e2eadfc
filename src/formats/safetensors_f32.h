// The floating-point element types of safetensors files widened to f32, for weights written by
// other tools (Hugging Face checkpoints are F32, BF16 or F16; `strata train --init-from`).
//
// Note [Widening to f32]
// Every BF16 and F16 value is exactly an f32 value, so widening never rounds:
//   BF16: the upper 16 bits of an f32 (core/dtype.h's bf16_to_f32).
//   F16 (1 sign, 5 exponent bits biased by 15, 10 mantissa bits), by exponent e:
//     1..30  normal: rebias the exponent by 127 - 15 = 112, shift the mantissa up 13 bits;
//     0      zero or subnormal, (-1)^s * m * 2^-24: an f32 normal, computed exactly as
//            float(m) * 2^-24 (m < 2^10 and a power-of-two scale are exact);
//     31     m = 0: infinity; else NaN, sign and payload kept in the f32 mantissa's top bits
//            (a signalling NaN stays signalling: its quiet bit moves with it).
// The host is little-endian (formats/safetensors.h), so elements are read as native integers.
#pragma once

#include <cstdint>

#include "formats/safetensors.h"

namespace strata {

// One IEEE binary16 value, exactly (Note [Widening to f32]).
float f16_to_f32(uint16_t h);

// Whether widen_to_f32 takes this dtype: F32, BF16, F16.
bool is_float_dtype(StDType t);

// dst[i] = src's element i as f32 for i < n; src holds n little-endian elements of `t` (a float
// dtype; anything else is a bug in the caller, STRATA_CHECK). src need not be aligned.
void widen_to_f32(StDType t, const uint8_t* src, int64_t n, float* dst);

}  // namespace strata
