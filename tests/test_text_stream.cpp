// Token ids to text as they come (Note [Streaming text] in data/text_stream.h), on the byte
// tokenizer: ids pushed one at a time are written as soon as their characters are complete, a
// split multi-byte character only once whole, never a partial sequence; an unfinished tail at the
// end and bytes that start no character are written as they are; ids beyond the tokenizer are
// "<|id N|>"; the bytes written equal detokenize of every id. The SentencePiece case is in
// test_tokenizer_sentencepiece.cpp.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/file_util.h"
#include "data/text_stream.h"
#include "data/tokenizer.h"
#include "test_util.h"

namespace strata {
namespace {

// What a TextStream wrote: one string per sink call.
struct Written {
  std::vector<std::string> chunks;
  std::string all() const {
    std::string s;
    for (const std::string& c : chunks) s += c;
    return s;
  }
};

std::vector<int32_t> bytes_of(std::string_view s) {
  return std::vector<int32_t>(reinterpret_cast<const unsigned char*>(s.data()),
                              reinterpret_cast<const unsigned char*>(s.data()) + s.size());
}

// Found by the README walk-through: a tokenizer.json whose vocabulary leaves ids out (here 256
// and 257) writes them as <|id N|> like ids past its size, not an error mid-sample.
TEST(Detokenize, IdsAVocabularyLeavesOutAreWrittenAsIds) {
  const std::string dir = test::make_temp_dir("text_stream_holes");
  // Byte-level BPE needs a token for every byte: byte b is GPT-2's character for it (printable
  // bytes themselves, the others U+0100 on), id b; then "ab" is 258, and 256, 257 are no ids.
  nlohmann::json vocab = {{"ab", 258}};
  for (int b = 0, shifted = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    const int c = printable ? b : 256 + shifted++;
    const std::string ch = c < 0x80 ? std::string(1, static_cast<char>(c))
                                    : std::string{static_cast<char>(0xC0 | (c >> 6)),
                                                  static_cast<char>(0x80 | (c & 0x3F))};
    vocab[ch] = b;
  }
  const nlohmann::json tj = {
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"a b"}}}}};
  ASSERT_TRUE(write_whole_file(dir + "/tokenizer.json", tj.dump(), "test").ok());
  auto tok = load_tokenizer(dir + "/tokenizer.json");
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  EXPECT_FALSE((*tok)->has_id(256));
  EXPECT_TRUE((*tok)->has_id(258));
  const std::vector<int32_t> ids = {'a', 256, 258, 257, 'c', 259};
  EXPECT_EQ(*detokenize(**tok, ids), "a<|id 256|>ab<|id 257|>c<|id 259|>");
  EXPECT_FALSE((*tok)->decode(ids).ok());  // decode itself still names the id it lacks
}

TEST(SettledLength, HoldsAnIncompleteCharacterOrTrailingReplacements) {
  EXPECT_EQ(settled_length("abc"), 3u);
  EXPECT_EQ(settled_length("ab\xC3"), 2u);                      // é's first byte
  EXPECT_EQ(settled_length("ab\xC3\xA9"), 4u);                  // é
  EXPECT_EQ(settled_length("a\xE2\x82"), 1u);                   // € less its last byte
  EXPECT_EQ(settled_length("a\xF0\x9F\x98"), 1u);               // 😀 less its last byte
  EXPECT_EQ(settled_length("a\xF0\x9F\x98\x80"), 5u);           // 😀
  EXPECT_EQ(settled_length("a\xFF"), 2u);                       // starts nothing: settled
  EXPECT_EQ(settled_length("a\x80"), 2u);                       // a stray continuation byte
  EXPECT_EQ(settled_length("ok\xEF\xBF\xBD\xEF\xBF\xBD"), 2u);  // U+FFFD U+FFFD
  EXPECT_EQ(settled_length("ok\xEF\xBF\xBD\xE2"), 2u);          // U+FFFD, then €'s first byte
  EXPECT_EQ(settled_length(""), 0u);
}

TEST(TextStream, WritesEachCharacterOnceItIsWhole) {
  auto tok = load_tokenizer("byte");
  ASSERT_TRUE(tok.ok());
  Written w;
  TextStream stream(**tok, [&](std::string_view b) {
    w.chunks.emplace_back(b);
    return Status();
  });
  const std::string text = "h\xC3\xA9 \xE2\x82\xAC\xF0\x9F\x98\x80!";  // "hé €😀!"
  std::vector<size_t> written_after;                                   // bytes, after each id
  for (int32_t id : bytes_of(text)) {
    ASSERT_TRUE(stream.push(std::span<const int32_t>(&id, 1)).ok());
    written_after.push_back(w.all().size());
  }
  ASSERT_TRUE(stream.finish().ok());
  EXPECT_EQ(w.all(), text);
  // h, then é only with its second byte, the space, € with its third, 😀 with its fourth, !.
  EXPECT_EQ(written_after, (std::vector<size_t>{1, 1, 3, 4, 4, 4, 7, 7, 7, 7, 11, 12}));
  for (const std::string& c : w.chunks) EXPECT_EQ(settled_length(c), c.size()) << c;
}

TEST(TextStream, WritesATailThatNeverCompletes) {
  auto tok = load_tokenizer("byte");
  ASSERT_TRUE(tok.ok());
  Written w;
  TextStream stream(**tok, [&](std::string_view b) {
    w.chunks.emplace_back(b);
    return Status();
  });
  // A lead byte then a letter: the lead starts nothing and goes out with the letter; ids past
  // the tokenizer's 256 as <|id N|>; an unfinished character at the end goes out at finish.
  const std::vector<int32_t> ids = {'a', 0xE2, 'b', 300, 'c', 0xF0, 0x9F};
  for (int32_t id : ids) ASSERT_TRUE(stream.push(std::span<const int32_t>(&id, 1)).ok());
  EXPECT_EQ(w.all(),
            "a\xE2"
            "b<|id 300|>c");
  ASSERT_TRUE(stream.finish().ok());
  const std::string want =
      "a\xE2"
      "b<|id 300|>c\xF0\x9F";
  EXPECT_EQ(w.all(), want);
  EXPECT_EQ(*detokenize(**tok, ids), want);
  // Trailing U+FFFD (SentencePiece's stand-in for bytes not yet whole) is held, but for no more
  // than kMaxHeldTokens ids.
  Written v;
  TextStream held(**tok, [&](std::string_view b) {
    v.chunks.emplace_back(b);
    return Status();
  });
  const std::string replacements = "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD";
  static_assert(TextStream::kMaxHeldTokens == 8);
  for (int32_t id : bytes_of(replacements)) {
    EXPECT_EQ(v.all(), "");
    ASSERT_TRUE(held.push(std::span<const int32_t>(&id, 1)).ok());
  }
  EXPECT_EQ(v.all(), replacements);
}

TEST(TextStream, ASinkErrorIsReturned) {
  auto tok = load_tokenizer("byte");
  ASSERT_TRUE(tok.ok());
  TextStream stream(**tok, [](std::string_view) { return io_error("cannot write to stdout"); });
  test::expect_error(stream.push(bytes_of("x")), ErrorCode::io_error, {"stdout"});
}

}  // namespace
}  // namespace strata
