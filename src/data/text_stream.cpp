// Note [Streaming text] in text_stream.h.
#include "data/text_stream.h"

#include <algorithm>

namespace strata {

Result<std::string> detokenize(const Tokenizer& t, std::span<const int32_t> ids) {
  std::string text;
  size_t run = 0;  // the start of the current run of ids the tokenizer has
  for (size_t i = 0; i <= ids.size(); ++i) {
    if (i < ids.size() && t.has_id(ids[i])) continue;
    STRATA_ASSIGN_OR_RETURN(std::string piece, t.decode(ids.subspan(run, i - run)));
    text += piece;
    if (i < ids.size()) text += "<|id " + std::to_string(ids[i]) + "|>";
    run = i + 1;
  }
  return text;
}

size_t settled_length(std::string_view text) {
  size_t n = text.size();
  // The last byte that is not a continuation byte (10xxxxxx), among the last four: a lead byte
  // whose sequence needs more bytes than follow it is held.
  for (size_t k = 1; k <= std::min<size_t>(4, n); ++k) {
    const auto c = static_cast<unsigned char>(text[n - k]);
    if ((c & 0xC0) == 0x80) continue;
    const size_t need = c >= 0xF0 && c <= 0xF4  ? 4
                        : c >= 0xE0 && c < 0xF0 ? 3
                        : c >= 0xC2 && c < 0xE0 ? 2
                                                : 1;
    if (need > k) n -= k;
    break;
  }
  constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD
  while (n >= 3 && text.substr(n - 3, 3) == kReplacement) n -= 3;
  return n;
}

Status TextStream::push(std::span<const int32_t> ids) {
  run_.insert(run_.end(), ids.begin(), ids.end());
  return emit(false);
}

Status TextStream::emit(bool final) {
  STRATA_ASSIGN_OR_RETURN(const std::string text, detokenize(tok_, run_));
  // A run whose text is no longer than its prefix's (an empty or control token) has nothing new.
  const std::string_view fresh =
      text.size() > prefix_bytes_ ? std::string_view(text).substr(prefix_bytes_) : "";
  const bool stuck = run_.size() - prefix_ > kMaxHeldTokens;
  const size_t settled = final || stuck ? fresh.size() : settled_length(fresh);
  if (settled > sent_) {
    STRATA_RETURN_IF_ERROR(sink_(fresh.substr(sent_, settled - sent_)));
    sent_ = settled;
  }
  // Restart after a run written in full, unless it wrote nothing (an empty text, a control
  // token: the next run's prefix must hold text for SentencePiece's first-piece rule).
  if (final || (settled == fresh.size() && (!fresh.empty() || stuck))) {
    const size_t keep = std::min(kPrefixTokens, run_.size());
    run_.erase(run_.begin(), run_.end() - static_cast<std::ptrdiff_t>(keep));
    prefix_ = run_.size();
    STRATA_ASSIGN_OR_RETURN(const std::string prefix_text, detokenize(tok_, run_));
    prefix_bytes_ = prefix_text.size();
    sent_ = 0;
  }
  return Status();
}

}  // namespace strata
