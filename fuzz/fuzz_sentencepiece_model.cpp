// A SentencePiece model (tokenizer.model, a protobuf): the input as a file loaded by
// SentencePieceTokenizer::load, which hands it to libsentencepiece and reads the flags that
// decide its streaming cuts with its own protobuf reader. A model that loads encodes a few fixed
// texts and the input's first bytes (or refuses one, bad_format, as some models that load do),
// and these must hold: every id is in [0, vocab_size), the ids decode, an id past the vocabulary
// is refused, and (Note [Streaming cuts]) where find_cut cuts, the two pieces' ids are the whole
// text's. decode(encode(s)) == s is promised only for some models (sentencepiece_tokenizer.h),
// so it is not checked.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "data/sentencepiece_tokenizer.h"
#include "fuzz_scratch.h"

namespace {

using strata::SentencePieceTokenizer;

constexpr size_t kInputSliceBytes = 256;

[[noreturn]] void fail(const char* what, std::string_view text) {
  std::fprintf(stderr, "sentencepiece: %s for a text of %zu bytes\n", what, text.size());
  std::abort();
}

// The ids of text, or nullopt where the model cannot encode it (bad_format: some models that
// load fail on some texts; any other error is a finding).
std::optional<std::vector<int32_t>> encode(SentencePieceTokenizer& t, std::string_view text) {
  std::vector<int32_t> ids;
  const strata::Status s = t.encode_append(text, &ids);
  if (s.ok()) return ids;
  if (s.code() != strata::ErrorCode::bad_format) fail("encode failed other than bad_format", text);
  return std::nullopt;
}

void check_text(SentencePieceTokenizer& t, std::string_view text) {
  const auto encoded = encode(t, text);
  if (!encoded) return;
  const std::vector<int32_t>& ids = *encoded;
  for (int32_t id : ids) {
    if (id < 0 || id >= t.vocab_size()) fail("an id outside the vocabulary", text);
  }
  if (!t.decode(ids).ok()) fail("the ids of encode do not decode", text);
  if (auto cut = t.find_cut(text, 0)) {
    if (cut->end > cut->resume || cut->resume > text.size()) fail("a cut outside the text", text);
    auto pieces = encode(t, text.substr(0, cut->end));
    const auto rest = encode(t, text.substr(cut->resume));
    if (!pieces || !rest) fail("a piece of a text that encodes does not", text);
    pieces->insert(pieces->end(), rest->begin(), rest->end());
    if (*pieces != ids) fail("the pieces of a cut encode unlike the whole", text);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = strata::fuzz::write_scratch("tokenizer.model", data, size);
  auto loaded = SentencePieceTokenizer::load(path);
  if (!loaded.ok()) return 0;
  SentencePieceTokenizer& t = **loaded;
  static const char* const kTexts[] = {
      "",
      "the quick brown fox jumps over the lazy dog",
      "hello world, the end <sep> 1234567890 !?",
      "  two  spaces\tand\ttabs\n\nnewlines ",
      "caf\xC3\xA9 \xE2\x98\x83 \xF0\x9F\x98\x80 \xFF\xFE\x80 bytes",
  };
  for (const char* s : kTexts) check_text(t, s);
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  check_text(t, input.substr(0, std::min(size, kInputSliceBytes)));
  const int32_t past = static_cast<int32_t>(std::min<int64_t>(t.vocab_size(), INT32_MAX));
  if (past < INT32_MAX && t.decode(std::vector<int32_t>{past}).ok()) {
    fail("an id past the vocabulary decodes", "");
  }
  return 0;
}
