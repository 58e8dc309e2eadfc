// Output files (Note [Writing an output file] in core/output_file.h) and the scratch registry
// (Note [Scratch files]): nothing that is not a regular file is written over or followed, the
// temporary file is unique and never left behind, and a signal handler can remove it.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "core/file_util.h"
#include "core/output_file.h"
#include "core/scratch_files.h"
#include "formats/checkpoint_publish.h"
#include "test_util.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

std::string read_text(const std::string& path) {
  auto text = read_whole_file(path, "test file");
  return text.ok() ? *text : "<" + text.status().to_string() + ">";
}

TEST(OutputFile, RefusesWhatIsNotARegularFileBeforeWritingAnything) {
  const std::string dir = test::make_temp_dir("output_file_refuses");
  const std::string fifo = dir + "/fifo", outside = dir + "/outside.txt", link = dir + "/link";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  ASSERT_TRUE(write_whole_file(outside, "keep me", "test file").ok());
  fs::create_symlink(outside, link);
  fs::create_directory(dir + "/sub");
  const std::vector<std::string> before = test::files_in(dir);
  test::expect_error(write_output_file(fifo, "x", "report"), ErrorCode::invalid_argument,
                     {"report " + fifo + " is a FIFO"});
  test::expect_error(write_output_file(link, "x", "report"), ErrorCode::invalid_argument,
                     {"report " + link + " is a symbolic link"});
  test::expect_error(write_output_file(dir + "/sub", "x", "report"), ErrorCode::invalid_argument,
                     {"report " + dir + "/sub is a directory"});
  // A device: refused by the check itself, so nothing here ever opens /dev/null for writing.
  test::expect_error(OutputFile::create("/dev/null", "data file").status(),
                     ErrorCode::invalid_argument, {"data file /dev/null is a character device"});
  EXPECT_EQ(read_text(outside), "keep me");
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_TRUE(fs::is_fifo(fifo));
  EXPECT_EQ(test::files_in(dir), before) << "a refused write left a file";

  test::expect_error(check_output_dir(outside, "export directory"), ErrorCode::invalid_argument,
                     {"export directory " + outside + " is a regular file"});
  EXPECT_TRUE(check_output_dir(dir + "/sub", "export directory").ok());
  EXPECT_TRUE(check_output_dir(dir + "/new", "export directory").ok());
}

TEST(OutputFile, ReplacesARegularFileByRenameAndLeavesNoTemporary) {
  const std::string dir = test::make_temp_dir("output_file_replaces");
  const std::string path = dir + "/out.bin";
  ASSERT_TRUE(write_output_file(path, "first", "report").ok());
  struct stat a {
  }, b{};
  ASSERT_EQ(::stat(path.c_str(), &a), 0);
  ASSERT_TRUE(write_output_file(path, "second", "report").ok());
  ASSERT_EQ(::stat(path.c_str(), &b), 0);
  EXPECT_NE(a.st_ino, b.st_ino) << "replaced in place, not by a rename";
  EXPECT_EQ(read_text(path), "second");
  EXPECT_EQ(test::files_in(dir), std::vector<std::string>{"out.bin"});
}

TEST(OutputFile, TwoWritersToOnePathEachWriteTheirOwnTemporary) {
  const std::string dir = test::make_temp_dir("output_file_two");
  const std::string path = dir + "/out.bin";
  auto a = OutputFile::create(path, "data file");
  auto b = OutputFile::create(path, "data file");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->temp_path(), b->temp_path());
  EXPECT_EQ(fs::path(a->temp_path()).parent_path(), fs::path(path).parent_path());
  const std::string big_a(1 << 20, 'a'), big_b(1 << 19, 'b');
  ASSERT_TRUE(a->write(big_a.data(), static_cast<int64_t>(big_a.size())).ok());
  ASSERT_TRUE(b->write(big_b.data(), static_cast<int64_t>(big_b.size())).ok());
  ASSERT_TRUE(b->commit().ok());
  EXPECT_EQ(read_text(path), big_b);
  ASSERT_TRUE(a->commit().ok());
  EXPECT_EQ(read_text(path), big_a) << "the last rename wins, whole";
  EXPECT_EQ(test::files_in(dir), std::vector<std::string>{"out.bin"});
}

TEST(OutputFile, AnUncommittedFileLeavesNothingAndTheOldFileStays) {
  const std::string dir = test::make_temp_dir("output_file_dropped");
  const std::string path = dir + "/out.bin";
  ASSERT_TRUE(write_output_file(path, "old", "report").ok());
  {
    auto f = OutputFile::create(path, "report");
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE(f->write("new", 3).ok());
    EXPECT_EQ(test::files_in(dir).size(), 2u);
  }
  EXPECT_EQ(read_text(path), "old");
  EXPECT_EQ(test::files_in(dir), std::vector<std::string>{"out.bin"});
}

TEST(OutputFile, AThingPutAtTheTargetWhileWritingIsNotReplaced) {
  const std::string dir = test::make_temp_dir("output_file_raced");
  const std::string path = dir + "/out.bin";
  auto f = OutputFile::create(path, "report");
  ASSERT_TRUE(f.ok());
  ASSERT_EQ(::mkfifo(path.c_str(), 0644), 0);
  test::expect_error(f->commit(), ErrorCode::invalid_argument, {path + " is a FIFO"});
  EXPECT_TRUE(fs::is_fifo(path));
  EXPECT_EQ(test::files_in(dir), std::vector<std::string>{"out.bin"});
}

TEST(ScratchFiles, TheHandlerRemovesRegisteredFilesOnly) {
  const std::string dir = test::make_temp_dir("scratch_files");
  const std::string kept = dir + "/kept", released = dir + "/released";
  ASSERT_TRUE(write_whole_file(kept, "k", "test file").ok());
  ASSERT_TRUE(write_whole_file(released, "r", "test file").ok());
  auto out = OutputFile::create(dir + "/out.bin", "report");
  ASSERT_TRUE(out.ok());
  ScratchFile r(released);
  EXPECT_TRUE(r.registered());
  r.release();
  EXPECT_FALSE(ScratchFile(std::string(5000, 'x')).registered()) << "too long for the table";
  unlink_scratch_files();  // what a signal handler does
  EXPECT_EQ(test::files_in(dir), (std::vector<std::string>{"kept", "released"}));
}

// A checkpoint being saved (begin_checkpoint_save registers its temporary directory) and a
// gather's scratch root are directories: a signal that ends the process removes them with what
// they hold, a few levels deep, and nothing beside them.
TEST(ScratchFiles, TheHandlerRemovesRegisteredDirectoriesWithWhatTheyHold) {
  const std::string root = test::make_temp_dir("scratch_dirs");
  ASSERT_TRUE(write_whole_file(root + "/beside", "b", "test file").ok());
  auto save = begin_checkpoint_save(root, 7, 4242);
  ASSERT_TRUE(save.ok()) << save.status().to_string();
  ASSERT_TRUE(save->scratch.registered());
  for (int i = 0; i < 40; ++i) {  // more names than one getdents64 buffer holds
    const std::string name = save->tmp + "/piece-" + std::string(40, 'x') + std::to_string(i);
    ASSERT_TRUE(write_whole_file(name, "p", "test file").ok());
  }
  const std::string gather = root + "/.tmp-gather-4242";
  fs::create_directories(gather + "/step-00000001/deeper");
  ASSERT_TRUE(write_whole_file(gather + "/step-00000001/model.safetensors", "m", "t").ok());
  ASSERT_TRUE(write_whole_file(gather + "/step-00000001/deeper/x", "x", "t").ok());
  ScratchFile gathered(gather);
  unlink_scratch_files();  // what a signal handler does
  EXPECT_EQ(test::files_in(root), std::vector<std::string>{"beside"});
}

TEST(ScratchFiles, SlotsAreReusedAndAFullTableRefusesMore) {
  std::vector<ScratchFile> held;
  for (int i = 0; i < 64; ++i) {
    held.emplace_back("/nonexistent/scratch-" + std::to_string(i));
    ASSERT_TRUE(held.back().registered()) << i;
  }
  EXPECT_FALSE(ScratchFile("/nonexistent/one-more").registered());
  held.pop_back();
  EXPECT_TRUE(ScratchFile("/nonexistent/one-more").registered());
}

}  // namespace
}  // namespace strata
