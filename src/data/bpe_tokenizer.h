// Byte-level BPE read from a Hugging Face tokenizer.json: GPT-2 style (ByteLevel pre-tokenizer
// with its regex) and Llama 3 style (a Split on Llama 3's regex, then ByteLevel without one).
//
// What is read, and refused with one line naming the file and the field:
//   model          type "BPE"; vocab {token: id}; merges as "a b" strings or [a, b] pairs, each
//                  naming two tokens of the vocab whose concatenation is one too (rank = index;
//                  a pair listed twice keeps its last rank, as Hugging Face's map does);
//                  ignore_merges (a pre-token that is itself a token is that token, Llama 3);
//                  byte_fallback, continuing_subword_prefix, end_of_word_suffix and dropout
//                  must be off. Every byte's token must be in the vocab.
//   pre_tokenizer  ByteLevel (use_regex true: the GPT-2 regex), or a Sequence of a Split and a
//                  ByteLevel with use_regex false, the Split's pattern {"Regex": ...} being
//                  exactly GPT-2's or Llama 3's (pretokenize.h), behavior "Isolated", not
//                  inverted. add_prefix_space must be false.
//   normalizer     must be null.
//   added_tokens   [{id, content}]: see Note [Special tokens].
// Ignored: decoder (ids decode to their bytes, which is what ByteLevel decoding does),
// post_processor (encode adds no BOS/EOS), truncation, padding.
//
// Tokens are strings over GPT-2's byte-to-unicode alphabet: each byte is one printable
// character (byte_to_unicode), so a token's bytes are its characters mapped back.
//
// Note [Special tokens]
// By default the added tokens' text is encoded like any other text ("<|endoftext|>" in a corpus
// becomes the tokens of its characters), as tiktoken's encode_ordinary and llm.c's data
// scripts do: a corpus cannot smuggle control tokens into training. With
// TokenizerOptions::special_tokens (strata prepare --special-tokens), every added token is
// matched literally in the text before pre-tokenization, the leftmost occurrence first and the
// longest of those starting there, and becomes its id; its lstrip/rstrip/single_word/normalized
// flags are ignored. An added token decodes to its content either way.

// BPE merges a pre-token's byte tokens by rank: the adjacent pair of lowest rank, the leftmost of
// equal ranks, until no pair has a merge. merge_fast does it with a heap of candidate pairs over
// a linked list of symbols (O(n log n), Hugging Face's order exactly), merge_naive rescans the
// whole list after each merge (O(n^2), the reference); tests check they agree. encode caches the
// ids of short pre-tokens.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "data/pretokenize.h"
#include "data/tokenizer.h"

namespace strata {

// GPT-2's bytes_to_unicode: the printable bytes ! to ~, ¡ to ¬ and ® to ÿ stand for themselves;
// the other 68 bytes, in order, for U+0100 onwards.
uint32_t byte_to_unicode(uint8_t b);
// The byte a character stands for, or -1 for a code point outside the alphabet.
int byte_from_unicode(uint32_t cp);

class BpeTokenizer final : public Tokenizer {
 public:
  // path names the file in errors; json_text is its content.
  static Result<std::unique_ptr<BpeTokenizer>> from_json(std::string_view json_text,
                                                         const std::string& path,
                                                         const TokenizerOptions& options);
  static Result<std::unique_ptr<BpeTokenizer>> load(const std::string& path,
                                                    const TokenizerOptions& options);

  std::string name() const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(tokens_.size()); }
  bool has_id(int32_t id) const override {
    return id >= 0 && id < vocab_size() && present_[static_cast<size_t>(id)];
  }
  Status encode_append(std::string_view text, std::vector<int32_t>* ids) override;
  Result<std::string> decode(std::span<const int32_t> ids) const override;
  std::optional<TextCut> find_cut(std::string_view text, size_t from) const override;

  PretokenPattern pattern() const { return pattern_; }
  bool ignore_merges() const { return ignore_merges_; }

  // The BPE of one pre-token's bytes (non-empty), appended to *ids; no cache, no ignore_merges.
  void merge_fast(std::string_view piece, std::vector<int32_t>* ids);
  void merge_naive(std::string_view piece, std::vector<int32_t>* ids) const;
  // true: encode uses merge_naive and no cache (the reference, for tests).
  void set_reference_mode(bool naive) { reference_mode_ = naive; }

 private:
  BpeTokenizer() = default;

  struct Merge {
    int32_t rank;
    int32_t id;  // of the merged token
  };
  struct AddedToken {
    std::string content;
    int32_t id;
  };
  // A merge candidate in merge_fast: the pair starting at symbol pos.
  struct Candidate {
    int32_t rank;
    int32_t pos;
    int32_t left, right;  // the ids it was made for: stale once either symbol changed
    int32_t id;
  };
  struct Symbol {
    int32_t id;
    int32_t prev, next;  // -1 at the ends
  };
  // Heterogeneous lookup by string_view, so cache probes do not allocate.
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  struct CacheEntry {
    uint32_t offset, count;  // in cache_ids_
  };

  const Merge* find_merge(int32_t left, int32_t right) const {
    auto it = merges_.find(pair_key(left, right));
    return it == merges_.end() ? nullptr : &it->second;
  }
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  // The parts of from_json: model.vocab (tokens_, present_, byte_ids_; *id_of maps each token
  // string to its id, *not_bytes lists the tokens outside the byte alphabet), model.merges,
  // added_tokens.
  Status read_vocab(const nlohmann::json& model, std::unordered_map<std::string, int32_t>* id_of,
                    std::vector<std::pair<int32_t, std::string>>* not_bytes);
  Status read_merges(const nlohmann::json& model,
                     const std::unordered_map<std::string, int32_t>& id_of);
  Status read_added_tokens(const nlohmann::json& root);
  void encode_piece(std::string_view piece, std::vector<int32_t>* ids);
  void encode_ordinary(std::string_view text, std::vector<int32_t>* ids);
  // The earliest added token at or after text[from] (leftmost, then longest): its offset and
  // index in added_, or {npos, 0}.
  std::pair<size_t, size_t> next_added(std::string_view text, size_t from) const;
  bool cut_splits_added_token(std::string_view text, size_t p) const;

  std::string path_;
  PretokenPattern pattern_ = PretokenPattern::gpt2;
  bool ignore_merges_ = false;
  bool special_tokens_ = false;
  bool reference_mode_ = false;

  std::vector<std::string> tokens_;  // id -> bytes
  std::vector<bool> present_;        // id -> in the vocab or added (ids may have holes)
  std::array<int32_t, 256> byte_ids_{};
  std::unordered_map<uint64_t, Merge> merges_;  // pair_key(left, right) -> merge
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> ids_by_bytes_;
  std::vector<AddedToken> added_;  // longest first
  std::array<bool, 256> added_first_byte_{};

  std::unordered_map<std::string, CacheEntry, StringHash, std::equal_to<>> cache_;
  std::vector<int32_t> cache_ids_;
  std::vector<Symbol> symbols_;        // merge_fast's scratch
  std::vector<Candidate> candidates_;  // its heap
};

}  // namespace strata
