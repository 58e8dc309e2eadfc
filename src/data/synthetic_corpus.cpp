#include "data/synthetic_corpus.h"

#include <string_view>

#include "core/check.h"
#include "core/rng.h"

namespace strata {

namespace {

// The draws the corpus makes, from core/rng.h's splitmix64 (the same sequence everywhere).
class CorpusRng {
 public:
  explicit CorpusRng(uint64_t seed) : rng_(seed) {}
  // Uniform in [0, n) by multiply-shift of the top 32 bits; n is small here, so the bias is far
  // below anything a model could notice.
  int64_t below(int64_t n) {
    return static_cast<int64_t>(((rng_.next_u64() >> 32) * static_cast<uint64_t>(n)) >> 32);
  }
  bool chance(int percent) { return below(100) < percent; }
  template <size_t N>
  std::string_view pick(const std::string_view (&list)[N]) {
    return list[below(static_cast<int64_t>(N))];
  }

 private:
  Rng rng_;
};

// Word lists. Small on purpose: a few hundred steps should be enough to learn the spelling and
// most of the grammar, leaving word choice as the remaining uncertainty.
constexpr std::string_view kCharacters[] = {
    "cat",    "dog",  "fox",   "bird", "rabbit", "farmer", "teacher", "baker",
    "sailor", "king", "queen", "girl", "boy",    "child",  "painter", "owl"};
constexpr std::string_view kThings[] = {
    "apple", "ball", "book",  "box", "cake", "door",   "hat",    "key",   "lamp", "letter",
    "map",   "boat", "stone", "cup", "coat", "basket", "candle", "clock", "song", "egg"};
constexpr std::string_view kAdjectives[] = {"big",    "small", "red",    "green", "old",  "new",
                                            "happy",  "quiet", "bright", "dark",  "warm", "cold",
                                            "little", "brown", "tall",   "clever"};
constexpr std::string_view kTransitive[] = {"sees",  "finds",   "takes",  "likes",     "wants",
                                            "opens", "carries", "holds",  "paints",    "watches",
                                            "drops", "keeps",   "cleans", "gives away"};
constexpr std::string_view kIntransitive[] = {
    "runs", "sleeps", "sings", "waits", "smiles", "walks home", "laughs", "sits down", "listens"};
constexpr std::string_view kAdverbs[] = {"slowly", "quickly", "again",
                                         "today",  "quietly", "at once"};
constexpr std::string_view kPlaces[] = {
    "in the garden", "by the river",   "near the house", "on the hill",    "under the tree",
    "at the market", "in the morning", "after dinner",   "in the kitchen", "by the window"};
constexpr std::string_view kConnectives[] = {"and", "but", "so", "because", "while", "then"};
constexpr std::string_view kCounts[] = {"two", "three", "four", "five", "many", "no"};
constexpr std::string_view kSpeech[] = {"said", "asked", "called", "whispered"};

bool starts_with_vowel(std::string_view w) {
  return !w.empty() && std::string_view("aeiou").find(w[0]) != std::string_view::npos;
}

std::string plural(std::string_view noun) {
  std::string p(noun);
  if (p.ends_with("x") || p.ends_with("s") || p.ends_with("ch") || p.ends_with("sh"))
    return p + "es";
  return p + "s";
}

// Every random draw is its own statement. In `a() + b()` C++ leaves the order of the two calls
// unspecified, so two compilers could draw in different orders and write different corpora.
class Writer {
 public:
  Writer(uint64_t seed, std::string* out) : rng_(seed), out_(out) {}

  void paragraph() {
    // The paragraph's character recurs in about half its sentences.
    hero_.clear();
    hero_ += rng_.pick(kAdjectives);
    hero_ += ' ';
    hero_ += rng_.pick(kCharacters);
    int64_t n = 3 + rng_.below(5);
    for (int64_t i = 0; i < n; i++) {
      if (i > 0) *out_ += ' ';
      sentence();
    }
    *out_ += "\n\n";
  }

 private:
  // "the cat", "an old fox".
  void noun_phrase(std::string& s, std::string_view noun, bool allow_adjective) {
    std::string_view adj;
    if (allow_adjective && rng_.chance(40)) adj = rng_.pick(kAdjectives);
    std::string_view first = adj.empty() ? noun : adj;
    if (rng_.chance(60)) {
      s += "the ";
    } else {
      s += starts_with_vowel(first) ? "an " : "a ";
    }
    if (!adj.empty()) (s += adj) += ' ';
    s += noun;
  }

  void subject(std::string& s) {
    if (rng_.chance(50)) {
      (s += "the ") += hero_;
    } else {
      noun_phrase(s, rng_.pick(kCharacters), true);
    }
  }

  void clause(std::string& s) {
    subject(s);
    s += ' ';
    if (rng_.chance(60)) {
      (s += rng_.pick(kTransitive)) += ' ';
      noun_phrase(s, rng_.pick(kThings), true);
    } else {
      s += rng_.pick(kIntransitive);
      if (rng_.chance(40)) (s += ' ') += rng_.pick(kAdverbs);
    }
    if (rng_.chance(40)) (s += ' ') += rng_.pick(kPlaces);
  }

  void sentence() {
    std::string s;
    int64_t kind = rng_.below(10);
    if (kind < 5) {
      clause(s);
    } else if (kind < 7) {
      clause(s);
      (s += ", ") += rng_.pick(kConnectives);
      s += ' ';
      clause(s);
    } else if (kind < 8) {
      (s += "\"where is the ") += rng_.pick(kThings);
      (s += "?\" ") += rng_.pick(kSpeech);
      s += ' ';
      subject(s);
    } else if (kind < 9) {
      subject(s);
      (s += " has ") += rng_.pick(kCounts);
      (s += ' ') += plural(rng_.pick(kThings));
    } else {
      s += "there is ";
      noun_phrase(s, rng_.pick(kThings), true);
      (s += ' ') += rng_.pick(kPlaces);
    }
    s += '.';
    // Capitalize the first letter, after an opening quote if there is one. By hand: toupper
    // depends on the locale, and the bytes must not.
    size_t first = s[0] == '"' ? 1 : 0;
    if (s[first] >= 'a' && s[first] <= 'z') s[first] = static_cast<char>(s[first] - 'a' + 'A');
    *out_ += s;
  }

  CorpusRng rng_;
  std::string* out_;
  std::string hero_;
};

}  // namespace

std::string synthetic_corpus(int64_t n_bytes, uint64_t seed) {
  STRATA_CHECK(n_bytes >= 0);
  std::string out;
  out.reserve(static_cast<size_t>(n_bytes) + 1024);
  Writer w(seed, &out);
  while (static_cast<int64_t>(out.size()) < n_bytes) w.paragraph();
  out.resize(static_cast<size_t>(n_bytes));
  return out;
}

}  // namespace strata
