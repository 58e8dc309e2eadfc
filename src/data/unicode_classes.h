// The character classes the byte-level BPE pre-tokenizers need (pretokenize.h): \p{L}, \p{N} and
// \s, by code point, for the code points core/utf8.h decodes.
//
// Coverage: \p{L} is every code point of general category Lu, Ll, Lt, Lm or Lo and \p{N} every
// one of Nd, Nl or No, as Unicode 14.0 assigns them (the version of Python 3.11's unicodedata);
// code points assigned later are neither. \s is Unicode's White_Space property (U+0009-000D,
// 0020, 0085, 00A0, 1680, 2000-200A, 2028, 2029, 202F, 205F, 3000), which is what the regex
// engines behind Hugging Face's tokenizers and tiktoken use; note JavaScript's \s differs on
// U+0085 (not in it) and U+FEFF (in it). tests/tokenizer_unicode.sh checks all 0x110000 code
// points against Python's unicodedata.
#pragma once

#include <cstdint>

#include "core/utf8.h"

namespace strata {

enum class CharClass : uint8_t {
  other = 0,   // punctuation, symbols, marks, controls, unassigned, kInvalidCodePoint
  letter = 1,  // \p{L}
  number = 2,  // \p{N}
  space = 3,   // \s (White_Space); no White_Space code point is a letter or number
};

CharClass char_class(uint32_t cp);

}  // namespace strata
