#include "data/prepare.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/json_util.h"
#include "core/log.h"
#include "data/token_file.h"

namespace strata {

namespace {

// A loss mask left beside out_path by an earlier JSONL prepare would mask the new plain tokens:
// removed when it is one of ours (its magic), kept (and refused by the loader) otherwise.
Status remove_stale_mask(const std::string& out_path) {
  const std::string path = mask_path_for(out_path);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return Status::ok_status();
  std::ifstream f(path, std::ios::binary);
  int32_t magic = 0;
  f.read(reinterpret_cast<char*>(&magic), 4);
  if (!f || magic != kMaskMagic) return Status::ok_status();
  if (!std::filesystem::remove(path, ec)) {
    return io_error("cannot remove the stale loss mask " + path + ": " + ec.message());
  }
  log_info("prepare: removed " + path + ", the loss mask of an earlier prepare of " + out_path);
  return Status::ok_status();
}

}  // namespace

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
  STRATA_RETURN_IF_ERROR(remove_stale_mask(out_path));
  stats.text_bytes = e.text_bytes;
  stats.tokens = e.tokens;
  stats.pieces = e.pieces;
  stats.largest_piece = e.largest_piece;
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

Result<PrepareStats> prepare_jsonl(Tokenizer& plain, Tokenizer& markers, ChatTemplate chat,
                                   const ExampleTokens& special, const std::string& jsonl_path,
                                   const std::string& out_path) {
  const auto start = std::chrono::steady_clock::now();
  std::ifstream in(jsonl_path, std::ios::binary);
  if (!in) return not_found("JSONL file " + jsonl_path + " cannot be opened");
  PrepareStats stats;
  stats.token_bytes = token_bytes_for_vocab(plain.vocab_size());
  STRATA_ASSIGN_OR_RETURN(TokenFileWriter out,
                          TokenFileWriter::create(out_path, stats.token_bytes));
  STRATA_ASSIGN_OR_RETURN(TokenFileWriter mask,
                          TokenFileWriter::create_mask(mask_path_for(out_path)));
  std::string line;
  std::vector<int32_t> ids, bits;  // one example's tokens and their mask
  for (int64_t number = 1; std::getline(in, line); ++number) {
    const std::string where = jsonl_path + ":" + std::to_string(number);
    stats.text_bytes += static_cast<int64_t>(line.size()) + 1;
    if (static_cast<int64_t>(line.size()) > kMaxExampleBytes) {
      return invalid_argument(where + ": a line of " + std::to_string(line.size()) +
                              " bytes is over the " + std::to_string(kMaxExampleBytes) +
                              "-byte bound of one example");
    }
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;  // a blank line
    STRATA_ASSIGN_OR_RETURN(nlohmann::json example, parse_json(line, where));
    STRATA_ASSIGN_OR_RETURN(std::vector<TextSegment> segments,
                            example_segments(example, chat, special, where));
    ids.clear();
    bits.clear();
    for (const TextSegment& seg : segments) {
      const size_t before = ids.size();
      STRATA_RETURN_IF_ERROR((seg.marker ? markers : plain).encode_append(seg.text, &ids));
      bits.resize(ids.size(), seg.counted ? kMaskTrained : 0);
      stats.counted += seg.counted ? static_cast<int64_t>(ids.size() - before) : 0;
    }
    if (!bits.empty()) bits.front() |= kMaskExampleStart;
    STRATA_RETURN_IF_ERROR(out.append(ids));
    STRATA_RETURN_IF_ERROR(mask.append(bits));
    stats.examples++;
  }
  if (in.bad()) return io_error("JSONL file " + jsonl_path + ": a read failed");
  if (stats.counted == 0) {
    return invalid_argument("JSONL file " + jsonl_path + " has no token to train on" +
                            (stats.examples == 0 ? " (no example)" : ""));
  }
  STRATA_RETURN_IF_ERROR(out.finish());  // then its mask: a loader refuses a mask of other tokens
  STRATA_RETURN_IF_ERROR(mask.finish());
  stats.tokens = out.tokens();
  stats.pieces = stats.examples;
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

}  // namespace strata
