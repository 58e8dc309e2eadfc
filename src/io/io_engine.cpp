#include "io/io_engine.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/log.h"
#include "io/posix_engine.h"
#include "io/uring_engine.h"

namespace strata {

const char* io_op_name(IoOp op) {
  switch (op) {
    case IoOp::read:
      return "read";
    case IoOp::write:
      return "write";
  }
  return "unknown";
}

IoFile::IoFile(IoFile&& other) noexcept
    : fd(other.fd), path(std::move(other.path)), direct(other.direct) {
  other.fd = -1;
}

IoFile& IoFile::operator=(IoFile&& other) noexcept {
  if (this != &other) {
    close_io_file(*this);
    fd = other.fd;
    path = std::move(other.path);
    direct = other.direct;
    other.fd = -1;
  }
  return *this;
}

IoFile::~IoFile() {
  close_io_file(*this);
}

void close_io_file(IoFile& file) {
  if (file.fd < 0) return;
  // Data written through the engine is already in the file (or reported failed); a close error
  // here cannot be retried (the fd is gone either way), so it is reported, not returned.
  if (::close(file.fd) != 0) {
    log_warn("close " + file.path + ": " + std::strerror(errno));
  }
  file.fd = -1;
}

Result<std::unique_ptr<IoFile>> open_io_file(const std::string& path, bool create, bool direct) {
  const int flags = O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0) | (direct ? O_DIRECT : 0);
  const int fd = ::open(path.c_str(), flags, 0644);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return not_found("open " + path + ": " + std::strerror(err));
    if (err == EINVAL && direct) {
      return unavailable("open " + path + ": the file system does not support O_DIRECT");
    }
    return io_error("open " + path + ": " + std::strerror(err));
  }
  return std::make_unique<IoFile>(fd, path, direct);
}

namespace {

// One aligned 4 KiB write and read through the engine on an unlinked O_DIRECT file in `dir`:
// proves the file system takes O_DIRECT and the kernel runs io_uring requests on it (some
// sandboxes set up rings but fail every request). unavailable with the reason if not; other
// errors (no such directory, no permission) are the caller's to fix and are returned as such.
Status probe_direct_io(IoEngine& engine, const std::string& dir) {
  const std::string path = dir + "/.strata_io_probe." + std::to_string(getpid());
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_DIRECT | O_CLOEXEC, 0600);
  if (fd < 0) {
    const int err = errno;
    if (err == EINVAL)
      return unavailable("the file system of " + dir + " does not support O_DIRECT");
    return io_error("cannot create the probe file " + path + ": " + std::strerror(err));
  }
  if (::unlink(path.c_str()) != 0) {
    log_warn("cannot remove the probe file " + path + ": " + std::strerror(errno));
  }
  IoFile file(fd, path, /*direct=*/true);
  void* out = std::aligned_alloc(kDirectIoAlignment, kDirectIoAlignment);
  void* in = std::aligned_alloc(kDirectIoAlignment, kDirectIoAlignment);
  Status status;
  if (out == nullptr || in == nullptr) {
    status = out_of_memory("io engine probe: 8 KiB");
  } else {
    std::memset(out, 0x5a, kDirectIoAlignment);
    std::memset(in, 0, kDirectIoAlignment);
    for (IoOp op : {IoOp::write, IoOp::read}) {
      IoRequest r{op, &file, 0, op == IoOp::write ? out : in, kDirectIoAlignment};
      auto ticket = engine.submit(r);
      status = ticket.ok() ? engine.wait(ticket.value()) : ticket.status();
      if (!status.ok()) break;
    }
    if (status.ok() && std::memcmp(out, in, kDirectIoAlignment) != 0) {
      status = io_error("O_DIRECT probe in " + dir + " read back different bytes");
    }
    if (!status.ok()) status = unavailable(status.message());
  }
  std::free(out);
  std::free(in);
  return status;
}

std::string posix_description(const PosixEngine& engine) {
  return std::to_string(engine.threads()) + " threads";
}

}  // namespace

Result<std::unique_ptr<IoEngine>> create_io_engine(const IoEngineOptions& options,
                                                   const std::string& probe_dir) {
  if (options.kind == IoEngineKind::posix) {
    STRATA_ASSIGN_OR_RETURN(auto engine, PosixEngine::create(options));
    log_info("storage engine: posix, " + posix_description(*engine) + " (asked for posix)");
    return std::unique_ptr<IoEngine>(std::move(engine));
  }
  if (options.kind == IoEngineKind::uring) {
    STRATA_ASSIGN_OR_RETURN(auto engine, UringEngine::create(options));
    log_info("storage engine: io_uring, " + engine->describe() + " (asked for io_uring)");
    return std::unique_ptr<IoEngine>(std::move(engine));
  }

  std::string reason;
  auto uring = UringEngine::create(options);
  if (!uring.ok()) {
    if (uring.status().code() != ErrorCode::unavailable) return uring.status();
    reason = "io_uring unavailable: " + uring.status().message();
  } else if (!probe_dir.empty()) {
    Status probe = probe_direct_io(*uring.value(), probe_dir);
    if (probe.code() == ErrorCode::unavailable) {
      reason = probe.message();
    } else if (!probe.ok()) {
      return probe;
    }
  }
  if (reason.empty()) {
    log_info("storage engine: io_uring, " + uring.value()->describe() +
             (probe_dir.empty() ? std::string(" (not probed)")
                                : " (io_uring and O_DIRECT work in " + probe_dir + ")"));
    return std::unique_ptr<IoEngine>(std::move(uring).value());
  }
  STRATA_ASSIGN_OR_RETURN(auto posix, PosixEngine::create(options));
  log_info("storage engine: posix, " + posix_description(*posix) + " (" + reason + ")");
  return std::unique_ptr<IoEngine>(std::move(posix));
}

}  // namespace strata
