// Note [Writing an output file] in output_file.h.
#include "core/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <filesystem>
#include <utility>

namespace strata {

namespace {

const char* kind_of(mode_t mode) {
  if (S_ISLNK(mode)) return "symbolic link";
  if (S_ISDIR(mode)) return "directory";
  if (S_ISCHR(mode)) return "character device";
  if (S_ISBLK(mode)) return "block device";
  if (S_ISFIFO(mode)) return "FIFO";
  if (S_ISSOCK(mode)) return "socket";
  return "special file";
}

std::string parent_of(const std::string& path) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  return dir.empty() ? "." : dir;
}

// After a failed lstat or stat: ok when nothing is there (it will be made); bad input when a
// directory on the way is not one.
Status missing_or_error(const std::string& path, const std::string& what) {
  const int err = errno;
  if (err == ENOENT) return Status::ok_status();
  if (err == ENOTDIR) {
    return invalid_argument(what + " " + path + ": a part of the path is not a directory");
  }
  return errno_error("cannot look at " + what + " " + path, err);
}

std::atomic<uint64_t> g_counter{0};

// ".<name>.tmp-<pid>-<n>" beside `path`.
std::string temp_name_for(const std::string& path) {
  const std::filesystem::path p(path);
  const std::string name = "." + p.filename().string() + ".tmp-" + std::to_string(::getpid()) +
                           "-" + std::to_string(g_counter.fetch_add(1));
  return (p.parent_path() / name).string();
}

}  // namespace

Status check_output_path(const std::string& path, const std::string& what) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return missing_or_error(path, what);
  if (S_ISREG(st.st_mode)) return Status::ok_status();
  return invalid_argument(what + " " + path + " is a " + kind_of(st.st_mode) +
                          "; an output must be a new or regular file");
}

Status check_output_dir(const std::string& given, const std::string& what) {
  std::string dir = given;  // "out/" names out, which may be a file: say so, not ENOTDIR
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return missing_or_error(dir, what);
  if (S_ISDIR(st.st_mode)) return Status::ok_status();
  const char* kind = S_ISREG(st.st_mode) ? "regular file" : kind_of(st.st_mode);
  return invalid_argument(what + " " + dir + " is a " + kind + "; it must be a directory");
}

Result<OutputFile> OutputFile::create(const std::string& path, const std::string& what) {
  if (path.empty()) return invalid_argument(what + ": the output path is empty");
  STRATA_RETURN_IF_ERROR(check_output_path(path, what));
  for (int attempt = 0;; ++attempt) {
    std::string temp = temp_name_for(path);
    const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd >= 0) return OutputFile(path, what, std::move(temp), fd);
    const int err = errno;
    // A leftover of a process that had our pid: try the next number.
    if (err == EEXIST && attempt < 100) continue;
    return errno_error("cannot write " + what + " " + path + ": create " + temp, err);
  }
}

OutputFile::OutputFile(OutputFile&& other) noexcept
    : path_(std::move(other.path_)),
      what_(std::move(other.what_)),
      temp_(std::move(other.temp_)),
      fd_(std::exchange(other.fd_, -1)),
      scratch_(std::move(other.scratch_)) {}

OutputFile::~OutputFile() {
  discard();
}

void OutputFile::discard() {
  if (fd_ < 0) return;
  ::close(std::exchange(fd_, -1));  // given up: a close error changes nothing
  remove_temp();
}

void OutputFile::remove_temp() {
  ::unlink(temp_.c_str());
  scratch_.release();
}

Status OutputFile::failed(const std::string& step, int err) {
  discard();
  return errno_error("cannot write " + what_ + " " + path_ + ": " + step, err);
}

Status OutputFile::write(const void* data, int64_t bytes) {
  if (fd_ < 0) return internal_error(what_ + " " + path_ + ": written after commit");
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t put = ::write(fd_, p, static_cast<size_t>(bytes));
    if (put < 0) {
      if (errno == EINTR) continue;
      return failed("write", errno);
    }
    p += put;
    bytes -= put;
  }
  return Status::ok_status();
}

Status OutputFile::commit() {
  if (fd_ < 0) return internal_error(what_ + " " + path_ + ": committed twice");
  if (::fsync(fd_) != 0) return failed("fsync", errno);
  // close can report a delayed write error (NFS, quota), so it is checked too.
  if (::close(std::exchange(fd_, -1)) != 0) {
    const int err = errno;
    remove_temp();
    return errno_error("cannot write " + what_ + " " + path_ + ": close", err);
  }
  // Once more just before the rename: something put there meanwhile is not replaced.
  Status target = check_output_path(path_, what_);
  if (target.ok() && ::rename(temp_.c_str(), path_.c_str()) != 0) {
    target = errno_error("cannot write " + what_ + " " + path_ + ": rename " + temp_, errno);
  }
  if (!target.ok()) {
    remove_temp();
    return target;
  }
  scratch_.release();
  const int dfd = ::open(parent_of(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0)
    return errno_error("cannot write " + what_ + " " + path_ + ": open its directory", errno);
  const int err = ::fsync(dfd) == 0 ? 0 : errno;
  ::close(dfd);
  // Some file systems cannot fsync a directory (EINVAL); the data is synced, so that is no error.
  if (err != 0 && err != EINVAL)
    return errno_error("cannot write " + what_ + " " + path_ + ": fsync its directory", err);
  return Status::ok_status();
}

Status write_output_file(const std::string& path, const std::string& text,
                         const std::string& what) {
  STRATA_ASSIGN_OR_RETURN(OutputFile out, OutputFile::create(path, what));
  STRATA_RETURN_IF_ERROR(out.write(text.data(), static_cast<int64_t>(text.size())));
  return out.commit();
}

}  // namespace strata
