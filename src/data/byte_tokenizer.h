// The byte tokenizer: token = byte value (vocab 256). Enough for the embedded corpus and for
// `strata prepare` on any text file, with no vocabulary file to ship.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"

namespace strata {

std::vector<uint16_t> byte_tokenize(std::string_view text);
// Tokens above 255 are not bytes; they come out as '?' rather than being truncated silently.
std::string byte_detokenize(const uint16_t* tokens, int64_t n);

// The same behind the Tokenizer interface (load_tokenizer("byte")), except that decode refuses
// ids above 255. Any place is a cut.
class ByteTokenizer final : public Tokenizer {
 public:
  std::string name() const override { return "byte"; }
  int64_t vocab_size() const override { return 256; }
  Status encode_append(std::string_view text, std::vector<int32_t>* ids) override;
  Result<std::string> decode(std::span<const int32_t> ids) const override;
  std::optional<TextCut> find_cut(std::string_view text, size_t from) const override;
};

}  // namespace strata
