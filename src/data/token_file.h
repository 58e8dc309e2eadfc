// Token files: a read-only memory map of uint16 tokens, in llm.c's .bin format or headerless.
//
// llm.c .bin: a header of 256 little-endian int32, header[0] = 20240520 (magic), header[1] = 1
// (version: uint16 tokens), header[2] = number of tokens; then that many little-endian uint16
// tokens. The file is exactly 1024 + 2 * n bytes, which catches truncated and concatenated files.
// raw_u16: little-endian uint16 tokens and nothing else; the size must be even.
//
// data.format auto accepts only llm.c files: every file of bytes is a valid raw_u16 file, so a
// text file, or an llm.c file of another version or dtype, read as raw tokens would train on
// garbage without a word. Raw tokens are read only when data.format says raw_u16.
#pragma once

#include <cstdint>
#include <string>

#include "core/config_enums.h"
#include "core/status.h"

namespace strata {

// TokenFormat (data.format) is in core/config_enums.h.

inline constexpr int32_t kLlmcMagic = 20240520;
inline constexpr int32_t kLlmcVersion = 1;
inline constexpr int64_t kLlmcHeaderBytes = 256 * 4;

// A read-only mmap of a token file's payload. Move-only; unmaps in the destructor.
class TokenFile {
 public:
  // auto_detect reads llm.c, and refuses a file without the magic (bad_format naming the bytes
  // found and data.format raw_u16). Errors: not_found (missing file), io_error, bad_format
  // (wrong magic or version, size disagreeing with the header, odd raw size, no tokens). Each
  // message starts "data file <path>".
  static Result<TokenFile> open(const std::string& path, TokenFormat format);

  TokenFile(TokenFile&& other) noexcept;
  TokenFile& operator=(TokenFile&& other) noexcept;
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;
  ~TokenFile();

  const uint16_t* tokens() const { return tokens_; }  // (size())
  int64_t size() const { return n_tokens_; }
  const std::string& path() const { return path_; }
  TokenFormat format() const { return format_; }  // the detected one, never auto_detect

 private:
  TokenFile() = default;
  void unmap();

  std::string path_;
  TokenFormat format_ = TokenFormat::raw_u16;
  void* map_ = nullptr;  // the whole file, header included
  int64_t map_bytes_ = 0;
  const uint16_t* tokens_ = nullptr;
  int64_t n_tokens_ = 0;
};

// Writes an llm.c .bin: to path.tmp, fsync, rename over path, fsync the directory, so a crash
// leaves either the old file or the whole new one. n must fit the int32 header.
Status write_token_file_llmc(const std::string& path, const uint16_t* tokens, int64_t n);

// invalid_argument for the first token >= vocab_size, e.g.
// "data file x.bin: token 50300 at position 12 is outside model.vocab_size 50257".
Status check_token_range(const TokenFile& f, int64_t vocab_size);

}  // namespace strata
