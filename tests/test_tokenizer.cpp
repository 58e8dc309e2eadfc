// Tokenizers without outside files: the byte-level alphabet, the Unicode classes and UTF-8
// decoding, both pre-tokenizers, BPE merging (fast against the naive reference) on vocabularies
// made here, special tokens, tokenizer.json errors, the factory, and streamed encoding (Note
// [Streaming cuts]). Real vocabularies are in test_tokenizer_gpt2 and the tokenizer_*.sh tests.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "core/file_util.h"
#include "core/rng.h"
#include "data/bpe_tokenizer.h"
#include "data/byte_tokenizer.h"
#include "data/prepare.h"
#include "data/pretokenize.h"
#include "data/token_file.h"
#include "data/tokenizer.h"
#include "data/unicode_classes.h"
#include "test_util.h"

namespace strata {
namespace {

using nlohmann::json;
using test::expect_error;

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// A token's bytes as a tokenizer.json string.
std::string level(std::string_view bytes) {
  std::string s;
  for (char c : bytes) s += utf8(byte_to_unicode(static_cast<uint8_t>(c)));
  return s;
}

std::string corpus() {
  auto t = read_whole_file(std::string(STRATA_SOURCE_DIR) + "/tests/fixtures/tokenizer/corpus.txt",
                           "corpus");
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return t.ok() ? *t : std::string();
}

const std::string kGpt2Pre = R"({"type": "ByteLevel", "add_prefix_space": false,
                                 "trim_offsets": true, "use_regex": true})";

json llama3_pre() {
  return {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"},
             {"pattern", {{"Regex", std::string(kLlama3Pattern)}}},
             {"behavior", "Isolated"},
             {"invert", false}},
            {{"type", "ByteLevel"},
             {"add_prefix_space", false},
             {"trim_offsets", true},
             {"use_regex", false}}}}};
}

// A byte-level tokenizer.json: ids 0..255 are the bytes, then each merge's token in order.
// Merges are given as raw byte strings.
json tiny_json(const std::vector<std::pair<std::string, std::string>>& merges,
               const json& pre_tokenizer) {
  json vocab = json::object();
  for (int b = 0; b < 256; b++) vocab[level(std::string(1, static_cast<char>(b)))] = b;
  json m = json::array();
  int next = 256;
  for (const auto& [a, b] : merges) {
    if (!vocab.contains(level(a + b))) vocab[level(a + b)] = next++;
    m.push_back(level(a) + " " + level(b));
  }
  return {{"version", "1.0"},
          {"added_tokens", json::array()},
          {"normalizer", nullptr},
          {"pre_tokenizer", pre_tokenizer},
          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", m}}}};
}

std::unique_ptr<BpeTokenizer> make(const json& j, TokenizerOptions o = {}) {
  auto t = BpeTokenizer::from_json(j.dump(), "test.json", o);
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return t.ok() ? std::move(t).value() : nullptr;
}

std::vector<int32_t> encode(Tokenizer& t, std::string_view text) {
  auto r = t.encode(text);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : std::vector<int32_t>{};
}

std::vector<std::string> pieces(std::string_view text, PretokenPattern p) {
  std::vector<std::string_view> v;
  pretokenize(text, p, &v);
  return std::vector<std::string>(v.begin(), v.end());
}

// Byte-level BPE training, the plain way: count adjacent pairs over the pre-tokens (weighted by
// how often each occurs), merge the most frequent (the smallest pair of ids on ties), repeat.
// For vocabularies shaped like real ones to test merging on; not part of Strata.
std::vector<std::pair<std::string, std::string>> train_bpe(std::string_view text, PretokenPattern p,
                                                           int n_merges) {
  std::map<std::string, int64_t> counts;
  for (const std::string& w : pieces(text, p)) counts[w]++;
  std::vector<std::string> tokens;  // id -> bytes
  for (int b = 0; b < 256; b++) tokens.push_back(std::string(1, static_cast<char>(b)));
  std::vector<std::pair<std::vector<int>, int64_t>> words;
  for (const auto& [w, c] : counts) {
    std::vector<int> ids;
    for (char ch : w) ids.push_back(static_cast<unsigned char>(ch));
    words.emplace_back(ids, c);
  }
  std::vector<std::pair<std::string, std::string>> merges;
  for (int k = 0; k < n_merges; k++) {
    std::map<std::pair<int, int>, int64_t> pairs;
    for (const auto& [ids, c] : words) {
      for (size_t i = 0; i + 1 < ids.size(); i++) pairs[{ids[i], ids[i + 1]}] += c;
    }
    if (pairs.empty()) break;
    auto best = pairs.begin();
    for (auto it = pairs.begin(); it != pairs.end(); ++it) {
      if (it->second > best->second) best = it;
    }
    const auto [a, b] = best->first;
    const int id = static_cast<int>(tokens.size());
    tokens.push_back(tokens[a] + tokens[b]);
    merges.emplace_back(tokens[a], tokens[b]);
    for (auto& [ids, c] : words) {
      std::vector<int> out;
      for (size_t i = 0; i < ids.size(); i++) {
        if (i + 1 < ids.size() && ids[i] == a && ids[i + 1] == b) {
          out.push_back(id);
          i++;
        } else {
          out.push_back(ids[i]);
        }
      }
      ids = out;
    }
  }
  return merges;
}

// Random text over characters that stress the pre-tokenizers and the cut rules: letters of
// several scripts, digits, spaces of several kinds, newlines, \r, apostrophes and contraction
// letters, punctuation, combining marks, emoji and bytes that are not UTF-8.
std::string random_text(uint64_t seed, int n_chars) {
  static const std::vector<std::string> alphabet = {"a",        "b",
                                                    "s",        "t",
                                                    "l",        "L",
                                                    "S",        "e",
                                                    "r",        "E",
                                                    "é",        "ж",
                                                    "中",       "ー",
                                                    "𝐀",        "1",
                                                    "2",        "٣",
                                                    "½",        " ",
                                                    " ",        " ",
                                                    "\t",       "\n",
                                                    "\n",       "\r",
                                                    "\xC2\xA0", "\xE3\x80\x80",
                                                    "'",        "'",
                                                    ".",        ",",
                                                    "!",        "\"",
                                                    "(",        "-",
                                                    "\xCC\x81", "\xF0\x9F\x99\x82",
                                                    "\xFF",     "\xC3",
                                                    "\xC5\xBF", "<",
                                                    "|"};
  Rng r(seed);
  std::string s;
  for (int i = 0; i < n_chars; i++) s += alphabet[r.next_u64() % alphabet.size()];
  return s;
}

// ---------------------------------------------------------------------------------------------
// The byte-level alphabet and the character classes

TEST(ByteLevelAlphabet, EveryByteIsOnePrintableCharacter) {
  std::set<uint32_t> seen;
  for (int b = 0; b < 256; b++) {
    const uint32_t cp = byte_to_unicode(static_cast<uint8_t>(b));
    EXPECT_TRUE(seen.insert(cp).second) << b;
    EXPECT_EQ(byte_from_unicode(cp), b);
    EXPECT_NE(char_class(cp), CharClass::space) << b;
  }
  EXPECT_EQ(byte_to_unicode('A'), 'A');
  EXPECT_EQ(byte_to_unicode(0xE9), 0xE9u);   // é stands for itself
  EXPECT_EQ(byte_to_unicode(' '), 0x120u);   // Ġ
  EXPECT_EQ(byte_to_unicode('\n'), 0x10Au);  // Ċ
  EXPECT_EQ(byte_to_unicode(0), 0x100u);     // Ā
  EXPECT_EQ(byte_to_unicode(0xAD), 0x143u);  // the last of the 68 moved bytes: Ń
  EXPECT_EQ(byte_from_unicode(0x144), -1);
  EXPECT_EQ(byte_from_unicode(' '), -1);
}

TEST(UnicodeClasses, LettersNumbersSpaces) {
  for (uint32_t cp : {0x61u, 0x5Au, 0xE9u, 0x436u, 0x4E2Du, 0x30FCu, 0x1D400u, 0xAAu, 0x2C6u,
                      0x5D0u, 0x905u, 0xAC00u, 0x20000u}) {
    EXPECT_EQ(char_class(cp), CharClass::letter) << std::hex << cp;
  }
  for (uint32_t cp : {0x30u, 0x39u, 0x663u, 0xBDu, 0xB2u, 0x216Bu, 0xFF11u, 0x967u, 0x1D7CEu}) {
    EXPECT_EQ(char_class(cp), CharClass::number) << std::hex << cp;
  }
  for (uint32_t cp : {0x9u, 0xAu, 0xBu, 0xCu, 0xDu, 0x20u, 0x85u, 0xA0u, 0x1680u, 0x2000u, 0x200Au,
                      0x2028u, 0x2029u, 0x202Fu, 0x205Fu, 0x3000u}) {
    EXPECT_EQ(char_class(cp), CharClass::space) << std::hex << cp;
  }
  // Marks, punctuation, symbols, format characters, emoji, unassigned, invalid: other.
  for (uint32_t cp : {0x301u, 0x903u, 0x2Eu, 0x27u, 0x24u, 0x200Bu, 0x200Du, 0xFEFFu, 0x1F642u,
                      0x378u, 0xE000u, 0x10FFFFu, kInvalidCodePoint, 0x1Cu, 0x180Eu}) {
    EXPECT_EQ(char_class(cp), CharClass::other) << std::hex << cp;
  }
}

TEST(UnicodeClasses, Utf8DecodingCoversAnyBytes) {
  EXPECT_EQ(decode_utf8("\xE2\x82\xAC", 0).cp, 0x20ACu);
  EXPECT_EQ(decode_utf8("\xF0\x9F\x99\x82", 0).len, 4u);
  for (std::string bad : {"\xC0\x80", "\xC1\xBF", "\xE0\x80\x80", "\xED\xA0\x80",
                          "\xF4\x90\x80\x80", "\xF5\x80\x80\x80", "\x80", "\xE2\x82", "\xFF"}) {
    EXPECT_EQ(decode_utf8(bad, 0).cp, kInvalidCodePoint) << bad;
    EXPECT_EQ(decode_utf8(bad, 0).len, 1u) << bad;
  }
  // Walking back from each boundary finds the boundary before it, for any bytes.
  for (uint64_t seed = 1; seed <= 200; seed++) {
    std::string s;
    for (int32_t b : test::random_ints(40, seed, 0, 256)) s += static_cast<char>(b);
    s += random_text(seed, 10);
    std::vector<size_t> starts;
    for (size_t i = 0; i < s.size(); i += decode_utf8(s, i).len) starts.push_back(i);
    for (size_t k = 1; k < starts.size(); k++) {
      ASSERT_EQ(prev_char_start(s, starts[k]), starts[k - 1]) << "seed " << seed;
    }
    ASSERT_EQ(prev_char_start(s, s.size()), starts.back());
  }
}

// ---------------------------------------------------------------------------------------------
// Pre-tokenizers

using Pieces = std::vector<std::string>;

TEST(Pretokenize, Gpt2) {
  const auto p = PretokenPattern::gpt2;
  EXPECT_EQ(pieces("Hello world", p), (Pieces{"Hello", " world"}));
  EXPECT_EQ(pieces("it's we'll I'd they're", p),
            (Pieces{"it", "'s", " we", "'ll", " I", "'d", " they", "'re"}));
  // Contractions are case-sensitive in GPT-2's pattern.
  EXPECT_EQ(pieces("IT'S", p), (Pieces{"IT", "'", "S"}));
  EXPECT_EQ(pieces("'sup", p), (Pieces{"'s", "up"}));
  EXPECT_EQ(pieces("abc123 4567", p), (Pieces{"abc", "123", " 4567"}));
  EXPECT_EQ(pieces("x!!! ?? (y)", p), (Pieces{"x", "!!!", " ??", " (", "y", ")"}));
  // Whitespace: a run gives its last character to the word after it.
  EXPECT_EQ(pieces("a  b", p), (Pieces{"a", " ", " b"}));
  EXPECT_EQ(pieces("a\n\nb", p), (Pieces{"a", "\n", "\n", "b"}));
  EXPECT_EQ(pieces("a \n b", p), (Pieces{"a", " \n", " b"}));
  EXPECT_EQ(pieces("end   ", p), (Pieces{"end", "   "}));
  EXPECT_EQ(pieces("a\t\tb", p), (Pieces{"a", "\t", "\t", "b"}));
  // Multi-byte whitespace is one character.
  EXPECT_EQ(pieces("a\xE3\x80\x80\xE3\x80\x80z", p),
            (Pieces{"a", "\xE3\x80\x80", "\xE3\x80\x80", "z"}));
  EXPECT_EQ(pieces("Größe 中文 ٣٤", p), (Pieces{"Größe", " 中文", " ٣٤"}));
  // A combining mark is not a letter; an emoji is punctuation-like.
  EXPECT_EQ(pieces("e\xCC\x81t", p), (Pieces{"e", "\xCC\x81", "t"}));
  EXPECT_EQ(pieces("hi 🙂🙂!", p), (Pieces{"hi", " 🙂🙂!"}));
  // Bytes that are not UTF-8 are "other" characters.
  EXPECT_EQ(pieces("ab\xFF\xFEz", p), (Pieces{"ab", "\xFF\xFE", "z"}));
}

TEST(Pretokenize, Llama3) {
  const auto p = PretokenPattern::llama3;
  EXPECT_EQ(pieces("Hello world", p), (Pieces{"Hello", " world"}));
  // Contractions fold case, 's also with ſ.
  EXPECT_EQ(pieces("IT'S WE'LL they'Re", p), (Pieces{"IT", "'S", " WE", "'LL", " they", "'Re"}));
  EXPECT_EQ(pieces("x'\xC5\xBF", p), (Pieces{"x", "'\xC5\xBF"}));
  // Numbers in groups of at most three.
  EXPECT_EQ(pieces("1234567 89", p), (Pieces{"123", "456", "7", " ", "89"}));
  // One character that is not a letter, number, \r or \n may lead a word.
  EXPECT_EQ(pieces("(hello) \"quoted\"", p), (Pieces{"(hello", ")", " \"", "quoted", "\""}));
  EXPECT_EQ(pieces("a\tb", p), (Pieces{"a", "\tb"}));
  // Punctuation takes the newlines after it.
  EXPECT_EQ(pieces("end.\n\nNext", p), (Pieces{"end", ".\n\n", "Next"}));
  // \s*[\r\n]+ ends at the last newline of a whitespace run.
  EXPECT_EQ(pieces("a \n \n  b", p), (Pieces{"a", " \n \n", " ", " b"}));
  EXPECT_EQ(pieces("a\r\n\r\nb", p), (Pieces{"a", "\r\n\r\n", "b"}));
  EXPECT_EQ(pieces("a  b", p), (Pieces{"a", " ", " b"}));
  EXPECT_EQ(pieces("end  ", p), (Pieces{"end", "  "}));
  EXPECT_EQ(pieces("\n\nx", p), (Pieces{"\n\n", "x"}));
  EXPECT_EQ(pieces("中文，２０２４年", p), (Pieces{"中文", "，", "２０２", "４", "年"}));
}

TEST(Pretokenize, PiecesCoverAnyText) {
  for (auto p : {PretokenPattern::gpt2, PretokenPattern::llama3}) {
    for (uint64_t seed = 1; seed <= 300; seed++) {
      const std::string s = random_text(seed, 60);
      std::string joined;
      for (const std::string& piece : pieces(s, p)) {
        ASSERT_FALSE(piece.empty());
        joined += piece;
      }
      ASSERT_EQ(joined, s) << pattern_name(p) << " seed " << seed;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// BPE

TEST(BpeTokenizer, MergesByRankLeftmostFirst) {
  // ids: bytes, then "ab" 256, "bc" 257, "abc" 258, "aa" 259.
  auto t =
      make(tiny_json({{"a", "b"}, {"b", "c"}, {"ab", "c"}, {"a", "a"}}, json::parse(kGpt2Pre)));
  ASSERT_TRUE(t);
  EXPECT_EQ(t->vocab_size(), 260);
  EXPECT_EQ(t->pattern(), PretokenPattern::gpt2);
  EXPECT_EQ(encode(*t, "abc"), (std::vector<int32_t>{258}));  // ab first (rank 0), then abc
  EXPECT_EQ(encode(*t, "bc"), (std::vector<int32_t>{257}));
  EXPECT_EQ(encode(*t, "aaa"), (std::vector<int32_t>{259, 'a'}));  // the leftmost pair
  EXPECT_EQ(encode(*t, "aaaa"), (std::vector<int32_t>{259, 259}));
  EXPECT_EQ(encode(*t, "abc abc"), (std::vector<int32_t>{258, ' ', 258}));  // " abc" no merge
  EXPECT_EQ(*t->decode(std::vector<int32_t>{258, ' ', 259}), "abc aa");
  expect_error(t->decode(std::vector<int32_t>{1, 260}).status(), ErrorCode::invalid_argument,
               {"token id 260 at position 1", "test.json"});
  expect_error(t->decode(std::vector<int32_t>{-1}).status(), ErrorCode::invalid_argument,
               {"token id -1"});
}

TEST(BpeTokenizer, IgnoreMergesAndPairForm) {
  // "abc" is a token, but no merge reaches it from "a" "bc" (the merges make "ab" then "abc"
  // only through "ab" "c"; here "bc" merges first).
  json j = tiny_json({{"b", "c"}, {"a", "b"}, {"ab", "c"}}, llama3_pre());
  auto plain = make(j);
  ASSERT_TRUE(plain);
  EXPECT_EQ(encode(*plain, "abc"), (std::vector<int32_t>{'a', 256}));
  j["model"]["ignore_merges"] = true;
  auto ignoring = make(j);
  ASSERT_TRUE(ignoring);
  EXPECT_EQ(encode(*ignoring, "abc"), (std::vector<int32_t>{258}));
  EXPECT_EQ(encode(*ignoring, "abcc"), (std::vector<int32_t>{'a', 256, 'c'}));
  // [a, b] pairs read as "a b" strings do.
  json pairs = j;
  pairs["model"]["merges"] = json::array();
  for (const json& m : j["model"]["merges"]) {
    const std::string s = m.get<std::string>();
    pairs["model"]["merges"].push_back({s.substr(0, s.find(' ')), s.substr(s.find(' ') + 1)});
  }
  auto from_pairs = make(pairs);
  ASSERT_TRUE(from_pairs);
  const std::string text = corpus();
  EXPECT_EQ(encode(*from_pairs, text), encode(*ignoring, text));
}

TEST(BpeTokenizer, FastMergeEqualsNaive) {
  const std::string text = corpus();
  for (auto p : {PretokenPattern::gpt2, PretokenPattern::llama3}) {
    auto t = make(tiny_json(train_bpe(text, p, 400),
                            p == PretokenPattern::gpt2 ? json::parse(kGpt2Pre) : llama3_pre()));
    ASSERT_TRUE(t);
    // Whole texts: with the cache and without it, the naive merge.
    std::vector<std::string> texts = {text, text + text};
    for (uint64_t seed = 1; seed <= 50; seed++) texts.push_back(random_text(seed, 200));
    std::string long_word;  // one pre-token of 20000 letters
    for (int i = 0; i < 4000; i++) long_word += "theab";
    texts.push_back(long_word);
    for (const std::string& s : texts) {
      t->set_reference_mode(false);
      const std::vector<int32_t> fast = encode(*t, s);
      t->set_reference_mode(true);
      ASSERT_EQ(fast, encode(*t, s)) << pattern_name(p);
      EXPECT_EQ(*t->decode(fast), s);
    }
    // Pieces on their own, past the cache.
    for (const std::string& piece : pieces(text, p)) {
      std::vector<int32_t> a, b;
      t->merge_fast(piece, &a);
      t->merge_naive(piece, &b);
      ASSERT_EQ(a, b) << piece;
    }
    t->set_reference_mode(false);
    EXPECT_LT(encode(*t, text).size(), text.size() * 2 / 3);  // the merges do merge
  }
}

TEST(BpeTokenizer, SpecialTokens) {
  json j = tiny_json({{"e", "n"}, {"<", "|"}}, json::parse(kGpt2Pre));
  j["added_tokens"] = {{{"id", 300}, {"content", "<|end|>"}, {"special", true}},
                       {{"id", 301}, {"content", "<|endoftext|>"}, {"special", true}},
                       {{"id", 256}, {"content", "en"}, {"special", false}}};  // also in vocab
  const std::string text = "a<|endoftext|>b<|end|><|end";
  auto off = make(j);
  ASSERT_TRUE(off);
  EXPECT_EQ(off->vocab_size(), 302);
  const std::vector<int32_t> as_text = encode(*off, text);
  EXPECT_EQ(std::count(as_text.begin(), as_text.end(), 300), 0);
  EXPECT_EQ(std::count(as_text.begin(), as_text.end(), 301), 0);
  EXPECT_EQ(*off->decode(as_text), text);
  TokenizerOptions o;
  o.special_tokens = true;
  auto on = make(j, o);
  ASSERT_TRUE(on);
  // The longest added token at the leftmost place; "<|end" without its "|>" is text.
  const std::vector<int32_t> ids = encode(*on, text);
  const std::vector<int32_t> tail = encode(*off, "<|end");
  std::vector<int32_t> want = {'a', 301, 'b', 300};
  want.insert(want.end(), tail.begin(), tail.end());
  EXPECT_EQ(ids, want);
  EXPECT_EQ(*on->decode(ids), text);
  EXPECT_EQ(*on->decode(std::vector<int32_t>{301, 256}), "<|endoftext|>en");
  // Ids with no token between the vocabulary and the added tokens are refused by decode.
  expect_error(on->decode(std::vector<int32_t>{299}).status(), ErrorCode::invalid_argument,
               {"token id 299"});
}

// Note [Duplicate keys]: a token given twice in the vocabulary is refused, not last-wins.
TEST(BpeTokenizer, AVocabularyKeyGivenTwiceIsRefused) {
  std::string text = tiny_json({{"a", "b"}}, llama3_pre()).dump();
  const size_t at = text.find("\"vocab\":{");
  ASSERT_NE(at, std::string::npos);
  text.insert(at + 9, "\"a\":7,\"a\":8,");
  expect_error(BpeTokenizer::from_json(text, "t.json", {}).status(), ErrorCode::bad_format,
               {"tokenizer t.json", "duplicate key \"model.vocab.a\""});
}

// Every refusal is one line naming the file and the field.
TEST(BpeTokenizer, RefusesWhatItDoesNotImplement) {
  const json good = tiny_json({{"a", "b"}}, llama3_pre());
  ASSERT_TRUE(BpeTokenizer::from_json(good.dump(), "t.json", {}).ok());
  struct Case {
    std::function<void(json&)> change;
    std::vector<std::string> parts;
  };
  const std::vector<Case> cases = {
      {[](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\w+|\\s+"; },
       {"pre_tokenizer.pretokenizers[0].pattern.Regex", "not one of the supported patterns",
        "\\\\w+"}},
      {[](json& j) {
         j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"String", " "}};
       },
       {"pre_tokenizer.pretokenizers[0].pattern", "Regex"}},
      {[](json& j) {
         j["pre_tokenizer"] = {{"type", "Whitespace"}};
       },
       {"pre_tokenizer.type", "Whitespace"}},
      {[](json& j) { j["pre_tokenizer"] = nullptr; }, {"pre_tokenizer", "byte-level"}},
      {[](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed"; },
       {"pre_tokenizer.pretokenizers[0].behavior"}},
      {[](json& j) { j["pre_tokenizer"]["pretokenizers"][1]["use_regex"] = true; },
       {"pre_tokenizer.pretokenizers[1].use_regex"}},
      {[](json& j) { j["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = true; },
       {"pre_tokenizer.pretokenizers[1].add_prefix_space"}},
      {[](json& j) { j["pre_tokenizer"] = json::parse(R"({"type": "ByteLevel"})"); },
       {"pre_tokenizer.add_prefix_space", "true"}},
      {[](json& j) {
         j["normalizer"] = {{"type", "NFC"}};
       },
       {"normalizer", "NFC"}},
      {[](json& j) { j["model"]["type"] = "WordPiece"; }, {"model.type", "WordPiece"}},
      {[](json& j) { j["model"]["byte_fallback"] = true; }, {"model.byte_fallback"}},
      {[](json& j) { j["model"]["continuing_subword_prefix"] = "##"; },
       {"model.continuing_subword_prefix"}},
      {[](json& j) { j["model"]["dropout"] = 0.1; }, {"model.dropout"}},
      {[](json& j) { j["model"]["merges"].push_back("a zz"); },
       {"model.merges[1]", "\"zz\"", "not in model.vocab"}},
      {[](json& j) { j["model"]["merges"].push_back("b c"); },
       {"model.merges[1]", "\"bc\"", "not in model.vocab"}},
      {[](json& j) { j["model"]["merges"].push_back("a b c"); }, {"model.merges[1]", "one space"}},
      {[](json& j) { j["model"]["merges"].push_back(json::array({"a"})); },
       {"model.merges[1]", "neither"}},
      {[](json& j) { j["model"]["vocab"].erase(level("\n")); },
       {"model.vocab", "byte 0x0A", "\"Ċ\""}},
      {[](json& j) { j["model"]["vocab"]["xyz"] = 5; }, {"model.vocab[", "repeats id 5"}},
      {[](json& j) { j["model"]["vocab"]["xyz"] = -1; }, {"model.vocab[\"xyz\"]", "-1"}},
      {[](json& j) { j["model"]["vocab"]["x y"] = 400; },
       {"model.vocab[\"x y\"]", "outside the byte-level alphabet"}},
      {[](json& j) { j["model"]["vocab"] = json::object(); }, {"model.vocab", "non-empty"}},
      {[](json& j) { j.erase("model"); }, {"model", "missing"}},
      {[](json& j) {
         j["added_tokens"] = {{{"id", 97}, {"content", "<x>"}}};
       },
       {"added_tokens[0]", "id 97", "another token"}},
      {[](json& j) {
         j["added_tokens"] = {{{"id", 3}}};
       },
       {"added_tokens[0]", "content"}},
  };
  for (const Case& c : cases) {
    json j = good;
    c.change(j);
    auto t = BpeTokenizer::from_json(j.dump(), "t.json", {});
    std::vector<std::string> parts = {"tokenizer t.json: "};
    parts.insert(parts.end(), c.parts.begin(), c.parts.end());
    ASSERT_FALSE(t.ok()) << c.parts[0];
    EXPECT_EQ(t.status().code(), ErrorCode::bad_format) << t.status().message();
    for (const std::string& part : parts) {
      EXPECT_NE(t.status().message().find(part), std::string::npos)
          << "'" << part << "' not in: " << t.status().message();
    }
    EXPECT_EQ(t.status().message().find('\n'), std::string::npos) << t.status().message();
  }
  expect_error(BpeTokenizer::from_json("{\"model\": ", "t.json", {}).status(),
               ErrorCode::bad_format, {"tokenizer t.json", "not valid JSON"});
  expect_error(BpeTokenizer::from_json("[1, 2]", "t.json", {}).status(), ErrorCode::bad_format,
               {"tokenizer t.json", "not a JSON object"});
}

// Found by fuzz_tokenizer_json: a token outside the byte alphabet (" ", listed before "b") took
// "b"'s id unnoticed, so the merge ["a", " "] merged the bytes "ab" into an added token that
// decodes to "zz". One id for two tokens is refused whichever the vocabulary lists first.
TEST(BpeTokenizer, RefusesAnIdSharedWithATokenOutsideTheAlphabet) {
  json j = tiny_json({}, llama3_pre());
  j["model"]["vocab"][" "] = 'b';
  j["model"]["vocab"]["a "] = 256;
  j["model"]["merges"].push_back(json::array({"a", " "}));
  j["added_tokens"] = {{{"id", 256}, {"content", "zz"}}};
  expect_error(BpeTokenizer::from_json(j.dump(), "t.json", {}).status(), ErrorCode::bad_format,
               {"tokenizer t.json: model.vocab[\"b\"] repeats id 98"});
  j["model"]["vocab"][" "] = 257;  // an id of its own: then the merge never applies
  j["added_tokens"].push_back({{"id", 257}, {"content", " "}});
  auto t = make(j);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(encode(*t, "ab"), (std::vector<int32_t>{'a', 'b'}));
}

// ---------------------------------------------------------------------------------------------
// The factory

TEST(LoadTokenizer, PicksByFile) {
  const std::string dir = test::make_temp_dir("tokenizer_load");
  auto byte = load_tokenizer("byte");
  ASSERT_TRUE(byte.ok());
  EXPECT_EQ((*byte)->name(), "byte");
  EXPECT_EQ((*byte)->vocab_size(), 256);
  EXPECT_EQ(encode(**byte, "hé"), (std::vector<int32_t>{'h', 0xC3, 0xA9}));
  expect_error((*byte)->decode(std::vector<int32_t>{65, 256}).status(), ErrorCode::invalid_argument,
               {"token id 256 at position 1"});

  const std::string text = tiny_json({{"a", "b"}}, json::parse(kGpt2Pre)).dump();
  ASSERT_TRUE(write_whole_file(dir + "/tokenizer.json", text, "test").ok());
  ASSERT_TRUE(write_whole_file(dir + "/vocab", "\n " + text, "test").ok());  // no suffix
  for (const std::string& path : {dir, dir + "/tokenizer.json", dir + "/vocab"}) {
    auto t = load_tokenizer(path);
    ASSERT_TRUE(t.ok()) << path << ": " << t.status().to_string();
    EXPECT_NE((*t)->name().find("BPE (gpt2 pattern, vocab 257)"), std::string::npos);
    EXPECT_EQ(encode(**t, "ab"), (std::vector<int32_t>{256}));
  }
  expect_error(load_tokenizer(dir + "/none.json").status(), ErrorCode::not_found,
               {"tokenizer " + dir + "/none.json does not exist"});
  const std::string empty = test::make_temp_dir("tokenizer_load_empty");
  expect_error(load_tokenizer(empty).status(), ErrorCode::not_found,
               {empty, "neither tokenizer.json nor tokenizer.model"});
  ASSERT_TRUE(write_whole_file(dir + "/bad.json", "{\"model\": [", "test").ok());
  expect_error(load_tokenizer(dir + "/bad.json").status(), ErrorCode::bad_format,
               {dir + "/bad.json", "not valid JSON"});
  ASSERT_TRUE(write_whole_file(dir + "/bad.model", "not a model", "test").ok());
  expect_error(load_tokenizer(dir + "/bad.model").status(), ErrorCode::bad_format,
               {"tokenizer " + dir + "/bad.model", "not a SentencePiece model"});
}

// ---------------------------------------------------------------------------------------------
// Streaming (Note [Streaming cuts])

// Every cut find_cut offers, on any prefix of the text as the buffer, keeps the pre-tokens and
// the ids of the whole text.
TEST(StreamingCuts, KeepThePiecesOfTheWholeText) {
  const std::string text = corpus();
  for (auto p : {PretokenPattern::gpt2, PretokenPattern::llama3}) {
    json j = tiny_json(train_bpe(text, p, 100),
                       p == PretokenPattern::gpt2 ? json::parse(kGpt2Pre) : llama3_pre());
    auto t = make(j);
    ASSERT_TRUE(t);
    int cuts = 0;
    for (uint64_t seed = 1; seed <= 400; seed++) {
      const std::string s = seed == 1 ? text : random_text(seed, 40);
      const Pieces whole = pieces(s, p);
      for (size_t q = 1; q <= s.size(); q += seed == 1 ? 7 : 1) {
        const auto cut = t->find_cut(std::string_view(s).substr(0, q), 0);
        if (!cut) continue;
        ASSERT_LE(cut->end, q);
        ASSERT_EQ(cut->end, cut->resume);
        cuts++;
        Pieces two = pieces(std::string_view(s).substr(0, cut->end), p);
        const Pieces rest = pieces(std::string_view(s).substr(cut->resume), p);
        two.insert(two.end(), rest.begin(), rest.end());
        ASSERT_EQ(two, whole) << pattern_name(p) << " seed " << seed << " cut at " << cut->end;
      }
    }
    EXPECT_GT(cuts, 1000) << pattern_name(p);  // the rules do find cuts in such text
  }
}

TEST(StreamingCuts, WhereTheyAreAndAreNot) {
  auto t = make(tiny_json({}, json::parse(kGpt2Pre)));
  ASSERT_TRUE(t);
  const auto cut_in = [](const Tokenizer& tok, std::string_view s) -> int64_t {
    auto c = tok.find_cut(s, 0);
    return c ? static_cast<int64_t>(c->end) : -1;
  };
  const auto cut_at = [&](std::string_view s) { return cut_in(*t, s); };
  EXPECT_EQ(cut_at("ab cd"), 2);
  EXPECT_EQ(cut_at("ab cd ef"), 5);       // the last one
  EXPECT_EQ(cut_at("ab "), -1);           // the letter after the space is not there yet
  EXPECT_EQ(cut_at("ab  cd"), -1);        // two spaces
  EXPECT_EQ(cut_at("a1 cd"), -1);         // a digit before
  EXPECT_EQ(cut_at("жж жж"), 4);          // letters of any script
  EXPECT_EQ(cut_at("end.\nNext"), 5);     // after a newline between non-spaces
  EXPECT_EQ(cut_at("end.\n\nNext"), -1);  // not inside a run of whitespace
  EXPECT_EQ(cut_at("end.\n Next"), -1);
  EXPECT_EQ(cut_at("end\n\xE3\x80"), -1);  // the character after is not complete yet
  EXPECT_EQ(cut_at("中文\n中文"), 7);
  // Special tokens on: never inside an added token, even one not complete yet.
  json j = tiny_json({}, json::parse(kGpt2Pre));
  j["added_tokens"] = {{{"id", 300}, {"content", "<|x y|>"}}};
  TokenizerOptions o;
  o.special_tokens = true;
  auto s = make(j, o);
  ASSERT_TRUE(s);
  EXPECT_EQ(cut_in(*s, "ab <|x y|>c d"), 11);
  EXPECT_EQ(cut_in(*s, "ab cd <|x y"), 2);
  EXPECT_EQ(cut_in(*t, "ab cd <|x y"), 9);
}

// encode_file's pieces give the ids of the whole text, for any chunk size.
TEST(EncodeFile, StreamedEqualsWhole) {
  const std::string dir = test::make_temp_dir("tokenizer_stream");
  const std::string text = corpus() + "<|endoftext|>" + corpus() + "\n" + random_text(9, 500) +
                           "<|endoftext|>" + corpus();
  const std::string path = dir + "/text.txt";
  ASSERT_TRUE(write_whole_file(path, text, "test").ok());
  std::vector<std::unique_ptr<Tokenizer>> toks;
  toks.push_back(std::move(load_tokenizer("byte")).value());
  for (auto p : {PretokenPattern::gpt2, PretokenPattern::llama3}) {
    json j = tiny_json(train_bpe(corpus(), p, 300),
                       p == PretokenPattern::gpt2 ? json::parse(kGpt2Pre) : llama3_pre());
    j["added_tokens"] = {{{"id", 1000}, {"content", "<|endoftext|>"}}};
    toks.push_back(make(j));
    TokenizerOptions o;
    o.special_tokens = true;
    toks.push_back(make(j, o));
  }
  for (auto& t : toks) {
    ASSERT_TRUE(t);
    const std::vector<int32_t> whole = encode(*t, text);
    for (int64_t chunk : {1, 2, 3, 7, 64, 1000, 1 << 20}) {
      std::vector<int32_t> got;
      EncodeStats stats;
      Status s = encode_file(
          *t, path, chunk,
          [&](std::span<const int32_t> ids) {
            got.insert(got.end(), ids.begin(), ids.end());
            return Status::ok_status();
          },
          &stats);
      ASSERT_TRUE(s.ok()) << s.to_string();
      ASSERT_EQ(got, whole) << t->name() << " chunk " << chunk;
      EXPECT_EQ(stats.text_bytes, static_cast<int64_t>(text.size()));
      EXPECT_EQ(stats.tokens, static_cast<int64_t>(whole.size()));
      if (chunk <= 1000) {
        EXPECT_GT(stats.pieces, 4) << t->name() << " chunk " << chunk;
      }
      if (chunk <= 64) {
        EXPECT_LT(stats.largest_piece, 512) << t->name() << " chunk " << chunk;
      }
    }
  }
  // A text with no cut is read whole, and still right.
  const std::string cjk = [] {
    std::string s;
    for (int i = 0; i < 300; i++) s += "中文字";
    return s;
  }();
  ASSERT_TRUE(write_whole_file(path, cjk, "test").ok());
  std::vector<int32_t> got;
  EncodeStats stats;
  ASSERT_TRUE(encode_file(
                  *toks[1], path, 16,
                  [&](std::span<const int32_t> ids) {
                    got.insert(got.end(), ids.begin(), ids.end());
                    return Status::ok_status();
                  },
                  &stats)
                  .ok());
  EXPECT_EQ(stats.pieces, 1);
  EXPECT_EQ(got, encode(*toks[1], cjk));
  // A stretch without cuts longer than a piece ends the piece at the first cuts after it (the
  // search doubles its span), not at the end of what was read.
  const std::string mixed = corpus() + cjk + cjk + cjk + corpus() + corpus();
  ASSERT_TRUE(write_whole_file(path, mixed, "test").ok());
  got.clear();
  ASSERT_TRUE(encode_file(
                  *toks[1], path, 1000,
                  [&](std::span<const int32_t> ids) {
                    got.insert(got.end(), ids.begin(), ids.end());
                    return Status::ok_status();
                  },
                  &stats)
                  .ok());
  EXPECT_EQ(got, encode(*toks[1], mixed));
  EXPECT_GE(stats.largest_piece, static_cast<int64_t>(3 * cjk.size()));
  EXPECT_LT(stats.largest_piece, static_cast<int64_t>(6 * cjk.size()));
  EXPECT_GT(stats.pieces, 10);
  // The sink's error stops it; a missing file is not_found.
  expect_error(encode_file(
                   *toks[0], path, 16,
                   [](std::span<const int32_t>) { return io_error("disk on fire"); }, &stats),
               ErrorCode::io_error, {"disk on fire"});
  expect_error(encode_file(
                   *toks[0], dir + "/none.txt", 16,
                   [](std::span<const int32_t>) { return Status::ok_status(); }, &stats),
               ErrorCode::not_found, {"text file " + dir + "/none.txt"});
}

// A vocabulary over 65536 ids is written as uint32 tokens (version 2).
TEST(Prepare, Uint32ForLargeVocabularies) {
  const std::string dir = test::make_temp_dir("tokenizer_prepare");
  json j = tiny_json({{"a", "b"}}, llama3_pre());
  j["added_tokens"] = {{{"id", 70000}, {"content", "<|eot|>"}}};
  TokenizerOptions o;
  o.special_tokens = true;
  auto t = make(j, o);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->vocab_size(), 70001);
  ASSERT_TRUE(write_whole_file(dir + "/in.txt", "ab ab<|eot|>ba", "test").ok());
  auto stats = prepare_token_file(*t, dir + "/in.txt", dir + "/out.bin");
  ASSERT_TRUE(stats.ok()) << stats.status().to_string();
  EXPECT_EQ(stats->token_bytes, 4);
  EXPECT_EQ(stats->tokens, 6);
  auto f = TokenFile::open(dir + "/out.bin", TokenFormat::auto_detect);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->token_bytes(), 4);
  std::vector<int32_t> ids(6);
  ASSERT_TRUE(f->copy_tokens(0, 6, ids.data()).ok());
  EXPECT_EQ(ids, (std::vector<int32_t>{256, ' ', 256, 70000, 'b', 'a'}));
  EXPECT_TRUE(check_token_range(*f, 70001).ok());
  EXPECT_FALSE(check_token_range(*f, 70000).ok());
}

}  // namespace
}  // namespace strata
