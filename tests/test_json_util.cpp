// core/json_util.h: parsing with a nesting limit (Note [Bounded JSON nesting]), the bounded
// preview of values for error messages, and core/format.h's UTF-8 check.
#include <gtest/gtest.h>

#include <string>

#include "core/format.h"
#include "core/json_util.h"
#include "test_util.h"

namespace strata {
namespace {

using json = nlohmann::json;
using test::expect_error;

std::string nested_arrays(int64_t depth) {
  return std::string(static_cast<size_t>(depth), '[') +
         std::string(static_cast<size_t>(depth), ']');
}

std::string nested_objects(int64_t depth) {
  std::string s;
  for (int64_t i = 0; i < depth; i++) s += "{\"a\":";
  s += "1";
  s += std::string(static_cast<size_t>(depth), '}');
  return s;
}

TEST(JsonUtil, DeepNestingIsRefusedBeforeParsing) {
  // 200,000 levels: nlohmann parses it, but the first copy or dump overflows the stack.
  for (const std::string& text : {nested_arrays(200000), nested_objects(200000)}) {
    auto r = parse_json(text, "deep.json");
    expect_error(r.status(), ErrorCode::bad_format,
                 {"deep.json is not valid JSON", "line 1, column ", "deeper than 64 levels"});
  }
  auto ordered = parse_json<nlohmann::ordered_json>(nested_arrays(200000), "header");
  expect_error(ordered.status(), ErrorCode::bad_format, {"header", "deeper than 64"});
  // The position is that of the first bracket too deep.
  expect_error(parse_json("\n  " + nested_arrays(65), "x").status(), ErrorCode::bad_format,
               {"line 2, column 67"});
}

TEST(JsonUtil, NestingUpToTheLimitParses) {
  auto r = parse_json(nested_arrays(kMaxJsonDepth), "ok.json");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_FALSE(parse_json(nested_arrays(kMaxJsonDepth + 1), "x").ok());
  // Brackets inside strings, escaped quotes and (where allowed) comments are not nesting.
  const std::string brackets(1000, '[');
  auto in_string = parse_json("{\"k\": \"" + brackets + "\\\"" + brackets + "\"}", "s");
  ASSERT_TRUE(in_string.ok()) << in_string.status().to_string();
  EXPECT_EQ((*in_string)["k"].get<std::string>().size(), 2001u);
  auto in_comments = parse_json("// " + brackets + "\n{/* " + brackets + " */ \"a\": [1]}", "c",
                                JsonSyntax{.comments = true});
  ASSERT_TRUE(in_comments.ok()) << in_comments.status().to_string();
  EXPECT_EQ((*in_comments)["a"][0], 1);
}

TEST(JsonUtil, MalformedTextIsOneLineWithThePosition) {
  expect_error(parse_json("{\"a\": 1,\n \"b\": }", "run.json").status(), ErrorCode::bad_format,
               {"run.json is not valid JSON: line 2, column 7"});
  // nlohmann throws out_of_range, not parse_error, for a number beyond double: still an error.
  expect_error(parse_json("[1e400]", "big.json").status(), ErrorCode::bad_format,
               {"big.json is not valid JSON", "number overflow"});
  // Comments only where asked for.
  EXPECT_FALSE(parse_json("// x\n{}", "c").ok());
  // A long bad token is cut in the message.
  auto long_token = parse_json("[" + std::string(100000, 'x') + "]", "t");
  ASSERT_FALSE(long_token.ok());
  EXPECT_LT(long_token.status().message().size(), 300u);
}

TEST(JsonUtil, DepthOfParsedValues) {
  // A value another reader built: checked by an iterative walk.
  const json deep = json::parse(nested_arrays(200000));
  expect_error(check_json_depth(deep, "config"), ErrorCode::invalid_argument,
               {"config nests JSON deeper than 64 levels"});
  EXPECT_TRUE(check_json_depth(json::parse(nested_arrays(kMaxJsonDepth)), "x").ok());
  EXPECT_TRUE(check_json_depth(json(5), "x").ok());
}

TEST(JsonUtil, PreviewReadsOnlyWhatItShows) {
  EXPECT_EQ(json_preview(json::parse(R"({"a":[1,2],"b":"x"})")), R"({"a":[1,2],"b":"x"})");
  // Deep and huge values are shown by their start, without a walk of the whole value.
  const json deep = json::parse(nested_arrays(200000));
  EXPECT_EQ(json_preview(deep), "[[[[[...]]]]]");
  json big = json::array();
  for (int i = 0; i < 100000; i++) big.push_back(i);
  const std::string shown = json_preview(big, 20);
  EXPECT_EQ(shown.rfind("[0,1,2,3,4,5,6,7,8,9", 0), 0u) << shown;
  EXPECT_LE(shown.size(), 24u);
  EXPECT_EQ(json_preview(json(std::string(1000000, 'a')), 10), "\"aaaaaaaaa...");
  // Invalid UTF-8 in a value does not throw.
  EXPECT_EQ(json_preview(json(std::string("k\xe9"))), "\"k\xEF\xBF\xBD\"");
}

TEST(Utf8, InvalidBytesAreFoundAndEscaped) {
  EXPECT_EQ(invalid_utf8_offset("plain"), -1);
  EXPECT_EQ(invalid_utf8_offset("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"), -1);
  EXPECT_EQ(invalid_utf8_offset("k\xe9.bin"), 1);         // Latin-1, as a shell's $'\xe9'
  EXPECT_EQ(invalid_utf8_offset("ab\xc3"), 2);            // truncated sequence
  EXPECT_EQ(invalid_utf8_offset("\xc0\xaf"), 0);          // overlong '/'
  EXPECT_EQ(invalid_utf8_offset("x\xed\xa0\x80"), 1);     // a surrogate
  EXPECT_EQ(invalid_utf8_offset("\xf4\x90\x80\x80"), 0);  // above U+10FFFF
  EXPECT_EQ(printable("k\xe9.bin\n"), "k\\xe9.bin\\n");
  EXPECT_EQ(printable("caf\xc3\xa9"), "caf\xc3\xa9");
}

}  // namespace
}  // namespace strata
