// The byte tokenizer: token = byte value (vocab 256). Enough for the embedded corpus and for
// `strata prepare` on any text file, with no vocabulary file to ship.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace strata {

std::vector<uint16_t> byte_tokenize(std::string_view text);
// Tokens above 255 are not bytes; they come out as '?' rather than being truncated silently.
std::string byte_detokenize(const uint16_t* tokens, int64_t n);

// Reads a text file and writes its bytes as an llm.c .bin (see token_file.h). Errors: not_found
// or io_error for the text file, invalid_argument when it is empty, and the writer's errors.
Status prepare_text_file(const std::string& text_path, const std::string& out_bin_path);

}  // namespace strata
