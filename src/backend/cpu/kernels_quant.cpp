// Block quantization: the naive reference (ref::) and the fast CPU versions (kernels_quant.h;
// Note [Quantized tensor format] in backend/quant.h).
#include "backend/cpu/kernels_quant.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/kernels.h"

namespace strata::cpu {

namespace {

Status quant_check_finite(const float* x, QuantFormat fmt, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) {
      return invalid_argument(std::string("quantize ") + quant_format_name(fmt) + ": element " +
                              std::to_string(i) + " of " + std::to_string(n) + " is " +
                              (std::isnan(x[i]) ? "NaN" : "infinite") +
                              ": only finite weights can be quantized");
    }
  }
  return Status::ok_status();
}

float quant_absmax(const float* x, int64_t len) {
  float m = 0.0f;
  for (int64_t i = 0; i < len; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

// The nearest NF4 code to v by the f32 distance, the lower index on ties: torch.argmin.
int nf4_nearest_ref(float v) {
  int best = 0;
  float best_d = std::fabs(v - kNf4Codes[0]);
  for (int c = 1; c < 16; ++c) {
    const float d = std::fabs(v - kNf4Codes[c]);
    if (d < best_d) best = c, best_d = d;
  }
  return best;
}

// The same code without 16 distances: count the midpoints below v, which lands on the nearest
// code or beside it (near a midpoint), then settle between the neighbours by the f32 distance,
// so that ties and roundings come out as in nf4_nearest_ref.
int nf4_nearest_fast(float v) {
  static const auto mids = [] {
    std::array<float, 15> m{};
    for (int c = 0; c < 15; ++c) m[c] = (kNf4Codes[c] + kNf4Codes[c + 1]) * 0.5f;
    return m;
  }();
  int k = 0;
  for (int c = 0; c < 15; ++c) k += mids[c] < v;
  int best = k;
  float best_d = std::fabs(v - kNf4Codes[k]);
  if (k > 0 && std::fabs(v - kNf4Codes[k - 1]) <= best_d) {
    best = k - 1;
    best_d = std::fabs(v - kNf4Codes[k - 1]);
  }
  if (k < 15 && std::fabs(v - kNf4Codes[k + 1]) < best_d) best = k + 1;
  return best;
}

// Note [Double quantization]: writes mean, scales and qabsmax of layout l from absmax (blocks).
void quant_store_double(uint8_t* base, const QuantLayout& l, const std::vector<float>& absmax) {
  double sum = 0.0;
  for (float a : absmax) sum += a;
  const float mean = l.blocks == 0 ? 0.0f : static_cast<float>(sum / static_cast<double>(l.blocks));
  std::memcpy(base + l.mean, &mean, 4);
  for (int64_t g = 0; g < l.groups; ++g) {
    const int64_t begin = g * kQuantDqGroup, end = std::min(l.blocks, begin + kQuantDqGroup);
    float scale = 0.0f;
    for (int64_t b = begin; b < end; ++b) scale = std::max(scale, std::fabs(absmax[b] - mean));
    std::memcpy(base + l.scales + 4 * g, &scale, 4);
    for (int64_t b = begin; b < end; ++b) {
      base[l.qabsmax + b] = static_cast<uint8_t>(quant_int8(absmax[b] - mean, scale));
    }
  }
}

void quant_store_absmax(uint8_t* base, const QuantLayout& l, QuantFormat fmt,
                        const std::vector<float>& absmax) {
  if (fmt == QuantFormat::nf4_dq) {
    quant_store_double(base, l, absmax);
  } else if (l.blocks > 0) {
    std::memcpy(base + l.absmax, absmax.data(), static_cast<size_t>(4 * l.blocks));
  }
}

// Block b's absmax as dequantize uses it: stored, or rebuilt (Note [Double quantization]).
float quant_load_absmax(const uint8_t* base, const QuantLayout& l, int64_t b) {
  float a;
  if (l.mean < 0) {
    std::memcpy(&a, base + l.absmax + 4 * b, 4);
    return a;
  }
  float mean, scale;
  std::memcpy(&mean, base + l.mean, 4);
  std::memcpy(&scale, base + l.scales + 4 * (b / kQuantDqGroup), 4);
  return dequant_int8(static_cast<int8_t>(base[l.qabsmax + b]), scale) + mean;
}

// Element i's code, from the packed nibbles or the int8 bytes.
int quant_code_at(const uint8_t* codes, QuantFormat fmt, int64_t i) {
  if (fmt == QuantFormat::int8) return static_cast<int8_t>(codes[i]);
  return i % 2 == 0 ? codes[i / 2] >> 4 : codes[i / 2] & 0xF;
}

}  // namespace

// ---- naive reference ------------------------------------------------------------------------

Status ref::quantize(void* out, const float* x, QuantFormat fmt, int64_t n) {
  STRATA_RETURN_IF_ERROR(quant_check_finite(x, fmt, n));
  const QuantLayout l = quant_layout(fmt, n);
  auto* base = static_cast<uint8_t*>(out);
  uint8_t* codes = base + l.codes;
  std::vector<float> absmax(static_cast<size_t>(l.blocks));
  for (int64_t b = 0; b < l.blocks; ++b) {
    absmax[b] = quant_absmax(x + b * kQuantBlock, std::min(kQuantBlock, n - b * kQuantBlock));
  }
  if (n > 0) std::memset(codes, 0, static_cast<size_t>(l.bytes - l.codes));
  for (int64_t i = 0; i < n; ++i) {
    const float a = absmax[i / kQuantBlock];
    if (fmt == QuantFormat::int8) {
      codes[i] = static_cast<uint8_t>(quant_int8(x[i], a));
      continue;
    }
    const int c = a == 0.0f ? kNf4Zero : nf4_nearest_ref(x[i] / a);
    codes[i / 2] |= static_cast<uint8_t>(i % 2 == 0 ? c << 4 : c);
  }
  quant_store_absmax(base, l, fmt, absmax);
  return Status::ok_status();
}

void ref::dequantize(float* out, const void* q, QuantFormat fmt, int64_t n) {
  const QuantLayout l = quant_layout(fmt, n);
  const auto* base = static_cast<const uint8_t*>(q);
  for (int64_t i = 0; i < n; ++i) {
    const float a = quant_load_absmax(base, l, i / kQuantBlock);
    const int c = quant_code_at(base + l.codes, fmt, i);
    out[i] = fmt == QuantFormat::int8 ? dequant_int8(static_cast<int8_t>(c), a) : kNf4Codes[c] * a;
  }
}

// ---- fast versions: blocks in parallel ------------------------------------------------------

Status quantize(void* out, const float* x, QuantFormat fmt, int64_t n) {
  STRATA_RETURN_IF_ERROR(quant_check_finite(x, fmt, n));
  const QuantLayout l = quant_layout(fmt, n);
  auto* base = static_cast<uint8_t*>(out);
  uint8_t* codes = base + l.codes;
  std::vector<float> absmax(static_cast<size_t>(l.blocks));
#pragma omp parallel for schedule(static) if (n >= kMinParallelWork)
  for (int64_t b = 0; b < l.blocks; ++b) {
    const int64_t begin = b * kQuantBlock, len = std::min(kQuantBlock, n - begin);
    const float a = quant_absmax(x + begin, len);
    absmax[b] = a;
    if (fmt == QuantFormat::int8) {
      for (int64_t i = begin; i < begin + len; ++i)
        codes[i] = static_cast<uint8_t>(quant_int8(x[i], a));
      continue;
    }
    // A block starts on a byte (kQuantBlock is even); only the tensor's last byte is half full.
    for (int64_t i = begin; i < begin + len; i += 2) {
      const int hi = a == 0.0f ? kNf4Zero : nf4_nearest_fast(x[i] / a);
      const int lo = i + 1 >= n ? 0 : (a == 0.0f ? kNf4Zero : nf4_nearest_fast(x[i + 1] / a));
      codes[i / 2] = static_cast<uint8_t>(hi << 4 | lo);
    }
  }
  quant_store_absmax(base, l, fmt, absmax);
  return Status::ok_status();
}

void dequantize(float* out, const void* q, QuantFormat fmt, int64_t n) {
  const QuantLayout l = quant_layout(fmt, n);
  const auto* base = static_cast<const uint8_t*>(q);
  const uint8_t* codes = base + l.codes;
#pragma omp parallel for schedule(static) if (n >= kMinParallelWork)
  for (int64_t b = 0; b < l.blocks; ++b) {
    const int64_t begin = b * kQuantBlock, len = std::min(kQuantBlock, n - begin);
    const float a = quant_load_absmax(base, l, b);
    if (fmt == QuantFormat::int8) {
      const auto* qi = reinterpret_cast<const int8_t*>(codes) + begin;
      for (int64_t i = 0; i < len; ++i) out[begin + i] = dequant_int8(qi[i], a);
      continue;
    }
    float lut[16];  // each entry one rounding: the same bits as kNf4Codes[c] * a per element
    for (int c = 0; c < 16; ++c) lut[c] = kNf4Codes[c] * a;
    const uint8_t* bytes = codes + begin / 2;
    const int64_t pairs = len / 2;
    for (int64_t j = 0; j < pairs; ++j) {
      out[begin + 2 * j] = lut[bytes[j] >> 4];
      out[begin + 2 * j + 1] = lut[bytes[j] & 0xF];
    }
    if (len % 2 != 0) out[begin + len - 1] = lut[bytes[pairs] >> 4];
  }
}

}  // namespace strata::cpu
