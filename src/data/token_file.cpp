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
#include "core/output_file.h"

namespace strata {

// Tokens are mapped and used in place, and the headers are little-endian on disk.
static_assert(std::endian::native == std::endian::little,
              "token files assume a little-endian host");

namespace {

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

// A whole file mapped read-only.
struct FileMapping {
  void* data;
  int64_t bytes;
};

// Maps the file at `path` (called `what` in messages): not_found when it does not exist,
// invalid_argument when it is not a regular file, bad_format when it is empty.
Result<FileMapping> map_file(const std::string& path, const std::string& what) {
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
  return FileMapping{map, bytes};
}

// The tokens of an llm.c .bin file mapped at map (bytes long): the 1024-byte header (magic,
// version, token count), then the uint16 (version 1) or uint32 (version 2) tokens.
Result<TokenView> llmc_tokens(const void* map, int64_t bytes, const std::string& what) {
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
  if (version != kLlmcVersion && version != kLlmcVersionU32) {
    return bad_format(what + ": llm.c version " + std::to_string(version) +
                      " is not supported (1: uint16 tokens, 2: uint32 tokens)");
  }
  const int64_t width = version == kLlmcVersion ? 2 : 4;
  if (n < 0 || kLlmcHeaderBytes + width * n != bytes) {
    return bad_format(what + ": header says " + std::to_string(n) + " tokens (" +
                      std::to_string(kLlmcHeaderBytes + width * n) + " bytes) but file has " +
                      std::to_string(bytes) + " bytes");
  }
  if (n == 0) return bad_format(what + " holds no tokens");
  const char* payload = static_cast<const char*>(map) + kLlmcHeaderBytes;
  if (width == 2) return TokenView(reinterpret_cast<const uint16_t*>(payload), n);
  return TokenView(reinterpret_cast<const uint32_t*>(payload), n);
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
    view_ = std::exchange(other.view_, TokenView());
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
  view_ = TokenView();
}

void TokenView::copy(int64_t first, int64_t n, int32_t* out) const {
  STRATA_CHECK(first >= 0 && n >= 0 && first + n <= n_);
  if (bytes_ == 2) {
    const uint16_t* t = static_cast<const uint16_t*>(data_) + first;
    for (int64_t i = 0; i < n; i++) out[i] = t[i];
  } else {
    const uint32_t* t = static_cast<const uint32_t*>(data_) + first;
    for (int64_t i = 0; i < n; i++) out[i] = static_cast<int32_t>(t[i]);
  }
}

Result<TokenFile> TokenFile::open(const std::string& path, TokenFormat format) {
  const std::string what = "data file " + excerpt(path, kMaxShownPath);  // Note [Bounded echoes]
  STRATA_ASSIGN_OR_RETURN(const FileMapping m, map_file(path, what));
  TokenFile f;  // from here on its destructor unmaps on every error path
  f.path_ = path;
  f.map_ = m.data;
  f.map_bytes_ = m.bytes;

  if (format == TokenFormat::auto_detect) {
    if (m.bytes < 4 || read_i32(m.data, 0) != kLlmcMagic) {
      return bad_format(what + " does not start with llm.c's magic " + std::to_string(kLlmcMagic) +
                        " (" + first_bytes_text(m.data, m.bytes) +
                        "); data.format auto reads only llm.c .bin files, set data.format=raw_u16 "
                        "for headerless uint16 tokens");
    }
    format = TokenFormat::llmc;
  }
  f.format_ = format;

  if (format == TokenFormat::raw_u16) {
    if (m.bytes % 2 != 0) {
      return bad_format(what + ": " + std::to_string(m.bytes) +
                        " bytes is an odd size for raw uint16 tokens");
    }
    f.view_ = TokenView(static_cast<const uint16_t*>(m.data), m.bytes / 2);
    return f;
  }
  STRATA_ASSIGN_OR_RETURN(f.view_, llmc_tokens(m.data, m.bytes, what));
  return f;
}

Result<TokenFileWriter> TokenFileWriter::create(const std::string& path, int token_bytes) {
  STRATA_CHECK(token_bytes == 2 || token_bytes == 4);
  STRATA_ASSIGN_OR_RETURN(OutputFile out, OutputFile::create(path, "data file"));
  TokenFileWriter w(path, std::move(out), token_bytes);
  // The header is written last, when the count is known; until then it is zeros.
  const int32_t zeros[256] = {};
  STRATA_RETURN_IF_ERROR(w.out_.write(zeros, sizeof zeros));
  return w;
}

Status TokenFileWriter::append(std::span<const int32_t> ids) {
  if (n_ + static_cast<int64_t>(ids.size()) > std::numeric_limits<int32_t>::max()) {
    return invalid_argument("data file " + path_ + ": more than " +
                            std::to_string(std::numeric_limits<int32_t>::max()) +
                            " tokens do not fit the llm.c header's int32 count");
  }
  const int64_t limit = token_bytes_ == 2 ? 65535 : std::numeric_limits<int32_t>::max();
  buf_.resize(ids.size() * static_cast<size_t>(token_bytes_));
  for (size_t i = 0; i < ids.size(); i++) {
    if (ids[i] < 0 || ids[i] > limit) {
      return invalid_argument("data file " + path_ + ": token " + std::to_string(ids[i]) +
                              " at position " + std::to_string(n_ + static_cast<int64_t>(i)) +
                              " does not fit " + std::to_string(token_bytes_ * 8) + " bits");
    }
    if (token_bytes_ == 2) {
      const uint16_t v = static_cast<uint16_t>(ids[i]);
      std::memcpy(buf_.data() + 2 * i, &v, 2);
    } else {
      const uint32_t v = static_cast<uint32_t>(ids[i]);
      std::memcpy(buf_.data() + 4 * i, &v, 4);
    }
  }
  STRATA_RETURN_IF_ERROR(out_.write(buf_.data(), static_cast<int64_t>(buf_.size())));
  n_ += static_cast<int64_t>(ids.size());
  return Status::ok_status();
}

Status TokenFileWriter::finish() {
  if (out_.fd() < 0) {
    return internal_error("data file " + path_ + ": finished twice or after a failed write");
  }
  int32_t header[256] = {};
  header[0] = kLlmcMagic;
  header[1] = token_bytes_ == 2 ? kLlmcVersion : kLlmcVersionU32;
  header[2] = static_cast<int32_t>(n_);
  if (::pwrite(out_.fd(), header, sizeof header, 0) != static_cast<ssize_t>(sizeof header)) {
    const int err = errno;
    out_.discard();
    return errno_error("cannot write the header of data file " + path_, err);
  }
  return out_.commit();
}

Status write_token_file_llmc(const std::string& path, const uint16_t* tokens, int64_t n) {
  STRATA_CHECK(n >= 0 && (tokens != nullptr || n == 0));
  if (n > std::numeric_limits<int32_t>::max()) {
    return invalid_argument("data file " + path + ": " + std::to_string(n) +
                            " tokens do not fit the llm.c header's int32 count");
  }
  STRATA_ASSIGN_OR_RETURN(TokenFileWriter w, TokenFileWriter::create(path, 2));
  std::vector<int32_t> ids;
  for (int64_t first = 0; first < n; first += 1 << 20) {
    const int64_t count = std::min<int64_t>(n - first, 1 << 20);
    ids.assign(tokens + first, tokens + first + count);
    STRATA_RETURN_IF_ERROR(w.append(ids));
  }
  return w.finish();
}

Status check_token_range(const TokenFile& f, int64_t vocab_size) {
  const TokenView v = f.view();
  if (v.token_bytes() == 2 && vocab_size > 65535) return Status::ok_status();  // every uint16 fits
  for (int64_t i = 0; i < v.size(); i++) {
    const int32_t t = v.token(i);
    if (t < 0 || t >= vocab_size) {
      // A negative token is a uint32 above INT32_MAX.
      const int64_t shown = t < 0 ? int64_t{t} + (int64_t{1} << 32) : int64_t{t};
      return invalid_argument("data file " + f.path() + ": token " + std::to_string(shown) +
                              " at position " + std::to_string(i) +
                              " is outside model.vocab_size " + std::to_string(vocab_size));
    }
  }
  return Status::ok_status();
}

}  // namespace strata
