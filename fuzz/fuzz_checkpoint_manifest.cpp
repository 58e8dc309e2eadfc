// A checkpoint's manifest.json: the input as the manifest of a directory that also holds one
// small file ("a", the byte 'a'), verified by verify_checkpoint (read_manifest's field checks,
// then each listed file's size and CRC32C, in whole and in 3-byte chunks). Names in a manifest
// are confined to the directory, so nothing outside the scratch directory is ever read.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "fuzz_scratch.h"
#include "formats/checkpoint.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const uint8_t a = 'a';  // CRC32C 0xc1d04330; the seed corpus lists it
  strata::fuzz::write_scratch("a", &a, 1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  strata::fuzz::write_scratch("manifest.json", data, size);
  const std::string& dir = strata::fuzz::scratch_dir();
  const strata::Status whole = strata::verify_checkpoint(dir);
  strata::CheckpointReadOptions small;
  small.chunk_bytes = 3;
  const strata::Status chunked = strata::verify_checkpoint(dir, small);
  if (whole.ok() != chunked.ok()) {
    std::fprintf(stderr, "verify_checkpoint depends on the chunk size: %s | %s\n",
                 whole.message().c_str(), chunked.message().c_str());
    std::abort();
  }
  (void)strata::verify_checkpoint_files(dir, {"a"});
  return 0;
}
