// Byte-level BPE at work: the byte alphabet, merging, encoding and decoding, and the streaming
// cuts. Reading tokenizer.json is bpe_tokenizer_json.cpp.
#include "data/bpe_tokenizer.h"

#include <algorithm>

#include "data/unicode_classes.h"

namespace strata {

namespace {

// Pre-tokens up to this many bytes are cached, until the cache holds kCacheEntries of them.
constexpr size_t kCacheMaxPieceBytes = 64;
constexpr size_t kCacheEntries = size_t{1} << 19;

struct ByteMaps {
  std::array<uint32_t, 256> to_unicode{};
  std::array<int16_t, 324> from_unicode{};  // code points 0..323 (the alphabet's largest is 323)
};

const ByteMaps& byte_maps() {
  static const ByteMaps maps = [] {
    ByteMaps m;
    m.from_unicode.fill(-1);
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      m.to_unicode[b] = printable ? b : next++;
      m.from_unicode[m.to_unicode[b]] = static_cast<int16_t>(b);
    }
    return m;
  }();
  return maps;
}

}  // namespace

uint32_t byte_to_unicode(uint8_t b) {
  return byte_maps().to_unicode[b];
}

int byte_from_unicode(uint32_t cp) {
  const ByteMaps& m = byte_maps();
  return cp < m.from_unicode.size() ? m.from_unicode[cp] : -1;
}

std::string BpeTokenizer::name() const {
  return std::string("BPE (") + pattern_name(pattern_) + " pattern, vocab " +
         std::to_string(vocab_size()) + ") " + path_;
}

// ---------------------------------------------------------------------------------------------
// Merging

void BpeTokenizer::merge_naive(std::string_view piece, std::vector<int32_t>* ids) const {
  std::vector<int32_t> word;
  for (char c : piece) word.push_back(byte_ids_[static_cast<unsigned char>(c)]);
  while (word.size() > 1) {
    const Merge* best = nullptr;
    size_t at = 0;
    for (size_t k = 0; k + 1 < word.size(); ++k) {
      const Merge* m = find_merge(word[k], word[k + 1]);
      if (m != nullptr && (best == nullptr || m->rank < best->rank)) {
        best = m;
        at = k;
      }
    }
    if (best == nullptr) break;
    word[at] = best->id;
    word.erase(word.begin() + static_cast<std::ptrdiff_t>(at) + 1);
  }
  ids->insert(ids->end(), word.begin(), word.end());
}

void BpeTokenizer::merge_fast(std::string_view piece, std::vector<int32_t>* ids) {
  const int32_t n = static_cast<int32_t>(piece.size());
  symbols_.resize(static_cast<size_t>(n));
  for (int32_t k = 0; k < n; ++k) {
    symbols_[k] = {byte_ids_[static_cast<unsigned char>(piece[k])], k - 1, k + 1 < n ? k + 1 : -1};
  }
  // A min-heap on (rank, pos): the lowest rank first, the leftmost of equal ranks.
  const auto later = [](const Candidate& x, const Candidate& y) {
    return x.rank != y.rank ? x.rank > y.rank : x.pos > y.pos;
  };
  candidates_.clear();
  const auto offer = [&](int32_t pos) {
    const Symbol& s = symbols_[pos];
    if (s.next < 0) return;
    const int32_t right = symbols_[s.next].id;
    if (const Merge* m = find_merge(s.id, right)) {
      candidates_.push_back({m->rank, pos, s.id, right, m->id});
      std::push_heap(candidates_.begin(), candidates_.end(), later);
    }
  };
  for (int32_t k = 0; k + 1 < n; ++k) offer(k);
  while (!candidates_.empty()) {
    std::pop_heap(candidates_.begin(), candidates_.end(), later);
    const Candidate c = candidates_.back();
    candidates_.pop_back();
    Symbol& s = symbols_[c.pos];
    // Stale: the left symbol was merged away or changed, or its right neighbour did.
    if (s.id != c.left || s.next < 0 || symbols_[s.next].id != c.right) continue;
    const int32_t gone = s.next;
    s.id = c.id;
    s.next = symbols_[gone].next;
    if (s.next >= 0) symbols_[s.next].prev = c.pos;
    symbols_[gone].id = -1;  // merged into its left neighbour
    if (s.prev >= 0) offer(s.prev);
    offer(c.pos);
  }
  for (int32_t k = 0; k >= 0; k = symbols_[k].next) ids->push_back(symbols_[k].id);
}

// ---------------------------------------------------------------------------------------------
// Encoding and decoding

void BpeTokenizer::encode_piece(std::string_view piece, std::vector<int32_t>* ids) {
  if (piece.size() == 1) {
    ids->push_back(byte_ids_[static_cast<unsigned char>(piece[0])]);
    return;
  }
  if (ignore_merges_) {
    auto it = ids_by_bytes_.find(piece);
    if (it != ids_by_bytes_.end()) {
      ids->push_back(it->second);
      return;
    }
  }
  if (reference_mode_) {
    merge_naive(piece, ids);
    return;
  }
  const bool cacheable = piece.size() <= kCacheMaxPieceBytes;
  if (cacheable) {
    auto it = cache_.find(piece);
    if (it != cache_.end()) {
      const int32_t* first = cache_ids_.data() + it->second.offset;
      ids->insert(ids->end(), first, first + it->second.count);
      return;
    }
  }
  const size_t before = ids->size();
  merge_fast(piece, ids);
  if (cacheable) {
    if (cache_.size() >= kCacheEntries) {
      cache_.clear();
      cache_ids_.clear();
    }
    const CacheEntry e{static_cast<uint32_t>(cache_ids_.size()),
                       static_cast<uint32_t>(ids->size() - before)};
    cache_ids_.insert(cache_ids_.end(), ids->begin() + static_cast<std::ptrdiff_t>(before),
                      ids->end());
    cache_.emplace(std::string(piece), e);
  }
}

void BpeTokenizer::encode_ordinary(std::string_view text, std::vector<int32_t>* ids) {
  for (size_t i = 0; i < text.size();) {
    const size_t n = pretoken_length(text, i, pattern_);
    encode_piece(text.substr(i, n), ids);
    i += n;
  }
}

std::pair<size_t, size_t> BpeTokenizer::next_added(std::string_view text, size_t from) const {
  for (size_t i = from; i < text.size(); ++i) {
    if (!added_first_byte_[static_cast<unsigned char>(text[i])]) continue;
    for (size_t k = 0; k < added_.size(); ++k) {  // longest first
      if (text.substr(i, added_[k].content.size()) == added_[k].content) return {i, k};
    }
  }
  return {std::string_view::npos, 0};
}

Status BpeTokenizer::encode_append(std::string_view text, std::vector<int32_t>* ids) {
  if (!special_tokens_ || added_.empty()) {
    encode_ordinary(text, ids);
    return Status::ok_status();
  }
  size_t pos = 0;
  while (pos < text.size()) {
    const auto [at, k] = next_added(text, pos);
    if (at == std::string_view::npos) {
      encode_ordinary(text.substr(pos), ids);
      break;
    }
    encode_ordinary(text.substr(pos, at - pos), ids);
    ids->push_back(added_[k].id);
    pos = at + added_[k].content.size();
  }
  return Status::ok_status();
}

Result<std::string> BpeTokenizer::decode(std::span<const int32_t> ids) const {
  std::string text;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (!has_id(id)) {
      return invalid_argument("token id " + std::to_string(id) + " at position " +
                              std::to_string(i) + " is not in the vocabulary of tokenizer " +
                              path_);
    }
    text += tokens_[static_cast<size_t>(id)];
  }
  return text;
}

// ---------------------------------------------------------------------------------------------
// Streaming cuts (Note [Streaming cuts] in tokenizer.h)
//
// Both patterns cut in the same two places, p being the first byte of the second piece:
//   (1) a space between two letters: text[p] == ' ', a letter before it, a letter after it;
//   (2) after a newline that follows a character other than whitespace and precedes one:
//       text[p-1] == '\n', text[p-2..] and text[p] not whitespace.
// Why the pre-tokens are the same on both sides of such a cut:
//  - No match starting before p ends after it, and one starts at p. In (1) the letter run
//    before p ends at the space (a letter run never takes a space); at p, ' ?\p{L}+' (GPT-2) or
//    '[^\r\n\p{L}\p{N}]?\p{L}+' (Llama 3) matches the space with the letters after it. In (2)
//    the run before the newline is not whitespace and no alternative takes a newline after it
//    except Llama 3's '[^\s\p{L}\p{N}]+[\r\n]*', which takes this one newline and stops at the
//    character after it, not being \r or \n; otherwise the newline is a match of its own
//    (GPT-2: \s+(?!\S) fails before \S, \s+ takes it; Llama 3: \s*[\r\n]+).
//  - No matcher decides anything on characters past the cut while matching before it: every
//    alternative stops at the first character of another class, which is the character just
//    before p (a space or newline) or earlier; the contractions look at most 3 characters ahead
//    and need letters, so a space or newline stops them too. Matching never looks behind.
//  - A match of the first piece that ends at its end is the same as in the whole text: at the
//    end of the first piece, the newline of (2) matches "\n" by \s+(?!\S) (GPT-2) or
//    \s*[\r\n]+ (Llama 3), as it does before a non-space character in the whole text.
// With special tokens on, a cut inside an added token's occurrence is refused as well.
bool BpeTokenizer::cut_splits_added_token(std::string_view text, size_t p) const {
  for (const AddedToken& a : added_) {
    const size_t len = a.content.size();
    for (size_t s = p >= len ? p - len + 1 : 0; s < p; ++s) {
      // An occurrence from s; past the end of text it may yet be completed.
      const size_t have = std::min(len, text.size() - s);
      if (text.substr(s, have) == std::string_view(a.content).substr(0, have)) return true;
    }
  }
  return false;
}

std::optional<TextCut> BpeTokenizer::find_cut(std::string_view text, size_t from) const {
  const auto is = [&](size_t i, CharClass c) {
    const Utf8Char u = decode_utf8(text, i);
    return u.cp != kInvalidCodePoint && char_class(u.cp) == c;
  };
  const auto not_space = [&](size_t i) {
    const Utf8Char u = decode_utf8(text, i);
    return u.cp != kInvalidCodePoint && char_class(u.cp) != CharClass::space;
  };
  if (text.size() < 3) return std::nullopt;
  for (size_t p = text.size() - 1; p >= 2 && p >= from; --p) {
    bool cut = false;
    if (text[p] == ' ') {
      cut = p + 1 < text.size() && is(p + 1, CharClass::letter) &&
            is(prev_char_start(text, p), CharClass::letter);
    } else if (text[p - 1] == '\n') {
      cut = not_space(p) && not_space(prev_char_start(text, p - 1));
    }
    if (cut && special_tokens_ && cut_splits_added_token(text, p)) cut = false;
    if (cut) return TextCut{p, p};
  }
  return std::nullopt;
}

}  // namespace strata
