#include "data/token_file.h"

#include <fcntl.h>
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

// The headers and tokens are little-endian on disk and copied as they are.
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

// Reads `bytes` at `offset` of fd into out, retrying short reads and EINTR. io_error naming
// `what` when the file ends first (it shrank: Note [Reading token files]) or the read fails.
Status pread_all(int fd, void* out, int64_t bytes, int64_t offset, const std::string& what) {
  char* p = static_cast<char*>(out);
  for (int64_t done = 0; done < bytes;) {
    const ssize_t got = ::pread(fd, p + done, static_cast<size_t>(bytes - done), offset + done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return errno_error("cannot read " + what, errno);
    if (got == 0) {
      struct stat st;
      const std::string now =
          ::fstat(fd, &st) == 0 ? std::to_string(st.st_size) + " bytes" : "shorter";
      return io_error(what + " shrank while in use: it is now " + now + ", and bytes " +
                      std::to_string(offset + done) + " .. " + std::to_string(offset + bytes) +
                      " are gone; do not rewrite a token file under a running job");
    }
    done += got;
  }
  return Status::ok_status();
}

// Opens `path` (called `what` in messages) read-only: its fd and size. not_found when it does
// not exist, invalid_argument when it is not a regular file, bad_format when it is empty.
Result<std::pair<int, int64_t>> open_file(const std::string& path, const std::string& what) {
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
  if (st.st_size == 0) {
    ::close(fd);
    return bad_format(what + " is empty");
  }
  return std::make_pair(fd, static_cast<int64_t>(st.st_size));
}

// The token count and width of an llm.c .bin file of `bytes` bytes whose header is `head`
// (min(bytes, 1024) bytes): the 1024-byte header (magic, version, token count), then the uint16
// (version 1) or uint32 (version 2) tokens.
Result<std::pair<int64_t, int>> llmc_tokens(const char* head, int64_t bytes,
                                            const std::string& what) {
  if (bytes < kLlmcHeaderBytes) {
    return bad_format(what + ": " + std::to_string(bytes) +
                      " bytes is too short for the 1024-byte llm.c header");
  }
  int32_t magic = read_i32(head, 0);
  int32_t version = read_i32(head, 1);
  int64_t n = read_i32(head, 2);
  if (magic != kLlmcMagic) {
    return bad_format(what + ": magic " + std::to_string(magic) + " is not " +
                      std::to_string(kLlmcMagic) + " (llm.c .bin)");
  }
  if (version != kLlmcVersion && version != kLlmcVersionU32) {
    return bad_format(what + ": llm.c version " + std::to_string(version) +
                      " is not supported (1: uint16 tokens, 2: uint32 tokens)");
  }
  const int width = version == kLlmcVersion ? 2 : 4;
  if (n < 0 || kLlmcHeaderBytes + width * n != bytes) {
    return bad_format(what + ": header says " + std::to_string(n) + " tokens (" +
                      std::to_string(kLlmcHeaderBytes + width * n) + " bytes) but file has " +
                      std::to_string(bytes) + " bytes");
  }
  if (n == 0) return bad_format(what + " holds no tokens");
  return std::make_pair(n, width);
}

}  // namespace

TokenFile::TokenFile(TokenFile&& other) noexcept {
  *this = std::move(other);
}

TokenFile& TokenFile::operator=(TokenFile&& other) noexcept {
  if (this != &other) {
    close_file();
    path_ = std::move(other.path_);
    format_ = other.format_;
    fd_ = std::exchange(other.fd_, -1);
    view_ = std::exchange(other.view_, TokenView());
    mask_ones_ = other.mask_ones_;
  }
  return *this;
}

TokenFile::~TokenFile() {
  close_file();
}

void TokenFile::close_file() {
  if (fd_ >= 0) ::close(fd_);  // read-only: a failed close loses nothing
  fd_ = -1;
  view_ = TokenView();
}

Status TokenView::copy(int64_t first, int64_t n, int32_t* out) const {
  STRATA_CHECK(first >= 0 && n >= 0 && first + n <= n_);
  if (fd_ >= 0) {
    // Widened in place from the back, so the narrow tokens are read into out itself.
    STRATA_RETURN_IF_ERROR(pread_all(fd_, out, n * bytes_, offset_ + first * bytes_, *what_));
    if (bytes_ == 2) {
      const uint16_t* t = reinterpret_cast<const uint16_t*>(out);
      for (int64_t i = n - 1; i >= 0; i--) out[i] = t[i];
    } else if (bytes_ == 1) {
      const uint8_t* t = reinterpret_cast<const uint8_t*>(out);
      for (int64_t i = n - 1; i >= 0; i--) out[i] = t[i];
    }
    return Status::ok_status();
  }
  if (bytes_ == 1) {
    const uint8_t* t = static_cast<const uint8_t*>(data_) + first;
    for (int64_t i = 0; i < n; i++) out[i] = t[i];
  } else if (bytes_ == 2) {
    const uint16_t* t = static_cast<const uint16_t*>(data_) + first;
    for (int64_t i = 0; i < n; i++) out[i] = t[i];
  } else {
    const uint32_t* t = static_cast<const uint32_t*>(data_) + first;
    for (int64_t i = 0; i < n; i++) out[i] = static_cast<int32_t>(t[i]);
  }
  return Status::ok_status();
}

Result<int32_t> TokenFile::token(int64_t i) const {
  int32_t t = 0;
  STRATA_RETURN_IF_ERROR(view_.copy(i, 1, &t));
  return t;
}

Result<TokenFile> TokenFile::open(const std::string& path, TokenFormat format) {
  auto what = std::make_shared<const std::string>(
      "data file " + excerpt(path, kMaxShownPath));  // Note [Bounded echoes]
  STRATA_ASSIGN_OR_RETURN(const auto opened, open_file(path, *what));
  const auto [fd, bytes] = opened;
  TokenFile f;  // from here on its destructor closes the file on every error path
  f.path_ = path;
  f.fd_ = fd;
  char head[kLlmcHeaderBytes];
  STRATA_RETURN_IF_ERROR(pread_all(fd, head, std::min(bytes, kLlmcHeaderBytes), 0, *what));

  if (format == TokenFormat::auto_detect) {
    if (bytes < 4 || read_i32(head, 0) != kLlmcMagic) {
      return bad_format(*what + " does not start with llm.c's magic " + std::to_string(kLlmcMagic) +
                        " (" + first_bytes_text(head, bytes) +
                        "); data.format auto reads only llm.c .bin files, set data.format=raw_u16 "
                        "for headerless uint16 tokens");
    }
    format = TokenFormat::llmc;
  }
  f.format_ = format;

  if (format == TokenFormat::raw_u16) {
    if (bytes % 2 != 0) {
      return bad_format(*what + ": " + std::to_string(bytes) +
                        " bytes is an odd size for raw uint16 tokens");
    }
    f.view_ = TokenView(fd, 0, bytes / 2, 2, what);
    return f;
  }
  STRATA_ASSIGN_OR_RETURN(const auto nw, llmc_tokens(head, bytes, *what));
  f.view_ = TokenView(fd, kLlmcHeaderBytes, nw.first, nw.second, what);
  return f;
}

Result<TokenFileWriter> TokenFileWriter::create(const std::string& path, int token_bytes) {
  STRATA_CHECK(token_bytes == 2 || token_bytes == 4);
  return create_width(path, token_bytes);
}

Result<TokenFileWriter> TokenFileWriter::create_mask(const std::string& path) {
  return create_width(path, 1);
}

Result<TokenFileWriter> TokenFileWriter::create_width(const std::string& path, int token_bytes) {
  STRATA_ASSIGN_OR_RETURN(OutputFile out,
                          OutputFile::create(path, token_bytes == 1 ? "mask file" : "data file"));
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
  const int64_t limit = token_bytes_ == 1   ? kMaskTrained | kMaskExampleStart
                        : token_bytes_ == 2 ? 65535
                                            : std::numeric_limits<int32_t>::max();
  buf_.resize(ids.size() * static_cast<size_t>(token_bytes_));
  for (size_t i = 0; i < ids.size(); i++) {
    if (ids[i] < 0 || ids[i] > limit) {
      return invalid_argument("data file " + path_ + ": token " + std::to_string(ids[i]) +
                              " at position " + std::to_string(n_ + static_cast<int64_t>(i)) +
                              " does not fit " + std::to_string(token_bytes_ * 8) + " bits");
    }
    if (token_bytes_ == 1) {
      buf_[i] = static_cast<char>(ids[i]);
    } else if (token_bytes_ == 2) {
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
  header[0] = token_bytes_ == 1 ? kMaskMagic : kLlmcMagic;
  header[1] = token_bytes_ == 1 ? kMaskVersion : token_bytes_ == 2 ? kLlmcVersion : kLlmcVersionU32;
  header[2] = static_cast<int32_t>(n_);
  if (::pwrite(out_.fd(), header, sizeof header, 0) != static_cast<ssize_t>(sizeof header)) {
    const int err = errno;
    out_.discard();
    return errno_error("cannot write the header of data file " + path_, err);
  }
  return out_.commit();
}

Result<TokenFile> TokenFile::open_mask(const std::string& path, int64_t tokens) {
  auto what = std::make_shared<const std::string>("mask file " + excerpt(path, kMaxShownPath));
  STRATA_ASSIGN_OR_RETURN(const auto opened, open_file(path, *what));
  const auto [fd, bytes] = opened;
  TokenFile f;  // closes the file on every error path
  f.path_ = path;
  f.fd_ = fd;
  char head[kLlmcHeaderBytes];
  STRATA_RETURN_IF_ERROR(pread_all(fd, head, std::min(bytes, kLlmcHeaderBytes), 0, *what));
  if (bytes < kLlmcHeaderBytes || read_i32(head, 0) != kMaskMagic ||
      read_i32(head, 1) != kMaskVersion) {
    return bad_format(*what + " is not a Strata loss mask (magic " + std::to_string(kMaskMagic) +
                      ", version " + std::to_string(kMaskVersion) + ")");
  }
  const int64_t n = read_i32(head, 2);
  if (n != tokens || bytes != kLlmcHeaderBytes + n) {
    return bad_format(*what + ": it masks " + std::to_string(n) + " tokens in " +
                      std::to_string(bytes) + " bytes, its token file holds " +
                      std::to_string(tokens) + " tokens");
  }
  f.view_ = TokenView(fd, kLlmcHeaderBytes, n, 1, what);
  std::vector<int32_t> chunk;  // (up to 1M entries)
  for (int64_t first = 0; first < n; first += static_cast<int64_t>(chunk.size())) {
    chunk.resize(static_cast<size_t>(std::min<int64_t>(n - first, 1 << 20)));
    STRATA_RETURN_IF_ERROR(f.view_.copy(first, static_cast<int64_t>(chunk.size()), chunk.data()));
    for (size_t k = 0; k < chunk.size(); ++k) {
      f.mask_ones_ += (chunk[k] & kMaskTrained) != 0;
      if ((chunk[k] & ~(kMaskTrained | kMaskExampleStart)) == 0) continue;
      return bad_format(*what + ": byte " + std::to_string(chunk[k]) + " at token " +
                        std::to_string(first + static_cast<int64_t>(k)) +
                        " has bits other than trained (1) and example start (2)");
    }
  }
  return f;
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
  std::vector<int32_t> chunk;                                                  // (up to 1M tokens)
  for (int64_t first = 0; first < v.size(); first += chunk.size()) {
    chunk.resize(static_cast<size_t>(std::min<int64_t>(v.size() - first, 1 << 20)));
    STRATA_RETURN_IF_ERROR(v.copy(first, static_cast<int64_t>(chunk.size()), chunk.data()));
    for (size_t k = 0; k < chunk.size(); k++) {
      const int32_t t = chunk[k];
      if (t >= 0 && t < vocab_size) continue;
      // A negative token is a uint32 above INT32_MAX.
      const int64_t shown = t < 0 ? int64_t{t} + (int64_t{1} << 32) : int64_t{t};
      return invalid_argument("data file " + f.path() + ": token " + std::to_string(shown) +
                              " at position " + std::to_string(first + static_cast<int64_t>(k)) +
                              " is outside model.vocab_size " + std::to_string(vocab_size));
    }
  }
  return Status::ok_status();
}

}  // namespace strata
