#include "data/byte_tokenizer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "data/token_file.h"

namespace strata {

namespace {

Result<std::string> read_text(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT) return not_found("text file " + path + " does not exist");
    return io_error("cannot open text file " + path + ": " + std::strerror(err));
  }
  std::string text;
  char buf[1 << 16];
  while (true) {
    ssize_t got = ::read(fd, buf, sizeof buf);
    if (got < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      return io_error("cannot read text file " + path + ": " + std::strerror(err));
    }
    if (got == 0) break;
    text.append(buf, static_cast<size_t>(got));
  }
  ::close(fd);  // read-only: nothing to lose if close reports an error
  return text;
}

}  // namespace

std::vector<uint16_t> byte_tokenize(std::string_view text) {
  std::vector<uint16_t> tokens(text.size());
  for (size_t i = 0; i < text.size(); i++) tokens[i] = static_cast<unsigned char>(text[i]);
  return tokens;
}

std::string byte_detokenize(const uint16_t* tokens, int64_t n) {
  std::string text(static_cast<size_t>(n), '?');
  for (int64_t i = 0; i < n; i++) {
    if (tokens[i] < 256) text[static_cast<size_t>(i)] = static_cast<char>(tokens[i]);
  }
  return text;
}

Status prepare_text_file(const std::string& text_path, const std::string& out_bin_path) {
  STRATA_ASSIGN_OR_RETURN(std::string text, read_text(text_path));
  if (text.empty()) return invalid_argument("text file " + text_path + " is empty");
  std::vector<uint16_t> tokens = byte_tokenize(text);
  return write_token_file_llmc(out_bin_path, tokens.data(), static_cast<int64_t>(tokens.size()));
}

}  // namespace strata
