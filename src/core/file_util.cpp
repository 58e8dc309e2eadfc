#include "core/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <utility>

namespace strata {

Result<std::string> read_whole_file(const std::string& path, const std::string& what) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT) return not_found(what + " " + path + " does not exist");
    return io_error("cannot open " + what + " " + path + ": " + std::strerror(err));
  }
  std::string text;
  char buf[1 << 16];
  while (true) {
    ssize_t got = ::read(fd, buf, sizeof buf);
    if (got < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      return io_error("cannot read " + what + " " + path + ": " + std::strerror(err));
    }
    if (got == 0) break;
    text.append(buf, static_cast<size_t>(got));
  }
  ::close(fd);  // read-only: nothing to lose if close reports an error
  return text;
}

Status write_whole_file(const std::string& path, const std::string& text, const std::string& what) {
  std::ofstream out(path, std::ios::out | std::ios::trunc | std::ios::binary);
  out << text;
  out.flush();
  if (!out) return io_error("cannot write " + what + " " + path);
  return Status::ok_status();
}

Result<ReadOnlyFile> ReadOnlyFile::open(const std::string& path, const std::string& what) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer; the check below
  // refuses anything but a regular file, where the flag changes nothing.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int err = errno;
    const std::string m = what + " " + path + ": open: " + std::strerror(err);
    return err == ENOENT ? not_found(m) : io_error(m);
  }
  struct stat sb;
  if (::fstat(fd, &sb) != 0) {
    const int err = errno;
    ::close(fd);
    return io_error(what + " " + path + ": stat: " + std::strerror(err));
  }
  if (!S_ISREG(sb.st_mode)) {
    ::close(fd);
    return bad_format(what + " " + path + ": not a regular file");
  }
  return ReadOnlyFile(fd, path, what, static_cast<int64_t>(sb.st_size));
}

ReadOnlyFile::ReadOnlyFile(ReadOnlyFile&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      path_(std::move(other.path_)),
      what_(std::move(other.what_)),
      size_(other.size_),
      stats_(other.stats_) {}

ReadOnlyFile& ReadOnlyFile::operator=(ReadOnlyFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
    what_ = std::move(other.what_);
    size_ = other.size_;
    stats_ = other.stats_;
  }
  return *this;
}

ReadOnlyFile::~ReadOnlyFile() {
  if (fd_ >= 0) ::close(fd_);  // read-only: nothing to lose if close reports an error
}

Status ReadOnlyFile::read_at(void* buf, int64_t bytes, int64_t offset) const {
  if (stats_ != nullptr) {
    stats_->reads += 1;
    stats_->bytes += bytes;
    stats_->largest = std::max(stats_->largest, bytes);
  }
  auto* p = static_cast<uint8_t*>(buf);
  while (bytes > 0) {
    const ssize_t got = ::pread(fd_, p, static_cast<size_t>(bytes), static_cast<off_t>(offset));
    if (got < 0) {
      if (errno == EINTR) continue;
      return io_error(where() + ": read at offset " + std::to_string(offset) + ": " +
                      std::strerror(errno));
    }
    if (got == 0) {
      return bad_format(where() + ": file ends at offset " + std::to_string(offset) +
                        " (truncated while reading)");
    }
    p += got;
    bytes -= got;
    offset += got;
  }
  return Status::ok_status();
}

}  // namespace strata
