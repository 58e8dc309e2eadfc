#include "test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "core/rng.h"

namespace strata::test {

std::vector<float> random_floats(int64_t n, uint64_t seed, float lo, float hi) {
  std::vector<float> v(static_cast<size_t>(n));
  Rng r(seed);
  for (auto& x : v) {
    double u = static_cast<double>(r.next_u64() >> 11) * (1.0 / 9007199254740992.0);
    x = static_cast<float>(lo + (hi - lo) * u);
  }
  return v;
}

std::vector<int32_t> random_ints(int64_t n, uint64_t seed, int32_t lo, int32_t hi) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  Rng r(seed);
  for (auto& x : v) x = lo + static_cast<int32_t>(r.next_u64() % static_cast<uint64_t>(hi - lo));
  return v;
}

double max_rel_error(const float* a, const float* b, int64_t n) {
  double max_diff = 0, max_ref = 0;
  for (int64_t i = 0; i < n; i++) {
    max_diff = std::max(max_diff, std::fabs(static_cast<double>(a[i]) - b[i]));
    max_ref = std::max(max_ref, std::fabs(static_cast<double>(b[i])));
  }
  if (max_ref == 0) return max_diff;
  return max_diff / max_ref;
}

double nmse(const float* a, const float* b, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = static_cast<double>(a[i]) - b[i];
    num += d * d;
    den += static_cast<double>(b[i]) * b[i];
  }
  return den == 0 ? num : num / den;
}

std::string make_temp_dir(const std::string& name) {
  std::filesystem::path p = std::filesystem::path(STRATA_BINARY_DIR) / "test_tmp" / name;
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p.string();
}

TrainConfig tiny_offload_config(const std::string& schedule, const std::string& store_dir) {
  TrainConfig c;
  c.model.vocab_size = 64;
  c.model.context_length = 16;
  c.model.n_layer = 3;
  c.model.n_head = 2;
  c.model.n_embd = 32;
  c.batch_size = 2;
  c.seq_len = 16;
  c.grad_accum = 3;
  c.schedule = named<Schedule>(schedule);
  c.offload.params_on_host = 0;
  c.offload.optim_on_host = 0;
  c.io.dirs = {store_dir};
  return c;
}

// Asserted with GoogleTest: the error has the expected code, is one line, and names everything in
// `parts`.
void expect_error(const Status& s, ErrorCode code, std::initializer_list<std::string> parts) {
  ASSERT_FALSE(s.ok()) << "expected an error containing " << *parts.begin();
  EXPECT_EQ(s.code(), code) << s.to_string();
  EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.to_string();
  for (const auto& p : parts) EXPECT_NE(s.message().find(p), std::string::npos) << s.to_string();
}

}  // namespace strata::test
