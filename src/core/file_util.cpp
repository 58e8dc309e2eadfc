#include "core/file_util.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

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

}  // namespace strata
