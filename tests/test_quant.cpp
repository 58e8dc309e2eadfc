// Block quantization (Note [Quantized tensor format] in backend/quant.h): round-trip properties
// of nf4, int8 and nf4_dq, the tie rules, refused input, the fast CPU kernels against the naive
// reference bit for bit, and Device::dequantize on cpu and cpu-discrete against the reference.
// test_cuda_quant.cpp holds CUDA to it (a binary of its own: the CUDA runtime costs a process
// most of a second), tests/nf4_torch.sh the reference to PyTorch.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/kernels_quant.h"
#include "backend/quant.h"
#include "quant_test_data.h"
#include "test_util.h"

namespace strata {
namespace {

using namespace quant_test;

int nf4_code(const std::vector<uint8_t>& q, int64_t n, int64_t i) {
  const uint8_t byte = q[quant_layout(QuantFormat::nf4, n).codes + i / 2];
  return i % 2 == 0 ? byte >> 4 : byte & 0xF;
}

float stored_absmax(const std::vector<uint8_t>& q, int64_t n, int64_t block) {
  float a;
  std::memcpy(&a, q.data() + quant_layout(QuantFormat::nf4, n).absmax + 4 * block, 4);
  return a;
}

TEST(quant, layout_sizes) {
  // nf4: 4 bytes of absmax per 64 elements and half a byte each; int8: a byte each.
  EXPECT_EQ(quantized_bytes(QuantFormat::nf4, 0), 0);
  EXPECT_EQ(quantized_bytes(QuantFormat::nf4, 64), 4 + 32);
  EXPECT_EQ(quantized_bytes(QuantFormat::nf4, 65), 8 + 33);
  EXPECT_EQ(quantized_bytes(QuantFormat::int8, 65), 8 + 65);
  // nf4_dq: mean, one f32 scale per 256 blocks, one byte per block.
  EXPECT_EQ(quantized_bytes(QuantFormat::nf4_dq, 64 * 300), 4 + 2 * 4 + 300 + 32 * 300);
}

TEST(quant, empty_tensor) {
  for (QuantFormat fmt : kFormats) {
    const std::vector<uint8_t> q = quantize({}, fmt), q_fast = quantize({}, fmt, true);
    EXPECT_EQ(q_fast, q);
    EXPECT_TRUE(dequantize(q, fmt, 0).empty());
  }
}

TEST(quant, nibble_order_high_first) {
  // As bitsandbytes: element 0 in the high nibble. -1 is code 0, 1 is code 15.
  const std::vector<uint8_t> q = quantize({-1.0f, 1.0f, 0.0f}, QuantFormat::nf4);
  EXPECT_EQ(q[4], 0x0F);
  EXPECT_EQ(q[5], 0x70);  // 0.0 is code 7; the odd tail's low nibble is 0
}

TEST(quant, every_code_times_absmax_is_exact) {
  for (float a : {1.0f, 3.7f, 1e-3f, 6.5e4f, 1e-30f, -2.25f}) {
    std::vector<float> x(kQuantBlock);
    for (int64_t i = 0; i < kQuantBlock; ++i) x[i] = kNf4Codes[i % 16] * std::fabs(a);
    if (a < 0) x[0] = a;  // the absmax from a negative element: -|a| is code 0 * |a|
    const std::vector<uint8_t> q = quantize(x, QuantFormat::nf4);
    EXPECT_EQ(stored_absmax(q, kQuantBlock, 0), std::fabs(a));
    test::expect_same_bits(dequantize(q, QuantFormat::nf4, kQuantBlock), x, "code * absmax");
    for (int64_t i = 1; i < kQuantBlock; ++i) EXPECT_EQ(nf4_code(q, kQuantBlock, i), i % 16) << i;
  }
}

TEST(quant, absmax_element_round_trips_exactly) {
  // nf4 only: its code for +-absmax is +-1 exactly; int8's (127 * a) / 127 need not be a.
  const int64_t n = 10 * kQuantBlock + 5;
  const std::vector<float> x = mixed_data(n, 11);
  const std::vector<float> y = dequantize(quantize(x, QuantFormat::nf4), QuantFormat::nf4, n);
  for (int64_t b = 0; b * kQuantBlock < n; ++b) {
    int64_t at = b * kQuantBlock;
    for (int64_t i = at; i < std::min(n, (b + 1) * kQuantBlock); ++i) {
      if (std::fabs(x[i]) > std::fabs(x[at])) at = i;
    }
    EXPECT_EQ(y[at], x[at]) << "block " << b;
  }
}

// |dequant - x| <= half the widest gap times absmax (nf4), absmax / 254 (int8), plus, for
// nf4_dq, the error of the rebuilt absmax (at most its group's scale / 254), and f32 rounding.
TEST(quant, error_is_bounded) {
  const int64_t n = 300 * kQuantBlock + 37;  // two nf4_dq groups, a partial block
  const std::vector<float> x = mixed_data(n, 5);
  float widest = 0.0f;
  for (int c = 0; c < 15; ++c) widest = std::max(widest, kNf4Codes[c + 1] - kNf4Codes[c]);
  EXPECT_NEAR(widest, 1.0 - 0.6961928009986877, 1e-7);  // between -1 and the next code
  for (QuantFormat fmt : kFormats) {
    const std::vector<float> y = dequantize(quantize(x, fmt), fmt, n);
    float dq_slack = 0.0f;  // nf4_dq: the widest |absmax - mean| bounds every scale
    for (int64_t b = 0; b * kQuantBlock < n; ++b) {
      float a = 0.0f;
      for (int64_t i = b * kQuantBlock; i < std::min(n, (b + 1) * kQuantBlock); ++i) {
        a = std::max(a, std::fabs(x[i]));
      }
      dq_slack = std::max(dq_slack, a);
    }
    for (int64_t i = 0; i < n; ++i) {
      const int64_t b0 = i / kQuantBlock * kQuantBlock;
      float a = 0.0f;
      for (int64_t j = b0; j < std::min(n, b0 + kQuantBlock); ++j) a = std::max(a, std::fabs(x[j]));
      double bound = fmt == QuantFormat::int8 ? a / 254.0 : widest / 2.0 * a;
      if (fmt == QuantFormat::nf4_dq) bound += dq_slack / 254.0 * 1.0001;
      bound += 4e-7 * a;
      ASSERT_LE(std::fabs(static_cast<double>(y[i]) - x[i]), bound)
          << quant_format_name(fmt) << " element " << i;
    }
  }
}

TEST(quant, partial_last_block_is_its_own_block) {
  const int64_t full = 3 * kQuantBlock, tail = 17, n = full + tail;
  const std::vector<float> x = mixed_data(n, 21);
  const std::vector<float> last(x.begin() + full, x.end());
  for (QuantFormat fmt : {QuantFormat::nf4, QuantFormat::int8}) {
    const std::vector<uint8_t> q = quantize(x, fmt), q_tail = quantize(last, fmt);
    const QuantLayout l = quant_layout(fmt, n), lt = quant_layout(fmt, tail);
    EXPECT_EQ(std::memcmp(q.data() + l.absmax + 4 * 3, q_tail.data() + lt.absmax, 4), 0);
    const int64_t skip = fmt == QuantFormat::int8 ? full : full / 2;
    EXPECT_EQ(std::vector<uint8_t>(q.begin() + l.codes + skip, q.end()),
              std::vector<uint8_t>(q_tail.begin() + lt.codes, q_tail.end()))
        << quant_format_name(fmt);
    const std::vector<float> y = dequantize(q, fmt, n), y_tail = dequantize(q_tail, fmt, tail);
    test::expect_same_bits(std::vector<float>(y.begin() + full, y.end()), y_tail, "tail");
  }
}

TEST(quant, zero_block_has_absmax_zero_and_dequantizes_to_zero) {
  std::vector<float> x = mixed_data(3 * kQuantBlock, 3);
  for (int64_t i = kQuantBlock; i < 2 * kQuantBlock; ++i) x[i] = i % 2 == 0 ? 0.0f : -0.0f;
  for (QuantFormat fmt : {QuantFormat::nf4, QuantFormat::int8}) {
    const std::vector<uint8_t> q = quantize(x, fmt);
    EXPECT_EQ(stored_absmax(q, 3 * kQuantBlock, 1), 0.0f);
    const std::vector<float> y = dequantize(q, fmt, 3 * kQuantBlock);
    for (int64_t i = kQuantBlock; i < 2 * kQuantBlock; ++i) {
      EXPECT_EQ(std::bit_cast<uint32_t>(y[i]), 0u) << quant_format_name(fmt) << " " << i;
    }
    if (fmt == QuantFormat::nf4) {
      EXPECT_EQ(nf4_code(q, 3 * kQuantBlock, kQuantBlock + 1), kNf4Zero);
    }
  }
}

TEST(quant, non_finite_input_is_refused) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    std::vector<float> x(100, 0.5f);
    x[70] = bad;
    for (QuantFormat fmt : kFormats) {
      std::vector<uint8_t> q(static_cast<size_t>(quantized_bytes(fmt, 100)));
      for (bool fast : {false, true}) {
        const Status s = fast ? cpu::quantize(q.data(), x.data(), fmt, 100)
                              : cpu::ref::quantize(q.data(), x.data(), fmt, 100);
        test::expect_error(
            s, ErrorCode::invalid_argument,
            {"element 70", std::isnan(bad) ? "NaN" : "infinite", quant_format_name(fmt)});
      }
    }
  }
}

// Values whose f32 distances to two neighbouring codes are equal go to the lower code; one ulp
// up goes to the upper one, so the rule, not an accident of rounding, decides.
TEST(quant, nf4_ties_go_to_the_lower_code) {
  int ties = 0;
  for (int c = 0; c < 15; ++c) {
    const float lo = kNf4Codes[c], hi = kNf4Codes[c + 1];
    float v = static_cast<float>((static_cast<double>(lo) + hi) / 2.0);
    for (int k = 0; k < 64; ++k) v = std::nextafter(v, lo);
    for (int k = 0; k < 128; ++k, v = std::nextafter(v, hi)) {
      if (std::fabs(v - lo) != std::fabs(hi - v)) continue;
      const float w = std::nextafter(v, hi);
      const bool w_ties = std::fabs(w - lo) == std::fabs(hi - w);
      for (bool fast : {false, true}) {
        const std::vector<uint8_t> q = quantize({1.0f, v, w}, QuantFormat::nf4, fast);
        EXPECT_EQ(nf4_code(q, 3, 1), c) << "tie between codes " << c << " and " << c + 1;
        if (!w_ties) {
          EXPECT_EQ(nf4_code(q, 3, 2), c + 1) << "above the tie " << c << ", " << c + 1;
        }
      }
      ++ties;
    }
  }
  EXPECT_GE(ties, 4);  // at least the pairs around 0 and the halves of exact midpoints
}

// (x / absmax) * 127 exactly half-way between two integers rounds to the even one.
TEST(quant, int8_ties_go_to_even) {
  const float a = 3.0f;
  int ties = 0;
  for (int k = -126; k < 126; k += 5) {
    float x = static_cast<float>((k + 0.5) / 127.0 * a);
    for (int j = 0; j < 32; ++j) x = std::nextafter(x, -10.0f);
    for (int j = 0; j < 64; ++j, x = std::nextafter(x, 10.0f)) {
      if ((x / a) * 127.0f != static_cast<float>(k) + 0.5f) continue;
      const std::vector<uint8_t> q = quantize({a, x}, QuantFormat::int8);
      const int even = k % 2 == 0 ? k : k + 1;
      EXPECT_EQ(static_cast<int8_t>(q[quant_layout(QuantFormat::int8, 2).codes + 1]), even) << x;
      ++ties;
    }
  }
  EXPECT_GE(ties, 10);
}

TEST(quant, fast_kernels_match_the_reference_bit_for_bit) {
  for (int64_t n : {1, 2, 63, 64, 65, 127, 4097, 300 * 64 + 33, 100003}) {
    const std::vector<float> x = mixed_data(n, static_cast<uint64_t>(n));
    for (QuantFormat fmt : kFormats) {
      const std::vector<uint8_t> q = quantize(x, fmt), q_fast = quantize(x, fmt, true);
      ASSERT_EQ(q_fast, q) << quant_format_name(fmt) << " n " << n;
      test::expect_same_bits(dequantize(q, fmt, n, true), dequantize(q, fmt, n), "dequantize");
    }
  }
}

TEST(quant, fast_dequantize_matches_reference_on_every_code) {
  for (int64_t n : {7, 64 * 257 + 9}) {
    for (QuantFormat fmt : kFormats) {
      const std::vector<uint8_t> q = random_quantized(fmt, n, 40 + n);
      test::expect_same_bits(dequantize(q, fmt, n, true), dequantize(q, fmt, n), "random codes");
    }
  }
}

TEST(quant, device_op_matches_reference_on_cpu_devices) {
  for (bool discrete : {false, true}) {
    auto d = create_cpu_device({.discrete = discrete});
    for (QuantFormat fmt : kFormats) {
      const int64_t n = 64 * 300 + 5;
      const std::vector<uint8_t> q = quantize(mixed_data(n, 8), fmt);
      test::expect_same_bits(device_dequantize(*d, q, fmt, n), dequantize(q, fmt, n),
                             d->name().c_str());
    }
  }
}

}  // namespace
}  // namespace strata
