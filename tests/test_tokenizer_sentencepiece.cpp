// SentencePiece models trained here on the multilingual corpus (libsentencepiece's trainer,
// unigram and BPE, with byte fallback and an identity normalizer): loading by file, round trips,
// streamed encoding equal to whole encoding, the models whose text cannot be cut, decoding ids
// one at a time as `strata sample` does (Note [Streaming text]), and errors.
// tests/tokenizer_sentencepiece.sh compares the ids with Python's sentencepiece.
#include <gtest/gtest.h>
#include <sentencepiece_trainer.h>

#include <filesystem>
#include <string>
#include <vector>

#include "core/file_util.h"
#include "data/sentencepiece_tokenizer.h"
#include "data/text_stream.h"
#include "data/tokenizer.h"
#include "test_util.h"

namespace strata {
namespace {

using test::expect_error;

const std::string kCorpus = std::string(STRATA_SOURCE_DIR) + "/tests/fixtures/tokenizer/corpus.txt";

// Trains a model into dir/<name>.model.
std::string train(const std::string& dir, const std::string& name, const std::string& extra) {
  const std::string prefix = dir + "/" + name;
  const auto s = sentencepiece::SentencePieceTrainer::Train(
      "--input=" + kCorpus + " --model_prefix=" + prefix +
      " --vocab_size=1200 --hard_vocab_limit=false --byte_fallback=true"
      " --character_coverage=0.98 --normalization_rule_name=identity"
      " --remove_extra_whitespaces=false --num_threads=1 --minloglevel=2 " +
      extra);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return prefix + ".model";
}

std::unique_ptr<Tokenizer> load(const std::string& path) {
  auto t = load_tokenizer(path);
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return t.ok() ? std::move(t).value() : nullptr;
}

std::vector<int32_t> encode(Tokenizer& t, std::string_view s) {
  auto r = t.encode(s);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : std::vector<int32_t>{};
}

std::vector<int32_t> encode_streamed(Tokenizer& t, const std::string& path, int64_t chunk,
                                     EncodeStats* stats) {
  std::vector<int32_t> got;
  Status s = encode_file(
      t, path, chunk,
      [&](std::span<const int32_t> ids) {
        got.insert(got.end(), ids.begin(), ids.end());
        return Status::ok_status();
      },
      stats);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return got;
}

TEST(SentencePiece, RoundTripAndStreaming) {
  const std::string dir = test::make_temp_dir("tokenizer_spm");
  auto text = read_whole_file(kCorpus, "corpus");
  ASSERT_TRUE(text.ok());
  std::string big;
  for (int i = 0; i < 10; i++) big += *text;
  ASSERT_TRUE(write_whole_file(dir + "/big.txt", big, "test").ok());
  for (const std::string type : {"unigram", "bpe"}) {
    auto t = load(train(dir, type, "--model_type=" + type));
    ASSERT_TRUE(t);
    EXPECT_EQ(t->name(), "SentencePiece " + dir + "/" + type + ".model");
    EXPECT_GT(t->vocab_size(), 800);
    const std::string refusal = t->cut_refusal();
    EXPECT_EQ(refusal, type == "bpe" ? ""
                                     : "a unigram model's segmentation depends on the text "
                                       "before it");
    const std::vector<int32_t> ids = encode(*t, *text);
    EXPECT_LT(ids.size(), text->size() * 2 / 3) << type;
    EXPECT_EQ(*t->decode(ids), *text) << type;  // byte fallback: nothing is lost
    const std::vector<int32_t> whole = encode(*t, big);
    for (int64_t chunk : {16, 300, 1 << 20}) {
      EncodeStats stats;
      EXPECT_EQ(encode_streamed(*t, dir + "/big.txt", chunk, &stats), whole)
          << type << " chunk " << chunk;
      EXPECT_EQ(stats.pieces > 20, chunk < 1000 && type == "bpe") << type << " " << chunk;
    }
    expect_error(t->decode(std::vector<int32_t>{5, static_cast<int32_t>(t->vocab_size())}).status(),
                 ErrorCode::invalid_argument, {"at position 1", type + ".model"});
  }
}

// Models whose text may not be cut are encoded whole (and still right).
TEST(SentencePiece, NoCutsWithoutTheDummyPrefix) {
  const std::string dir = test::make_temp_dir("tokenizer_spm_nocut");
  auto t = load(train(dir, "plain", "--model_type=bpe --add_dummy_prefix=false"));
  ASSERT_TRUE(t);
  EXPECT_EQ(t->cut_refusal(), "the model adds no dummy prefix");
  EXPECT_FALSE(t->find_cut("ab cd ef gh", 0).has_value());
  auto text = read_whole_file(kCorpus, "corpus");
  ASSERT_TRUE(text.ok());
  EncodeStats stats;
  EXPECT_EQ(encode_streamed(*t, kCorpus, 64, &stats), encode(*t, *text));
  EXPECT_EQ(stats.pieces, 1);
}

// A model of pieces `pieces` (the first one <unk>) and a control piece if given, written as its
// protobuf: ModelProto
// pieces = 1 {piece = 1, type = 3}, trainer_spec = 2 {model_type = 3: 1 unigram, 2 BPE},
// normalizer_spec = 3 {name = 1}.
std::string tiny_model(const std::vector<std::string>& pieces, uint64_t model_type = 2,
                       const std::string& control = "") {
  const auto varint = [](uint64_t n) {
    std::string out;
    for (; n >= 0x80; n >>= 7) out.push_back(static_cast<char>((n & 0x7F) | 0x80));
    out.push_back(static_cast<char>(n));
    return out;
  };
  const auto field = [&](int num, const std::string& bytes) {
    return varint(static_cast<uint64_t>(num) << 3 | 2) + varint(bytes.size()) + bytes;
  };
  const auto number = [&](int num, uint64_t v) {
    return varint(static_cast<uint64_t>(num) << 3) + varint(v);
  };
  std::string model;
  for (size_t i = 0; i < pieces.size(); ++i) {
    model += field(1, field(1, pieces[i]) + number(3, i == 0 ? 2 : 1));  // UNKNOWN, NORMAL
  }
  if (!control.empty()) model += field(1, field(1, control) + number(3, 3));  // CONTROL
  return model + field(2, number(3, model_type)) + field(3, field(1, "identity"));
}

// Found by fuzz_sentencepiece_model: without a piece "▁", SentencePiece joins "x▁x" in "ax xa"
// into one <unk>, which a cut at the space splits in two; such a model is encoded whole.
TEST(SentencePiece, NoCutsWithoutASpacePiece) {
  const std::string dir = test::make_temp_dir("tokenizer_spm_nospace");
  ASSERT_TRUE(write_whole_file(dir + "/no_space.model", tiny_model({"<unk>", "a"}), "test").ok());
  auto t = load(dir + "/no_space.model");
  ASSERT_TRUE(t);
  EXPECT_EQ(encode(*t, "ax xa"), (std::vector<int32_t>{0, 1, 0, 1}));
  EXPECT_EQ(t->cut_refusal(),
            "the model has no piece \"▁\", so a run of unknown characters can span words");
  EXPECT_FALSE(t->find_cut("ax xa", 0).has_value());
  // With the piece, the unknown runs stop at it and the text may be cut.
  ASSERT_TRUE(write_whole_file(dir + "/space.model", tiny_model({"<unk>", "a", "▁"}), "test").ok());
  auto cut = load(dir + "/space.model");
  ASSERT_TRUE(cut);
  EXPECT_EQ(cut->cut_refusal(), "");
  EXPECT_EQ(encode(*cut, "ax xa"), (std::vector<int32_t>{2, 1, 0, 2, 0, 1}));
  ASSERT_TRUE(cut->find_cut("ax xa", 0).has_value());
}

// Found by fuzz_sentencepiece_model: a word model's unknown words are whole pieces, "▁" and all,
// so "ax xa" is one <unk> whole and two cut at the space; such a model is encoded whole.
TEST(SentencePiece, NoCutsForAWordModelOrAnUnknownType) {
  const std::string dir = test::make_temp_dir("tokenizer_spm_word");
  ASSERT_TRUE(
      write_whole_file(dir + "/word.model", tiny_model({"<unk>", "a", "▁"}, 3), "test").ok());
  auto t = load(dir + "/word.model");
  ASSERT_TRUE(t);
  EXPECT_EQ(encode(*t, "ax xa"), (std::vector<int32_t>{0}));
  EXPECT_EQ(encode(*t, "ax"), (std::vector<int32_t>{0}));
  EXPECT_EQ(t->cut_refusal(), "a word model joins adjacent unknown words into one <unk>");
  EXPECT_FALSE(t->find_cut("ax xa", 0).has_value());
  // A type outside the enum: the library picks a model of its own, so nothing is cut.
  ASSERT_TRUE(
      write_whole_file(dir + "/odd.model", tiny_model({"<unk>", "a", "▁"}, 99), "test").ok());
  auto odd = load(dir + "/odd.model");
  ASSERT_TRUE(odd);
  EXPECT_EQ(odd->cut_refusal(), "the model's type 99 is not a type SentencePiece defines");
  EXPECT_FALSE(odd->find_cut("ax xa", 0).has_value());
}

// A Llama 2 / Mistral directory: a tokenizer.json the BPE reader refuses (here a Metaspace
// normalizer) beside the tokenizer.model it was made from, which is read instead.
TEST(SentencePiece, ADirectoryFallsBackToTheModelBesideAnUnreadableJson) {
  const std::string dir = test::make_temp_dir("tokenizer_spm_fallback");
  const std::string json =
      R"({"normalizer": {"type": "Metaspace", "replacement": "\u2581"}, "pre_tokenizer": null, )"
      R"("model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})";
  ASSERT_TRUE(write_whole_file(dir + "/tokenizer.json", json, "test").ok());
  auto alone = load_tokenizer(dir);
  ASSERT_FALSE(alone.ok());
  EXPECT_EQ(alone.status().code(), ErrorCode::bad_format) << alone.status().to_string();
  EXPECT_NE(alone.status().message().find("normalizer"), std::string::npos)
      << alone.status().to_string();
  const std::string model = train(dir, "bpe", "--model_type=bpe");
  std::filesystem::rename(model, dir + "/tokenizer.model");
  auto t = load(dir);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->name(), "SentencePiece " + dir + "/tokenizer.model");
  EXPECT_EQ(encode(*t, "hello"), encode(*load(dir + "/tokenizer.model"), "hello"));
}

// Ids decoded as they come (Note [Streaming text]): the pieces written make the text decode gives
// for all the ids at once, though a piece's text depends on its neighbours (the first piece's
// space dropped, byte pieces joined into characters), and each piece written is whole UTF-8.
TEST(SentencePiece, TextStreamWritesTheDecodeOfAllTheIds) {
  const std::string dir = test::make_temp_dir("tokenizer_spm_stream");
  auto t = load(train(dir, "bpe", "--model_type=bpe"));
  ASSERT_TRUE(t);
  auto text = read_whole_file(kCorpus, "corpus");
  ASSERT_TRUE(text.ok());
  const std::vector<int32_t> ids = encode(*t, *text);
  std::vector<std::string> chunks;
  TextStream stream(*t, [&](std::string_view b) {
    chunks.emplace_back(b);
    return Status();
  });
  ASSERT_TRUE(stream.push(std::span<const int32_t>(ids.data(), 3)).ok());  // a prompt
  for (size_t i = 3; i < ids.size(); ++i) {
    ASSERT_TRUE(stream.push(std::span<const int32_t>(&ids[i], 1)).ok());
  }
  ASSERT_TRUE(stream.finish().ok());
  std::string all;
  for (const std::string& c : chunks) {
    EXPECT_EQ(settled_length(c), c.size()) << c;
    all += c;
  }
  EXPECT_EQ(all, *text);
  EXPECT_EQ(all, *t->decode(ids));
}

TEST(SentencePiece, Errors) {
  const std::string dir = test::make_temp_dir("tokenizer_spm_errors");
  expect_error(load_tokenizer(dir + "/none.model").status(), ErrorCode::not_found,
               {"tokenizer " + dir + "/none.model does not exist"});
  ASSERT_TRUE(write_whole_file(dir + "/junk.model", std::string(100, '\x07'), "test").ok());
  expect_error(load_tokenizer(dir + "/junk.model").status(), ErrorCode::bad_format,
               {"tokenizer " + dir + "/junk.model", "not a SentencePiece model"});
  // Found by fuzz_sentencepiece_model: libsentencepiece throws for a unigram model with a piece
  // that is one NUL byte (its trie takes C strings: an empty key), which aborted the process.
  ASSERT_TRUE(write_whole_file(dir + "/nul_piece.model",
                               tiny_model({"<unk>", "a", std::string(1, '\0')}, 1), "test")
                  .ok());
  expect_error(
      load_tokenizer(dir + "/nul_piece.model").status(), ErrorCode::bad_format,
      {"tokenizer " + dir + "/nul_piece.model", "not a SentencePiece model", "zero-length key"});
  // Found by fuzz_sentencepiece_model: a CONTROL piece of one character loads, but
  // libsentencepiece fails to encode a text holding it: bad_format naming the file.
  ASSERT_TRUE(
      write_whole_file(dir + "/control.model", tiny_model({"<unk>", "a"}, 2, "x"), "test").ok());
  auto control = load(dir + "/control.model");
  ASSERT_TRUE(control);
  EXPECT_EQ(encode(*control, "aa"), (std::vector<int32_t>{0, 1, 1}));  // "▁" is <unk>
  expect_error(control->encode("axa").status(), ErrorCode::bad_format,
               {"tokenizer " + dir + "/control.model cannot encode the text", "not consumed"});
}

}  // namespace
}  // namespace strata
