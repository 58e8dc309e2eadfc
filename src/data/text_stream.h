// Token ids to text as they come, for `strata sample` (Note [Streaming text]).
//
// Note [Streaming text]
// A token's text may depend on its neighbours (SentencePiece drops the leading space of the first
// piece and joins byte pieces into characters), so each push decodes a short run: the last few
// ids already written in full (the prefix), then those since. What the run decodes beyond the
// prefix's own text is new; of it, an unfinished tail is held back (an incomplete UTF-8 sequence,
// as byte-level tokens split characters, or trailing U+FFFD, SentencePiece's stand-in for one)
// and the rest is written. When nothing is held the run restarts after it. A tail held for more
// than kMaxHeldTokens tokens is no character in the making and is written as it is, as is any
// tail at finish. For byte and byte-level BPE tokenizers, whose text is the concatenation of each
// token's, the bytes written are detokenize(every id) exactly.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "data/tokenizer.h"

namespace strata {

// The text of `ids`. A model's vocabulary may be padded beyond its tokenizer's (GPT-2's 50257 to
// 50304): an id the tokenizer lacks is written "<|id N|>" rather than failing.
Result<std::string> detokenize(const Tokenizer& t, std::span<const int32_t> ids);

// The length of text's longest prefix that more tokens cannot change: text less a trailing
// incomplete UTF-8 sequence and the U+FFFD characters before it.
size_t settled_length(std::string_view text);

class TextStream {
 public:
  using Sink = std::function<Status(std::string_view bytes)>;
  static constexpr size_t kMaxHeldTokens = 8;
  static constexpr size_t kPrefixTokens = 4;

  TextStream(const Tokenizer& t, Sink sink) : tok_(t), sink_(std::move(sink)) {}

  // Appends ids; writes their text to the sink, less a held tail. Errors: the tokenizer's, the
  // sink's.
  Status push(std::span<const int32_t> ids);
  // Writes the held tail.
  Status finish() { return emit(true); }

 private:
  Status emit(bool final);

  const Tokenizer& tok_;
  Sink sink_;
  std::vector<int32_t> run_;  // the prefix (its first `prefix_` ids), then the ids since
  size_t prefix_ = 0;
  size_t prefix_bytes_ = 0;  // the length of the prefix's own text
  size_t sent_ = 0;          // bytes of the new text written so far
};

}  // namespace strata
