// DataLoader: contiguous (B, T) batches from a token array, llm.c style.
//
// A batch takes the B*T+1 tokens starting at position(): inputs[i] = tok[pos + i] and
// targets[i] = tok[pos + i + 1] for i < B*T, then the position advances by B*T. When fewer than
// B*T+1 tokens remain, the position first goes back to 0, so every batch is whole and the tail
// shorter than a batch is skipped on each pass. The loader does not own the tokens (a TokenFile
// of either width or an in-memory vector); they must outlive it.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "core/status.h"
#include "data/token_file.h"

namespace strata {

class DataLoader {
 public:
  // invalid_argument when B or T is not positive, or when n < B*T+1 (the message names
  // source_name and the numbers). source_name reads as "data file x.bin" or "embedded corpus".
  static Result<DataLoader> create(TokenView tokens, int64_t B, int64_t T,
                                   const std::string& source_name);
  static Result<DataLoader> create(const uint16_t* tokens, int64_t n, int64_t B, int64_t T,
                                   const std::string& source_name) {
    return create(TokenView(tokens, n), B, T, source_name);
  }

  // inputs, targets: (B, T) each. The tokens' read errors (a file that shrank: Note [Reading
  // token files] in data/token_file.h); the position advances only on success.
  Status next_batch(int32_t* inputs, int32_t* targets);

  // Where the next batch starts (before any wrap). Saved in checkpoints so a resumed run sees
  // the same batches.
  int64_t position() const { return pos_; }
  // invalid_argument unless 0 <= pos <= size(): a checkpoint may come from a different file.
  Status set_position(int64_t pos);

  int64_t size() const { return n_; }
  int64_t batch_size() const { return B_; }
  int64_t seq_len() const { return T_; }

 private:
  DataLoader(TokenView tokens, int64_t B, int64_t T, std::string source)
      : tokens_(tokens), n_(tokens.size()), B_(B), T_(T), source_(std::move(source)) {}

  TokenView tokens_;  // (n_)
  int64_t n_ = 0;
  int64_t B_ = 0;
  int64_t T_ = 0;
  int64_t pos_ = 0;
  std::string source_;
};

}  // namespace strata
