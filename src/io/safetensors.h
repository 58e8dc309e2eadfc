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
//   - Files are small enough to hold in memory (GPT-2 124M in f32 is 0.5 GB); each tensor owns
//     its bytes. The host must be little-endian, like the format.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace strata {

enum class StDType { f32, bf16, i32, u16 };

const char* st_dtype_name(StDType t);  // "F32", "BF16", "I32", "U16": the header spelling
int64_t st_dtype_size(StDType t);      // bytes per element

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

// Writes to path + ".tmp", fsyncs, then renames over path (and fsyncs the directory), so a crash
// leaves either the old file or the new one. Fails with invalid_argument on duplicate names or a
// data size that does not match the shape; no_space when the disk is full.
Status write_safetensors(const std::string& path, const SafeTensors& st);

}  // namespace strata
