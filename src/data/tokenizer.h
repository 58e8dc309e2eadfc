// One interface for the tokenizers Strata reads, and the factory that picks one by file.
//
//   byte           token = byte value, vocabulary 256 (byte_tokenizer.h); the name "byte"
//   tokenizer.json Hugging Face byte-level BPE, GPT-2 and Llama 3 style (bpe_tokenizer.h)
//   *.model        SentencePiece, through libsentencepiece (sentencepiece_tokenizer.h)
//
// encode never adds tokens of its own (no BOS/EOS, no template): the ids are the text's. Added
// (special) tokens of a tokenizer.json are plain text unless TokenizerOptions::special_tokens
// says otherwise; see Note [Special tokens] in bpe_tokenizer.h.
//
// Note [Streaming cuts]
// A long text is encoded in pieces (encode_file) and the ids must equal encoding it whole. Each
// tokenizer names the places where its text may be cut (find_cut): a cut {end, resume} means
// encode(text[0, end)) followed by encode(text[resume, ...)) gives encode(text). Byte-level BPE
// cuts where no pre-token can span the cut and no matcher looks across it (bpe_tokenizer.cpp);
// SentencePiece cuts at a space between two ASCII letters and drops it, since the dummy prefix
// of the second piece stands for it (sentencepiece_tokenizer.cpp). A text with no such place is
// encoded whole: correct, at the cost of memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace strata {

struct TokenizerOptions {
  // Note [Special tokens]: true matches a tokenizer.json's added tokens literally in the text.
  bool special_tokens = false;
};

struct TextCut {
  size_t end = 0;     // the first piece is text[0, end)
  size_t resume = 0;  // the next starts at text[resume] (end <= resume)
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // For logs: "byte", "BPE (llama3 pattern) tok/tokenizer.json", "SentencePiece x.model".
  virtual std::string name() const = 0;
  // Ids are in [0, vocab_size()).
  virtual int64_t vocab_size() const = 0;
  // Whether decode knows `id`: every id below vocab_size() but the holes a tokenizer.json's
  // vocabulary may leave (ids it never names).
  virtual bool has_id(int32_t id) const { return id >= 0 && id < vocab_size(); }

  // Appends the ids of text to *ids. Not thread-safe (a BPE caches the pieces it has merged).
  virtual Status encode_append(std::string_view text, std::vector<int32_t>* ids) = 0;
  Result<std::vector<int32_t>> encode(std::string_view text);

  // The bytes the ids stand for; invalid_argument naming the first id outside the vocabulary.
  virtual Result<std::string> decode(std::span<const int32_t> ids) const = 0;

  // Note [Streaming cuts]: the cut of text nearest its end, at or after text[from] (a cut at
  // position p needs a few bytes on both sides to decide, so the search may read before from);
  // nullopt when there is none.
  virtual std::optional<TextCut> find_cut(std::string_view text, size_t from) const = 0;
  // Why find_cut never cuts (so a text is encoded whole), or "" when it may.
  virtual std::string cut_refusal() const { return ""; }
};

// "byte"; a Hugging Face tokenizer.json (by the .json suffix or a '{' first); a SentencePiece
// model (anything else, normally tokenizer.model); a directory holding tokenizer.json or
// tokenizer.model (the .json first; the .model when the .json is bad_format, which is logged:
// Llama 2's and Mistral's). Errors are one line naming the file and, for a tokenizer.json, the
// field: not_found (no such file), bad_format (bad JSON, an unsupported or malformed field).
Result<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& path,
                                                  const TokenizerOptions& options = {});

struct EncodeStats {
  int64_t text_bytes = 0;
  int64_t tokens = 0;
  int64_t pieces = 0;         // encode calls
  int64_t largest_piece = 0;  // bytes
};

// Pieces are cut at most this long where the text allows (SentencePiece's encoder is twice as
// fast and far smaller on 64 KiB pieces than on 4 MiB ones).
inline constexpr int64_t kEncodePieceBytes = 64 << 10;

// Note [Streaming cuts]: reads the file in reads of chunk_bytes, encodes it in pieces of at most
// kEncodePieceBytes (and chunk_bytes) ending at the last cut in their span, or, where a span
// has none, in a span twice as long, and so on, and hands each piece's ids to sink in order;
// together they are encode(whole file). Memory is a few chunks unless the text has no cut for
// longer. Errors: the file's (not_found, io_error naming "text file <path>"), the tokenizer's,
// the sink's.
Status encode_file(Tokenizer& tok, const std::string& path, int64_t chunk_bytes,
                   const std::function<Status(std::span<const int32_t>)>& sink, EncodeStats* stats);

}  // namespace strata
