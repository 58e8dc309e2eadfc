// Small file helpers shared by the config reader, the tokenizer, the commands and the readers of
// safetensors files and checkpoints.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "core/status.h"

namespace strata {

// The whole file as bytes. `what` names it in errors: "config file", "text file".
// Errors: not_found when it does not exist, io_error otherwise (with strerror).
Result<std::string> read_whole_file(const std::string& path, const std::string& what);

// Writes `text` as the whole file (created or truncated). io_error "cannot write <what> <path>"
// when it cannot be opened or written.
Status write_whole_file(const std::string& path, const std::string& text, const std::string& what);

// What the reads of some files asked for, for tests that bound a reader's memory by the largest
// buffer it ever filled.
struct ReadStats {
  int64_t reads = 0;
  int64_t bytes = 0;
  int64_t largest = 0;  // bytes of the largest single read
};

// A file opened for reads at offsets, closed when destroyed. `what` names it in errors, as in
// read_whole_file ("checkpoint file", "safetensors"): every error is one line
// "<what> <path>: ...".
class ReadOnlyFile {
 public:
  // not_found when it does not exist, bad_format when it is not a regular file, io_error
  // otherwise.
  static Result<ReadOnlyFile> open(const std::string& path, const std::string& what);
  ReadOnlyFile(ReadOnlyFile&& other) noexcept;
  ReadOnlyFile& operator=(ReadOnlyFile&& other) noexcept;
  ReadOnlyFile(const ReadOnlyFile&) = delete;
  ReadOnlyFile& operator=(const ReadOnlyFile&) = delete;
  ~ReadOnlyFile();

  const std::string& path() const { return path_; }
  int64_t size() const { return size_; }  // when opened

  // Exactly `bytes` at `offset`, retrying interrupted and short reads. io_error naming the file
  // and the offset when a read fails; bad_format when the file ends first (truncated).
  Status read_at(void* buf, int64_t bytes, int64_t offset) const;
  // Counts every later read_at in *stats (null: none).
  void count_reads_in(ReadStats* stats) { stats_ = stats; }

 private:
  ReadOnlyFile(int fd, std::string path, std::string what, int64_t size)
      : fd_(fd), path_(std::move(path)), what_(std::move(what)), size_(size) {}
  std::string where() const { return what_ + " " + path_; }

  int fd_ = -1;
  std::string path_, what_;
  int64_t size_ = 0;
  ReadStats* stats_ = nullptr;
};

}  // namespace strata
