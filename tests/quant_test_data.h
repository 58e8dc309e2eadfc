// Helpers of the quantization tests (test_quant.cpp, test_cuda_quant.cpp): quantize and
// dequantize through the CPU kernels, varied data, random quantized tensors, and a round trip
// through a device's dequantize op.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/kernels_quant.h"
#include "backend/quant.h"
#include "test_util.h"

namespace strata::quant_test {

inline constexpr QuantFormat kFormats[] = {QuantFormat::nf4, QuantFormat::int8,
                                           QuantFormat::nf4_dq};

inline std::vector<uint8_t> quantize(const std::vector<float>& x, QuantFormat fmt,
                                     bool fast = false) {
  const auto n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> q(static_cast<size_t>(quantized_bytes(fmt, n)), 0xAB);
  const Status s = fast ? cpu::quantize(q.data(), x.data(), fmt, n)
                        : cpu::ref::quantize(q.data(), x.data(), fmt, n);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return q;
}

inline std::vector<float> dequantize(const std::vector<uint8_t>& q, QuantFormat fmt, int64_t n,
                                     bool fast = false) {
  std::vector<float> out(static_cast<size_t>(n), std::numeric_limits<float>::quiet_NaN());
  (fast ? cpu::dequantize : cpu::ref::dequantize)(out.data(), q.data(), fmt, n);
  return out;
}

// Varied data: normal-looking weights at several scales, exact code multiples, zeros.
inline std::vector<float> mixed_data(int64_t n, uint64_t seed) {
  std::vector<float> x = test::random_floats(n, seed);
  const std::vector<float> pick = test::random_floats(n, seed + 1, 0.0f, 1.0f);
  for (int64_t i = 0; i < n; ++i) {
    const float scale = std::ldexp(1.0f, static_cast<int>(i / kQuantBlock % 13) - 6);
    if (pick[i] < 0.1f) x[i] = 0.0f;
    if (pick[i] >= 0.1f && pick[i] < 0.2f) x[i] = kNf4Codes[i % 16];
    x[i] *= scale;
  }
  return x;
}

// Every code in every position, not only those quantizing produces: random bytes as codes,
// random positive absmax (or mean and scales for nf4_dq).
inline std::vector<uint8_t> random_quantized(QuantFormat fmt, int64_t n, uint64_t seed) {
  const QuantLayout l = quant_layout(fmt, n);
  std::vector<uint8_t> q(static_cast<size_t>(l.bytes));
  const std::vector<int32_t> bytes = test::random_ints(l.bytes, seed, 0, 256);
  for (int64_t i = 0; i < l.bytes; ++i) q[i] = static_cast<uint8_t>(bytes[i]);
  const int64_t floats = l.mean < 0 ? l.blocks : 1 + l.groups;
  const std::vector<float> f = test::random_floats(floats, seed + 1, 0.01f, 5.0f);
  std::memcpy(q.data(), f.data(), static_cast<size_t>(4 * floats));
  return q;
}

// Device::dequantize: the quantized tensor copied to device memory, dequantized there, copied
// back; the bits of cpu::ref::dequantize.
inline std::vector<float> device_dequantize(Device& d, const std::vector<uint8_t>& q,
                                            QuantFormat fmt, int64_t n) {
  auto stream = d.create_stream("quant");
  Buffer dq = std::move(d.alloc(static_cast<int64_t>(q.size()))).value();
  Buffer dout = std::move(d.alloc(4 * n)).value();
  std::vector<float> out(static_cast<size_t>(n));
  d.copy(*stream, dq.data(), q.data(), static_cast<int64_t>(q.size()));
  d.dequantize(*stream, dout.f32(), dq.data(), fmt, n);
  d.copy(*stream, out.data(), dout.data(), 4 * n);
  stream->synchronize();
  return out;
}

}  // namespace strata::quant_test
