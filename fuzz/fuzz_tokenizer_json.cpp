// A Hugging Face tokenizer.json: the input's text through BpeTokenizer::from_json, with and
// without special tokens, and as a file in a scratch directory through load_tokenizer (the
// directory pick, the file read); all three must agree on whether it loads (an input naming
// an id above 2^20 gets only the first: kCheapIds). A tokenizer that
// loads encodes a few fixed texts, the input's first bytes and the bytes of neighbouring ids,
// and these must hold:
//  - every id is in [0, vocab_size) and decode(encode(s)) == s: byte-level BPE with no
//    normalizer, every byte a token and every merge the concatenation of its parts
//    (bpe_tokenizer.h), and an added token matched literally decodes to its content;
//  - merge_fast gives merge_naive's ids (the reference mode);
//  - Note [Streaming cuts]: at find_cut's cut, the two pieces' ids are the whole text's.
// STRATA_FUZZ_VERBOSE=1 prints each input's verdict (for writing seeds).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "core/json_util.h"
#include "data/bpe_tokenizer.h"
#include "fuzz_scratch.h"

namespace {

using strata::BpeTokenizer;

// The input bytes encoded besides the fixed texts: enough to reach the merges and added tokens,
// few enough that merge_naive's O(n^2) stays fast.
constexpr size_t kInputSliceBytes = 256;
// Texts made of the first ids' bytes.
constexpr int64_t kPairTexts = 320;
// The id table goes up to the largest id (at most 2^24, bpe_tokenizer_json.cpp): seconds under
// ASan. An input naming an id above this is loaded once, by from_json, to stay inside -timeout.
constexpr int64_t kCheapIds = int64_t{1} << 20;

// The largest integer among model.vocab's values and added_tokens' ids, or 0.
int64_t largest_id(std::string_view text) {
  auto j = strata::parse_json(text, "fuzz");
  if (!j.ok() || !j->is_object()) return 0;
  int64_t most = 0;
  const auto note = [&](const nlohmann::json& v) {
    if (v.is_number_integer()) most = std::max(most, v.get<int64_t>());
  };
  const auto model = j->find("model");
  if (model != j->end() && model->is_object()) {
    const auto vocab = model->find("vocab");
    if (vocab != model->end() && vocab->is_object()) {
      for (const auto& v : *vocab) note(v);
    }
  }
  const auto added = j->find("added_tokens");
  if (added != j->end() && added->is_array()) {
    for (const auto& a : *added) {
      if (a.is_object() && a.contains("id")) note(a["id"]);
    }
  }
  return most;
}

[[noreturn]] void fail(const char* what, std::string_view text) {
  std::fprintf(stderr, "tokenizer.json: %s for a text of %zu bytes\n", what, text.size());
  std::abort();
}

std::vector<int32_t> encode(BpeTokenizer& t, std::string_view text) {
  std::vector<int32_t> ids;
  if (!t.encode_append(text, &ids).ok()) fail("encode failed", text);
  return ids;
}

void check_text(BpeTokenizer& t, std::string_view text) {
  const std::vector<int32_t> ids = encode(t, text);
  for (int32_t id : ids) {
    if (id < 0 || id >= t.vocab_size()) fail("an id outside the vocabulary", text);
  }
  auto back = t.decode(ids);
  if (!back.ok() || *back != text) fail("decode(encode(s)) != s", text);

  t.set_reference_mode(true);
  const std::vector<int32_t> naive = encode(t, text);
  t.set_reference_mode(false);
  if (naive != ids) fail("merge_fast and merge_naive disagree", text);

  if (auto cut = t.find_cut(text, 0)) {
    if (cut->end > cut->resume || cut->resume > text.size()) fail("a cut outside the text", text);
    std::vector<int32_t> pieces = encode(t, text.substr(0, cut->end));
    const std::vector<int32_t> rest = encode(t, text.substr(cut->resume));
    pieces.insert(pieces.end(), rest.begin(), rest.end());
    if (pieces != ids) fail("the pieces of a cut encode unlike the whole", text);
  }
}

void check_tokenizer(BpeTokenizer& t, std::string_view input) {
  static const char* const kTexts[] = {
      "",
      "Hello world's 123 thing\n\n  the end",
      "a<|endoftext|>b <|begin_of_text|><|eot_id|>",
      "caf\xC3\xA9 \xE2\x98\x83 \xF0\x9F\x98\x80 \xFF\xFE\x80 bytes",
      "the the the inin heheh 1234567 ing",
  };
  for (const char* s : kTexts) check_text(t, s);
  check_text(t, input.substr(0, std::min(input.size(), kInputSliceBytes)));
  // The bytes of each two neighbouring ids: a merge's parts, in seeds that number tokens in order.
  const int32_t n = static_cast<int32_t>(std::min<int64_t>(t.vocab_size(), kPairTexts));
  for (int32_t id = 0; id + 1 < n; ++id) {
    const int32_t pair[2] = {id, id + 1};
    auto bytes = t.decode(pair);
    if (bytes.ok()) check_text(t, *bytes);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  // One tokenizer alive at a time: ids up to 2^24 make each one's id table up to 512 MiB.
  int64_t vocab_size = -1;
  std::string verdict;
  {
    auto plain = BpeTokenizer::from_json(text, "fuzz/tokenizer.json", {});
    verdict = plain.ok() ? (*plain)->name() : plain.status().message();
    if (plain.ok()) {
      vocab_size = (*plain)->vocab_size();
      check_tokenizer(**plain, text);
    }
  }
  if (std::getenv("STRATA_FUZZ_VERBOSE") != nullptr) {
    std::fprintf(stderr, "tokenizer: %s\n", verdict.c_str());
  }
  if (largest_id(text) > kCheapIds) return 0;
  {
    auto special =
        BpeTokenizer::from_json(text, "fuzz/tokenizer.json", strata::TokenizerOptions{true});
    if (special.ok() != (vocab_size >= 0)) fail("special tokens change whether it loads", text);
    if (special.ok()) check_tokenizer(**special, text);
  }
  strata::fuzz::write_scratch("tokenizer.json", data, size);
  auto loaded = strata::load_tokenizer(strata::fuzz::scratch_dir());
  if (loaded.ok() != (vocab_size >= 0) || (loaded.ok() && (*loaded)->vocab_size() != vocab_size)) {
    fail("load_tokenizer and from_json disagree", text);
  }
  return 0;
}
