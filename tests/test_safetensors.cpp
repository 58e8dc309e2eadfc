// safetensors reader/writer: round trips and every malformed-file error the reader must catch;
// the header-only reader catches the same ones and says where each tensor's bytes lie; the
// streaming writer takes the data in pieces.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "formats/safetensors.h"
#include "test_util.h"

namespace strata {
namespace {

// A file of: u64 length | header | data, written byte for byte (to build broken files).
void write_raw(const std::string& path, const std::string& header, const std::vector<uint8_t>& data,
               int64_t length_field = -1) {
  uint64_t n = length_field < 0 ? header.size() : static_cast<uint64_t>(length_field);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(&n), 8);
  f.write(header.data(), static_cast<std::streamsize>(header.size()));
  f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  ASSERT_TRUE(f.good()) << path;
}

// The reader's error for a file, which must be bad_format and name the file; the header-only
// reader must refuse the file with the same message.
std::string read_error(const std::string& path) {
  Result<SafeTensors> r = read_safetensors(path);
  EXPECT_FALSE(r.ok()) << path;
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), ErrorCode::bad_format) << r.status().to_string();
  EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status().to_string();
  Result<SafeTensorsHeader> h = read_safetensors_header(path);
  EXPECT_FALSE(h.ok()) << path;
  if (!h.ok()) {
    EXPECT_EQ(h.status().to_string(), r.status().to_string());
  }
  return r.status().message();
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

SafeTensors sample() {
  SafeTensors st;
  std::vector<float> w = test::random_floats(6, 1);
  std::vector<int32_t> tokens = test::random_ints(8, 2, 0, 50257);
  std::vector<bf16_t> half;
  for (float x : test::random_floats(5, 3)) half.push_back(f32_to_bf16(x));
  std::vector<uint16_t> u16 = {0, 1, 65535};
  float scalar = 2.5f;
  st.add_f32("wte.weight", {2, 3}, w.data());
  st.add_i32("tokens", {2, 4}, tokens.data());
  st.add("blk.0.ln1.weight", StDType::bf16, {5}, half.data());
  st.add("shard", StDType::u16, {3}, u16.data());
  st.add_f32("expected.loss", {}, &scalar);
  st.add_f32("empty", {0, 7}, nullptr);
  st.metadata["n_layer"] = "2";
  st.metadata["generator"] = "strata test";
  return st;
}

TEST(SafeTensors, RoundTripKeepsOrderBytesAndMetadata) {
  std::string dir = test::make_temp_dir("safetensors_round_trip");
  std::string path = dir + "/a.safetensors";
  SafeTensors out = sample();
  ASSERT_TRUE(write_safetensors(path, out).ok());
  EXPECT_EQ(test::files_in(dir), std::vector<std::string>{"a.safetensors"});

  Result<SafeTensors> in = read_safetensors(path);
  ASSERT_TRUE(in.ok()) << in.status().to_string();
  EXPECT_EQ(in->path, path);
  EXPECT_EQ(in->metadata, out.metadata);
  ASSERT_EQ(in->tensors.size(), out.tensors.size());
  for (size_t i = 0; i < out.tensors.size(); i++) {
    const StTensor& a = out.tensors[i];
    const StTensor& b = in->tensors[i];
    EXPECT_EQ(b.name, a.name);
    EXPECT_EQ(b.dtype, a.dtype) << a.name;
    EXPECT_EQ(b.shape, a.shape) << a.name;
    EXPECT_EQ(b.data, a.data) << a.name;
  }
  Result<std::vector<float>> w = in->get_f32("wte.weight", {2, 3});
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  EXPECT_EQ(*w, test::random_floats(6, 1));
  Result<std::vector<int32_t>> tokens = in->get_i32("tokens");
  ASSERT_TRUE(tokens.ok());
  EXPECT_EQ(*tokens, test::random_ints(8, 2, 0, 50257));
  Result<std::vector<float>> loss = in->get_f32("expected.loss");
  ASSERT_TRUE(loss.ok());
  EXPECT_EQ(*loss, std::vector<float>{2.5f});
  EXPECT_EQ(in->find("empty")->numel(), 0);
}

TEST(SafeTensors, DataStartsAlignedAndHeaderIsPlainJson) {
  std::string path = test::make_temp_dir("safetensors_layout") + "/a.safetensors";
  ASSERT_TRUE(write_safetensors(path, sample()).ok());
  std::ifstream f(path, std::ios::binary);
  uint64_t n = 0;
  f.read(reinterpret_cast<char*>(&n), 8);
  EXPECT_EQ((8 + n) % 8, 0u);
  std::string header(n, '\0');
  f.read(header.data(), static_cast<std::streamsize>(n));
  EXPECT_EQ(header.front(), '{');
  EXPECT_TRUE(contains(header, "\"__metadata__\""));
  EXPECT_TRUE(contains(header, "\"dtype\":\"BF16\""));
}

TEST(SafeTensors, RewriteReplacesTheFile) {
  std::string path = test::make_temp_dir("safetensors_rewrite") + "/a.safetensors";
  ASSERT_TRUE(write_safetensors(path, sample()).ok());
  SafeTensors small;
  float x = 1.0f;
  small.add_f32("x", {1}, &x);
  ASSERT_TRUE(write_safetensors(path, small).ok());
  Result<SafeTensors> in = read_safetensors(path);
  ASSERT_TRUE(in.ok());
  ASSERT_EQ(in->tensors.size(), 1u);
  EXPECT_TRUE(in->metadata.empty());
}

TEST(SafeTensors, MissingTensorAndWrongDtypeNameTensorAndFile) {
  std::string path = test::make_temp_dir("safetensors_missing") + "/a.safetensors";
  ASSERT_TRUE(write_safetensors(path, sample()).ok());
  Result<SafeTensors> in = read_safetensors(path);
  ASSERT_TRUE(in.ok());

  Result<std::vector<float>> r = in->get_f32("blk.7.ln1.weight");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::not_found);
  EXPECT_TRUE(contains(r.status().message(), "blk.7.ln1.weight"));
  EXPECT_TRUE(contains(r.status().message(), path));

  r = in->get_f32("tokens");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::bad_format);
  EXPECT_TRUE(contains(r.status().message(), "'tokens' is I32, expected F32"));

  r = in->get_f32("wte.weight", {3, 2});
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.status().message(), "has shape (2, 3), expected (3, 2)"));

  Result<std::vector<int32_t>> i = in->get_i32("wte.weight");
  ASSERT_FALSE(i.ok());
  EXPECT_EQ(i.status().code(), ErrorCode::bad_format);
}

TEST(SafeTensors, MissingFileIsNotFound) {
  std::string path = test::make_temp_dir("safetensors_no_file") + "/absent.safetensors";
  Result<SafeTensors> r = read_safetensors(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::not_found);
  EXPECT_TRUE(contains(r.status().message(), path));
}

TEST(SafeTensors, CorruptHeaderLength) {
  std::string dir = test::make_temp_dir("safetensors_header_length");
  std::string header = R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  std::vector<uint8_t> data(4, 0);

  write_raw(dir + "/huge.st", header, data, int64_t{1} << 40);
  EXPECT_TRUE(contains(read_error(dir + "/huge.st"), "header length 1099511627776"));

  write_raw(dir + "/past_end.st", header, data, static_cast<int64_t>(header.size() + 5));
  EXPECT_TRUE(contains(read_error(dir + "/past_end.st"), "does not fit"));

  write_raw(dir + "/short.st", header, data, static_cast<int64_t>(header.size() - 3));
  EXPECT_TRUE(contains(read_error(dir + "/short.st"), "not valid JSON"));

  std::ofstream(dir + "/tiny.st", std::ios::binary) << "abc";
  EXPECT_TRUE(contains(read_error(dir + "/tiny.st"), "too short"));
}

TEST(SafeTensors, OffsetsBeyondTheFile) {
  std::string dir = test::make_temp_dir("safetensors_offsets");
  write_raw(dir + "/a.st", R"({"x":{"dtype":"F32","shape":[100],"data_offsets":[0,400]}})",
            std::vector<uint8_t>(16, 0));
  std::string m = read_error(dir + "/a.st");
  EXPECT_TRUE(contains(m, "'x'")) << m;
  EXPECT_TRUE(contains(m, "outside the data section of 16 bytes")) << m;

  write_raw(dir + "/b.st", R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})",
            std::vector<uint8_t>(16, 0));
  EXPECT_TRUE(contains(read_error(dir + "/b.st"), "outside the data section"));
}

// Note [Duplicate keys]: a tensor named twice would be read as whichever came last.
TEST(SafeTensors, ATensorNamedTwiceIsRefused) {
  std::string dir = test::make_temp_dir("safetensors_duplicate");
  write_raw(dir + "/a.st",
            R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
            R"("x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
            std::vector<uint8_t>(8, 0));
  std::string m = read_error(dir + "/a.st");
  EXPECT_TRUE(contains(m, "duplicate key \"x\"")) << m;
}

TEST(SafeTensors, TruncatedFile) {
  std::string dir = test::make_temp_dir("safetensors_truncated");
  std::string path = dir + "/a.safetensors";
  ASSERT_TRUE(write_safetensors(path, sample()).ok());
  auto size = std::filesystem::file_size(path);

  std::filesystem::resize_file(path, size - 1);  // last data byte gone
  EXPECT_TRUE(contains(read_error(path), "outside the data section"));

  std::filesystem::resize_file(path, 40);  // inside the header
  EXPECT_TRUE(contains(read_error(path), "does not fit"));
}

TEST(SafeTensors, SpanMustMatchShapeAndDtype) {
  std::string dir = test::make_temp_dir("safetensors_span");
  write_raw(dir + "/a.st", R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}})",
            std::vector<uint8_t>(16, 0));
  EXPECT_TRUE(contains(read_error(dir + "/a.st"), "shape (2, 2) of F32 does not fill"));

  write_raw(dir + "/b.st", R"({"w":{"dtype":"BF16","shape":[4],"data_offsets":[0,16]}})",
            std::vector<uint8_t>(16, 0));
  EXPECT_TRUE(contains(read_error(dir + "/b.st"), "of BF16 does not fill"));
}

TEST(SafeTensors, OverlappingTensors) {
  std::string dir = test::make_temp_dir("safetensors_overlap");
  write_raw(dir + "/a.st",
            R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
            R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
            std::vector<uint8_t>(16, 0));
  EXPECT_TRUE(contains(read_error(dir + "/a.st"), "'a' and 'b' overlap"));
}

TEST(SafeTensors, MalformedHeaderEntries) {
  std::string dir = test::make_temp_dir("safetensors_malformed");
  std::vector<uint8_t> data(8, 0);
  write_raw(dir + "/dtype.st", R"({"x":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", data);
  EXPECT_TRUE(contains(read_error(dir + "/dtype.st"), "unsupported dtype \"F64\""));

  write_raw(dir + "/shape.st", R"({"x":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", data);
  EXPECT_TRUE(contains(read_error(dir + "/shape.st"), "bad shape"));

  write_raw(dir + "/fields.st", R"({"x":{"dtype":"F32","shape":[2]}})", data);
  EXPECT_TRUE(contains(read_error(dir + "/fields.st"), "needs dtype, shape and data_offsets"));

  write_raw(dir + "/meta.st", R"({"__metadata__":{"n_layer":2}})", data);
  EXPECT_TRUE(contains(read_error(dir + "/meta.st"), "value of 'n_layer' is not a string"));

  write_raw(dir + "/array.st", R"([1, 2])", data);
  EXPECT_TRUE(contains(read_error(dir + "/array.st"), "not a JSON object"));
}

// Note [Bounded JSON nesting]: a deeply nested dtype was dumped into the error message, which
// overflowed the stack; nesting is now refused before parsing, and values in messages are cut.
TEST(SafeTensors, DeepOrHugeHeaderValuesAreOneLine) {
  std::string dir = test::make_temp_dir("safetensors_deep");
  std::vector<uint8_t> data(8, 0);
  const int64_t depth = 200000;
  const std::string deep = std::string(depth, '[') + std::string(depth, ']');
  write_raw(dir + "/deep.st", R"({"x":{"dtype":)" + deep + R"(,"shape":[2],"data_offsets":[0,8]}})",
            data);
  const std::string deep_error = read_error(dir + "/deep.st");
  EXPECT_TRUE(contains(deep_error, "header is not valid JSON: line 1, column 77")) << deep_error;
  EXPECT_TRUE(contains(deep_error, "deeper than 64 levels")) << deep_error;

  std::string shape = "[-1";
  for (int i = 0; i < 100000; i++) shape += ",1";
  write_raw(dir + "/shape.st",
            R"({"x":{"dtype":"F32","shape":)" + shape + R"(],"data_offsets":[0,8]}})", data);
  const std::string shape_error = read_error(dir + "/shape.st");
  EXPECT_TRUE(contains(shape_error, "bad shape [-1,1,1")) << shape_error;
  EXPECT_LT(shape_error.size(), 300u);

  write_raw(dir + "/name.st", R"({")" + std::string(100000, 'n') + R"(":[]})", data);
  const std::string name_error = read_error(dir + "/name.st");
  EXPECT_TRUE(contains(name_error, "nnn...': entry is not an object")) << name_error;
  EXPECT_LT(name_error.size(), 300u);
}

TEST(SafeTensors, WriterRejectsBadTablesAndReportsIoErrors) {
  std::string dir = test::make_temp_dir("safetensors_writer");
  SafeTensors st = sample();
  st.tensors[0].data.pop_back();
  Status s = write_safetensors(dir + "/a.st", st);
  EXPECT_EQ(s.code(), ErrorCode::invalid_argument);
  EXPECT_TRUE(contains(s.message(), "'wte.weight'")) << s.message();
  EXPECT_TRUE(test::files_in(dir).empty()) << "a refused table left a file";

  st = sample();
  st.tensors.push_back(st.tensors[0]);
  EXPECT_EQ(write_safetensors(dir + "/b.st", st).code(), ErrorCode::invalid_argument);

  s = write_safetensors(dir + "/no_such_dir/c.st", sample());
  EXPECT_EQ(s.code(), ErrorCode::io_error);
  EXPECT_TRUE(contains(s.message(), "no_such_dir/c.st")) << s.message();
}

TEST(SafeTensors, HeaderSaysWhereEveryTensorLies) {
  std::string path = test::make_temp_dir("safetensors_header") + "/a.safetensors";
  ASSERT_TRUE(write_safetensors(path, sample()).ok());
  Result<SafeTensorsHeader> h = read_safetensors_header(path);
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  Result<SafeTensors> whole = read_safetensors(path);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(h->metadata, whole->metadata);
  EXPECT_EQ(h->file_bytes, static_cast<int64_t>(std::filesystem::file_size(path)));
  std::ifstream f(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  ASSERT_EQ(h->tensors.size(), whole->tensors.size());
  for (size_t i = 0; i < h->tensors.size(); ++i) {
    const StEntry& e = h->tensors[i];
    const StTensor& t = whole->tensors[i];
    EXPECT_EQ(e.name, t.name);
    EXPECT_EQ(e.dtype, t.dtype);
    EXPECT_EQ(e.shape, t.shape);
    ASSERT_EQ(e.bytes, static_cast<int64_t>(t.data.size())) << e.name;
    ASSERT_LE(e.offset + e.bytes, h->file_bytes) << e.name;
    // (an empty tensor's data() may be null, and memcmp of null is undefined even for 0 bytes)
    if (!t.data.empty()) {
      EXPECT_EQ(std::memcmp(bytes.data() + e.offset, t.data.data(), t.data.size()), 0) << e.name;
    }
  }

  ASSERT_TRUE(h->f32_entry("wte.weight", {2, 3}).ok());
  auto missing = h->f32_entry("blk.7.ln1.weight", {1});
  EXPECT_EQ(missing.status().code(), ErrorCode::not_found);
  EXPECT_TRUE(contains(missing.status().message(), path)) << missing.status().message();
  EXPECT_TRUE(
      contains(h->f32_entry("tokens", {2, 4}).status().message(), "'tokens' is I32, expected F32"));
  EXPECT_TRUE(contains(h->f32_entry("wte.weight", {3, 2}).status().message(),
                       "has shape (2, 3), expected (3, 2)"));
}

// The streaming writer takes the data in any pieces and writes the file write_safetensors would.
TEST(SafeTensors, StreamingWriterTakesTheDataInPieces) {
  const std::string dir = test::make_temp_dir("safetensors_stream");
  const SafeTensors st = sample();
  std::vector<StEntry> entries;
  std::string data;
  for (const StTensor& t : st.tensors) {
    entries.push_back({t.name, t.dtype, t.shape, 0, 0});
    data.append(t.data.begin(), t.data.end());
  }
  auto w = SafeTensorsWriter::create(dir + "/s.st", entries, st.metadata);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  for (size_t at = 0; at < data.size(); at += 3) {
    ASSERT_TRUE(w->append(data.data() + at, std::min<int64_t>(3, data.size() - at)).ok());
  }
  EXPECT_FALSE(std::filesystem::exists(dir + "/s.st")) << "published before finish";
  ASSERT_TRUE(w->finish().ok());
  EXPECT_FALSE(std::filesystem::exists(dir + "/s.st.tmp"));
  ASSERT_TRUE(write_safetensors(dir + "/whole.st", st).ok());
  std::ifstream a(dir + "/s.st", std::ios::binary), b(dir + "/whole.st", std::ios::binary);
  const std::string streamed((std::istreambuf_iterator<char>(a)), std::istreambuf_iterator<char>());
  const std::string whole((std::istreambuf_iterator<char>(b)), std::istreambuf_iterator<char>());
  EXPECT_EQ(streamed, whole);
}

TEST(SafeTensors, StreamingWriterRefusesTooManyOrTooFewBytes) {
  const std::string dir = test::make_temp_dir("safetensors_stream_bad");
  const std::vector<StEntry> entries = {{"x", StDType::f32, {2}, 0, 0}};
  const float v[3] = {1, 2, 3};
  {
    auto w = SafeTensorsWriter::create(dir + "/long.st", entries, {});
    ASSERT_TRUE(w.ok());
    Status s = w->append(v, 12);
    EXPECT_EQ(s.code(), ErrorCode::invalid_argument);
    EXPECT_TRUE(contains(s.message(), "long.st")) << s.message();
    EXPECT_TRUE(contains(s.message(), "run past the 8 bytes")) << s.message();
  }
  EXPECT_TRUE(test::files_in(dir).empty()) << "dropped writer left its file";
  {
    auto w = SafeTensorsWriter::create(dir + "/short.st", entries, {});
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(w->append(v, 4).ok());
    Status s = w->finish();
    EXPECT_EQ(s.code(), ErrorCode::invalid_argument);
    EXPECT_TRUE(contains(s.message(), "4 bytes of data written, the header describes 8"))
        << s.message();
  }
  EXPECT_TRUE(test::files_in(dir).empty()) << "an unfinished writer left a file";
  auto dup = SafeTensorsWriter::create(dir + "/dup.st", {entries[0], entries[0]}, {});
  EXPECT_EQ(dup.status().code(), ErrorCode::invalid_argument);
  EXPECT_TRUE(test::files_in(dir).empty());
}

}  // namespace
}  // namespace strata
