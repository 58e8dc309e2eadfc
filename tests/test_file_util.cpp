// Whole-file helpers (core/file_util.h): what is written reads back byte for byte, and failures
// are one-line typed errors naming the file.
#include <gtest/gtest.h>

#include <string>

#include "core/file_util.h"
#include "test_util.h"

namespace strata {
namespace {

TEST(FileUtil, WriteThenReadBackAndErrorsNameTheFile) {
  const std::string dir = test::make_temp_dir("file_util");
  const std::string path = dir + "/out.json";
  const std::string text = std::string("{\"a\": 1}\n") + '\0' + "tail";
  ASSERT_TRUE(write_whole_file(path, text, "trace file").ok());
  auto back = read_whole_file(path, "trace file");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(*back, text);
  ASSERT_TRUE(write_whole_file(path, "short", "trace file").ok());  // truncates
  EXPECT_EQ(*read_whole_file(path, "trace file"), "short");

  const std::string missing = dir + "/no/such/dir/out.json";
  test::expect_error(write_whole_file(missing, "x", "trace file"), ErrorCode::io_error,
                     {"cannot write trace file " + missing});
  test::expect_error(read_whole_file(missing, "trace file").status(), ErrorCode::not_found,
                     {missing});
}

}  // namespace
}  // namespace strata
