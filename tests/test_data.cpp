// Data: token files (llm.c .bin of uint16 and uint32 tokens, raw uint16), the batch loader, the
// generated corpus and the byte tokenizer.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "data/byte_tokenizer.h"
#include "data/dataloader.h"
#include "data/prepare.h"
#include "data/synthetic_corpus.h"
#include "data/token_file.h"
#include "test_util.h"

namespace strata {
namespace {

using test::expect_error;

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << path;
}

std::string u16_bytes(const std::vector<uint16_t>& tokens) {
  std::string s(tokens.size() * 2, '\0');
  // (memcpy from an empty vector's null data() is undefined even for 0 bytes; UBSan says so)
  if (!tokens.empty()) std::memcpy(s.data(), tokens.data(), s.size());
  return s;
}

// An llm.c file built by hand, independent of write_token_file_llmc.
std::string llmc_bytes(int32_t magic, int32_t version, int32_t n_header,
                       const std::vector<uint16_t>& tokens) {
  std::vector<int32_t> header(256, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = n_header;
  std::string s(1024, '\0');
  std::memcpy(s.data(), header.data(), 1024);
  return s + u16_bytes(tokens);
}

std::vector<uint16_t> iota_tokens(int64_t n) {
  std::vector<uint16_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; i++) t[static_cast<size_t>(i)] = static_cast<uint16_t>(i % 65536);
  return t;
}

// ---------------------------------------------------------------------------------------------
// Token files

TEST(TokenFile, LlmcWriteReadRoundTrip) {
  std::string dir = test::make_temp_dir("data_llmc_roundtrip");
  std::vector<uint16_t> tokens;
  for (int32_t v : test::random_ints(1000, 7, 0, 65536)) tokens.push_back(static_cast<uint16_t>(v));
  std::string path = dir + "/train.bin";
  ASSERT_TRUE(write_token_file_llmc(path, tokens.data(), 1000).ok());
  EXPECT_EQ(std::filesystem::file_size(path), 1024u + 2000u);
  EXPECT_EQ(test::files_in(dir), std::vector<std::string>{"train.bin"});

  for (TokenFormat fmt : {TokenFormat::llmc, TokenFormat::auto_detect}) {
    auto f = TokenFile::open(path, fmt);
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    EXPECT_EQ(f->format(), TokenFormat::llmc);
    EXPECT_EQ(f->path(), path);
    ASSERT_EQ(f->size(), 1000);
    EXPECT_EQ(f->token_bytes(), 2);
    std::vector<int32_t> got(1000);
    ASSERT_TRUE(f->copy_tokens(0, 1000, got.data()).ok());
    EXPECT_EQ(got, std::vector<int32_t>(tokens.begin(), tokens.end()));
  }
  // Overwriting replaces the file whole.
  ASSERT_TRUE(write_token_file_llmc(path, tokens.data(), 10).ok());
  EXPECT_EQ(TokenFile::open(path, TokenFormat::llmc)->size(), 10);
}

// data.format auto reads llm.c files only: raw tokens, or a text file, used to be read as raw
// tokens without a word (a text file trained with vocab 50257).
TEST(TokenFile, AutoReadsOnlyLlmcRawNeedsToBeAskedFor) {
  std::string dir = test::make_temp_dir("data_raw");
  std::vector<uint16_t> tokens = {5, 4, 3, 2, 1, 0, 65535};
  std::string path = dir + "/raw.u16";
  write_bytes(path, u16_bytes(tokens));
  expect_error(TokenFile::open(path, TokenFormat::auto_detect).status(), ErrorCode::bad_format,
               {"data file " + path +
                    " does not start with llm.c's magic 20240520 (its first "
                    "bytes are 05 00 04 00)",
                "set data.format=raw_u16"});
  std::string text = dir + "/corpus.txt";
  write_bytes(text, "The quick brown fox.\n");
  expect_error(TokenFile::open(text, TokenFormat::auto_detect).status(), ErrorCode::bad_format,
               {text, "its first bytes are 54 68 65 20", "data.format=raw_u16"});
  std::string tiny = dir + "/tiny";
  write_bytes(tiny, "ab");
  expect_error(TokenFile::open(tiny, TokenFormat::auto_detect).status(), ErrorCode::bad_format,
               {tiny, "its 2 bytes are 61 62"});

  auto f = TokenFile::open(path, TokenFormat::raw_u16);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->format(), TokenFormat::raw_u16);
  ASSERT_EQ(f->size(), 7);
  for (int64_t i = 0; i < 7; i++) EXPECT_EQ(*f->token(i), tokens[static_cast<size_t>(i)]);
  // A forced raw read of an llm.c file sees its header as tokens: the caller asked for that.
  std::string bin = dir + "/x.bin";
  write_bytes(bin, llmc_bytes(20240520, 1, 3, {1, 2, 3}));
  auto raw = TokenFile::open(bin, TokenFormat::raw_u16);
  ASSERT_TRUE(raw.ok());
  EXPECT_EQ(raw->size(), 512 + 3);
}

TEST(TokenFile, MoveKeepsTheMapping) {
  std::string dir = test::make_temp_dir("data_move");
  std::string path = dir + "/a.bin";
  std::vector<uint16_t> tokens = {9, 8, 7};
  ASSERT_TRUE(write_token_file_llmc(path, tokens.data(), 3).ok());
  auto r = TokenFile::open(path, TokenFormat::auto_detect);
  ASSERT_TRUE(r.ok());
  TokenFile a = std::move(r).value();
  TokenFile b = std::move(a);
  EXPECT_EQ(a.size(), 0);
  EXPECT_EQ(a.view().size(), 0);
  ASSERT_EQ(b.size(), 3);
  EXPECT_EQ(*b.token(2), 7);
}

TEST(TokenFile, WrongMagicAndVersion) {
  std::string dir = test::make_temp_dir("data_magic");
  std::string path = dir + "/m.bin";
  write_bytes(path, llmc_bytes(123, 1, 2, {1, 2}));
  expect_error(TokenFile::open(path, TokenFormat::llmc).status(), ErrorCode::bad_format,
               {"data file " + path, "magic 123 is not 20240520"});
  write_bytes(path, llmc_bytes(20240520, 3, 2, {1, 2}));
  expect_error(TokenFile::open(path, TokenFormat::auto_detect).status(), ErrorCode::bad_format,
               {path, "version 3 is not supported (1: uint16 tokens, 2: uint32 tokens)"});
  // Version 2 is uint32 tokens: two uint16 are one uint32's bytes, too few for its count.
  write_bytes(path, llmc_bytes(20240520, 2, 2, {1, 2}));
  expect_error(TokenFile::open(path, TokenFormat::auto_detect).status(), ErrorCode::bad_format,
               {path, "header says 2 tokens (1032 bytes) but file has 1028 bytes"});
  write_bytes(path, std::string(100, '\0'));  // shorter than the header
  expect_error(TokenFile::open(path, TokenFormat::llmc).status(), ErrorCode::bad_format,
               {path, "100 bytes", "header"});
}

TEST(TokenFile, SizeMustAgreeWithHeader) {
  std::string dir = test::make_temp_dir("data_size");
  std::string path = dir + "/s.bin";
  write_bytes(path, llmc_bytes(20240520, 1, 10, iota_tokens(9)));  // truncated
  expect_error(TokenFile::open(path, TokenFormat::auto_detect).status(), ErrorCode::bad_format,
               {path, "header says 10 tokens (1044 bytes) but file has 1042 bytes"});
  write_bytes(path, llmc_bytes(20240520, 1, 10, iota_tokens(11)));  // extra bytes
  expect_error(TokenFile::open(path, TokenFormat::auto_detect).status(), ErrorCode::bad_format,
               {"header says 10 tokens (1044 bytes) but file has 1046 bytes"});
  write_bytes(path, llmc_bytes(20240520, 1, -1, {}));
  expect_error(TokenFile::open(path, TokenFormat::llmc).status(), ErrorCode::bad_format,
               {"header says -1 tokens"});
  write_bytes(path, llmc_bytes(20240520, 1, 0, {}));
  expect_error(TokenFile::open(path, TokenFormat::llmc).status(), ErrorCode::bad_format,
               {path, "no tokens"});
}

TEST(TokenFile, RawSizeEmptyMissing) {
  std::string dir = test::make_temp_dir("data_raw_errors");
  std::string odd = dir + "/odd.u16";
  write_bytes(odd, "abcde");
  expect_error(TokenFile::open(odd, TokenFormat::raw_u16).status(), ErrorCode::bad_format,
               {odd, "5 bytes", "odd"});
  std::string empty = dir + "/empty.bin";
  write_bytes(empty, "");
  expect_error(TokenFile::open(empty, TokenFormat::auto_detect).status(), ErrorCode::bad_format,
               {empty, "empty"});
  expect_error(TokenFile::open(dir + "/none.bin", TokenFormat::auto_detect).status(),
               ErrorCode::not_found, {dir + "/none.bin"});
  expect_error(TokenFile::open(dir, TokenFormat::auto_detect).status(), ErrorCode::invalid_argument,
               {dir, "not a regular file"});
}

TEST(TokenFile, TokenRange) {
  std::string dir = test::make_temp_dir("data_range");
  std::string path = dir + "/r.bin";
  std::vector<uint16_t> tokens(20, 65);
  tokens[12] = 300;
  tokens[15] = 400;
  ASSERT_TRUE(write_token_file_llmc(path, tokens.data(), 20).ok());
  auto f = TokenFile::open(path, TokenFormat::llmc);
  ASSERT_TRUE(f.ok());
  expect_error(check_token_range(*f, 256), ErrorCode::invalid_argument,
               {"data file " + path, "token 300 at position 12 is outside model.vocab_size 256"});
  EXPECT_TRUE(check_token_range(*f, 401).ok());
  expect_error(check_token_range(*f, 400), ErrorCode::invalid_argument,
               {"token 400 at position 15"});
  EXPECT_TRUE(check_token_range(*f, 65536).ok());
}

TEST(TokenFile, FormatNamesAndWriteErrors) {
  EXPECT_EQ(*parse_enum<TokenFormat>("data.format", "auto"), TokenFormat::auto_detect);
  EXPECT_EQ(*parse_enum<TokenFormat>("data.format", "llmc"), TokenFormat::llmc);
  EXPECT_EQ(*parse_enum<TokenFormat>("data.format", "raw_u16"), TokenFormat::raw_u16);
  expect_error(parse_enum<TokenFormat>("data.format", "bin").status(), ErrorCode::invalid_argument,
               {"'bin'"});
  uint16_t t[2] = {1, 2};
  std::string path = test::make_temp_dir("data_write_err") + "/no/such/dir/x.bin";
  expect_error(write_token_file_llmc(path, t, 2), ErrorCode::io_error, {path});
}

// ---------------------------------------------------------------------------------------------
// DataLoader

TEST(DataLoader, BatchContentsAndWrapAround) {
  const int64_t B = 2, T = 4, n = 2 * B * T + 3;  // two whole batches, then a too-short tail
  std::vector<uint16_t> tokens = iota_tokens(n);
  auto dl = DataLoader::create(tokens.data(), n, B, T, "test tokens");
  ASSERT_TRUE(dl.ok()) << dl.status().to_string();
  std::vector<int32_t> x(B * T), y(B * T);
  for (int pass = 0; pass < 2; pass++) {
    for (int64_t batch = 0; batch < 2; batch++) {
      // The wrap happens inside next_batch, so position() still reads 16 before pass 2.
      EXPECT_EQ(dl->position(), pass > 0 && batch == 0 ? 2 * B * T : batch * B * T);
      ASSERT_TRUE(dl->next_batch(x.data(), y.data()).ok());
      for (int64_t i = 0; i < B * T; i++) {
        ASSERT_EQ(x[i], batch * B * T + i) << "pass " << pass << " batch " << batch;
        ASSERT_EQ(y[i], batch * B * T + i + 1);
      }
    }
    // 16 + 8 + 1 > 19: the next batch starts again at 0 (checked by the second pass).
    EXPECT_EQ(dl->position(), 2 * B * T);
  }
}

TEST(DataLoader, UsesTheLastTokenWhenItFitsExactly) {
  const int64_t B = 1, T = 3, n = 7;  // batches at 0 and 3; the second's last target is tok[6]
  std::vector<uint16_t> tokens = {10, 11, 12, 13, 14, 15, 16};
  auto dl = DataLoader::create(tokens.data(), n, B, T, "t");
  ASSERT_TRUE(dl.ok());
  int32_t x[3], y[3];
  ASSERT_TRUE(dl->next_batch(x, y).ok());
  ASSERT_TRUE(dl->next_batch(x, y).ok());
  EXPECT_EQ(x[0], 13);
  EXPECT_EQ(y[2], 16);
  ASSERT_TRUE(dl->next_batch(x, y).ok());
  EXPECT_EQ(x[0], 10);
}

TEST(DataLoader, SetPosition) {
  std::vector<uint16_t> tokens = iota_tokens(100);
  auto dl = DataLoader::create(tokens.data(), 100, 2, 5, "t");
  ASSERT_TRUE(dl.ok());
  ASSERT_TRUE(dl->set_position(37).ok());
  EXPECT_EQ(dl->position(), 37);
  std::vector<int32_t> x(10), y(10);
  ASSERT_TRUE(dl->next_batch(x.data(), y.data()).ok());
  EXPECT_EQ(x[0], 37);
  EXPECT_EQ(y[9], 47);
  EXPECT_EQ(dl->position(), 47);
  ASSERT_TRUE(dl->set_position(95).ok());  // too close to the end: wraps
  ASSERT_TRUE(dl->next_batch(x.data(), y.data()).ok());
  EXPECT_EQ(x[0], 0);
  expect_error(dl->set_position(-1), ErrorCode::invalid_argument, {"position -1"});
  expect_error(dl->set_position(101), ErrorCode::invalid_argument, {"position 101", "100 tokens"});
  EXPECT_EQ(dl->position(), 10);  // a rejected position changes nothing
}

TEST(DataLoader, TooFewTokens) {
  std::vector<uint16_t> tokens = iota_tokens(33);
  expect_error(DataLoader::create(tokens.data(), 32, 4, 8, "data file tiny.bin").status(),
               ErrorCode::invalid_argument, {"data file tiny.bin", "32 tokens", "4x8", "33"});
  EXPECT_TRUE(DataLoader::create(tokens.data(), 33, 4, 8, "x").ok());
  expect_error(DataLoader::create(tokens.data(), 33, 0, 8, "x").status(),
               ErrorCode::invalid_argument, {"0x8"});
}

// ---------------------------------------------------------------------------------------------
// Corpus and tokenizer

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

TEST(SyntheticCorpus, DeterministicAndExactLength) {
  std::string a = synthetic_corpus(100000, 1337);
  EXPECT_EQ(a, synthetic_corpus(100000, 1337));
  EXPECT_NE(a, synthetic_corpus(100000, 1338));
  // A prefix of a longer corpus: the generator does not depend on the requested length.
  EXPECT_EQ(synthetic_corpus(5000, 1337), a.substr(0, 5000));
  for (int64_t n : {0, 1, 17, 4096}) EXPECT_EQ(synthetic_corpus(n, 3).size(), size_t(n));
  // Pinned bytes: a change here means every machine's default run changes. Update the constant
  // only when the grammar is changed on purpose.
  uint64_t h = fnv1a(synthetic_corpus(4096, 1337));
  EXPECT_EQ(h, 0x9ceecc660a76d187ull) << std::hex << h;
}

TEST(SyntheticCorpus, LooksLikeText) {
  std::string s = synthetic_corpus(200000, 42);
  int64_t spaces = 0, periods = 0, paragraphs = 0, capitals = 0;
  for (size_t i = 0; i < s.size(); i++) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    ASSERT_TRUE((c >= 0x20 && c < 0x7f) || c == '\n') << "byte " << int(c) << " at " << i;
    spaces += c == ' ';
    periods += c == '.';
    capitals += c >= 'A' && c <= 'Z';
    paragraphs += i > 0 && c == '\n' && s[i - 1] == '\n';
  }
  EXPECT_GT(spaces, 200000 / 10);  // words of a few letters
  EXPECT_GT(periods, 200000 / 100);
  EXPECT_GT(capitals, periods / 2);
  EXPECT_GT(paragraphs, 200000 / 2000);
  EXPECT_NE(s.find("The "), std::string::npos);
}

TEST(ByteTokenizer, RoundTrip) {
  std::string text;
  for (int i = 0; i < 256; i++) text += static_cast<char>(i);
  text += "hello, world\n";
  std::vector<uint16_t> t = byte_tokenize(text);
  ASSERT_EQ(t.size(), text.size());
  EXPECT_EQ(t[255], 255);
  EXPECT_EQ(t[256], 'h');
  EXPECT_EQ(byte_detokenize(t.data(), static_cast<int64_t>(t.size())), text);
  uint16_t not_bytes[2] = {300, 'a'};
  EXPECT_EQ(byte_detokenize(not_bytes, 2), "?a");
}

TEST(ByteTokenizer, PrepareTextFile) {
  std::string dir = test::make_temp_dir("data_prepare");
  std::string text = synthetic_corpus(3000, 5) + "\xff\x01";
  std::string txt = dir + "/in.txt", bin = dir + "/out.bin";
  write_bytes(txt, text);
  ByteTokenizer bytes;
  auto stats = prepare_token_file(bytes, txt, bin);
  ASSERT_TRUE(stats.ok()) << stats.status().to_string();
  EXPECT_EQ(stats->tokens, static_cast<int64_t>(text.size()));
  EXPECT_EQ(stats->token_bytes, 2);
  auto f = TokenFile::open(bin, TokenFormat::auto_detect);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->format(), TokenFormat::llmc);
  ASSERT_EQ(f->size(), static_cast<int64_t>(text.size()));
  std::vector<uint16_t> got;
  for (int64_t i = 0; i < f->size(); i++) got.push_back(static_cast<uint16_t>(*f->token(i)));
  EXPECT_EQ(byte_detokenize(got.data(), f->size()), text);
  EXPECT_TRUE(check_token_range(*f, 256).ok());

  expect_error(prepare_token_file(bytes, dir + "/missing.txt", bin).status(), ErrorCode::not_found,
               {dir + "/missing.txt"});
  EXPECT_FALSE(std::filesystem::exists(bin + ".tmp"));
  std::string empty = dir + "/empty.txt";
  write_bytes(empty, "");
  expect_error(prepare_token_file(bytes, empty, bin).status(), ErrorCode::invalid_argument,
               {empty, "empty"});
}

// ---------------------------------------------------------------------------------------------
// uint32 token files (version 2)

TEST(TokenFile, Uint32WriteReadRoundTrip) {
  EXPECT_EQ(token_bytes_for_vocab(256), 2);
  EXPECT_EQ(token_bytes_for_vocab(65536), 2);
  EXPECT_EQ(token_bytes_for_vocab(65537), 4);
  EXPECT_EQ(token_bytes_for_vocab(128256), 4);

  std::string dir = test::make_temp_dir("data_u32");
  std::string path = dir + "/big.bin";
  std::vector<int32_t> ids = test::random_ints(3000, 11, 0, 200000);
  ids[7] = 65535;
  ids[8] = 65536;
  ids[9] = std::numeric_limits<int32_t>::max();
  {
    auto w = TokenFileWriter::create(path, 4);
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    ASSERT_TRUE(w->append(std::span<const int32_t>(ids).first(1000)).ok());
    ASSERT_TRUE(w->append(std::span<const int32_t>(ids).subspan(1000)).ok());
    EXPECT_EQ(w->tokens(), 3000);
    const std::vector<std::string> names = test::files_in(dir);
    ASSERT_EQ(names.size(), 1u);
    EXPECT_EQ(names[0].rfind(".big.bin.tmp-", 0), 0u) << names[0];
    ASSERT_TRUE(w->finish().ok());
  }
  EXPECT_EQ(test::files_in(dir), std::vector<std::string>{"big.bin"});
  EXPECT_EQ(std::filesystem::file_size(path), 1024u + 4u * 3000u);

  // The header, read by hand: magic, version 2, count.
  std::ifstream in(path, std::ios::binary);
  int32_t header[3];
  in.read(reinterpret_cast<char*>(header), sizeof header);
  EXPECT_EQ(header[0], 20240520);
  EXPECT_EQ(header[1], 2);
  EXPECT_EQ(header[2], 3000);

  auto f = TokenFile::open(path, TokenFormat::auto_detect);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->token_bytes(), 4);
  ASSERT_EQ(f->size(), 3000);
  std::vector<int32_t> got(3000);
  ASSERT_TRUE(f->copy_tokens(0, 3000, got.data()).ok());
  EXPECT_EQ(got, ids);
  EXPECT_EQ(*f->token(8), 65536);
  expect_error(
      check_token_range(*f, 200000), ErrorCode::invalid_argument,
      {"data file " + path, "token 2147483647 at position 9", "outside model.vocab_size 200000"});
}

// Note [Reading token files]: a file cut short under an open TokenFile (and a DataLoader on it)
// is an io_error naming the file and the missing bytes, never a SIGBUS; what is still there
// reads as before, and a failed batch leaves the loader's position where it was.
TEST(TokenFile, ShrinkingUnderAReaderIsAnError) {
  std::string dir = test::make_temp_dir("data_shrinks");
  std::string path = dir + "/shrinks.bin";
  std::vector<uint16_t> tokens(4096);
  for (size_t i = 0; i < tokens.size(); i++) tokens[i] = static_cast<uint16_t>(i % 250);
  ASSERT_TRUE(write_token_file_llmc(path, tokens.data(), 4096).ok());
  auto f = TokenFile::open(path, TokenFormat::auto_detect);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  auto dl = DataLoader::create(f->view(), 4, 64, "data file " + path);
  ASSERT_TRUE(dl.ok());
  std::vector<int32_t> x(256), y(256);
  ASSERT_TRUE(dl->next_batch(x.data(), y.data()).ok());
  EXPECT_EQ(x[5], 5);

  std::filesystem::resize_file(path, 1024 + 2 * 1000);  // 1000 tokens left of 4096
  EXPECT_EQ(*f->token(999), 999 % 250);
  expect_error(f->token(1000).status(), ErrorCode::io_error,
               {"data file " + path, "shrank while in use", "now 3024 bytes", "do not rewrite"});
  ASSERT_TRUE(dl->set_position(3000).ok());
  expect_error(dl->next_batch(x.data(), y.data()), ErrorCode::io_error,
               {"data file " + path, "shrank while in use", "bytes 7024 .. 7536 are gone"});
  EXPECT_EQ(dl->position(), 3000);
  expect_error(check_token_range(*f, 250), ErrorCode::io_error, {"shrank while in use"});
}

TEST(TokenFile, Uint32RangeAndWriterErrors) {
  std::string dir = test::make_temp_dir("data_u32_errors");
  // A uint32 token above INT32_MAX, written by hand: refused by the range check, named as it is.
  std::string path = dir + "/huge.bin";
  std::vector<int32_t> header(256, 0);
  header[0] = 20240520;
  header[1] = 2;
  header[2] = 2;
  std::string bytes(1024, '\0');
  std::memcpy(bytes.data(), header.data(), 1024);
  const uint32_t tokens[2] = {70000, 4000000000u};
  bytes.append(reinterpret_cast<const char*>(tokens), sizeof tokens);
  write_bytes(path, bytes);
  auto f = TokenFile::open(path, TokenFormat::llmc);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  expect_error(check_token_range(*f, 100000), ErrorCode::invalid_argument,
               {"token 4000000000 at position 1"});
  expect_error(check_token_range(*f, 70000), ErrorCode::invalid_argument,
               {"token 70000 at position 0"});

  // uint16 files refuse ids over 65535 and negative ones; an unfinished writer leaves nothing.
  std::string out = dir + "/w.bin";
  {
    auto w = TokenFileWriter::create(out, 2);
    ASSERT_TRUE(w.ok());
    const int32_t ok_ids[2] = {0, 65535};
    ASSERT_TRUE(w->append(ok_ids).ok());
    const int32_t big[2] = {1, 65536};
    expect_error(w->append(big), ErrorCode::invalid_argument,
                 {"data file " + out, "token 65536 at position 3 does not fit 16 bits"});
    const int32_t negative[1] = {-1};
    expect_error(w->append(negative), ErrorCode::invalid_argument, {"token -1"});
  }
  EXPECT_EQ(test::files_in(dir), std::vector<std::string>{"huge.bin"});
  expect_error(TokenFileWriter::create(dir + "/no/such/x.bin", 4).status(), ErrorCode::io_error,
               {"data file " + dir + "/no/such/x.bin", "create " + dir + "/no/such/.x.bin.tmp-"});
}

// The loader reads a uint32 file's tokens as it reads a uint16 file's.
TEST(DataLoader, Uint32TokensBatchLikeUint16) {
  std::vector<uint16_t> narrow = iota_tokens(200);
  std::vector<uint32_t> wide(narrow.begin(), narrow.end());
  wide[50] = 100000;
  narrow[50] = 0;  // differs only there
  auto a = DataLoader::create(TokenView(narrow.data(), 200), 2, 8, "narrow");
  auto b = DataLoader::create(TokenView(wide.data(), 200), 2, 8, "wide");
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<int32_t> ia(16), ta(16), ib(16), tb(16);
  for (int step = 0; step < 30; step++) {
    ASSERT_TRUE(a->next_batch(ia.data(), ta.data()).ok());
    ASSERT_TRUE(b->next_batch(ib.data(), tb.data()).ok());
    for (int i = 0; i < 16; i++) {
      const int64_t pos = a->position() - 16 + i;
      EXPECT_EQ(ib[i], pos == 50 ? 100000 : ia[i]);
      EXPECT_EQ(tb[i], pos + 1 == 50 ? 100000 : ta[i]);
    }
  }
}

}  // namespace
}  // namespace strata
