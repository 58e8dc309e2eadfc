#include "core/utf8.h"

namespace strata {

namespace {

bool is_continuation(unsigned char b) {
  return (b & 0xC0) == 0x80;
}

}  // namespace

Utf8Char decode_utf8(std::string_view text, size_t i) {
  const auto at = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char b0 = at(i);
  if (b0 < 0x80) return {b0, 1};
  const size_t left = text.size() - i;
  // The second byte's range depends on the first (RFC 3629): no overlong forms, no surrogates,
  // nothing above U+10FFFF.
  unsigned char lo = 0x80, hi = 0xBF;
  uint32_t len = 0;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {kInvalidCodePoint, 1};
  }
  if (left < len || at(i + 1) < lo || at(i + 1) > hi) return {kInvalidCodePoint, 1};
  uint32_t cp = b0 & (0xFF >> (len + 1));
  for (uint32_t k = 1; k < len; ++k) {
    if (!is_continuation(at(i + k))) return {kInvalidCodePoint, 1};
    cp = (cp << 6) | (at(i + k) & 0x3F);
  }
  return {cp, len};
}

size_t prev_char_start(std::string_view text, size_t i) {
  // A well-formed sequence starts with a byte that is not a continuation byte, so no sequence
  // decoded from further left can run into it: the one ending at i, if any, is where forward
  // decoding put a boundary.
  if (!is_continuation(static_cast<unsigned char>(text[i - 1]))) return i - 1;
  for (size_t k = 2; k <= 4 && k <= i; ++k) {
    if (is_continuation(static_cast<unsigned char>(text[i - k]))) continue;
    const Utf8Char c = decode_utf8(text, i - k);
    return c.len == k ? i - k : i - 1;
  }
  return i - 1;
}

void append_utf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace strata
