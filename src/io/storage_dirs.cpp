// Note [Storage directories checked first] in storage_dirs.h.
#include "io/storage_dirs.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "core/format.h"

namespace strata {

namespace {

namespace fs = std::filesystem;

// What every refusal ends with: what io.dirs are for, so the fix is plain.
constexpr const char* kWhatDirsAre = "io.dirs must be directories on writable storage";

// A file can be created in `dir`: an unnamed one where the file system has O_TMPFILE, else a
// named one, removed at once.
Status check_writable(const std::string& dir, const std::string& shown) {
  int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  int err = fd >= 0 ? 0 : errno;
  if (fd < 0 && (err == EOPNOTSUPP || err == EISDIR || err == EINVAL)) {
    const std::string probe = dir + "/.strata_dir_probe." + std::to_string(::getpid());
    fd = ::open(probe.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    err = fd >= 0 ? 0 : errno;
    if (fd >= 0 && ::unlink(probe.c_str()) != 0) {
      const int unlink_err = errno;
      ::close(fd);
      return io_error("cannot remove the probe file " + excerpt(probe, kMaxShownPath) + ": " +
                      std::strerror(unlink_err));
    }
  }
  if (fd >= 0) {
    ::close(fd);
    return Status::ok_status();
  }
  return invalid_argument(shown + ": cannot create a file in it (" + std::strerror(err) + "); " +
                          kWhatDirsAre);
}

Status prepare_storage_dir(const std::string& dir) {
  const std::string shown = "io.dirs entry " + excerpt(dir, kMaxShownPath);
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  if (ec && ec != std::errc::no_such_file_or_directory) {
    return invalid_argument(shown + ": " + ec.message() + "; " + kWhatDirsAre);
  }
  if (!fs::exists(st)) {
    fs::create_directories(dir, ec);
    if (ec) {
      return invalid_argument(shown + " does not exist and cannot be created: " + ec.message() +
                              "; " + kWhatDirsAre);
    }
  } else if (!fs::is_directory(st)) {
    return invalid_argument(shown + " is not a directory; " + kWhatDirsAre);
  }
  return check_writable(dir, shown);
}

}  // namespace

Status prepare_storage_dirs(const std::vector<std::string>& dirs) {
  for (const std::string& dir : dirs) STRATA_RETURN_IF_ERROR(prepare_storage_dir(dir));
  return Status::ok_status();
}

}  // namespace strata
