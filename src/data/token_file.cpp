#include "data/token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <utility>

#include "core/check.h"

namespace strata {

// Tokens are mapped and used in place, and the headers are little-endian on disk.
static_assert(std::endian::native == std::endian::little,
              "token files assume a little-endian host");

namespace {

std::string errno_text(int err) {
  return std::strerror(err);
}

// ENOSPC and EDQUOT get their own code so the CLI can say "disk full" rather than "I/O error".
Status write_error(const std::string& what, int err) {
  std::string m = what + ": " + errno_text(err);
  if (err == ENOSPC || err == EDQUOT) return Status(ErrorCode::no_space, m);
  return io_error(m);
}

// write(2) may write less than asked, or be interrupted; loop until all of it is down.
Status write_all(int fd, const void* data, int64_t bytes, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t put = ::write(fd, p, static_cast<size_t>(std::min<int64_t>(bytes, 1 << 30)));
    if (put < 0) {
      if (errno == EINTR) continue;
      return write_error("cannot write " + path, errno);
    }
    p += put;
    bytes -= put;
  }
  return Status::ok_status();
}

// Makes the rename itself durable. Some file systems cannot fsync a directory (EINVAL); the
// data is already synced there, so that is not an error.
Status sync_parent_dir(const std::string& path) {
  std::filesystem::path parent = std::filesystem::path(path).parent_path();
  const std::string dir = parent.empty() ? std::string(1, '.') : parent.string();
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return io_error("cannot open directory " + dir + ": " + errno_text(errno));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0 && err != EINVAL)
    return io_error("cannot fsync directory " + dir + ": " + errno_text(err));
  return Status::ok_status();
}

// "its first bytes are 54 68 65 20" (at most 4), for a file that is not what it should be.
std::string first_bytes_text(const void* base, int64_t bytes) {
  std::string s = bytes < 4 ? "its " + std::to_string(bytes) + " bytes are" : "its first bytes are";
  for (int64_t i = 0; i < std::min<int64_t>(bytes, 4); i++) {
    char hex[4];
    std::snprintf(hex, sizeof hex, " %02x", static_cast<const unsigned char*>(base)[i]);
    s += hex;
  }
  return s;
}

int32_t read_i32(const void* base, int64_t index) {
  int32_t v;
  std::memcpy(&v, static_cast<const char*>(base) + 4 * index, 4);
  return v;
}

}  // namespace

TokenFile::TokenFile(TokenFile&& other) noexcept {
  *this = std::move(other);
}

TokenFile& TokenFile::operator=(TokenFile&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    format_ = other.format_;
    map_ = std::exchange(other.map_, nullptr);
    map_bytes_ = std::exchange(other.map_bytes_, 0);
    tokens_ = std::exchange(other.tokens_, nullptr);
    n_tokens_ = std::exchange(other.n_tokens_, 0);
  }
  return *this;
}

TokenFile::~TokenFile() {
  unmap();
}

void TokenFile::unmap() {
  if (map_ != nullptr) {
    // munmap fails only for an invalid range, which would be a bug here.
    int rc = ::munmap(map_, static_cast<size_t>(map_bytes_));
    STRATA_CHECK(rc == 0);
  }
  map_ = nullptr;
  map_bytes_ = 0;
  tokens_ = nullptr;
  n_tokens_ = 0;
}

Result<TokenFile> TokenFile::open(const std::string& path, TokenFormat format) {
  const std::string what = "data file " + path;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT) return not_found(what + " does not exist");
    return io_error("cannot open " + what + ": " + errno_text(err));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return io_error("cannot stat " + what + ": " + errno_text(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return invalid_argument(what + " is not a regular file");
  }
  const int64_t bytes = static_cast<int64_t>(st.st_size);
  if (bytes == 0) {
    ::close(fd);
    return bad_format(what + " is empty");
  }
  void* map = ::mmap(nullptr, static_cast<size_t>(bytes), PROT_READ, MAP_PRIVATE, fd, 0);
  int map_err = errno;
  ::close(fd);  // the mapping keeps the file open; a read-only close has nothing to lose
  if (map == MAP_FAILED) return io_error("cannot mmap " + what + ": " + errno_text(map_err));

  TokenFile f;  // from here on its destructor unmaps on every error path
  f.path_ = path;
  f.map_ = map;
  f.map_bytes_ = bytes;

  if (format == TokenFormat::auto_detect) {
    if (bytes < 4 || read_i32(map, 0) != kLlmcMagic) {
      return bad_format(what + " does not start with llm.c's magic " + std::to_string(kLlmcMagic) +
                        " (" + first_bytes_text(map, bytes) +
                        "); data.format auto reads only llm.c .bin files, set data.format=raw_u16 "
                        "for headerless uint16 tokens");
    }
    format = TokenFormat::llmc;
  }
  f.format_ = format;

  if (format == TokenFormat::raw_u16) {
    if (bytes % 2 != 0) {
      return bad_format(what + ": " + std::to_string(bytes) +
                        " bytes is an odd size for raw uint16 tokens");
    }
    f.tokens_ = static_cast<const uint16_t*>(map);
    f.n_tokens_ = bytes / 2;
    return f;
  }

  if (bytes < kLlmcHeaderBytes) {
    return bad_format(what + ": " + std::to_string(bytes) +
                      " bytes is too short for the 1024-byte llm.c header");
  }
  int32_t magic = read_i32(map, 0);
  int32_t version = read_i32(map, 1);
  int64_t n = read_i32(map, 2);
  if (magic != kLlmcMagic) {
    return bad_format(what + ": magic " + std::to_string(magic) + " is not " +
                      std::to_string(kLlmcMagic) + " (llm.c .bin)");
  }
  if (version != kLlmcVersion) {
    return bad_format(what + ": llm.c version " + std::to_string(version) +
                      " is not supported (only 1: uint16 tokens)");
  }
  if (n < 0 || kLlmcHeaderBytes + 2 * n != bytes) {
    return bad_format(what + ": header says " + std::to_string(n) + " tokens (" +
                      std::to_string(kLlmcHeaderBytes + 2 * n) + " bytes) but file has " +
                      std::to_string(bytes) + " bytes");
  }
  if (n == 0) return bad_format(what + " holds no tokens");
  f.tokens_ = reinterpret_cast<const uint16_t*>(static_cast<const char*>(map) + kLlmcHeaderBytes);
  f.n_tokens_ = n;
  return f;
}

Status write_token_file_llmc(const std::string& path, const uint16_t* tokens, int64_t n) {
  STRATA_CHECK(n >= 0 && (tokens != nullptr || n == 0));
  if (n > std::numeric_limits<int32_t>::max()) {
    return invalid_argument("data file " + path + ": " + std::to_string(n) +
                            " tokens do not fit the llm.c header's int32 count");
  }
  int32_t header[256] = {};
  header[0] = kLlmcMagic;
  header[1] = kLlmcVersion;
  header[2] = static_cast<int32_t>(n);

  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return write_error("cannot create " + tmp, errno);
  Status s = write_all(fd, header, sizeof header, tmp);
  if (s.ok()) s = write_all(fd, tokens, 2 * n, tmp);
  if (s.ok() && ::fsync(fd) != 0) s = write_error("cannot fsync " + tmp, errno);
  // close can report a delayed write error (NFS, quota), so it is checked too.
  if (::close(fd) != 0 && s.ok()) s = write_error("cannot close " + tmp, errno);
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    s = io_error("cannot rename " + tmp + " to " + path + ": " + errno_text(errno));
  }
  if (!s.ok()) {
    ::unlink(tmp.c_str());  // best effort: the error already says what went wrong
    return s;
  }
  return sync_parent_dir(path);
}

Status check_token_range(const TokenFile& f, int64_t vocab_size) {
  if (vocab_size > 65535) return Status::ok_status();  // every uint16 fits
  const uint16_t* t = f.tokens();
  for (int64_t i = 0; i < f.size(); i++) {
    if (t[i] >= vocab_size) {
      return invalid_argument("data file " + f.path() + ": token " + std::to_string(t[i]) +
                              " at position " + std::to_string(i) +
                              " is outside model.vocab_size " + std::to_string(vocab_size));
    }
  }
  return Status::ok_status();
}

}  // namespace strata
