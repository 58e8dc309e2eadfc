// Token files: a read-only memory map of tokens, in llm.c's .bin format or headerless.
//
// llm.c .bin: a header of 256 little-endian int32, header[0] = 20240520 (magic), header[1] =
// version, header[2] = number of tokens n; then n little-endian tokens:
//   version 1: uint16 tokens, file size 1024 + 2n (llm.c's own format);
//   version 2: uint32 tokens, file size 1024 + 4n (Strata's, for vocabularies over 65536 ids;
//              llm.c itself reads only version 1).
// The size must be exact, which catches truncated and concatenated files. n must fit the int32
// header (2^31 - 1 tokens a file).
// raw_u16: little-endian uint16 tokens and nothing else; the size must be even.
//
// data.format auto accepts only llm.c files: every file of bytes is a valid raw_u16 file, so a
// text file, or an llm.c file of another version or dtype, read as raw tokens would train on
// garbage without a word. Raw tokens are read only when data.format says raw_u16.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/config_enums.h"
#include "core/output_file.h"
#include "core/status.h"

namespace strata {

// TokenFormat (data.format) is in core/config_enums.h.

inline constexpr int32_t kLlmcMagic = 20240520;
inline constexpr int32_t kLlmcVersion = 1;     // uint16 tokens
inline constexpr int32_t kLlmcVersionU32 = 2;  // uint32 tokens
inline constexpr int64_t kLlmcHeaderBytes = 256 * 4;

// The width a vocabulary's tokens are stored in: 2 bytes (version 1) when every id fits a
// uint16, else 4 (version 2).
inline int token_bytes_for_vocab(int64_t vocab_size) {
  return vocab_size <= 65536 ? 2 : 4;
}

// Tokens of either width, read in place; not owned. Tokens of a uint32 file above INT32_MAX
// come out negative from token() and copy(): check_token_range refuses them first.
class TokenView {
 public:
  TokenView() = default;
  TokenView(const uint16_t* t, int64_t n) : data_(t), n_(n), bytes_(2) {}
  TokenView(const uint32_t* t, int64_t n) : data_(t), n_(n), bytes_(4) {}

  int64_t size() const { return n_; }
  int token_bytes() const { return bytes_; }  // 2 or 4
  int32_t token(int64_t i) const {
    return bytes_ == 2 ? static_cast<const uint16_t*>(data_)[i]
                       : static_cast<int32_t>(static_cast<const uint32_t*>(data_)[i]);
  }
  // out[k] = token(first + k) for k < n; the range must be inside the view.
  void copy(int64_t first, int64_t n, int32_t* out) const;

 private:
  const void* data_ = nullptr;
  int64_t n_ = 0;
  int bytes_ = 2;
};

// A read-only mmap of a token file's payload. Move-only; unmaps in the destructor.
class TokenFile {
 public:
  // auto_detect reads llm.c (either version), and refuses a file without the magic (bad_format
  // naming the bytes found and data.format raw_u16). Errors: not_found (missing file),
  // io_error, bad_format (wrong magic or version, size disagreeing with the header, odd raw
  // size, no tokens). Each message starts "data file <path>".
  static Result<TokenFile> open(const std::string& path, TokenFormat format);

  TokenFile(TokenFile&& other) noexcept;
  TokenFile& operator=(TokenFile&& other) noexcept;
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;
  ~TokenFile();

  TokenView view() const { return view_; }
  int32_t token(int64_t i) const { return view_.token(i); }
  void copy_tokens(int64_t first, int64_t n, int32_t* out) const { view_.copy(first, n, out); }
  int64_t size() const { return view_.size(); }
  int token_bytes() const { return view_.token_bytes(); }  // 2 or 4
  const std::string& path() const { return path_; }
  TokenFormat format() const { return format_; }  // the detected one, never auto_detect

 private:
  TokenFile() = default;
  void unmap();

  std::string path_;
  TokenFormat format_ = TokenFormat::raw_u16;
  void* map_ = nullptr;  // the whole file, header included
  int64_t map_bytes_ = 0;
  TokenView view_;
};

// Writes an llm.c .bin of token_bytes-wide tokens (2: version 1, 4: version 2) as they come:
// to an OutputFile (Note [Writing an output file] in core/output_file.h), then on finish the
// header and the commit, so a crash leaves either the old file or the whole new one; a writer
// destroyed unfinished removes its temporary file.
class TokenFileWriter {
 public:
  // invalid_argument when path is not a new or regular file; io_error or no_space naming it
  // when its temporary file cannot be created.
  static Result<TokenFileWriter> create(const std::string& path, int token_bytes);
  TokenFileWriter(TokenFileWriter&& other) noexcept = default;
  TokenFileWriter& operator=(TokenFileWriter&&) = delete;
  TokenFileWriter(const TokenFileWriter&) = delete;
  TokenFileWriter& operator=(const TokenFileWriter&) = delete;

  // invalid_argument for an id that does not fit the width (or is negative), or when the file
  // would exceed the header's int32 count; the write's errors.
  Status append(std::span<const int32_t> ids);
  Status finish();
  int64_t tokens() const { return n_; }

 private:
  TokenFileWriter(std::string path, OutputFile out, int token_bytes)
      : path_(std::move(path)), out_(std::move(out)), token_bytes_(token_bytes) {}

  std::string path_;
  OutputFile out_;  // uncommitted: removed with the writer
  int token_bytes_ = 2;
  int64_t n_ = 0;
  std::vector<char> buf_;
};

// A whole llm.c .bin of uint16 tokens (version 1) at once, as TokenFileWriter writes it. n must
// fit the int32 header.
Status write_token_file_llmc(const std::string& path, const uint16_t* tokens, int64_t n);

// invalid_argument for the first token >= vocab_size (or above INT32_MAX), e.g.
// "data file x.bin: token 50300 at position 12 is outside model.vocab_size 50257".
Status check_token_range(const TokenFile& f, int64_t vocab_size);

}  // namespace strata
