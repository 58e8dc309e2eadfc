#include "data/pretokenize.h"

#include "data/unicode_classes.h"

namespace strata {

namespace {

// A cursor over one text: the character (code point, length, class) at a byte offset.
struct Text {
  std::string_view s;

  bool at_end(size_t i) const { return i >= s.size(); }
  Utf8Char ch(size_t i) const { return decode_utf8(s, i); }
  CharClass cls(size_t i) const { return at_end(i) ? CharClass::other : char_class(ch(i).cp); }
  bool is(size_t i, CharClass c) const { return !at_end(i) && char_class(ch(i).cp) == c; }
  size_t next(size_t i) const { return i + ch(i).len; }
  // The end of the run of class c starting at i (i itself when text[i] is not of class c).
  size_t run_end(size_t i, CharClass c) const {
    while (is(i, c)) i = next(i);
    return i;
  }
  bool is_cr_lf(size_t i) const { return !at_end(i) && (s[i] == '\r' || s[i] == '\n'); }
  char lower_ascii(size_t i) const {
    if (at_end(i)) return 0;
    const char c = s[i];
    return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
  }
};

// The length of a contraction 's|'t|'re|'ve|'m|'ll|'d at i (text[i] is '\''), or 0. With
// fold_case, letters match their capitals and 's also matches U+017F (UTF-8 C5 BF).
size_t contraction_length(const Text& t, size_t i, bool fold_case) {
  const auto letter = [&](size_t k, char want) {
    if (t.at_end(k)) return size_t{0};
    if (t.s[k] == want) return size_t{1};
    if (!fold_case) return size_t{0};
    if (t.lower_ascii(k) == want) return size_t{1};
    if (want == 's' && t.s.substr(k, 2) == "\xC5\xBF") return size_t{2};
    return size_t{0};
  };
  const size_t j = i + 1;
  if (size_t n = letter(j, 's')) return 1 + n;
  if (size_t n = letter(j, 't')) return 1 + n;
  if (size_t n = letter(j, 'r'); n && letter(j + n, 'e')) return 2 + n;
  if (size_t n = letter(j, 'v'); n && letter(j + n, 'e')) return 2 + n;
  if (size_t n = letter(j, 'm')) return 1 + n;
  if (size_t n = letter(j, 'l'); n && letter(j + n, 'l')) return 2 + n;
  if (size_t n = letter(j, 'd')) return 1 + n;
  return 0;
}

// \s+(?!\S) then \s+ at i, a whitespace character. The greedy run is taken whole when it ends
// the text (nothing follows it); otherwise \S follows, so (?!\S) holds only one character
// before the end of the run: the match leaves the run's last character out, unless it is the
// only one, when \s+ takes it.
size_t whitespace_length(const Text& t, size_t i) {
  const size_t end = t.run_end(i, CharClass::space);
  if (t.at_end(end)) return end - i;
  const size_t last = prev_char_start(t.s, end);
  return last > i ? last - i : end - i;
}

size_t gpt2_length(const Text& t, size_t i) {
  // 's|'t|'re|'ve|'m|'ll|'d
  if (t.s[i] == '\'') {
    if (size_t n = contraction_length(t, i, /*fold_case=*/false)) return n;
  }
  // ' ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+': an optional space, then a run of one class. A
  // space followed by a letter, number or other character starts that class's match; any other
  // character that is not whitespace starts the match of its own class.
  const size_t j = t.s[i] == ' ' && !t.at_end(i + 1) && !t.is(i + 1, CharClass::space) ? i + 1 : i;
  const CharClass c = t.cls(j);
  if (c != CharClass::space) return t.run_end(j, c) - i;
  // \s+(?!\S)|\s+
  return whitespace_length(t, i);
}

size_t llama3_length(const Text& t, size_t i) {
  const Utf8Char u0 = t.ch(i);
  const CharClass c0 = char_class(u0.cp);
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)
  if (t.s[i] == '\'') {
    if (size_t n = contraction_length(t, i, /*fold_case=*/true)) return n;
  }
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (c0 == CharClass::letter) return t.run_end(i, CharClass::letter) - i;
  if (c0 != CharClass::number && !t.is_cr_lf(i) && t.is(i + u0.len, CharClass::letter)) {
    return t.run_end(i + u0.len, CharClass::letter) - i;
  }
  // \p{N}{1,3}
  if (c0 == CharClass::number) {
    size_t j = i;
    for (int k = 0; k < 3 && t.is(j, CharClass::number); ++k) j = t.next(j);
    return j - i;
  }
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
  const size_t j = t.s[i] == ' ' && t.is(i + 1, CharClass::other) ? i + 1 : i;
  if (t.is(j, CharClass::other)) {
    size_t end = t.run_end(j, CharClass::other);
    while (t.is_cr_lf(end)) ++end;
    return end - i;
  }
  // \s*[\r\n]+: the greedy \s* gives back characters until [\r\n] matches, so the match ends
  // just after the run's last \r or \n.
  const size_t run = t.run_end(i, CharClass::space);
  for (size_t k = run; k > i; --k) {
    if (t.is_cr_lf(k - 1)) return k - i;
  }
  // \s+(?!\S)|\s+
  return whitespace_length(t, i);
}

}  // namespace

const char* pattern_name(PretokenPattern p) {
  return p == PretokenPattern::gpt2 ? "gpt2" : "llama3";
}

size_t pretoken_length(std::string_view text, size_t i, PretokenPattern p) {
  const Text t{text};
  return p == PretokenPattern::gpt2 ? gpt2_length(t, i) : llama3_length(t, i);
}

void pretokenize(std::string_view text, PretokenPattern p, std::vector<std::string_view>* out) {
  size_t i = 0;
  while (i < text.size()) {
    const size_t n = pretoken_length(text, i, p);
    out->push_back(text.substr(i, n));
    i += n;
  }
}

}  // namespace strata
