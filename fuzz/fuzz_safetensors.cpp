// safetensors headers: the input as a whole file in memory (parse_safetensors) and on disk, read
// header only (read_safetensors_header). Both run the same checks, so they must agree on whether
// the file is valid, and on its tensors; every span they return lies inside the file.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "fuzz_scratch.h"
#include "formats/safetensors.h"

namespace {

[[noreturn]] void fail(const char* why) {
  std::fprintf(stderr, "safetensors: %s\n", why);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto whole = strata::parse_safetensors(bytes, "fuzz.safetensors");
  const std::string path = strata::fuzz::write_scratch("fuzz.safetensors", data, size);
  auto header = strata::read_safetensors_header(path);

  if (whole.ok() != header.ok()) fail("parse_safetensors and read_safetensors_header disagree");
  if (!whole.ok()) return 0;
  if (whole->tensors.size() != header->tensors.size()) fail("tensor counts differ");
  if (whole->metadata != header->metadata) fail("metadata differ");
  for (size_t i = 0; i < header->tensors.size(); ++i) {
    const strata::StEntry& e = header->tensors[i];
    const strata::StTensor& t = whole->tensors[i];
    if (e.name != t.name || e.dtype != t.dtype || e.shape != t.shape) fail("entries differ");
    if (e.offset < 8 || e.bytes < 0 || e.offset > header->file_bytes - e.bytes) {
      fail("a tensor's span is outside the file");
    }
    if (static_cast<int64_t>(t.data.size()) != e.bytes ||
        e.bytes != e.numel() * strata::st_dtype_size(e.dtype)) {
      fail("a tensor's size disagrees with its shape");
    }
    if (e.bytes > 0 &&
        std::memcmp(t.data.data(), data + e.offset, static_cast<size_t>(e.bytes)) != 0) {
      fail("a tensor's bytes are not the file's");
    }
  }
  return 0;
}
