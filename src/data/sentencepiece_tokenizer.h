// A SentencePiece model (tokenizer.model) behind the Tokenizer interface, through Debian's
// libsentencepiece. encode is SentencePieceProcessor::Encode on the text (no BOS/EOS; its
// user-defined symbols are always matched and its control symbols never, whatever
// TokenizerOptions::special_tokens says); decode is its Decode, after checking every id is in
// range. decode(encode(x)) == x holds for models trained with byte_fallback and an identity
// normalizer that keeps whitespace (remove_extra_whitespaces false); other models normalise.
//
// Streaming cuts (Note [Streaming cuts]): at a space between two ASCII letters, the space being
// dropped, since the dummy prefix SentencePiece puts before the next piece stands for it. That
// is exact for a BPE or char model that adds the dummy prefix, escapes whitespace as "▁",
// does not treat it as a suffix, has "▁" as a piece (a run of unknown characters is one <unk>)
// and no piece holding "▁" after its first character: no piece spans a word boundary, and BPE
// merges by fixed piece scores, so each word's pieces are independent of the others'. The
// model's protobuf is read for the flags. Not for unigram models: their Viterbi search sums
// scores in floating point from the start of the text, so ties between equal-scored
// segmentations ("55"+"5" against "5"+"55") fall differently after another prefix (seen on the
// test corpus); nor for word models, whose adjacent unknown words join into one <unk>. A model
// that does not qualify is encoded whole, and says why (cut_refusal()).
#pragma once

#include <memory>
#include <string>

#include "data/tokenizer.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace strata {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  // Errors: not_found for a missing file, bad_format (naming the file) for one SentencePiece
  // cannot load. encode_append's bad_format: a text the model cannot encode (a model that loads
  // may still fail on some texts, e.g. one holding a CONTROL piece of one character).
  static Result<std::unique_ptr<SentencePieceTokenizer>> load(const std::string& path);
  ~SentencePieceTokenizer() override;

  std::string name() const override { return "SentencePiece " + path_; }
  int64_t vocab_size() const override { return vocab_size_; }
  Status encode_append(std::string_view text, std::vector<int32_t>* ids) override;
  Result<std::string> decode(std::span<const int32_t> ids) const override;
  std::optional<TextCut> find_cut(std::string_view text, size_t from) const override;

  std::string cut_refusal() const override { return cut_refusal_; }

 private:
  SentencePieceTokenizer();

  std::string path_;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  int64_t vocab_size_ = 0;
  std::string cut_refusal_;
};

}  // namespace strata
