#include "io/sequential_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "io/crc32c.h"

namespace strata {

Status fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_error("open " + path + " for fsync", errno);
  const int rc = ::fsync(fd);
  Status st = rc == 0 ? Status() : errno_error("fsync " + path, errno);
  ::close(fd);
  return st;
}

Result<SequentialFile> SequentialFile::create(IoEngine& engine, const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(auto f, open_io_file(path, /*create=*/true, /*direct=*/false));
  return SequentialFile(engine, std::move(f));
}

Status SequentialFile::append(const void* data, int64_t bytes) {
  if (bytes == 0) return Status();
  IoRequest r;
  r.op = IoOp::write;
  r.file = file_.get();
  r.offset = static_cast<uint64_t>(position_);
  r.buffer = const_cast<void*>(data);
  r.length = static_cast<uint64_t>(bytes);
  STRATA_ASSIGN_OR_RETURN(Ticket t, engine_->submit(r));
  STRATA_RETURN_IF_ERROR(engine_->wait(t));
  crc_ = crc32c(data, static_cast<size_t>(bytes), crc_);
  position_ += bytes;
  size_ = std::max(size_, position_);
  return Status();
}

Status SequentialFile::finish() {
  if (::fsync(file_->fd) != 0) return errno_error("fsync " + file_->path, errno);
  close_io_file(*file_);
  return Status();
}

const std::string& SequentialFile::path() const {
  return file_->path;
}

}  // namespace strata
