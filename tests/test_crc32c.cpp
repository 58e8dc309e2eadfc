// CRC32C: published check values, chaining through the seed, and the hardware path equal to the
// portable table path at every length and alignment.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "io/crc32c.h"

namespace strata {
namespace {

std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  uint32_t x = seed * 2654435761u + 1;
  for (auto& b : v) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<uint8_t>(x >> 24);
  }
  return v;
}

TEST(Crc32c, KnownVectors) {
  const char* check = "123456789";
  EXPECT_EQ(crc32c(check, 9), 0xE3069283u);
  EXPECT_EQ(crc32c_portable(check, 9), 0xE3069283u);
  EXPECT_EQ(crc32c(nullptr, 0), 0u);
  // RFC 3720 (iSCSI) appendix B.4: 32 bytes of zeros, of 0xFF, and an ascending sequence.
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xFF), up(32);
  for (int i = 0; i < 32; i++) up[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(crc32c(zeros.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), 32), 0x62A8AB43u);
  EXPECT_EQ(crc32c(up.data(), 32), 0x46DD794Eu);
  EXPECT_EQ(crc32c_portable(up.data(), 32), 0x46DD794Eu);
}

TEST(Crc32c, SeedChainsCalls) {
  auto data = pattern(10000, 7);
  uint32_t whole = crc32c(data.data(), data.size());
  for (size_t split : {0ul, 1ul, 7ul, 8ul, 4096ul, 9999ul, 10000ul}) {
    uint32_t a = crc32c(data.data(), split);
    EXPECT_EQ(crc32c(data.data() + split, data.size() - split, a), whole) << "split " << split;
    uint32_t pa = crc32c_portable(data.data(), split);
    EXPECT_EQ(crc32c_portable(data.data() + split, data.size() - split, pa), whole);
  }
}

TEST(Crc32c, CombineEqualsTheChecksumOfTheConcatenation) {
  auto data = pattern(70000, 11);
  const uint32_t whole = crc32c(data.data(), data.size());
  for (size_t split : {0ul, 1ul, 3ul, 4096ul, 65536ul, 69999ul, 70000ul}) {
    const uint32_t a = crc32c(data.data(), split);
    const uint32_t b = crc32c(data.data() + split, data.size() - split);
    EXPECT_EQ(crc32c_combine(a, b, static_cast<int64_t>(data.size() - split)), whole)
        << "split " << split;
  }
  // Three pieces combined in file order, as a file written out of order is checked.
  const uint32_t p0 = crc32c(data.data(), 100), p1 = crc32c(data.data() + 100, 900);
  const uint32_t p2 = crc32c(data.data() + 1000, data.size() - 1000);
  EXPECT_EQ(crc32c_combine(crc32c_combine(p0, p1, 900), p2, 69000), whole);
  // A changed byte in the second piece changes the combined value.
  data[500] ^= 0x10;
  const uint32_t q1 = crc32c(data.data() + 100, 900);
  EXPECT_NE(crc32c_combine(crc32c_combine(p0, q1, 900), p2, 69000), whole);
}

TEST(Crc32c, HardwareEqualsPortable) {
  if (!crc32c_hardware_available()) GTEST_SKIP() << "CPU has no SSE4.2: only the portable path";
  auto data = pattern(70000, 3);
  // Every small length at every misalignment, then a few large ones.
  for (size_t off = 0; off < 16; off++) {
    for (size_t n = 0; n < 200; n++) {
      ASSERT_EQ(crc32c_hardware(data.data() + off, n, 0x12345678u),
                crc32c_portable(data.data() + off, n, 0x12345678u))
          << "offset " << off << " length " << n;
    }
  }
  for (size_t n : {4095ul, 4096ul, 4097ul, 65536ul, 69999ul}) {
    EXPECT_EQ(crc32c_hardware(data.data() + 1, n), crc32c_portable(data.data() + 1, n));
  }
  EXPECT_EQ(crc32c(data.data(), data.size()), crc32c_hardware(data.data(), data.size()));
}

TEST(Crc32c, DetectsSingleBitFlips) {
  auto data = pattern(4096, 11);
  uint32_t base = crc32c(data.data(), data.size());
  for (size_t i = 0; i < data.size(); i += 97) {
    for (int bit = 0; bit < 8; bit++) {
      data[i] ^= static_cast<uint8_t>(1u << bit);
      EXPECT_NE(crc32c(data.data(), data.size()), base) << "byte " << i << " bit " << bit;
      data[i] ^= static_cast<uint8_t>(1u << bit);
    }
  }
}

}  // namespace
}  // namespace strata
