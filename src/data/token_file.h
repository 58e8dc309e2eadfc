// Token files: tokens read from a file, in llm.c's .bin format or headerless.
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
#include <memory>
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

// Note [Loss masks]
// A token file X.bin may have X.bin.mask beside it: llm.c's header shape (256 int32) with magic
// kMaskMagic, version 1 and the token count of X.bin, then one byte per token: bit kMaskTrained
// when the token is trained as a target (its prediction counts in the loss; clear for a chat
// prompt, a system message: Note [Ignored targets] in core/targets.h), bit kMaskExampleStart on
// the first token of each example (data.pack false makes a row of each: Note [Sharded corpora]).
// X.bin stays an llm.c file that llm.c reads; the loader finds the mask by name and turns a
// target without kMaskTrained into kIgnoreTarget. A mask of another count, or a byte with other
// bits, is refused naming the file.
inline constexpr int32_t kMaskMagic = 20240601;
inline constexpr int32_t kMaskVersion = 1;
inline constexpr int32_t kMaskTrained = 1;
inline constexpr int32_t kMaskExampleStart = 2;

// The mask file of token file `path` (Note [Loss masks]).
inline std::string mask_path_for(const std::string& path) {
  return path + ".mask";
}

// The width a vocabulary's tokens are stored in: 2 bytes (version 1) when every id fits a
// uint16, else 4 (version 2).
inline int token_bytes_for_vocab(int64_t vocab_size) {
  return vocab_size <= 65536 ? 2 : 4;
}

// Tokens of either width, not owned: in memory (read in place) or in an open token file (read
// with pread, Note [Reading token files]). Tokens of a uint32 file above INT32_MAX come out
// negative from copy(): check_token_range refuses them first.
class TokenView {
 public:
  TokenView() = default;
  TokenView(const uint16_t* t, int64_t n) : data_(t), n_(n), bytes_(2) {}
  TokenView(const uint32_t* t, int64_t n) : data_(t), n_(n), bytes_(4) {}
  TokenView(const uint8_t* t, int64_t n) : data_(t), n_(n), bytes_(1) {}  // a mask
  // The n tokens of width `bytes` at byte `offset` of the open file `fd`, named `what` in errors.
  TokenView(int fd, int64_t offset, int64_t n, int bytes, std::shared_ptr<const std::string> what)
      : fd_(fd), offset_(offset), n_(n), bytes_(bytes), what_(std::move(what)) {}

  int64_t size() const { return n_; }
  int token_bytes() const { return bytes_; }  // 2 or 4; a mask's 1
  // out[k] = token(first + k) for k < n; the range must be inside the view. io_error naming the
  // file when a file's tokens cannot be read (it shrank under the run, or the disk failed).
  Status copy(int64_t first, int64_t n, int32_t* out) const;

 private:
  const void* data_ = nullptr;  // in memory, or
  int fd_ = -1;                 // in a file, from byte offset_
  int64_t offset_ = 0;
  int64_t n_ = 0;
  int bytes_ = 2;
  std::shared_ptr<const std::string> what_;  // "data file x.bin", for a file's errors
};

// Note [Reading token files]: a token file is read with pread into the caller's buffer, never
// mapped: a file truncated under a running job (a user re-running `prepare` over it, a full disk
// reclaimed) would make a mapped read SIGBUS with no message, while a short pread is an io_error
// naming the file, its size when opened and the bytes missing, and the run stops with exit 1.
// The page cache serves repeated reads as a mapping would; a batch is a few KB to a few MB.
class TokenFile {
 public:
  // auto_detect reads llm.c (either version), and refuses a file without the magic (bad_format
  // naming the bytes found and data.format raw_u16). Errors: not_found (missing file),
  // io_error, bad_format (wrong magic or version, size disagreeing with the header, odd raw
  // size, no tokens). Each message starts "data file <path>".
  static Result<TokenFile> open(const std::string& path, TokenFormat format);
  // The mask file `path` of a token file of `tokens` tokens (Note [Loss masks]): bad_format naming
  // it for another magic, version or count, a size that disagrees, or a byte with other bits (every
  // byte is read once here, in chunks, as check_token_range reads tokens).
  static Result<TokenFile> open_mask(const std::string& path, int64_t tokens);

  TokenFile(TokenFile&& other) noexcept;
  TokenFile& operator=(TokenFile&& other) noexcept;
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;
  ~TokenFile();

  TokenView view() const { return view_; }
  Result<int32_t> token(int64_t i) const;
  Status copy_tokens(int64_t first, int64_t n, int32_t* out) const {
    return view_.copy(first, n, out);
  }
  int64_t size() const { return view_.size(); }
  int token_bytes() const { return view_.token_bytes(); }  // 2 or 4
  const std::string& path() const { return path_; }
  TokenFormat format() const { return format_; }    // the detected one, never auto_detect
  int64_t mask_ones() const { return mask_ones_; }  // a mask's trained tokens (open_mask)

 private:
  TokenFile() = default;
  void close_file();

  std::string path_;
  TokenFormat format_ = TokenFormat::raw_u16;
  int fd_ = -1;  // open read-only while the file lives
  TokenView view_;
  int64_t mask_ones_ = 0;
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
  // A mask file (Note [Loss masks]): append takes bytes of kMaskTrained and kMaskExampleStart.
  static Result<TokenFileWriter> create_mask(const std::string& path);
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
  static Result<TokenFileWriter> create_width(const std::string& path, int token_bytes);

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
