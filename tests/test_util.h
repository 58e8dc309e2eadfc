// Helpers shared by the tests: deterministic random fills and error measures.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/config.h"

namespace strata::test {

// Uniform in [lo, hi), from a fixed seed (splitmix64), so every run sees the same data.
std::vector<float> random_floats(int64_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f);
std::vector<int32_t> random_ints(int64_t n, uint64_t seed, int32_t lo, int32_t hi);
// max |a-b| / max |b|  (0 when both are zero)
double max_rel_error(const float* a, const float* b, int64_t n);
// mse(a,b) / mse(b,0), ggml's NMSE
double nmse(const float* a, const float* b, int64_t n);
// A 3-block GPT small enough for a test to train in milliseconds (vocab 64, T 16, C 32, B 2,
// M 3), on `schedule`, parameters and optimizer state on storage in `store_dir`.
// The value of a config enum by its config name ("vertical", "auto"); aborts the test binary on a
// name that does not exist (a typo in a test, not a runtime condition).
template <typename E>
E named(const std::string& name) {
  auto v = parse_enum<E>("test", name);
  if (!v.ok()) {
    std::fprintf(stderr, "%s\n", v.status().message().c_str());
    std::abort();
  }
  return *v;
}

TrainConfig tiny_offload_config(const std::string& schedule, const std::string& store_dir);

// The error has the expected code, is one line, and names everything in `parts`.
void expect_error(const Status& s, ErrorCode code, std::initializer_list<std::string> parts);
// A fresh empty directory under the build tree for one test.
std::string make_temp_dir(const std::string& name);

}  // namespace strata::test
