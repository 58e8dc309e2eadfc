// AdamW: every SIMD level against the scalar reference bit for bit, thread-count independence,
// the reference against a double-precision evaluation of the update, and clip_scale.
#include <gtest/gtest.h>
#include <omp.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/kernels_adamw.h"
#include "core/dtype.h"
#include "optim/grad_clip.h"
#include "test_util.h"

namespace strata {
namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

struct AdamState {
  std::vector<float> param, m, v;  // (n)
  std::vector<bf16_t> param_bf16;  // (n), unused when the run has no bf16 output
};

// Random params, zero moments (the state before step 1).
AdamState initial_state(int64_t n, uint64_t seed) {
  AdamState s;
  s.param = test::random_floats(n, seed, -2.0f, 2.0f);
  // Awkward params too: denormal, zero, huge; their decay and bf16 rounding must agree.
  const float specials[] = {1e-40f, -0.0f, 0.0f, 3e38f, -7e-39f, FLT_MIN};
  for (int64_t i = 5, k = 0; i < n; i += 97, k++) s.param[i] = specials[k % 6];
  s.m.assign(static_cast<size_t>(n), 0.0f);
  s.v.assign(static_cast<size_t>(n), 0.0f);
  s.param_bf16.assign(static_cast<size_t>(n), 0);
  return s;
}

// Random gradients with large, tiny, denormal and zero values mixed in.
std::vector<float> gradients(int64_t n, uint64_t seed) {
  std::vector<float> g = test::random_floats(n, seed, -3.0f, 3.0f);
  const float specials[] = {0.0f,    -0.0f, 1e-40f, -3e-39f, 1.4e-45f, 1e-20f,
                            -1e-25f, 1e30f, -2e19f, 3e38f,   FLT_MIN,  1e-3f};
  for (int64_t i = 3, k = 0; i < n; i += 13, k++) g[i] = specials[k % 12];
  return g;
}

// First index where the f32 bits differ, or -1.
int64_t first_bit_mismatch(const std::vector<float>& a, const std::vector<float>& b) {
  for (size_t i = 0; i < a.size(); i++) {
    if (bits(a[i]) != bits(b[i])) return static_cast<int64_t>(i);
  }
  return -1;
}

void expect_same_bits(const AdamState& got, const AdamState& want, bool with_bf16,
                      const std::string& what) {
  const std::pair<const std::vector<float>*, const std::vector<float>*> pairs[] = {
      {&got.param, &want.param}, {&got.m, &want.m}, {&got.v, &want.v}};
  const char* names[] = {"param", "m", "v"};
  for (int k = 0; k < 3; k++) {
    const int64_t i = first_bit_mismatch(*pairs[k].first, *pairs[k].second);
    EXPECT_EQ(i, -1) << what << ": " << names[k] << "[" << i
                     << "] = " << (i >= 0 ? (*pairs[k].first)[i] : 0.0f) << " vs "
                     << (i >= 0 ? (*pairs[k].second)[i] : 0.0f);
  }
  if (with_bf16) {
    EXPECT_EQ(got.param_bf16, want.param_bf16) << what << ": param_bf16";
  }
}

bf16_t* bf16_ptr(AdamState& s, bool with_bf16) {
  return with_bf16 ? s.param_bf16.data() : nullptr;
}

std::vector<SimdLevel> supported_levels() {
  std::vector<SimdLevel> levels = {SimdLevel::scalar};
  if (adamw_best_simd_level() >= SimdLevel::avx2) levels.push_back(SimdLevel::avx2);
  if (adamw_best_simd_level() >= SimdLevel::avx512) levels.push_back(SimdLevel::avx512);
  return levels;
}

// Four steps on both sides, comparing after each, with the hyperparameters changing per step.
void run_against_ref(SimdLevel level, int64_t n, bool with_bf16, float weight_decay,
                     float grad_scale) {
  const std::string what = std::string(simd_level_name(level)) + " n=" + std::to_string(n) +
                           (with_bf16 ? " bf16" : "") + " wd=" + std::to_string(weight_decay) +
                           " scale=" + std::to_string(grad_scale);
  AdamState want = initial_state(n, 11);
  AdamState got = initial_state(n, 11);
  for (int64_t step = 1; step <= 4; step++) {
    const std::vector<float> grad = gradients(n, 100 + static_cast<uint64_t>(step));
    AdamWHyper h{.lr = 3e-4f * static_cast<float>(step),
                 .weight_decay = weight_decay,
                 .step = step,
                 .grad_scale = grad_scale};
    adamw_step_ref(want.param.data(), want.m.data(), want.v.data(), bf16_ptr(want, with_bf16),
                   grad.data(), n, h);
    adamw_step_with(level, got.param.data(), got.m.data(), got.v.data(), bf16_ptr(got, with_bf16),
                    grad.data(), n, h);
    expect_same_bits(got, want, with_bf16, what + " step " + std::to_string(step));
    if (::testing::Test::HasFailure()) return;
  }
  if (with_bf16) {
    for (int64_t i = 0; i < n; i++) ASSERT_EQ(want.param_bf16[i], f32_to_bf16(want.param[i])) << i;
  }
}

TEST(AdamW, SimdMatchesReferenceBitForBit) {
  const int64_t sizes[] = {1, 7, 63, 64, 65, 1000003};
  for (SimdLevel level : supported_levels()) {
    for (int64_t n : sizes) {
      run_against_ref(level, n, /*with_bf16=*/true, /*weight_decay=*/0.1f, /*grad_scale=*/0.37f);
      run_against_ref(level, n, /*with_bf16=*/false, /*weight_decay=*/0.0f, /*grad_scale=*/1.0f);
    }
  }
}

TEST(AdamW, ThisMachineHasTheExpectedLevels) {
  // The bit-for-bit test is only as good as the levels it reaches; say which they were.
  std::string names;
  for (SimdLevel level : supported_levels()) names += std::string(simd_level_name(level)) + " ";
  std::printf("AdamW levels tested: %s(best: %s)\n", names.c_str(),
              simd_level_name(adamw_best_simd_level()));
  EXPECT_STREQ(simd_level_name(SimdLevel::avx512), "avx512");
}

// lr = 0, no decay: the params pass through unchanged, so the bf16 copy can be checked on
// chosen bit patterns: ties in both directions, NaN, infinities, denormals.
TEST(AdamW, Bf16CopyRoundsLikeDtypeH) {
  const uint32_t patterns[] = {0x3f808000u, 0x3f818000u, 0x3f807fffu, 0x3f808001u, 0x7f7fffffu,
                               0xff7fffffu, 0x7f800000u, 0xff800000u, 0x7fc00001u, 0xffbfffffu,
                               0x00008000u, 0x80018000u, 0x00000001u, 0x80000000u, 0x477fe000u};
  const int64_t n = 16 * 3 + 5;  // full vectors for every level, plus a scalar tail
  std::vector<float> param0(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; i++) param0[i] = from_bits(patterns[i % 15]);
  const std::vector<float> grad(static_cast<size_t>(n), 0.5f);
  const AdamWHyper h{.lr = 0.0f, .weight_decay = 0.0f, .step = 1};
  for (SimdLevel level : supported_levels()) {
    std::vector<float> param = param0, m(n, 0.0f), v(n, 0.0f);
    std::vector<bf16_t> out(static_cast<size_t>(n), 0);
    adamw_step_with(level, param.data(), m.data(), v.data(), out.data(), grad.data(), n, h);
    for (int64_t i = 0; i < n; i++) {
      if (!std::isnan(param0[i])) {
        ASSERT_EQ(bits(param[i]), bits(param0[i])) << i;
      }
      ASSERT_EQ(out[i], f32_to_bf16(param[i])) << simd_level_name(level) << " element " << i;
    }
  }
}

// Non-finite gradients (a step the caller should have skipped) still give the same bits.
TEST(AdamW, NonFiniteGradientsMatchReference) {
  const int64_t n = 1000;
  std::vector<float> grad = gradients(n, 5);
  for (int64_t i = 0; i < n; i += 37) grad[i] = (i % 2) ? INFINITY : -INFINITY;
  for (int64_t i = 17; i < n; i += 41) grad[i] = NAN;
  const AdamWHyper h{.lr = 1e-3f, .weight_decay = 0.1f, .step = 2};
  AdamState want = initial_state(n, 3);
  adamw_step_ref(want.param.data(), want.m.data(), want.v.data(), want.param_bf16.data(),
                 grad.data(), n, h);
  for (SimdLevel level : supported_levels()) {
    AdamState got = initial_state(n, 3);
    adamw_step_with(level, got.param.data(), got.m.data(), got.v.data(), got.param_bf16.data(),
                    grad.data(), n, h);
    expect_same_bits(got, want, true, simd_level_name(level));
  }
}

TEST(AdamW, ThreadCountDoesNotChangeBits) {
  const int64_t n = 1000003;
  const std::vector<float> grad = gradients(n, 77);
  const AdamWHyper h{.lr = 6e-4f, .weight_decay = 0.1f, .step = 3, .grad_scale = 0.8f};
  const int saved_threads = omp_get_max_threads();
  for (SimdLevel level : supported_levels()) {
    AdamState results[3];
    const int thread_counts[] = {1, 2, 3};
    for (int k = 0; k < 3; k++) {
      omp_set_num_threads(thread_counts[k]);
      results[k] = initial_state(n, 9);
      AdamState& s = results[k];
      adamw_step_with(level, s.param.data(), s.m.data(), s.v.data(), s.param_bf16.data(),
                      grad.data(), n, h);
    }
    expect_same_bits(results[1], results[0], true,
                     std::string(simd_level_name(level)) + " 2 vs 1 threads");
    expect_same_bits(results[2], results[0], true,
                     std::string(simd_level_name(level)) + " 3 vs 1 threads");
  }
  omp_set_num_threads(saved_threads);
}

// Reference vs the update rule evaluated in double, for a first step from zero moments and for a
// later step from non-zero ones. Elements with param 0 expose the update itself (not only
// param - update) to the tolerance.
TEST(AdamW, ReferenceMatchesDoublePrecisionFormula) {
  struct Case {
    int64_t step;
    float weight_decay, grad_scale;
  };
  const Case cases[] = {{1, 0.1f, 1.0f}, {1, 0.0f, 0.25f}, {7, 0.01f, 0.6f}};
  const float p0[] = {0.5f, -1.25f, 0.0f, 0.0f, 3.0f, -0.01f};
  const float g0[] = {0.2f, -0.003f, 1.5f, -2e-4f, 0.0f, 40.0f};
  const float m0[] = {0.01f, -0.02f, 0.3f, 1e-5f, 0.05f, -1.0f};
  const float v0[] = {0.004f, 1e-6f, 0.2f, 3e-8f, 0.01f, 2.0f};
  const int64_t n = 6;
  for (const Case& c : cases) {
    const AdamWHyper h{
        .lr = 1e-3f, .weight_decay = c.weight_decay, .step = c.step, .grad_scale = c.grad_scale};
    std::vector<float> p(p0, p0 + n), m(n, 0.0f), v(n, 0.0f);
    if (c.step > 1) {
      m.assign(m0, m0 + n);
      v.assign(v0, v0 + n);
    }
    const std::vector<float> m_in = m, v_in = v;
    adamw_step_ref(p.data(), m.data(), v.data(), nullptr, g0, n, h);
    const double b1 = h.beta1, b2 = h.beta2, lr = h.lr;
    for (int64_t i = 0; i < n; i++) {
      const double g = static_cast<double>(g0[i]) * c.grad_scale;
      const double mm = b1 * m_in[i] + (1 - b1) * g;
      const double vv = b2 * v_in[i] + (1 - b2) * g * g;
      const double bc1 = 1 - std::pow(b1, static_cast<double>(c.step));
      const double bc2 = 1 - std::pow(b2, static_cast<double>(c.step));
      const double pp = p0[i] * (1 - lr * c.weight_decay) -
                        lr / bc1 * mm / (std::sqrt(vv) / std::sqrt(bc2) + h.eps);
      const auto close = [](double got, double want) {
        return std::abs(got - want) <= 1e-6 * std::abs(want) + 1e-30;
      };
      EXPECT_TRUE(close(m[i], mm))
          << "step " << c.step << " m[" << i << "] " << m[i] << " vs " << mm;
      EXPECT_TRUE(close(v[i], vv))
          << "step " << c.step << " v[" << i << "] " << v[i] << " vs " << vv;
      EXPECT_TRUE(close(p[i], pp))
          << "step " << c.step << " p[" << i << "] " << p[i] << " vs " << pp;
    }
  }
}

// Hand-derived: at step 1 from zero moments the bias-corrected update is lr * g / (|g| + eps),
// i.e. lr * sign(g) for |g| >> eps.
TEST(AdamW, FirstStepMovesByLrTimesSign) {
  float p[] = {0.0f, 0.0f, 1.0f};
  float m[] = {0.0f, 0.0f, 0.0f}, v[] = {0.0f, 0.0f, 0.0f};
  const float g[] = {0.5f, -4.0f, 0.0f};
  adamw_step_ref(p, m, v, nullptr, g, 3, AdamWHyper{.lr = 0.01f, .weight_decay = 0.5f, .step = 1});
  EXPECT_NEAR(p[0], -0.01f, 1e-8f);
  EXPECT_NEAR(p[1], 0.01f, 1e-8f);
  EXPECT_FLOAT_EQ(p[2], 1.0f - 0.01f * 0.5f);  // zero gradient: decay only
}

TEST(GradClip, ClipScale) {
  EXPECT_EQ(clip_scale(100.0, 0.0f), 1.0f);   // disabled
  EXPECT_EQ(clip_scale(100.0, -1.0f), 1.0f);  // disabled
  EXPECT_EQ(clip_scale(0.0, 1.0f), 1.0f);     // zero gradient: never scaled up
  EXPECT_EQ(clip_scale(0.25, 1.0f), 1.0f);    // norm 0.5 below max
  // norm 10, max 1: 1 / (10 + 1e-6)
  EXPECT_FLOAT_EQ(clip_scale(100.0, 1.0f), static_cast<float>(1.0 / (10.0 + 1e-6)));
  // norm 4, max 2: about 0.5, a hair below it because of the 1e-6
  const float s = clip_scale(16.0, 2.0f);
  EXPECT_LT(s, 0.5f);
  EXPECT_NEAR(s, 0.5f, 1e-6f);
  // norm exactly max: the 1e-6 keeps it just under 1, as PyTorch's clip_grad_norm_.
  EXPECT_LT(clip_scale(1.0, 1.0f), 1.0f);
  EXPECT_GT(clip_scale(1.0, 1.0f), 0.999998f);
}

TEST(GradClip, FiniteNorm) {
  EXPECT_TRUE(is_finite_norm(0.0));
  EXPECT_TRUE(is_finite_norm(1e300));
  EXPECT_FALSE(is_finite_norm(INFINITY));
  EXPECT_FALSE(is_finite_norm(NAN));
}

TEST(GradClipDeathTest, NonFiniteSumWithClippingIsABug) {
  EXPECT_DEATH(clip_scale(NAN, 1.0f), "finite");
  EXPECT_EQ(clip_scale(NAN, 0.0f), 1.0f);  // clipping off: the sum is not looked at
}

}  // namespace
}  // namespace strata
