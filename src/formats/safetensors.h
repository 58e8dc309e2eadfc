// safetensors files: the interchange format for weights, fixtures and PyTorch parity data.
//
// Layout (https://github.com/huggingface/safetensors, format section):
//   u64 little-endian N | N bytes of JSON header | data
// The header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]}, offsets
// relative to the start of the data; the optional "__metadata__" entry maps strings to strings.
//
// Conventions of this implementation:
//   - Tensors keep their order: the reader returns them in header order, the writer writes header
//     entries and data in the order of SafeTensors::tensors.
//   - The writer pads the header with spaces so the data starts 8-byte aligned.
//   - SafeTensors holds a whole file in memory, each tensor owning its bytes: for fixtures, parity
//     data and small models. Files larger than memory (checkpoints, exports) are read through
//     read_safetensors_header, which reads only the header and says where each tensor's bytes
//     lie, and then by byte ranges. The host must be little-endian, like the format.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/output_file.h"
#include "core/status.h"

namespace strata {

enum class StDType { f32, bf16, f16, i32, u16 };

const char* st_dtype_name(StDType t);  // "F32", "BF16", "F16", "I32", "U16": the header spelling
int64_t st_dtype_size(StDType t);      // bytes per element
// A shape in errors, in Python's spelling as PyTorch and HF users read it: (2, 3), and (768,)
// for one dimension.
std::string shape_text(const std::vector<int64_t>& shape);

struct StTensor {
  std::string name;
  StDType dtype = StDType::f32;
  std::vector<int64_t> shape;  // () is a scalar: one element
  std::vector<uint8_t> data;   // numel * st_dtype_size(dtype) bytes, little-endian

  int64_t numel() const;
};

struct SafeTensors {
  std::vector<StTensor> tensors;  // header order when read; write order when written
  std::map<std::string, std::string> metadata;
  std::string path;  // the file this was read from, for error messages; empty if built in memory

  const StTensor* find(const std::string& name) const;

  // Append a tensor, copying numel(shape) elements from data. A duplicate name, negative
  // dimension or a name of "__metadata__" is a bug in the caller (STRATA_CHECK).
  void add(const std::string& name, StDType dtype, std::vector<int64_t> shape, const void* data);
  void add_f32(const std::string& name, std::vector<int64_t> shape, const float* data);
  void add_i32(const std::string& name, std::vector<int64_t> shape, const int32_t* data);

  // The elements of a tensor; not_found if absent, bad_format if it has another dtype.
  Result<std::vector<float>> get_f32(const std::string& name) const;
  Result<std::vector<int32_t>> get_i32(const std::string& name) const;
  // As above, and also bad_format unless its shape is `shape`.
  Result<std::vector<float>> get_f32(const std::string& name,
                                     const std::vector<int64_t>& shape) const;
};

// Where one tensor's bytes lie in a file, without the bytes.
struct StEntry {
  std::string name;
  StDType dtype = StDType::f32;
  std::vector<int64_t> shape;
  int64_t offset = 0;  // of its first byte, from the start of the file
  int64_t bytes = 0;   // numel * st_dtype_size(dtype)

  int64_t numel() const;
};

// A file's header, read without its data.
struct SafeTensorsHeader {
  std::vector<StEntry> tensors;  // header order
  std::map<std::string, std::string> metadata;
  std::string path;        // for error messages
  int64_t file_bytes = 0;  // the size of the file when the header was read

  const StEntry* find(const std::string& name) const;
  // The entry of an F32 tensor of `shape`: not_found if absent, bad_format for another dtype or
  // shape, with SafeTensors::get_f32's messages.
  Result<const StEntry*> f32_entry(const std::string& name,
                                   const std::vector<int64_t>& shape) const;
};

// Reads the 8-byte header length and the JSON header of `path`, not the data, and checks
// everything read_safetensors checks against the file's size: the header length, the JSON
// structure, known dtypes, offsets inside the data, no overlaps, each span equal to
// numel * dtype size. Errors are one line naming the file (and the tensor).
Result<SafeTensorsHeader> read_safetensors_header(const std::string& path);

// Reads and validates a whole file: header length against the file size, JSON structure, known
// dtypes, offsets inside the data, no two tensors overlapping, each span equal to
// numel * dtype size. Errors are one line naming the file.
Result<SafeTensors> read_safetensors(const std::string& path);

// The same checks over a file's bytes already in memory (e.g. read once to check a CRC); `path`
// names it in errors.
Result<SafeTensors> parse_safetensors(std::string_view bytes, const std::string& path);

// The bytes a file starts with: the u64 header length, then the header JSON ({name: {dtype, shape,
// data_offsets}}, "__metadata__") padded with spaces so the data starts 8-byte aligned. For
// writers that stream tensors after it.
std::string safetensors_header_bytes(const nlohmann::ordered_json& header);

// A safetensors file written in pieces, for files larger than memory. The header comes from
// `tensors` (names, dtypes and shapes; laid out back to back in that order, their `offset` and
// `bytes` are ignored); then append() takes every tensor's bytes in that order, in as many calls
// as the caller likes. It writes an OutputFile (Note [Writing an output file] in
// core/output_file.h); finish() checks that every byte came and commits it, so a crash leaves the
// old file or the new one. A writer dropped before finish() removes its temporary file.
class SafeTensorsWriter {
 public:
  // invalid_argument for a duplicate or reserved name, a bad shape or a path that is not a new
  // or regular file (before anything is written); no_space when the disk is full, io_error for
  // other write failures.
  static Result<SafeTensorsWriter> create(const std::string& path,
                                          const std::vector<StEntry>& tensors,
                                          const std::map<std::string, std::string>& metadata);
  SafeTensorsWriter(SafeTensorsWriter&& other) noexcept = default;
  SafeTensorsWriter& operator=(SafeTensorsWriter&&) = delete;
  SafeTensorsWriter(const SafeTensorsWriter&) = delete;
  SafeTensorsWriter& operator=(const SafeTensorsWriter&) = delete;

  // The next `bytes` of the data section; invalid_argument past its end.
  Status append(const void* data, int64_t bytes);
  Status finish();

 private:
  SafeTensorsWriter(std::string path, OutputFile out, int64_t data_bytes)
      : path_(std::move(path)), out_(std::move(out)), data_bytes_(data_bytes) {}

  std::string path_;
  OutputFile out_;  // uncommitted: removed with the writer
  int64_t data_bytes_ = 0, written_ = 0;
};

// Writes by SafeTensorsWriter, so a crash leaves either the old file or the new one. Fails with
// invalid_argument on duplicate names or a data size that does not match the shape; no_space when
// the disk is full.
Status write_safetensors(const std::string& path, const SafeTensors& st);

}  // namespace strata
