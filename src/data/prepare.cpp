#include "data/prepare.h"

#include <chrono>

#include "data/token_file.h"

namespace strata {

Result<PrepareStats> prepare_token_file(Tokenizer& tok, const std::string& text_path,
                                        const std::string& out_path, int64_t chunk_bytes) {
  const auto start = std::chrono::steady_clock::now();
  PrepareStats stats;
  stats.token_bytes = token_bytes_for_vocab(tok.vocab_size());
  STRATA_ASSIGN_OR_RETURN(TokenFileWriter out,
                          TokenFileWriter::create(out_path, stats.token_bytes));
  EncodeStats e;
  STRATA_RETURN_IF_ERROR(encode_file(
      tok, text_path, chunk_bytes, [&](std::span<const int32_t> ids) { return out.append(ids); },
      &e));
  if (e.tokens == 0) {
    return invalid_argument("text file " + text_path + " is empty: it has no tokens");
  }
  STRATA_RETURN_IF_ERROR(out.finish());
  stats.text_bytes = e.text_bytes;
  stats.tokens = e.tokens;
  stats.pieces = e.pieces;
  stats.largest_piece = e.largest_piece;
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

}  // namespace strata
