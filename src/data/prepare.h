// `strata prepare`: a text file to an llm.c token file, through any tokenizer, streamed.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "data/tokenizer.h"

namespace strata {

// Text is read in reads of this size (Note [Streaming cuts] in tokenizer.h).
inline constexpr int64_t kPrepareChunkBytes = 4 << 20;

struct PrepareStats {
  int64_t text_bytes = 0;
  int64_t tokens = 0;
  int token_bytes = 2;        // 2: uint16 (llm.c version 1), 4: uint32 (version 2)
  int64_t pieces = 0;         // the text was encoded in this many pieces
  int64_t largest_piece = 0;  // bytes
  double seconds = 0;
};

// Encodes text_path with tok and writes the ids to out_path (token_file.h), uint16 when the
// vocabulary fits (token_bytes_for_vocab), else uint32. Errors: the text file's (not_found,
// io_error), invalid_argument when it holds no tokens, the tokenizer's and the writer's.
Result<PrepareStats> prepare_token_file(Tokenizer& tok, const std::string& text_path,
                                        const std::string& out_path,
                                        int64_t chunk_bytes = kPrepareChunkBytes);

}  // namespace strata
