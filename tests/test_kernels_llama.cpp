// The Llama kernels (kernels_llama.cpp) against their references (kernels_ref.cpp) on odd sizes,
// their accumulate semantics, their thread-count invariance (Note [Deterministic reductions]),
// and properties that pin the references to the formulas of backend.h independently: RoPE is a
// rotation (norms kept, identity at t = 0, undone by its transpose and by the inverse table),
// repeat_kv follows Hugging Face's repeat_kv order, RMSNorm and SwiGLU agree with the formulas
// evaluated in double. Gradients against finite differences are in test_kernels_grad.cpp.
//
// Tolerances: rope, repeat_kv, the RMSNorm forward and its dinp do the same f32 operations in
// the same order in both versions (Note [RMSNorm summation order]), so they must be equal bit for
// bit. RMSNorm's dweight sums rows in 32-row chunks instead of one by one, and SwiGLU's fast
// version uses exp_fast (~2 ulp) instead of std::exp: those are held to kTol = 1e-5 relative to
// the largest reference value, as the other fast kernels (observed ~1e-7).
#include <gtest/gtest.h>
#include <omp.h>

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
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kEps = 1e-5f;

void expect_close(const Floats& got, const Floats& want, const char* what, double tol = kTol) {
  test::expect_close(got, want, what, tol);
}
using test::expect_same_bits;

// Runs op with 1, 2 and 3 OpenMP threads and expects the same bits every time.
template <class Op>
void expect_thread_invariant(const char* what, Op op) {
  const int omp_default = omp_get_max_threads();
  omp_set_num_threads(1);
  const Floats one = op();
  for (int threads : {2, 3}) {
    omp_set_num_threads(threads);
    const Floats many = op();
    ASSERT_EQ(one.size(), many.size()) << what;
    EXPECT_EQ(std::memcmp(one.data(), many.data(), one.size() * sizeof(float)), 0)
        << what << ": results differ between 1 and " << threads << " threads";
  }
  omp_set_num_threads(omp_default);
}

Floats concat(std::initializer_list<const Floats*> parts) {
  Floats all;
  for (const Floats* p : parts) all.insert(all.end(), p->begin(), p->end());
  return all;
}

// The Llama table, (maxT, hs/2, 2): angle t * base^(-2i/hs) in double, cos and sin rounded to
// f32, as a caller builds it. Position 0 is exactly (1, 0).
Floats llama_rope_table(int64_t maxT, int64_t hs, double base = 10000.0) {
  const int64_t half = hs / 2;
  Floats table(static_cast<size_t>(maxT * half * 2));
  for (int64_t t = 0; t < maxT; t++) {
    for (int64_t i = 0; i < half; i++) {
      const double angle =
          static_cast<double>(t) * std::pow(base, -2.0 * static_cast<double>(i) / hs);
      table[(t * half + i) * 2] = static_cast<float>(std::cos(angle));
      table[(t * half + i) * 2 + 1] = static_cast<float>(std::sin(angle));
    }
  }
  return table;
}

// The table of the inverse rotations: sin negated.
Floats inverse_table(Floats table) {
  for (size_t k = 1; k < table.size(); k += 2) table[k] = -table[k];
  return table;
}

// ---- RMSNorm ------------------------------------------------------------------------------------

struct NormSize {
  int64_t N, C;
};

TEST(KernelsLlama, RmsnormMatchesRef) {
  // C not a multiple of 8; N = 1; 101 rows: several chunks of 32; 70 x 999 crosses
  // kMinParallelWork, so the fast version really runs in parallel.
  for (NormSize s : {NormSize{7, 33}, NormSize{1, 5}, NormSize{101, 67}, NormSize{70, 999}}) {
    SCOPED_TRACE(testing::Message() << "N=" << s.N << " C=" << s.C);
    const int64_t N = s.N, C = s.C;
    Floats inp = random_floats(N * C, 10, -2.0f, 2.0f);
    for (int64_t i = 0; i < N; i++) inp[i * C] += 3.0f;  // a nonzero mean, which RMSNorm keeps
    const Floats w = random_floats(C, 11, 0.5f, 1.5f);
    Floats out(N * C, kNaN), rstd(N, kNaN), out_r(N * C, kNaN), rstd_r(N, kNaN);
    cpu::rmsnorm_forward(out.data(), rstd.data(), inp.data(), w.data(), N, C, kEps);
    ref::rmsnorm_forward(out_r.data(), rstd_r.data(), inp.data(), w.data(), N, C, kEps);
    expect_same_bits(out, out_r, "out");
    expect_same_bits(rstd, rstd_r, "rstd");

    // Backward accumulates: non-zero prefills.
    const Floats dout = random_floats(N * C, 13);
    Floats dinp = random_floats(N * C, 14), dw = random_floats(C, 15);
    Floats dinp_r = dinp, dw_r = dw;
    cpu::rmsnorm_backward(dinp.data(), dw.data(), dout.data(), inp.data(), w.data(), rstd_r.data(),
                          N, C);
    ref::rmsnorm_backward(dinp_r.data(), dw_r.data(), dout.data(), inp.data(), w.data(),
                          rstd_r.data(), N, C);
    expect_same_bits(dinp, dinp_r, "dinp");
    expect_close(dw, dw_r, "dweight");
  }
}

// The reference against the formula evaluated in double: out = x / sqrt(mean(x^2) + eps) * w.
TEST(KernelsLlama, RmsnormRefMatchesFormulaInDouble) {
  const int64_t N = 4, C = 37;
  const Floats inp = random_floats(N * C, 16, -3.0f, 3.0f), w = random_floats(C, 17, 0.5f, 1.5f);
  Floats out(N * C), rstd(N);
  ref::rmsnorm_forward(out.data(), rstd.data(), inp.data(), w.data(), N, C, kEps);
  for (int64_t i = 0; i < N; i++) {
    double ms = 0;
    for (int64_t c = 0; c < C; c++) ms += static_cast<double>(inp[i * C + c]) * inp[i * C + c];
    const double r = 1.0 / std::sqrt(ms / C + kEps);
    EXPECT_NEAR(rstd[i], r, 1e-6 * r);
    for (int64_t c = 0; c < C; c++) {
      const double want = inp[i * C + c] * r * w[c];
      EXPECT_NEAR(out[i * C + c], want, 1e-6 * std::max(1.0, std::fabs(want)));
    }
  }
}

// eps keeps an all-zero row finite: rstd = 1/sqrt(eps), out = 0.
TEST(KernelsLlama, RmsnormZeroRowIsFinite) {
  const int64_t C = 9;
  const Floats inp(C, 0.0f), w(C, 1.0f);
  Floats out(C, kNaN), rstd(1, kNaN);
  cpu::rmsnorm_forward(out.data(), rstd.data(), inp.data(), w.data(), 1, C, kEps);
  EXPECT_FLOAT_EQ(rstd[0], 1.0f / std::sqrt(kEps));
  for (float y : out) EXPECT_EQ(y, 0.0f);
}

// ---- RoPE ---------------------------------------------------------------------------------------

struct RopeSize {
  int64_t B, T, NH, NKV, hs;
};

// Rows laid out as the Llama block's qkv: q (NH heads) | k (NKV) | v (NKV), with q and k rotated
// (n_rot_heads = NH + NKV) and v copied. Also n_rot_heads = 0 (all copied).
TEST(KernelsLlama, RopeMatchesRefBitForBit) {
  for (RopeSize s : {RopeSize{2, 5, 3, 1, 6}, RopeSize{1, 1, 2, 2, 2}, RopeSize{3, 7, 4, 2, 10},
                     RopeSize{1, 40, 8, 2, 64}}) {
    const int64_t B = s.B, T = s.T, hs = s.hs, row = (s.NH + 2 * s.NKV) * hs;
    for (int64_t n_rot : {s.NH + s.NKV, int64_t{0}}) {
      SCOPED_TRACE(testing::Message() << "B=" << B << " T=" << T << " row=" << row << " hs=" << hs
                                      << " n_rot=" << n_rot);
      const Floats table = llama_rope_table(T + 3, hs);  // longer than T, as allowed
      const Floats inp = random_floats(B * T * row, 20);
      Floats out(B * T * row, kNaN), out_r(B * T * row, kNaN);
      cpu::rope_forward(out.data(), inp.data(), table.data(), B, T, row, n_rot, hs);
      ref::rope_forward(out_r.data(), inp.data(), table.data(), B, T, row, n_rot, hs);
      expect_same_bits(out, out_r, "out");

      Floats in_place = inp;  // out may be inp
      cpu::rope_forward(in_place.data(), in_place.data(), table.data(), B, T, row, n_rot, hs);
      expect_same_bits(in_place, out_r, "out in place");

      const Floats dout = random_floats(B * T * row, 21);
      Floats dinp = random_floats(B * T * row, 22), dinp_r = dinp;
      cpu::rope_backward(dinp.data(), dout.data(), table.data(), B, T, row, n_rot, hs);
      ref::rope_backward(dinp_r.data(), dout.data(), table.data(), B, T, row, n_rot, hs);
      expect_same_bits(dinp, dinp_r, "dinp");
    }
  }
}

// The reference against the formula of backend.h written out for one head pair, and the
// unrotated rest of the row copied unchanged.
TEST(KernelsLlama, RopeRefFollowsTheFormula) {
  const int64_t T = 3, hs = 4, half = 2, row = 11, n_rot = 2;  // two heads, then 3 floats
  const Floats table = random_floats(T * half * 2, 23);  // any table: the kernel only reads it
  const Floats inp = random_floats(T * row, 24);
  Floats out(T * row, kNaN);
  ref::rope_forward(out.data(), inp.data(), table.data(), 1, T, row, n_rot, hs);
  for (int64_t t = 0; t < T; t++) {
    for (int64_t h = 0; h < n_rot; h++) {
      for (int64_t i = 0; i < half; i++) {
        const float c = table[(t * half + i) * 2], s = table[(t * half + i) * 2 + 1];
        const float x1 = inp[t * row + h * hs + i], x2 = inp[t * row + h * hs + i + half];
        EXPECT_EQ(out[t * row + h * hs + i], x1 * c - x2 * s);
        EXPECT_EQ(out[t * row + h * hs + i + half], x2 * c + x1 * s);
      }
    }
    for (int64_t j = n_rot * hs; j < row; j++) EXPECT_EQ(out[t * row + j], inp[t * row + j]);
  }
}

// A rotation keeps each rotated pair's norm; position 0 (cos 1, sin 0) is the identity, exactly.
TEST(KernelsLlama, RopeIsARotation) {
  const int64_t B = 2, T = 9, NH = 4, hs = 16, half = 8, row = NH * hs, n_rot = 3;
  const Floats table = llama_rope_table(T, hs);
  const Floats inp = random_floats(B * T * row, 25, -3.0f, 3.0f);
  for (bool fast : {true, false}) {
    SCOPED_TRACE(fast ? "fast" : "ref");
    Floats out(B * T * row, kNaN);
    (fast ? cpu::rope_forward : ref::rope_forward)(out.data(), inp.data(), table.data(), B, T, row,
                                                   n_rot, hs);
    double worst = 0;
    for (int64_t bt = 0; bt < B * T; bt++) {
      for (int64_t h = 0; h < n_rot; h++) {
        for (int64_t i = 0; i < half; i++) {
          const int64_t k1 = bt * row + h * hs + i, k2 = k1 + half;
          const double before = std::hypot(static_cast<double>(inp[k1]), inp[k2]);
          const double after = std::hypot(static_cast<double>(out[k1]), out[k2]);
          worst = std::max(worst, std::fabs(after - before) / before);
        }
      }
      if (bt % T == 0) {  // t = 0
        for (int64_t j = 0; j < row; j++) ASSERT_EQ(out[bt * row + j], inp[bt * row + j]) << j;
      }
    }
    EXPECT_LE(worst, 1e-6);  // |cos^2 + sin^2 - 1| and the products' rounding: a few ulp
  }
}

// The rotation undone: forward with the inverse table, and the backward (the transpose) of the
// forward, both return the input up to rounding; and the backward with the inverse table *is*
// the forward with the table (R^-T = R), operation for operation, so exactly.
TEST(KernelsLlama, RopeInverseAndTranspose) {
  const int64_t B = 2, T = 6, hs = 8, row = 5 * hs, n_rot = 4;
  const Floats table = llama_rope_table(T, hs), inv = inverse_table(table);
  const Floats x = random_floats(B * T * row, 26);
  for (bool fast : {true, false}) {
    SCOPED_TRACE(fast ? "fast" : "ref");
    auto forward = fast ? cpu::rope_forward : ref::rope_forward;
    auto backward = fast ? cpu::rope_backward : ref::rope_backward;
    Floats y(B * T * row, kNaN), back(B * T * row, kNaN), t_back(B * T * row, 0.0f);
    forward(y.data(), x.data(), table.data(), B, T, row, n_rot, hs);
    forward(back.data(), y.data(), inv.data(), B, T, row, n_rot, hs);
    expect_close(back, x, "forward with the inverse table after forward", 1e-6);
    backward(t_back.data(), y.data(), table.data(), B, T, row, n_rot, hs);
    expect_close(t_back, x, "backward after forward", 1e-6);

    Floats as_backward(B * T * row, 0.0f);
    backward(as_backward.data(), x.data(), inv.data(), B, T, row, n_rot, hs);
    for (size_t k = 0; k < y.size(); k++) ASSERT_EQ(as_backward[k], y[k]) << k;  // +0 == -0
  }
}

// ---- SwiGLU -------------------------------------------------------------------------------------

TEST(KernelsLlama, SwigluMatchesRef) {
  for (NormSize s : {NormSize{7, 33}, NormSize{1, 1}, NormSize{64, 1001}}) {
    SCOPED_TRACE(testing::Message() << "N=" << s.N << " F=" << s.C);
    const int64_t N = s.N, F = s.C;
    const Floats gu = random_floats(N * 2 * F, 30, -10.0f, 10.0f);
    Floats out(N * F, kNaN), out_r(N * F, kNaN);
    cpu::swiglu_forward(out.data(), gu.data(), N, F);
    ref::swiglu_forward(out_r.data(), gu.data(), N, F);
    expect_close(out, out_r, "out");

    const Floats dout = random_floats(N * F, 31);
    Floats dgu = random_floats(N * 2 * F, 32), dgu_r = dgu;
    cpu::swiglu_backward(dgu.data(), gu.data(), dout.data(), N, F);
    ref::swiglu_backward(dgu_r.data(), gu.data(), dout.data(), N, F);
    expect_close(dgu, dgu_r, "dgu");
  }
}

// The reference against the formulas in double; far tails (where exp overflows or the fast
// version's exp saturates) stay finite and close.
TEST(KernelsLlama, SwigluFormulaAndTails) {
  const Floats gate = {-1000.0f, -100.0f, -20.0f, -3.5f, -1e-3f, 0.0f,
                       1e-3f,    0.7f,    3.5f,   20.0f, 100.0f, 1000.0f};
  const int64_t F = static_cast<int64_t>(gate.size());
  Floats gu(2 * F);
  for (int64_t j = 0; j < F; j++) gu[j] = gate[j], gu[F + j] = 0.5f + 0.1f * j;  // up
  const Floats ones(F, 1.0f);
  for (bool fast : {true, false}) {
    SCOPED_TRACE(fast ? "fast" : "ref");
    Floats out(F, kNaN), dgu(2 * F, 0.0f);
    (fast ? cpu::swiglu_forward : ref::swiglu_forward)(out.data(), gu.data(), 1, F);
    (fast ? cpu::swiglu_backward : ref::swiglu_backward)(dgu.data(), gu.data(), ones.data(), 1, F);
    for (int64_t j = 0; j < F; j++) {
      SCOPED_TRACE(testing::Message() << "gate=" << gate[j]);
      const double g = gate[j], u = gu[F + j];
      const double sig = 1.0 / (1.0 + std::exp(-g));
      const double silu = g * sig, dsilu = sig * (1.0 + g * (1.0 - sig));
      ASSERT_TRUE(std::isfinite(out[j]) && std::isfinite(dgu[j]) && std::isfinite(dgu[F + j]));
      EXPECT_NEAR(out[j], silu * u, 1e-6 * std::max(1.0, std::fabs(silu * u)));
      EXPECT_NEAR(dgu[j], u * dsilu, 1e-6 * std::max(1.0, std::fabs(u * dsilu)));
      EXPECT_NEAR(dgu[F + j], silu, 1e-6 * std::max(1.0, std::fabs(silu)));
    }
  }
}

// ---- repeat_kv ----------------------------------------------------------------------------------

struct KvSize {
  int64_t B, T, NH, NKV, hs;
};

// NKV = NH (plain multi-head), NKV = 1 (multi-query), NH/NKV = 2 and 4, odd hs, T = 1.
const KvSize kKvSizes[] = {{2, 5, 4, 4, 5}, {2, 5, 4, 1, 5}, {1, 1, 4, 2, 3},
                           {3, 7, 8, 2, 7}, {2, 3, 6, 3, 1}, {1, 50, 8, 2, 64}};

TEST(KernelsLlama, RepeatKvMatchesRefBitForBit) {
  for (KvSize s : kKvSizes) {
    SCOPED_TRACE(testing::Message() << "B=" << s.B << " T=" << s.T << " NH=" << s.NH
                                    << " NKV=" << s.NKV << " hs=" << s.hs);
    const int64_t B = s.B, T = s.T, NH = s.NH, NKV = s.NKV, hs = s.hs;
    const int64_t in_n = B * T * (NH + 2 * NKV) * hs, out_n = B * T * 3 * NH * hs;
    const Floats inp = random_floats(in_n, 40);
    Floats out(out_n, kNaN), out_r(out_n, kNaN);
    cpu::repeat_kv_forward(out.data(), inp.data(), B, T, NH, NKV, hs);
    ref::repeat_kv_forward(out_r.data(), inp.data(), B, T, NH, NKV, hs);
    expect_same_bits(out, out_r, "out");

    const Floats dout = random_floats(out_n, 41);
    Floats dinp = random_floats(in_n, 42), dinp_r = dinp;
    cpu::repeat_kv_backward(dinp.data(), dout.data(), B, T, NH, NKV, hs);
    ref::repeat_kv_backward(dinp_r.data(), dout.data(), B, T, NH, NKV, hs);
    expect_same_bits(dinp, dinp_r, "dinp");
  }
}

// Hugging Face's repeat_kv (x[:, :, None].expand(...).reshape): query head h reads kv head
// h / (NH/NKV), written out for NH = 4, NKV = 2: heads 0, 1 <- kv 0; heads 2, 3 <- kv 1. The
// backward's k and v parts are the sums of the repeats.
TEST(KernelsLlama, RepeatKvFollowsHuggingFaceOrder) {
  const int64_t NH = 4, NKV = 2, hs = 3, in_row = (NH + 2 * NKV) * hs, out_row = 3 * NH * hs;
  const Floats inp = random_floats(in_row, 43);
  const int64_t kv_of_head[NH] = {0, 0, 1, 1};
  for (bool fast : {true, false}) {
    SCOPED_TRACE(fast ? "fast" : "ref");
    Floats out(out_row, kNaN);
    (fast ? cpu::repeat_kv_forward : ref::repeat_kv_forward)(out.data(), inp.data(), 1, 1, NH, NKV,
                                                             hs);
    for (int64_t h = 0; h < NH; h++) {
      for (int64_t i = 0; i < hs; i++) {
        EXPECT_EQ(out[h * hs + i], inp[h * hs + i]);
        EXPECT_EQ(out[(NH + h) * hs + i], inp[(NH + kv_of_head[h]) * hs + i]);
        EXPECT_EQ(out[(2 * NH + h) * hs + i], inp[(NH + NKV + kv_of_head[h]) * hs + i]);
      }
    }
    Floats dout(out_row);
    for (int64_t k = 0; k < out_row; k++) dout[k] = static_cast<float>(k);  // sums exact
    Floats dinp(in_row, 1.0f);
    (fast ? cpu::repeat_kv_backward : ref::repeat_kv_backward)(dinp.data(), dout.data(), 1, 1, NH,
                                                               NKV, hs);
    for (int64_t i = 0; i < hs; i++) {
      for (int64_t h = 0; h < NH; h++) EXPECT_EQ(dinp[h * hs + i], 1.0f + dout[h * hs + i]);
      for (int64_t part = 1; part <= 2; part++) {
        for (int64_t j = 0; j < NKV; j++) {
          const float want =
              1.0f + dout[(part * NH + 2 * j) * hs + i] + dout[(part * NH + 2 * j + 1) * hs + i];
          EXPECT_EQ(dinp[(NH + (part - 1) * NKV + j) * hs + i], want);
        }
      }
    }
  }
}

// ---- thread-count invariance, sizes above kMinParallelWork --------------------------------------

TEST(KernelsLlama, AreThreadInvariant) {
  const int64_t N = 301, C = 129;
  const Floats inp = random_floats(N * C, 50), w = random_floats(C, 51, 0.5f, 1.5f);
  const Floats dout = random_floats(N * C, 52);
  expect_thread_invariant("rmsnorm", [&] {
    Floats out(N * C), rstd(N), dinp = random_floats(N * C, 53), dw = random_floats(C, 54);
    cpu::rmsnorm_forward(out.data(), rstd.data(), inp.data(), w.data(), N, C, kEps);
    cpu::rmsnorm_backward(dinp.data(), dw.data(), dout.data(), inp.data(), w.data(), rstd.data(), N,
                          C);
    return concat({&out, &rstd, &dinp, &dw});
  });

  const int64_t B = 2, T = 64, NH = 8, NKV = 2, hs = 32, row = (NH + 2 * NKV) * hs;
  const Floats table = llama_rope_table(T, hs), x = random_floats(B * T * row, 55);
  const Floats dy = random_floats(B * T * 3 * NH * hs, 56);
  expect_thread_invariant("rope, repeat_kv", [&] {
    Floats y(B * T * row), dx = random_floats(B * T * row, 57);
    cpu::rope_forward(y.data(), x.data(), table.data(), B, T, row, NH + NKV, hs);
    cpu::rope_backward(dx.data(), x.data(), table.data(), B, T, row, NH + NKV, hs);
    Floats rep(B * T * 3 * NH * hs), drep = random_floats(B * T * row, 58);
    cpu::repeat_kv_forward(rep.data(), y.data(), B, T, NH, NKV, hs);
    cpu::repeat_kv_backward(drep.data(), dy.data(), B, T, NH, NKV, hs);
    return concat({&y, &dx, &rep, &drep});
  });

  const int64_t F = 1001;
  const Floats gu = random_floats(N * 2 * F, 59, -8.0f, 8.0f), dz = random_floats(N * F, 60);
  expect_thread_invariant("swiglu", [&] {
    Floats z(N * F), dgu = random_floats(N * 2 * F, 61);
    cpu::swiglu_forward(z.data(), gu.data(), N, F);
    cpu::swiglu_backward(dgu.data(), gu.data(), dz.data(), N, F);
    return concat({&z, &dgu});
  });
}

}  // namespace
}  // namespace strata
