// File helpers (core/file_util.h): what is written reads back byte for byte, reads at offsets
// are exact and counted, and failures are one-line typed errors naming the file.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "core/file_util.h"
#include "core/output_file.h"
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

TEST(FileUtil, AtomicWriteReplacesTheFileAndLeavesNoTemporary) {
  const std::string dir = test::make_temp_dir("file_util_atomic");
  const std::string path = dir + "/index.json";
  ASSERT_TRUE(write_output_file(path, "first", "shard index").ok());
  ASSERT_TRUE(write_output_file(path, "second", "shard index").ok());
  EXPECT_EQ(*read_whole_file(path, "shard index"), "second");
  EXPECT_EQ(test::files_in(dir), std::vector<std::string>{"index.json"});
  const std::string missing = dir + "/no/such/dir/index.json";
  test::expect_error(write_output_file(missing, "x", "shard index"), ErrorCode::io_error,
                     {"cannot write shard index " + missing});
}

TEST(FileUtil, ReadAtIsExactCountedAndNamesTheFileWhenItEndsFirst) {
  const std::string dir = test::make_temp_dir("file_util_read_at");
  const std::string path = dir + "/data.bin";
  ASSERT_TRUE(write_whole_file(path, "0123456789", "data file").ok());
  auto f = ReadOnlyFile::open(path, "data file");
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->size(), 10);
  ReadStats stats;
  f->count_reads_in(&stats);
  char buf[8] = {};
  ASSERT_TRUE(f->read_at(buf, 4, 3).ok());
  EXPECT_EQ(std::string(buf, 4), "3456");
  ASSERT_TRUE(f->read_at(buf, 2, 0).ok());
  EXPECT_EQ(stats.reads, 2);
  EXPECT_EQ(stats.bytes, 6);
  EXPECT_EQ(stats.largest, 4);
  test::expect_error(f->read_at(buf, 8, 6), ErrorCode::bad_format,
                     {"data file " + path + ": file ends at offset 10"});
  test::expect_error(ReadOnlyFile::open(dir + "/absent", "data file").status(),
                     ErrorCode::not_found, {"data file " + dir + "/absent"});
  test::expect_error(ReadOnlyFile::open(dir, "data file").status(), ErrorCode::bad_format,
                     {"not a regular file"});
}

}  // namespace
}  // namespace strata
