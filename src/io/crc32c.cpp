#include "io/crc32c.h"

#include <array>
#include <cstring>

#include "core/check.h"

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace strata {

namespace {

constexpr uint32_t kPolyReflected = 0x82F63B78u;

// tables[0] is the classic byte-at-a-time table; tables[k][b] is the CRC of byte b followed by k
// zero bytes, which lets the portable path fold 8 input bytes per step (slicing-by-8).
using CrcTables = std::array<std::array<uint32_t, 256>, 8>;

constexpr CrcTables make_tables() {
  CrcTables t{};
  for (uint32_t b = 0; b < 256; b++) {
    uint32_t c = b;
    for (int i = 0; i < 8; i++) c = (c & 1) ? (c >> 1) ^ kPolyReflected : c >> 1;
    t[0][b] = c;
  }
  for (int k = 1; k < 8; k++) {
    for (uint32_t b = 0; b < 256; b++) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFF];
  }
  return t;
}

constexpr CrcTables kTables = make_tables();

// Both paths work on the raw register (already inverted); the public functions do the xors.
uint32_t portable_update(uint32_t crc, const uint8_t* p, size_t n) {
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);  // little-endian load; x86 and aarch64 hosts
    word ^= crc;
    crc = kTables[7][word & 0xFF] ^ kTables[6][(word >> 8) & 0xFF] ^
          kTables[5][(word >> 16) & 0xFF] ^ kTables[4][(word >> 24) & 0xFF] ^
          kTables[3][(word >> 32) & 0xFF] ^ kTables[2][(word >> 40) & 0xFF] ^
          kTables[1][(word >> 48) & 0xFF] ^ kTables[0][word >> 56];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) crc = (crc >> 8) ^ kTables[0][(crc ^ *p++) & 0xFF];
  return crc;
}

#if defined(__x86_64__)
// Compiled for SSE4.2 whatever the baseline -march, and only called after the CPU said it has it.
__attribute__((target("sse4.2"))) uint32_t hardware_update(uint32_t crc, const uint8_t* p,
                                                           size_t n) {
  uint64_t c = crc;
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c = _mm_crc32_u64(c, word);
    p += 8;
    n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  while (n-- > 0) c32 = _mm_crc32_u8(c32, *p++);
  return c32;
}

bool detect_hardware() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("sse4.2");
}
#else
uint32_t hardware_update(uint32_t crc, const uint8_t* p, size_t n) {
  return portable_update(crc, p, n);
}
bool detect_hardware() {
  return false;
}
#endif

// A function-local static so that callers from other translation units' static initializers
// still see the detected value.
bool has_hardware() {
  static const bool has = detect_hardware();
  return has;
}

// a * b modulo the polynomial, in the reflected representation (bit 31 is x^0).
uint32_t multiply_mod_poly(uint32_t a, uint32_t b) {
  uint32_t product = 0;
  for (uint32_t bit = 1u << 31; bit != 0; bit >>= 1) {
    if ((a & bit) != 0) product ^= b;
    b = (b & 1) != 0 ? (b >> 1) ^ kPolyReflected : b >> 1;  // b * x
  }
  return product;
}

}  // namespace

// Appending n bytes to a message multiplies its CRC register by x^(8n) and adds the CRC of the
// bytes alone; the initial and final inversions cancel in the sum, so
// crc(a ++ b) = crc(a) * x^(8 |b|) + crc(b), the power taken by squaring.
uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, int64_t bytes_b) {
  uint32_t power = 1u << 31;   // x^0
  uint32_t square = 1u << 23;  // x^8: one byte
  for (auto n = static_cast<uint64_t>(bytes_b); n != 0; n >>= 1) {
    if ((n & 1) != 0) power = multiply_mod_poly(power, square);
    square = multiply_mod_poly(square, square);
  }
  return multiply_mod_poly(crc_a, power) ^ crc_b;
}

bool crc32c_hardware_available() {
  return has_hardware();
}

uint32_t crc32c_portable(const void* data, size_t bytes, uint32_t seed) {
  return ~portable_update(~seed, static_cast<const uint8_t*>(data), bytes);
}

uint32_t crc32c_hardware(const void* data, size_t bytes, uint32_t seed) {
  STRATA_CHECK_MSG(has_hardware(), "crc32c_hardware called on a CPU without SSE4.2");
  return ~hardware_update(~seed, static_cast<const uint8_t*>(data), bytes);
}

uint32_t crc32c(const void* data, size_t bytes, uint32_t seed) {
  const auto* p = static_cast<const uint8_t*>(data);
  return has_hardware() ? ~hardware_update(~seed, p, bytes) : ~portable_update(~seed, p, bytes);
}

}  // namespace strata
