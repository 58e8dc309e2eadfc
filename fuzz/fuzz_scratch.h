// A fuzz target's scratch directory, for the readers that take a path (a token file is mapped, a
// checkpoint's JSON is read from its directory): one per process, removed at exit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace strata::fuzz {

// The directory, created on first use under $TMPDIR (or /tmp).
const std::string& scratch_dir();

// Writes `size` bytes to scratch_dir()/name, replacing it; returns the path. Aborts (a finding
// the fuzzer reports) if the scratch directory cannot be written: nothing to fuzz without it.
std::string write_scratch(const std::string& name, const uint8_t* data, size_t size);

}  // namespace strata::fuzz
