// `strata prepare`: a text file to an llm.c token file, through any tokenizer, streamed.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "data/instruct.h"
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
  int64_t examples = 0;  // JSONL: the lines encoded
  int64_t counted = 0;   // JSONL: the tokens trained as targets (the mask's ones)
};

// Encodes text_path with tok and writes the ids to out_path (token_file.h), uint16 when the
// vocabulary fits (token_bytes_for_vocab), else uint32. Errors: the text file's (not_found,
// io_error), invalid_argument when it holds no tokens, the tokenizer's and the writer's.
Result<PrepareStats> prepare_token_file(Tokenizer& tok, const std::string& text_path,
                                        const std::string& out_path,
                                        int64_t chunk_bytes = kPrepareChunkBytes);

// An example line longer than this is refused (a JSONL line is one example, held whole).
inline constexpr int64_t kMaxExampleBytes = 64 << 20;

// JSONL examples (Note [Instruction data] in data/instruct.h) to out_path and its loss mask
// mask_path_for(out_path) (Note [Loss masks] in data/token_file.h). `plain` encodes the examples'
// text, `markers` a template's markers and the special tokens (added tokens matched). Errors:
// one line naming "<file>:<line>" and the field; the file's; invalid_argument when no example
// has a token that counts; the writers' (on any error neither file is left behind).
Result<PrepareStats> prepare_jsonl(Tokenizer& plain, Tokenizer& markers, ChatTemplate chat,
                                   const ExampleTokens& special, const std::string& jsonl_path,
                                   const std::string& out_path);

}  // namespace strata
