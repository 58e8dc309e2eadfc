// Quantized tensors for a frozen base (QLoRA, issue 39): the byte layout of one quantized tensor,
// shared by the CPU kernels (cpu/kernels_quant.h), the CUDA kernel (cuda/kernels_quant.cu), the
// Device op that dequantizes (Device::dequantize) and the planner and storage, which size a
// quantized tensor by quantized_bytes. Quantizing runs once on the host (cpu::quantize).
//
// Note [Quantized tensor format]
// Blocks of kQuantBlock = 64 elements (the last may be partial), absmax = max |x| (f32); only
// finite x (cpu::quantize refuses the rest). A block of zeros has absmax 0 and dequantizes to 0.
//  nf4: code = the index of the NF4 value (kNf4Codes) nearest v = x / absmax: the least f32
//   |v - kNf4Codes[c]|, the lower index on equal distances (torch.argmin's rule); absmax 0 gives
//   code 7 (0.0). Two codes a byte, element 2j in the high nibble (as bitsandbytes), an odd n's
//   last low nibble 0. Dequant: kNf4Codes[c] * absmax, one f32 rounding.
//  int8: q = round-half-even((x / absmax) * 127), each step f32, clamped to [-127, 127], 0 for
//   absmax 0; dequant: (q * absmax) / 127, two f32 roundings in that order.
//  nf4_dq: nf4 codes, absmax as mean + int8 of (absmax - mean) per 256 blocks (Note [Double
//   quantization] in cpu/kernels_quant.h).
#pragma once

#include <cstdint>

namespace strata {

enum class QuantFormat : uint8_t { nf4 = 0, int8 = 1, nf4_dq = 2 };

inline const char* quant_format_name(QuantFormat f) {
  switch (f) {
    case QuantFormat::nf4:
      return "nf4";
    case QuantFormat::int8:
      return "int8";
    case QuantFormat::nf4_dq:
      return "nf4_dq";
  }
  return "?";
}

inline constexpr int64_t kQuantBlock = 64;     // elements per absmax
inline constexpr int64_t kQuantDqGroup = 256;  // absmax values per int8 scale (nf4_dq)
inline constexpr int kNf4Zero = 7;             // the code of 0.0

// QLoRA (Dettmers et al. 2023, arXiv 2305.14314) Appendix E, and bitsandbytes' NF4 table: the
// f32 values nearest these decimals, in ascending order.
inline constexpr float kNf4Codes[16] = {
    -1.0f,
    -0.6961928009986877f,
    -0.5250730514526367f,
    -0.39491748809814453f,
    -0.28444138169288635f,
    -0.18477343022823334f,
    -0.09105003625154495f,
    0.0f,
    0.07958029955625534f,
    0.16093020141124725f,
    0.24611230194568634f,
    0.33791524171829224f,
    0.44070982933044434f,
    0.5626170039176941f,
    0.7229568362236023f,
    1.0f,
};

// Where each part of a quantized tensor of n elements lies, in bytes from its start (a Buffer's
// data(), 4 KiB aligned, so every f32 part is 4-byte aligned). Parts a format lacks are -1.
//  nf4:    absmax f32 (blocks) | codes u8 ((n+1)/2)
//  int8:   absmax f32 (blocks) | codes i8 (n)
//  nf4_dq: mean f32 (1) | scales f32 (groups) | qabsmax i8 (blocks) | codes u8 ((n+1)/2)
struct QuantLayout {
  int64_t n = 0;
  int64_t blocks = 0;  // ceil(n / kQuantBlock)
  int64_t groups = 0;  // nf4_dq: ceil(blocks / kQuantDqGroup); else 0
  int64_t absmax = -1, mean = -1, scales = -1, qabsmax = -1;
  int64_t codes = 0;
  int64_t bytes = 0;  // the whole tensor
};

inline QuantLayout quant_layout(QuantFormat fmt, int64_t n) {
  QuantLayout l;
  l.n = n;
  l.blocks = (n + kQuantBlock - 1) / kQuantBlock;
  const int64_t code_bytes = fmt == QuantFormat::int8 ? n : (n + 1) / 2;
  if (fmt == QuantFormat::nf4_dq) {
    l.groups = (l.blocks + kQuantDqGroup - 1) / kQuantDqGroup;
    l.mean = 0;
    l.scales = 4;
    l.qabsmax = l.scales + 4 * l.groups;
    l.codes = l.qabsmax + l.blocks;
  } else {
    l.absmax = 0;
    l.codes = 4 * l.blocks;
  }
  l.bytes = l.codes + code_bytes;
  return l;
}

// The bytes of a quantized tensor of n elements: what the planner budgets and storage holds.
inline int64_t quantized_bytes(QuantFormat fmt, int64_t n) {
  return quant_layout(fmt, n).bytes;
}

}  // namespace strata
