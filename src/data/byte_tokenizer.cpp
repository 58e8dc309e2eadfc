#include "data/byte_tokenizer.h"

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

Status ByteTokenizer::encode_append(std::string_view text, std::vector<int32_t>* ids) {
  ids->reserve(ids->size() + text.size());
  for (char c : text) ids->push_back(static_cast<unsigned char>(c));
  return Status::ok_status();
}

Result<std::string> ByteTokenizer::decode(std::span<const int32_t> ids) const {
  std::string text(ids.size(), '\0');
  for (size_t i = 0; i < ids.size(); i++) {
    if (ids[i] < 0 || ids[i] > 255) {
      return invalid_argument("token id " + std::to_string(ids[i]) + " at position " +
                              std::to_string(i) + " is outside the byte tokenizer's 256");
    }
    text[i] = static_cast<char>(ids[i]);
  }
  return text;
}

std::optional<TextCut> ByteTokenizer::find_cut(std::string_view text, size_t from) const {
  if (text.size() <= from) return std::nullopt;
  return TextCut{text.size(), text.size()};
}

}  // namespace strata
