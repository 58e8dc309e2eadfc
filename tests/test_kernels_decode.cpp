// attention_decode (one new query against a key/value cache, KV-cached sampling) on the CPU: the
// fast kernel (kernels_attention.cpp) against its reference (kernels_ref.cpp) on odd and even
// head sizes, T = 1, 7, 300 and NH/NKV = 1, 2, 4; decoding the newest position against the full
// causal forward's last row (of repeat_kv_forward + attention_forward when NKV < NH), and every
// prefix of a sequence against the forward's rows, as a sampler that grows its cache does; the
// reference against the formula in double; thread-count invariance; scratch contents that do not
// matter; T = 1, where the output is the value heads themselves.
//
// Tolerances (Note [Decode attention] in kernels_attention.cpp):
//  - ref decode vs ref forward: bit for bit. Both are the same plain loops in the same order.
//  - fast decode vs fast forward: kForwardTol = 5e-6 relative to the row's largest value. The
//    softmax is the forward's own code, and the scores and the weighted sum are one FMA chain
//    per element, as an sgemm micro-kernel computes an element; but the forward's products are
//    OpenBLAS sgemms, whose kernels (chosen per CPU, per shape, per thread split) do not all sum
//    in that order. Measured with OpenBLAS 0.3.21 (Cooperlake kernels): bit for bit in 21 of the
//    36 shapes of MatchesTheFullForwardsLastRow, at most 8.8e-7 in the others (1.5e-6 over a
//    wider sweep up to T = 1100, hs = 128). The test does not ask for the bits.
//  - fast vs ref: kTol = 1e-5 relative, as the other fast kernels (exp_fast vs std::exp, FMA
//    chains vs multiply-then-add, a reciprocal multiply vs a division; measured up to 7.6e-7).
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/kernels.h"
#include "test_util.h"

namespace strata {
namespace {

namespace ref = cpu::ref;
using test::random_floats;
using Floats = std::vector<float>;

constexpr double kTol = 1e-5;
constexpr double kForwardTol = 5e-6;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

using test::expect_close;
using test::expect_same_bits;

struct DecodeSize {
  int64_t T, NH, NKV, hs;
};

// T = 1, 7, 300 (300: several key tiles and a partial one); hs odd (5, 33: a partial column
// block) and even (8, 64); NH/NKV = 1, 2, 4.
std::vector<DecodeSize> decode_sizes() {
  std::vector<DecodeSize> sizes;
  for (int64_t T : {1, 7, 300}) {
    for (int64_t hs : {5, 8, 33, 64}) {
      for (auto [NH, NKV] : {std::pair<int64_t, int64_t>{4, 4}, {4, 2}, {8, 2}}) {
        sizes.push_back({T, NH, NKV, hs});
      }
    }
  }
  return sizes;
}

testing::Message describe(const DecodeSize& s) {
  return testing::Message() << "T=" << s.T << " NH=" << s.NH << " NKV=" << s.NKV << " hs=" << s.hs;
}

using DecodeFn = void (*)(float*, float*, const float*, const float*, int64_t, int64_t, int64_t,
                          int64_t);

// out (NH*hs) of decode on a fresh NaN-filled out and scratch.
Floats decode(DecodeFn fn, const Floats& q, const Floats& kv, const DecodeSize& s) {
  Floats out(s.NH * s.hs, kNaN), scratch(s.NH * s.T, kNaN);
  fn(out.data(), scratch.data(), q.data(), kv.data(), s.T, s.NH, s.NKV, s.hs);
  return out;
}

// A sequence of T positions as the Llama block holds it before attention: inp (T, (NH+2NKV)*hs)
// with q | k | v per position (NKV key and value heads). Its cache is the k | v tail of each row,
// and the newest query the q part of the last row.
struct Sequence {
  DecodeSize s;
  Floats inp;  // (T, (NH+2*NKV)*hs)

  int64_t row() const { return (s.NH + 2 * s.NKV) * s.hs; }
  // The cache of the first t positions: (t, 2*NKV*hs).
  Floats cache(int64_t t) const {
    Floats kv;
    for (int64_t p = 0; p < t; p++) {
      const float* r = inp.data() + p * row() + s.NH * s.hs;
      kv.insert(kv.end(), r, r + 2 * s.NKV * s.hs);
    }
    return kv;
  }
  // The query heads of position t: (NH*hs).
  Floats query(int64_t t) const {
    const float* r = inp.data() + t * row();
    return Floats(r, r + s.NH * s.hs);
  }
};

Sequence make_sequence(const DecodeSize& s, uint64_t seed) {
  // Wider than [-1, 1) so that some rows of the softmax are peaked.
  return Sequence{s, random_floats(s.T * (s.NH + 2 * s.NKV) * s.hs, seed, -2.0f, 2.0f)};
}

// The full causal forward of the sequence, out (T, NH*hs): attention_forward on q | k | v when
// NKV == NH, else on repeat_kv_forward's output, as the Llama block runs it.
Floats full_forward(const Sequence& seq, bool fast) {
  const auto [T, NH, NKV, hs] = seq.s;
  const int64_t C = NH * hs;
  Floats qkv = seq.inp;  // (T, 3C)
  if (NKV != NH) {
    qkv.assign(T * 3 * C, kNaN);
    (fast ? cpu::repeat_kv_forward : ref::repeat_kv_forward)(qkv.data(), seq.inp.data(), 1, T, NH,
                                                             NKV, hs);
  }
  Floats out(T * C, kNaN), att(NH * T * T, kNaN);
  (fast ? cpu::attention_forward : ref::attention_forward)(out.data(), att.data(), qkv.data(), 1, T,
                                                           C, NH);
  return out;
}

Floats forward_row(const Floats& out, int64_t t, int64_t C) {
  return Floats(out.begin() + t * C, out.begin() + (t + 1) * C);
}

// ---- fast vs reference ------------------------------------------------------------------------

TEST(KernelsDecode, MatchesRef) {
  uint64_t seed = 100;
  for (const DecodeSize& s : decode_sizes()) {
    SCOPED_TRACE(describe(s));
    const Floats q = random_floats(s.NH * s.hs, seed++, -2.0f, 2.0f);
    const Floats kv = random_floats(s.T * 2 * s.NKV * s.hs, seed++, -2.0f, 2.0f);
    const Floats got = decode(cpu::attention_decode, q, kv, s);
    const Floats want = decode(ref::attention_decode, q, kv, s);
    expect_close(got, want, "out", kTol);
  }
}

// ---- decode vs the full forward -----------------------------------------------------------------

// The reference decode is the reference forward's last row, operation for operation.
TEST(KernelsDecode, RefIsTheFullForwardsLastRowBitForBit) {
  uint64_t seed = 200;
  for (const DecodeSize& s : decode_sizes()) {
    SCOPED_TRACE(describe(s));
    const Sequence seq = make_sequence(s, seed++);
    const Floats want = forward_row(full_forward(seq, false), s.T - 1, s.NH * s.hs);
    expect_same_bits(decode(ref::attention_decode, seq.query(s.T - 1), seq.cache(s.T), s), want,
                     "ref decode vs ref forward");
  }
}

// The fast decode against the fast forward (sgemm products): to rounding, kForwardTol.
TEST(KernelsDecode, MatchesTheFullForwardsLastRow) {
  uint64_t seed = 300;
  for (const DecodeSize& s : decode_sizes()) {
    SCOPED_TRACE(describe(s));
    const Sequence seq = make_sequence(s, seed++);
    const Floats want = forward_row(full_forward(seq, true), s.T - 1, s.NH * s.hs);
    expect_close(decode(cpu::attention_decode, seq.query(s.T - 1), seq.cache(s.T), s), want,
                 "fast decode vs fast forward", kForwardTol);
  }
}

// What a sampler does: position t decoded against the cache of positions 0..t gives the causal
// forward's row t, for every t (a row of the causal forward sees only its past).
TEST(KernelsDecode, EveryPrefixMatchesTheForwardsRow) {
  for (const DecodeSize& s : {DecodeSize{40, 8, 2, 16}, DecodeSize{40, 4, 4, 7}}) {
    SCOPED_TRACE(describe(s));
    const Sequence seq = make_sequence(s, 400 + s.hs);
    const int64_t C = s.NH * s.hs;
    const Floats fwd_ref = full_forward(seq, false), fwd_fast = full_forward(seq, true);
    for (int64_t t = 0; t < s.T; t++) {
      SCOPED_TRACE(testing::Message() << "position " << t);
      const DecodeSize prefix{t + 1, s.NH, s.NKV, s.hs};
      const Floats q = seq.query(t), kv = seq.cache(t + 1);
      expect_same_bits(decode(ref::attention_decode, q, kv, prefix), forward_row(fwd_ref, t, C),
                       "ref");
      expect_close(decode(cpu::attention_decode, q, kv, prefix), forward_row(fwd_fast, t, C),
                   "fast", kForwardTol);
    }
  }
}

// ---- the reference against the formula ----------------------------------------------------------

// backend.h's formula in double, with Hugging Face's repeat_kv order written out for NH = 4,
// NKV = 2: query heads 0, 1 read kv head 0; heads 2, 3 read kv head 1.
TEST(KernelsDecode, RefFollowsTheFormulaInDouble) {
  const int64_t T = 9, NH = 4, NKV = 2, hs = 5, ld = 2 * NKV * hs;
  const int64_t kv_of_head[NH] = {0, 0, 1, 1};
  const Floats q = random_floats(NH * hs, 500, -2.0f, 2.0f);
  const Floats kv = random_floats(T * ld, 501, -2.0f, 2.0f);
  const Floats got = decode(ref::attention_decode, q, kv, {T, NH, NKV, hs});
  Floats want(NH * hs);
  for (int64_t h = 0; h < NH; h++) {
    const int64_t g = kv_of_head[h];
    std::vector<double> w(T);
    double max = -INFINITY, sum = 0.0;
    for (int64_t t = 0; t < T; t++) {
      double dot = 0.0;
      for (int64_t i = 0; i < hs; i++) dot += double{q[h * hs + i]} * kv[t * ld + g * hs + i];
      w[t] = dot / std::sqrt(static_cast<double>(hs));
      max = std::max(max, w[t]);
    }
    for (int64_t t = 0; t < T; t++) sum += (w[t] = std::exp(w[t] - max));
    for (int64_t i = 0; i < hs; i++) {
      double o = 0.0;
      for (int64_t t = 0; t < T; t++) o += w[t] / sum * kv[t * ld + (NKV + g) * hs + i];
      want[h * hs + i] = static_cast<float>(o);
    }
  }
  expect_close(got, want, "ref vs double", 1e-6);
}

// One cached position: its weight is exactly 1 (exp(0) / exp(0)), so every query head receives
// its value head unchanged, whatever q holds: head h gets kv head h / (NH/NKV).
TEST(KernelsDecode, OnePositionReturnsItsValueHeads) {
  const int64_t NH = 8, NKV = 2, hs = 33;
  const Floats q = random_floats(NH * hs, 600, -4.0f, 4.0f);
  const Floats kv = random_floats(2 * NKV * hs, 601);
  for (DecodeFn fn : {cpu::attention_decode, ref::attention_decode}) {
    const Floats out = decode(fn, q, kv, {1, NH, NKV, hs});
    Floats want;
    for (int64_t h = 0; h < NH; h++) {
      const float* v = kv.data() + (NKV + h / (NH / NKV)) * hs;
      want.insert(want.end(), v, v + hs);
    }
    expect_same_bits(out, want, fn == cpu::attention_decode ? "fast" : "ref");
  }
}

// ---- determinism, scratch -----------------------------------------------------------------------

// The same bits with 1, 2 and 3 OpenMP threads, at sizes above kMinParallelWork (several key
// tiles per kv head, several column blocks per head).
TEST(KernelsDecode, IsThreadInvariant) {
  for (const DecodeSize& s : {DecodeSize{300, 8, 2, 64}, DecodeSize{1000, 4, 4, 97}}) {
    SCOPED_TRACE(describe(s));
    ASSERT_GE(s.NH * s.T * s.hs, cpu::kMinParallelWork);
    const Floats q = random_floats(s.NH * s.hs, 700),
                 kv = random_floats(s.T * 2 * s.NKV * s.hs, 701);
    const int omp_default = omp_get_max_threads();
    omp_set_num_threads(1);
    const Floats one = decode(cpu::attention_decode, q, kv, s);
    for (int threads : {2, 3}) {
      omp_set_num_threads(threads);
      expect_same_bits(decode(cpu::attention_decode, q, kv, s), one, "1 thread vs more");
    }
    omp_set_num_threads(omp_default);
  }
}

// scratch is only written before it is read: NaN, infinities or stale probabilities in it change
// nothing, and out is written whole (it starts as NaN).
TEST(KernelsDecode, ScratchContentsDoNotMatter) {
  const DecodeSize s{70, 4, 2, 9};
  const Floats q = random_floats(s.NH * s.hs, 800), kv = random_floats(s.T * 2 * s.NKV * s.hs, 801);
  for (DecodeFn fn : {cpu::attention_decode, ref::attention_decode}) {
    SCOPED_TRACE(fn == cpu::attention_decode ? "fast" : "ref");
    const Floats with_nan = decode(fn, q, kv, s);  // scratch NaN
    for (float v : with_nan) ASSERT_TRUE(std::isfinite(v));
    for (float fill : {0.0f, INFINITY, -INFINITY, 1e30f}) {
      Floats out(s.NH * s.hs, kNaN), scratch(s.NH * s.T, fill);
      fn(out.data(), scratch.data(), q.data(), kv.data(), s.T, s.NH, s.NKV, s.hs);
      expect_same_bits(out, with_nan, "scratch prefilled");
    }
  }
}

}  // namespace
}  // namespace strata
