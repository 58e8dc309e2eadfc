// UTF-8 decoding that never fails, by RFC 3629's rules: the one decoder behind the tokenizers
// (data/) and the checks on text that comes into a message or a JSON file (core/format.h); and
// the encoder.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace strata {

// A code point that is not valid UTF-8: each byte of a malformed sequence stands for itself.
inline constexpr uint32_t kInvalidCodePoint = 0xFFFFFFFF;

// The code point starting at text[i] and its length in bytes (1-4). A byte that does not start
// a well-formed sequence (a stray continuation byte, an overlong form, a surrogate, a value
// above U+10FFFF, a sequence cut by the end of text) is one "character" of length 1 with code
// point kInvalidCodePoint: every byte string decodes, and the pieces cover it.
struct Utf8Char {
  uint32_t cp;
  uint32_t len;
};
Utf8Char decode_utf8(std::string_view text, size_t i);

// The start of the character that ends just before text[i] (i > 0), by decode_utf8's rules.
size_t prev_char_start(std::string_view text, size_t i);

// Appends code point cp (at most U+10FFFF) in UTF-8: 1 to 4 bytes.
void append_utf8(uint32_t cp, std::string* out);

}  // namespace strata
