// AdamW on AVX2 and AVX-512, chosen at run time, threaded with OpenMP.
//
// Each kernel performs the operations of Note [AdamW operation order] (kernels_adamw.h) lane by
// lane, in the same order as detail::adamw_span_scalar: mul, add, sqrt and div are correctly
// rounded IEEE operations in both, and no FMA is used, so every lane equals the scalar result bit
// for bit. The bf16 copy reproduces f32_to_bf16 (core/dtype.h) with integer ops. Tails go through
// the scalar code itself.
//
// The kernels are compiled with target attributes rather than relying on the build's -march, so
// the AVX-512 path exists even in an x86-64-v3 build and is only entered when the CPU has it.
#include <omp.h>

#include <algorithm>

#include "backend/cpu/kernels_adamw.h"
#include "core/check.h"
#include "core/math_util.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define STRATA_ADAMW_X86 1
// GCC 12's AVX-512 intrinsics start from self-initialized "undefined" vectors, which
// -Wmaybe-uninitialized reports once they are inlined into a target("avx512f") function. Popped
// at the end of the file, so that the files a unity build compiles after this one keep it.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define STRATA_ADAMW_POP_DIAGNOSTIC 1
#endif
#endif

namespace strata {
namespace {

using detail::AdamWConstants;

// One kernel: n elements from the given pointers (param_bf16 may be null).
using SpanFn = void (*)(float* param, float* m, float* v, bf16_t* param_bf16, const float* grad,
                        int64_t n, const AdamWConstants& c);

#if STRATA_ADAMW_X86

#define STRATA_TARGET_AVX2 __attribute__((target("avx2,fma")))
#define STRATA_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma")))

// The vector loop of Note [AdamW operation order], written once for both widths: `name` steps W
// lanes of type V at a time with the intrinsics P##_op_ps (P is _mm256 or _mm512) and STORE_BF16
// for the bf16 copy, then hands the tail to the scalar code. A macro, not a template, because
// each width must be compiled under its own target attribute: a template shared by the two would
// be compiled under neither, and clang refuses to pass AVX vectors through such a function.
#define STRATA_ADAMW_SPAN(name, TARGET, V, P, W, STORE_BF16)                                  \
  TARGET void name(float* param, float* m, float* v, bf16_t* param_bf16, const float* grad,   \
                   int64_t n, const AdamWConstants& c) {                                      \
    const V beta1 = P##_set1_ps(c.beta1);                                                     \
    const V one_minus_beta1 = P##_set1_ps(c.one_minus_beta1);                                 \
    const V beta2 = P##_set1_ps(c.beta2);                                                     \
    const V one_minus_beta2 = P##_set1_ps(c.one_minus_beta2);                                 \
    const V eps = P##_set1_ps(c.eps);                                                         \
    const V grad_scale = P##_set1_ps(c.grad_scale);                                           \
    const V decay = P##_set1_ps(c.decay);                                                     \
    const V step_size = P##_set1_ps(c.step_size);                                             \
    const V bc2_sqrt = P##_set1_ps(c.bc2_sqrt);                                               \
    int64_t i = 0;                                                                            \
    for (; i + W <= n; i += W) {                                                              \
      const V g = P##_mul_ps(P##_loadu_ps(grad + i), grad_scale);                             \
      const V m_new =                                                                         \
          P##_add_ps(P##_mul_ps(beta1, P##_loadu_ps(m + i)), P##_mul_ps(one_minus_beta1, g)); \
      const V v_new = P##_add_ps(P##_mul_ps(beta2, P##_loadu_ps(v + i)),                      \
                                 P##_mul_ps(P##_mul_ps(one_minus_beta2, g), g));              \
      const V decayed = P##_mul_ps(P##_loadu_ps(param + i), decay);                           \
      const V denom = P##_add_ps(P##_div_ps(P##_sqrt_ps(v_new), bc2_sqrt), eps);              \
      const V update = P##_div_ps(P##_mul_ps(step_size, m_new), denom);                       \
      const V p_new = P##_sub_ps(decayed, update);                                            \
      P##_storeu_ps(m + i, m_new);                                                            \
      P##_storeu_ps(v + i, v_new);                                                            \
      P##_storeu_ps(param + i, p_new);                                                        \
      if (param_bf16 != nullptr) STORE_BF16(param_bf16 + i, p_new);                           \
    }                                                                                         \
    detail::adamw_span_scalar(param + i, m + i, v + i, param_bf16 ? param_bf16 + i : nullptr, \
                              grad + i, n - i, c);                                            \
  }

// f32_to_bf16 on 8 lanes: NaN -> (u >> 16) | 0x40, else (u + 0x7fff + ((u >> 16) & 1)) >> 16.
STRATA_TARGET_AVX2 inline void store_bf16_avx2(bf16_t* out, __m256 p) {
  const __m256i u = _mm256_castps_si256(p);
  const __m256i high = _mm256_srli_epi32(u, 16);
  const __m256i bias =
      _mm256_add_epi32(_mm256_set1_epi32(0x7fff), _mm256_and_si256(high, _mm256_set1_epi32(1)));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, bias), 16);
  const __m256i quiet_nan = _mm256_or_si256(high, _mm256_set1_epi32(0x40));
  // |u| as a non-negative int32, so a signed compare is an unsigned one.
  const __m256i abs_bits = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
  const __m256i is_nan = _mm256_cmpgt_epi32(abs_bits, _mm256_set1_epi32(0x7f800000));
  const __m256i result = _mm256_blendv_epi8(rounded, quiet_nan, is_nan);
  // Every lane is in [0, 0xffff], so unsigned saturation packs without changing it.
  const __m128i packed =
      _mm_packus_epi32(_mm256_castsi256_si128(result), _mm256_extracti128_si256(result, 1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), packed);
}

STRATA_ADAMW_SPAN(adamw_span_avx2, STRATA_TARGET_AVX2, __m256, _mm256, 8, store_bf16_avx2)

// f32_to_bf16 on 16 lanes; same integer recipe as store_bf16_avx2.
STRATA_TARGET_AVX512 inline void store_bf16_avx512(bf16_t* out, __m512 p) {
  const __m512i u = _mm512_castps_si512(p);
  const __m512i high = _mm512_srli_epi32(u, 16);
  const __m512i bias =
      _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(high, _mm512_set1_epi32(1)));
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(u, bias), 16);
  const __m512i quiet_nan = _mm512_or_si512(high, _mm512_set1_epi32(0x40));
  const __m512i abs_bits = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
  const __mmask16 is_nan = _mm512_cmpgt_epi32_mask(abs_bits, _mm512_set1_epi32(0x7f800000));
  const __m512i result = _mm512_mask_blend_epi32(is_nan, rounded, quiet_nan);
  // vpmovdw truncates each lane to 16 bits; every lane already fits.
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm512_cvtepi32_epi16(result));
}

STRATA_ADAMW_SPAN(adamw_span_avx512, STRATA_TARGET_AVX512, __m512, _mm512, 16, store_bf16_avx512)
#undef STRATA_ADAMW_SPAN

#endif  // STRATA_ADAMW_X86

SpanFn span_fn(SimdLevel level) {
  switch (level) {
    case SimdLevel::scalar:
      return &detail::adamw_span_scalar;
#if STRATA_ADAMW_X86
    case SimdLevel::avx2:
      return &adamw_span_avx2;
    case SimdLevel::avx512:
      return &adamw_span_avx512;
#else
    default:
      break;
#endif
  }
  STRATA_CHECK_MSG(false, "AdamW SIMD level not built for this architecture");
  return nullptr;
}

// Elements per chunk below which a call stays on the calling thread: starting a parallel region
// costs more than stepping this many elements.
constexpr int64_t kMinChunk = int64_t{1} << 16;
// Chunk boundaries fall on multiples of this many elements (whole cache lines and vectors), so
// only the last chunk can have a scalar tail.
constexpr int64_t kChunkAlign = 64;

}  // namespace

SimdLevel adamw_best_simd_level() {
#if STRATA_ADAMW_X86
  // libgcc's cpu model also checks that the OS saves the wider registers (XCR0).
  static const SimdLevel best = [] {
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx2") &&
        __builtin_cpu_supports("fma")) {
      return SimdLevel::avx512;
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return SimdLevel::avx2;
    return SimdLevel::scalar;
  }();
  return best;
#else
  return SimdLevel::scalar;
#endif
}

void adamw_step_with(SimdLevel level, float* param, float* m, float* v, bf16_t* param_bf16,
                     const float* grad, int64_t n, const AdamWHyper& h) {
  STRATA_CHECK(n >= 0);
  STRATA_CHECK_MSG(static_cast<int>(level) <= static_cast<int>(adamw_best_simd_level()),
                   "AdamW SIMD level not supported by this CPU");
  const SpanFn fn = span_fn(level);
  const AdamWConstants c = detail::adamw_constants(h);

  // One contiguous chunk per thread (rounded up to kChunkAlign), so each thread streams through
  // its own region of param, m, v and grad.
  const int64_t threads = std::max(1, omp_get_max_threads());
  int64_t chunk = (n + threads - 1) / threads;
  chunk = round_up(chunk, kChunkAlign);
  chunk = std::max(chunk, kMinChunk);
  const int64_t num_chunks = (n + chunk - 1) / chunk;

#pragma omp parallel for schedule(static) if (num_chunks > 1)
  for (int64_t k = 0; k < num_chunks; k++) {
    const int64_t begin = k * chunk;
    const int64_t count = std::min(chunk, n - begin);
    fn(param + begin, m + begin, v + begin, param_bf16 ? param_bf16 + begin : nullptr, grad + begin,
       count, c);
  }
}

void adamw_step(float* param, float* m, float* v, bf16_t* param_bf16, const float* grad, int64_t n,
                const AdamWHyper& h) {
  adamw_step_with(adamw_best_simd_level(), param, m, v, param_bf16, grad, n, h);
}

}  // namespace strata

#if STRATA_ADAMW_POP_DIAGNOSTIC
#pragma GCC diagnostic pop
#undef STRATA_ADAMW_POP_DIAGNOSTIC
#endif
