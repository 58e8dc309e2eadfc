// Device::dequantize on CUDA against cpu::ref::dequantize, bit for bit (Note [Quantized tensor
// format] in backend/quant.h), on quantized weights and on random codes. Skips, printing why,
// where create_cuda_device fails (built without CUDA, no GPU, driver too old).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "backend/quant.h"
#include "quant_test_data.h"
#include "test_util.h"

namespace strata {
namespace {

using namespace quant_test;

TEST(cuda_quant, dequantize_matches_reference) {
  auto r = create_cuda_device();
  if (!r.ok()) GTEST_SKIP() << "CUDA device unavailable: " << r.status().to_string();
  Device& gpu = **r;
  for (int64_t n : {1, 65, 64 * 257 + 9, 1000003}) {
    for (QuantFormat fmt : kFormats) {
      for (bool random_codes : {false, true}) {
        const std::vector<uint8_t> q =
            random_codes ? random_quantized(fmt, n, 90 + n) : quantize(mixed_data(n, 9), fmt);
        test::expect_same_bits(device_dequantize(gpu, q, fmt, n), dequantize(q, fmt, n),
                               quant_format_name(fmt));
      }
    }
  }
}

}  // namespace
}  // namespace strata
