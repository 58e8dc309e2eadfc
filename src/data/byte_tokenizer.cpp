#include "data/byte_tokenizer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/file_util.h"
#include "data/token_file.h"

namespace strata {

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
  STRATA_ASSIGN_OR_RETURN(std::string text, read_whole_file(text_path, "text file"));
  if (text.empty()) return invalid_argument("text file " + text_path + " is empty");
  std::vector<uint16_t> tokens = byte_tokenize(text);
  return write_token_file_llmc(out_bin_path, tokens.data(), static_cast<int64_t>(tokens.size()));
}

}  // namespace strata
