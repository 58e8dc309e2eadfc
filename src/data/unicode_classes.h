// The character classes the byte-level BPE pre-tokenizers need (pretokenize.h): \p{L}, \p{N} and
// \s, by code point, and UTF-8 decoding that never fails.
//
// Coverage: \p{L} is every code point of general category Lu, Ll, Lt, Lm or Lo and \p{N} every
// one of Nd, Nl or No, as Unicode 14.0 assigns them (the version of Python 3.11's unicodedata);
// code points assigned later are neither. \s is Unicode's White_Space property (U+0009-000D,
// 0020, 0085, 00A0, 1680, 2000-200A, 2028, 2029, 202F, 205F, 3000), which is what the regex
// engines behind Hugging Face's tokenizers and tiktoken use; note JavaScript's \s differs on
// U+0085 (not in it) and U+FEFF (in it). tests/tokenizer_unicode.sh checks all 0x110000 code
// points against Python's unicodedata.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace strata {

enum class CharClass : uint8_t {
  other = 0,   // punctuation, symbols, marks, controls, unassigned, invalid UTF-8
  letter = 1,  // \p{L}
  number = 2,  // \p{N}
  space = 3,   // \s (White_Space); no White_Space code point is a letter or number
};

// A code point that is not valid UTF-8: each byte of a malformed sequence stands for itself.
inline constexpr uint32_t kInvalidCodePoint = 0xFFFFFFFF;

CharClass char_class(uint32_t cp);

// The code point starting at text[i] and its length in bytes (1-4). A byte that does not start
// a well-formed sequence (a stray continuation byte, an overlong form, a surrogate, a value
// above U+10FFFF, a sequence cut by the end of text) is one "character" of length 1 with code
// point kInvalidCodePoint, class other: every byte string decodes, and the pieces cover it.
struct Utf8Char {
  uint32_t cp;
  uint32_t len;
};
Utf8Char decode_utf8(std::string_view text, size_t i);

// The start of the character that ends just before text[i] (i > 0), by decode_utf8's rules.
size_t prev_char_start(std::string_view text, size_t i);

}  // namespace strata
