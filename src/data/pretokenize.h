// Pre-tokenization for byte-level BPE: the text is cut into pieces by a regex, and BPE merges
// never cross a piece. Two patterns are supported, each implemented by hand (no regex engine),
// recognised by their exact pattern strings in a tokenizer.json:
//
//   gpt2    's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//           GPT-2's (also the ByteLevel pre-tokenizer's use_regex=true pattern)
//   llama3  (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//           ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//           Llama 3's, which is also GPT-4's cl100k_base
//
// The matcher follows the regex semantics exactly: leftmost match, alternatives tried in order,
// greedy quantifiers with backtracking (worked out per alternative in pretokenize.cpp). Classes
// are unicode_classes.h's. (?i:...) folds case as Unicode simple case folding does for these
// letters: 's also matches 'S and 'ſ (U+017F), the other letters their ASCII capitals.
// Bytes that are not valid UTF-8 are single characters of class "other" (not a letter, number
// or space), so every byte string is cut into pieces that cover it.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

namespace strata {

enum class PretokenPattern { gpt2, llama3 };

inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

const char* pattern_name(PretokenPattern p);  // "gpt2", "llama3"

// The length in bytes (> 0) of the piece that starts at text[i], i < text.size().
size_t pretoken_length(std::string_view text, size_t i, PretokenPattern p);

// Appends the pieces of text, in order; they concatenate to text.
void pretokenize(std::string_view text, PretokenPattern p, std::vector<std::string_view>* out);

}  // namespace strata
