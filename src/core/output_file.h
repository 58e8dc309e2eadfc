// Writing a file for the user (--out, --trace, an export's config.json): never over something
// that is not ours, never half written.
//
// Note [Writing an output file]
// A writer refuses (invalid_argument: bad input, exit 2) a path that exists and is not a regular
// file (a device, a FIFO, a socket, a directory) or is a symbolic link: it never follows a link
// it did not make, and never writes into or replaces a device. It writes a temporary file beside
// the target, ".<name>.tmp-<pid>-<n>", created with O_CREAT|O_EXCL|O_NOFOLLOW (so two writers,
// in one process or two, never share one), registered as a scratch file (Note [Scratch files])
// so a signal or crash removes it, and removed on every failure path. commit() fsyncs it, checks
// the target once more and renames it over the target: a reader sees the old file or the new one,
// never a mix. Two writers to one path each leave a whole file; the last rename wins.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "core/scratch_files.h"
#include "core/status.h"

namespace strata {

// ok when `path` does not exist or is a regular file (not a link); invalid_argument
// "<what> <path> is a <kind>; ..." otherwise, io_error when it cannot be looked at.
Status check_output_path(const std::string& path, const std::string& what);
// For an output directory: ok when `dir` does not exist or is a directory (a link to one
// included: the files in it are checked one by one); invalid_argument when it is something else.
Status check_output_dir(const std::string& dir, const std::string& what);

class OutputFile {
 public:
  // check_output_path, then the temporary file. `what` names the file in errors ("report").
  static Result<OutputFile> create(const std::string& path, const std::string& what);
  OutputFile(OutputFile&& other) noexcept;
  OutputFile& operator=(OutputFile&&) = delete;
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  ~OutputFile();  // an uncommitted file's temporary is removed

  int fd() const { return fd_; }  // of the temporary file; -1 once committed or given up
  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_; }
  // All of `bytes`, retrying short and interrupted writes; no_space or io_error naming the file.
  Status write(const void* data, int64_t bytes);
  // fsync, close, check the target, rename over it, fsync the directory. Any failure removes
  // the temporary file and names the step.
  Status commit();
  // Closes and removes the temporary file now (what the destructor does).
  void discard();

 private:
  OutputFile(std::string path, std::string what, std::string temp, int fd)
      : path_(std::move(path)),
        what_(std::move(what)),
        temp_(std::move(temp)),
        fd_(fd),
        scratch_(temp_) {}
  Status failed(const std::string& step, int err);
  void remove_temp();  // unlinks the temporary file and leaves the scratch registry

  std::string path_, what_, temp_;
  int fd_ = -1;
  ScratchFile scratch_;
};

// The whole of `text` as the file at `path`, by OutputFile.
Status write_output_file(const std::string& path, const std::string& text, const std::string& what);

}  // namespace strata
