// The config's rules for what users get wrong by accident (issue 42): a key given twice in a
// file, a value too long to echo, and what a resumed run may change (Note [Duplicate keys],
// Note [Bounded echoes], Note [Resuming with changed fields]).
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "core/config.h"
#include "core/format.h"
#include "core/json_util.h"
#include "data/token_file.h"
#include "io/fault_injector.h"
#include "test_util.h"

namespace strata {
namespace {

using json = nlohmann::json;
using test::expect_error;

std::string write_file(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string path = dir + "/" + name;
  std::ofstream(path) << text;
  return path;
}

// A value far longer than any message should be: 10 MB of 'x'.
const std::string& huge() {
  static const std::string s(10'000'000, 'x');
  return s;
}

// The message is one short line that says how long the value was, not the value.
void expect_bounded(const Status& s, const std::string& what) {
  ASSERT_FALSE(s.ok()) << what;
  EXPECT_LT(s.message().size(), 400u) << what << ": " << s.message().substr(0, 400);
  EXPECT_NE(s.message().find("...(10000000 bytes)"), std::string::npos)
      << what << ": " << s.message().substr(0, 400);
  EXPECT_EQ(s.message().find('\n'), std::string::npos) << what;
}

TEST(DuplicateKeys, AConfigFileWithAKeyTwiceIsRefusedNamingIt) {
  const std::string dir = test::make_temp_dir("config_rules_duplicates");
  const std::string nested =
      write_file(dir, "nested.json", "{\"train\": {\"steps\": 10, \"seed\": 1, \"steps\": 1000}}");
  expect_error(read_json_file(nested).status(), ErrorCode::bad_format,
               {nested, "duplicate key \"train.steps\""});
  const std::string top =
      write_file(dir, "top.json", "{\"device\": \"cpu\", // the CPU\n \"device\": \"cuda\"}");
  expect_error(read_json_file(top).status(), ErrorCode::bad_format, {"duplicate key \"device\""});
  // The same key spelled with an escape is the same key.
  const std::string escaped =
      write_file(dir, "escaped.json", "{\"train\": {\"seed\": 1, \"s\\u0065ed\": 2}}");
  expect_error(read_json_file(escaped).status(), ErrorCode::bad_format,
               {"duplicate key \"train.seed\""});
  // One key in each of two objects is no duplicate; nor are equal keys in array elements.
  const std::string fine = write_file(
      dir, "fine.json", "{\"train\": {\"steps\": 1}, \"optim\": {\"lr\": 0.1, \"steps\": 2}}");
  auto parsed = read_json_file(fine);
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ((*parsed)["optim"]["steps"], 2);
}

TEST(DuplicateKeys, ThePathNamesArrayElements) {
  auto ok = parse_json("[{\"k\": 1}, {\"k\": 2}, [1, {\"a\": {}}]]", "t", {.unique_keys = true});
  EXPECT_TRUE(ok.ok()) << ok.status().message();
  auto dup = parse_json("{\"io\": {\"dirs\": [[], {\"a\": 1}, {\"b\": {}, \"a\": 1, \"b\": 2}]}}",
                        "t", {.unique_keys = true});
  expect_error(dup.status(), ErrorCode::bad_format, {"t: duplicate key \"io.dirs[2].b\""});
  // Without unique_keys the parser keeps the last, as nlohmann does.
  auto last = parse_json("{\"a\": 1, \"a\": 2}", "t");
  ASSERT_TRUE(last.ok());
  EXPECT_EQ((*last)["a"], 2);
}

TEST(DuplicateKeys, SetTwiceForOneKeyTakesTheLast) {
  // The command line's convention: a later flag overrides an earlier one.
  json j = default_config_json();
  ASSERT_TRUE(apply_set(j, "train.steps=10").ok());
  ASSERT_TRUE(apply_set(j, "train.steps=20").ok());
  auto c = parse_config(j);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->steps, 20);
}

TEST(BoundedEchoes, ExcerptCutsAtACharacterAndSaysTheLength) {
  EXPECT_EQ(excerpt("short"), "short");
  EXPECT_EQ(excerpt(std::string(80, 'a')), std::string(80, 'a'));
  EXPECT_EQ(excerpt(std::string(81, 'a')), std::string(80, 'a') + "...(81 bytes)");
  // "é" is two bytes: a cut inside it backs off to before it.
  EXPECT_EQ(excerpt("abcé", 4), "abc...(5 bytes)");
  EXPECT_EQ(excerpt("a\nb", 80), "a\\nb");
}

TEST(BoundedEchoes, EveryConfigErrorQuotingAHugeValueIsShort) {
  json j = default_config_json();
  json schedule = default_config_json();
  ASSERT_TRUE(apply_set(schedule, "train.schedule=" + huge()).ok());  // a string: checked later
  expect_bounded(parse_config(schedule).status(), "an enum's value");
  expect_bounded(apply_set(j, "train.steps=" + huge()), "an integer's value");
  expect_bounded(apply_set(j, huge() + "=1"), "an unknown --set key");
  expect_bounded(merge_config(j, json{{huge(), 1}}, "run.json"), "an unknown key in a file");
  expect_bounded(merge_config(j, json{{"optim", {{"lr", huge()}}}}, "run.json"), "a float's value");
  json alpha = default_config_json();
  expect_bounded(merge_config(alpha, json{{"optim", {{"alpha", huge()}}}}, "run.json"),
                 "alpha's value");
  expect_bounded(parse_enum<DeviceKind>("--device", huge()).status(), "--device");
  expect_bounded(parse_fault_spec("read:1:" + huge()).status(), "io.faults");
  const std::string twice = "{\"" + huge() + "\": 1, \"" + huge() + "\": 2}";
  expect_bounded(parse_json(twice, "t", {.unique_keys = true}).status(), "a key given twice");

  const std::string dir = test::make_temp_dir("config_rules_huge");
  const std::string file =
      write_file(dir, "huge.json", "{\"train\": {\"schedule\": \"" + huge() + "\"}}");
  auto file_json = read_json_file(file);
  ASSERT_TRUE(file_json.ok());
  expect_bounded(parse_config(*file_json).status(), "a file's enum value");
}

TEST(BoundedEchoes, APathIsShownUpToPathMax) {
  // A path names a file only below PATH_MAX, so up to that it is shown whole.
  auto opened = TokenFile::open("/nonexistent/" + huge(), TokenFormat::auto_detect);
  ASSERT_FALSE(opened.ok());
  EXPECT_LT(opened.status().message().size(), kMaxShownPath + 200);
  EXPECT_NE(opened.status().message().find("...(10000013 bytes)"), std::string::npos);
}

TEST(ResumeChanges, EveryDifferingFieldInTableOrder) {
  TrainConfig a, b;
  b.optim.lr = 1e-3f;
  b.batch_size = 4;
  b.precision = Precision::bf16;
  const std::vector<FieldDifference> d = config_differences(a, b);
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[0].key, "train.batch_size");
  EXPECT_EQ(d[0].a, "8");
  EXPECT_EQ(d[0].b, "4");
  EXPECT_EQ(d[1].key, "train.precision");
  EXPECT_EQ(d[1].b, "\"bf16\"");
  EXPECT_EQ(d[2].key, "optim.lr");
  EXPECT_EQ(d[2].a, "0.003");
  EXPECT_EQ(d[2].b, "0.001");
  EXPECT_TRUE(config_differences(a, a).empty());
}

TEST(ResumeChanges, DataStreamKeysAreTableKeys) {
  for (std::string_view key : kDataStreamKeys) EXPECT_TRUE(is_config_key(key)) << key;
  EXPECT_FALSE(is_config_key("train.batchsize"));
  EXPECT_FALSE(is_config_key("train"));
}

TEST(ResumeChanges, OnlyTheDataStreamsFieldsMoveIt) {
  TrainConfig a, b;
  b.optim.lr = 1e-3f;
  b.steps = 5000;
  b.seed = 7;
  b.precision = Precision::bf16;
  EXPECT_TRUE(data_stream_changes(a, b).empty());
  b.seq_len = 64;
  b.data_train = "other.bin";
  auto d = data_stream_changes(a, b);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].key, "train.seq_len");
  EXPECT_EQ(d[1].key, "data.train");
}

TEST(ResumeChanges, GradAccumCountsWithTheRanks) {
  TrainConfig a, b;
  a.ranks = 2;
  a.grad_accum = 2;
  b.ranks = 1;
  b.grad_accum = 4;  // the same 4 micro-batches per step
  EXPECT_TRUE(data_stream_changes(a, b).empty());
  b.grad_accum = 2;
  auto d = data_stream_changes(a, b);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].key, "train.grad_accum");
  EXPECT_EQ(d[0].a, "2 x 2 ranks");
  EXPECT_EQ(d[0].b, "2 x 1 ranks");
}

}  // namespace
}  // namespace strata
