// Fast CPU kernels against their references (kernels_ref.cpp), on random data with odd sizes,
// and the thread-count invariance promised by Note [Deterministic reductions].
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/kernels.h"
#include "core/targets.h"
#include "test_util.h"

namespace strata {
namespace {

namespace ref = cpu::ref;
using test::random_floats;
using Floats = std::vector<float>;

// The fast kernels' contract with their references: max |fast - ref| / max |ref| <= 1e-5.
// Every fast kernel sums in a different order (vector lanes, sgemm blocking), so exact
// equality is not expected; at these sizes the observed error is about 1e-7.
constexpr double kTol = 1e-5;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

void expect_close(const Floats& fast, const Floats& want, const char* what, double tol = kTol) {
  ASSERT_EQ(fast.size(), want.size()) << what;
  EXPECT_LE(test::max_rel_error(fast.data(), want.data(), static_cast<int64_t>(fast.size())), tol)
      << what;
}

// ---- thread-count invariance ------------------------------------------------------------------

// Runs `op` (which returns its outputs as a vector) with 1, 2 and 3 OpenMP threads and expects
// the same bits every time.
//
// Our own loops must not depend on OMP_NUM_THREADS (Note [Deterministic reductions]).
template <class Op>
void expect_thread_invariant(const char* what, Op op) {
  const int omp_default = omp_get_max_threads();
  auto run = [&](int threads) {
    omp_set_num_threads(threads);
    return op();
  };
  const auto one = run(1);
  for (int threads : {2, 3}) {
    const auto many = run(threads);
    ASSERT_EQ(one.size(), many.size()) << what;
    EXPECT_EQ(std::memcmp(one.data(), many.data(), one.size() * sizeof(one[0])), 0)
        << what << ": results differ between 1 and " << threads << " threads";
  }
  omp_set_num_threads(omp_default);
}

// For kernels built on sgemm: OpenBLAS (its OpenMP build, Note [OpenBLAS on OpenMP]) splits the
// output between as many threads as OpenMP gives it, and the split changes which micro-kernels
// compute which elements (measured with 0.3.21), so bits may differ between thread counts. What
// must hold is repeatability: at any one thread count, the same inputs give the same bits.
template <class Op>
void expect_repeatable(const char* what, Op op) {
  const int omp_default = omp_get_max_threads();
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    const auto first = op();
    const auto second = op();
    ASSERT_EQ(first.size(), second.size()) << what;
    EXPECT_EQ(std::memcmp(first.data(), second.data(), first.size() * sizeof(first[0])), 0)
        << what << ": two runs with " << threads << " threads differ";
  }
  omp_set_num_threads(omp_default);
}

// Concatenates outputs for a single bitwise comparison.
Floats concat(std::initializer_list<const Floats*> parts) {
  Floats all;
  for (const Floats* p : parts) all.insert(all.end(), p->begin(), p->end());
  return all;
}

// ---- exp_fast -----------------------------------------------------------------------------------

TEST(KernelsCpu, ExpFastIsAccurate) {
  double worst = 0;
  for (float x = -87.0f; x <= 88.0f; x += 0.001953125f) {  // every 1/512
    const double want = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::fabs(cpu::exp_fast(x) - want) / want);
  }
  EXPECT_LE(worst, 3e-7);  // a few ulp (ulp = 6e-8)
  EXPECT_EQ(cpu::exp_fast(0.0f), 1.0f);
  EXPECT_EQ(cpu::exp_fast(-100.0f), 0.0f);
  EXPECT_EQ(cpu::exp_fast(-INFINITY), 0.0f);
  EXPECT_TRUE(std::isfinite(cpu::exp_fast(100.0f)));
  EXPECT_GT(cpu::exp_fast(100.0f), 1e38f);
}

// ---- matmul -------------------------------------------------------------------------------------

TEST(KernelsCpu, MatmulMatchesRefAllTransposes) {
  const int64_t M = 7, N = 33, K = 17;
  const Floats a = random_floats(M * K, 1), b = random_floats(K * N, 2);
  const Floats bias = random_floats(N, 3), init = random_floats(M * N, 4);
  for (bool trans_a : {false, true}) {
    for (bool trans_b : {false, true}) {
      for (bool with_bias : {false, true}) {
        for (bool accumulate : {false, true}) {
          SCOPED_TRACE(testing::Message() << "trans_a=" << trans_a << " trans_b=" << trans_b
                                          << " bias=" << with_bias << " acc=" << accumulate);
          const float* bp = with_bias ? bias.data() : nullptr;
          // Without accumulate the old contents must be ignored, NaN included.
          Floats fast = accumulate ? init : Floats(M * N, kNaN);
          Floats want = init;
          cpu::matmul(fast.data(), a.data(), b.data(), bp, M, N, K, trans_a, trans_b, accumulate);
          ref::matmul(want.data(), a.data(), b.data(), bp, M, N, K, trans_a, trans_b, accumulate);
          expect_close(fast, want, "out");
        }
      }
    }
  }
}

// The reference's trans flags, checked without BLAS: a transposed operand stored transposed
// gives the same product as the plain one.
TEST(KernelsCpu, MatmulRefTransposeFlagsMeanTranspose) {
  const int64_t M = 5, N = 6, K = 3;
  const Floats a = random_floats(M * K, 5), b = random_floats(K * N, 6);
  Floats at(K * M), bt(N * K);
  for (int64_t i = 0; i < M; i++)
    for (int64_t k = 0; k < K; k++) at[k * M + i] = a[i * K + k];
  for (int64_t k = 0; k < K; k++)
    for (int64_t j = 0; j < N; j++) bt[j * K + k] = b[k * N + j];
  Floats want(M * N);
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++)
      for (int64_t k = 0; k < K; k++) want[i * N + j] += a[i * K + k] * b[k * N + j];
  for (bool trans_a : {false, true}) {
    for (bool trans_b : {false, true}) {
      Floats got(M * N);
      ref::matmul(got.data(), trans_a ? at.data() : a.data(), trans_b ? bt.data() : b.data(),
                  nullptr, M, N, K, trans_a, trans_b, false);
      expect_close(got, want, "ref matmul", 1e-6);
    }
  }
}

TEST(KernelsCpu, BiasBackwardMatchesRef) {
  const int64_t M = 150, N = 133;  // three row chunks of 64, the last one partial
  const Floats dout = random_floats(M * N, 7);
  Floats fast = random_floats(N, 8), want = fast;
  cpu::bias_backward(fast.data(), dout.data(), M, N);
  ref::bias_backward(want.data(), dout.data(), M, N);
  expect_close(fast, want, "dbias");
}

// ---- layernorm ----------------------------------------------------------------------------------

struct LnSize {
  int64_t N, C;
};

TEST(KernelsCpu, LayernormMatchesRef) {
  for (LnSize s : {LnSize{7, 33}, LnSize{101, 67}}) {  // 101 rows: several chunks of 32
    SCOPED_TRACE(testing::Message() << "N=" << s.N << " C=" << s.C);
    const int64_t N = s.N, C = s.C;
    Floats inp = random_floats(N * C, 10, -2.0f, 2.0f);
    for (int64_t i = 0; i < N; i++) inp[i * C] += 3.0f;  // a nonzero mean per row
    const Floats w = random_floats(C, 11, 0.5f, 1.5f), b = random_floats(C, 12);
    Floats out(N * C, kNaN), mean(N, kNaN), rstd(N, kNaN);
    Floats out_r(N * C), mean_r(N), rstd_r(N);
    cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N,
                           C);
    ref::layernorm_forward(out_r.data(), mean_r.data(), rstd_r.data(), inp.data(), w.data(),
                           b.data(), N, C);
    expect_close(out, out_r, "out");
    expect_close(mean, mean_r, "mean");
    expect_close(rstd, rstd_r, "rstd");

    const Floats dout = random_floats(N * C, 13);
    Floats dinp = random_floats(N * C, 14), dw = random_floats(C, 15), db = random_floats(C, 16);
    Floats dinp_r = dinp, dw_r = dw, db_r = db;
    cpu::layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(),
                            mean_r.data(), rstd_r.data(), N, C);
    ref::layernorm_backward(dinp_r.data(), dw_r.data(), db_r.data(), dout.data(), inp.data(),
                            w.data(), mean_r.data(), rstd_r.data(), N, C);
    expect_close(dinp, dinp_r, "dinp");
    expect_close(dw, dw_r, "dweight");
    expect_close(db, db_r, "dbias");
  }
}

// ---- GELU ---------------------------------------------------------------------------------------

TEST(KernelsCpu, GeluMatchesRef) {
  const int64_t n = 1001;
  const Floats x = random_floats(n, 20, -6.0f, 6.0f);
  Floats out(n, kNaN), out_r(n);
  cpu::gelu_forward(out.data(), x.data(), n);
  ref::gelu_forward(out_r.data(), x.data(), n);
  expect_close(out, out_r, "gelu");

  const Floats dout = random_floats(n, 21);
  Floats dinp = random_floats(n, 22), dinp_r = dinp;
  cpu::gelu_backward(dinp.data(), x.data(), dout.data(), n);
  ref::gelu_backward(dinp_r.data(), x.data(), dout.data(), n);
  expect_close(dinp, dinp_r, "dinp");
}

// Far tails, where the fast version's exp saturates: still finite and close to the reference.
TEST(KernelsCpu, GeluTails) {
  const Floats x = {-1000.0f, -100.0f, -20.0f, -10.0f, -1e-3f, 0.0f,
                    1e-3f,    10.0f,   20.0f,  100.0f, 1000.0f};
  const int64_t n = static_cast<int64_t>(x.size());
  const Floats ones(n, 1.0f);
  Floats out(n), out_r(n), dinp(n, 0.0f), dinp_r(n, 0.0f);
  cpu::gelu_forward(out.data(), x.data(), n);
  ref::gelu_forward(out_r.data(), x.data(), n);
  cpu::gelu_backward(dinp.data(), x.data(), ones.data(), n);
  ref::gelu_backward(dinp_r.data(), x.data(), ones.data(), n);
  for (int64_t i = 0; i < n; i++) {
    SCOPED_TRACE(testing::Message() << "x=" << x[i]);
    EXPECT_NEAR(out[i], out_r[i], 1e-5 * std::max(1.0f, std::fabs(out_r[i])));
    EXPECT_NEAR(dinp[i], dinp_r[i], 1e-5);
  }
}

// ---- attention ----------------------------------------------------------------------------------

struct AttnSize {
  int64_t B, T, C, NH;
};

TEST(KernelsCpu, AttentionMatchesRef) {
  // T = 300 spans three 128-row blocks (Note [Block-triangular attention]).
  for (AttnSize s : {AttnSize{2, 17, 12, 3}, AttnSize{1, 300, 24, 3}}) {
    SCOPED_TRACE(testing::Message() << "B=" << s.B << " T=" << s.T << " C=" << s.C);
    const int64_t B = s.B, T = s.T, C = s.C, NH = s.NH;
    const Floats qkv = random_floats(B * T * 3 * C, 30, -2.0f, 2.0f);
    Floats out(B * T * C, kNaN), att(B * NH * T * T, kNaN);
    Floats out_r(B * T * C), att_r(B * NH * T * T);
    cpu::attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
    ref::attention_forward(out_r.data(), att_r.data(), qkv.data(), B, T, C, NH);
    expect_close(out, out_r, "out");
    expect_close(att, att_r, "att");
    int64_t nonzero_above = 0;
    for (int64_t bh = 0; bh < B * NH; bh++)
      for (int64_t t = 0; t < T; t++)
        for (int64_t t2 = t + 1; t2 < T; t2++) nonzero_above += att[(bh * T + t) * T + t2] != 0.0f;
    EXPECT_EQ(nonzero_above, 0) << "att must be exactly zero above the diagonal";

    const Floats dout = random_floats(B * T * C, 31);
    Floats dqkv = random_floats(B * T * 3 * C, 32), dqkv_r = dqkv;
    Floats scratch(B * NH * T * T, kNaN), scratch_r(B * NH * T * T, kNaN);
    cpu::attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att_r.data(), B,
                            T, C, NH);
    ref::attention_backward(dqkv_r.data(), scratch_r.data(), dout.data(), qkv.data(), att_r.data(),
                            B, T, C, NH);
    expect_close(dqkv, dqkv_r, "dqkv");
  }
}

// ---- softmax cross-entropy ----------------------------------------------------------------------

TEST(KernelsCpu, SoftmaxCrossEntropyMatchesRef) {
  const int64_t N = 7, V = 1001;
  Floats logits = random_floats(N * V, 40, -4.0f, 4.0f);
  for (int64_t v = 0; v < V; v++) logits[V + v] += 80.0f;  // exp would overflow without max-shift
  const std::vector<int32_t> targets = test::random_ints(N, 41, 0, static_cast<int32_t>(V));
  Floats losses(N, kNaN), probs(N * V, kNaN), losses_r(N), probs_r(N * V);
  cpu::softmax_cross_entropy_forward(losses.data(), probs.data(), logits.data(), targets.data(), N,
                                     V);
  ref::softmax_cross_entropy_forward(losses_r.data(), probs_r.data(), logits.data(), targets.data(),
                                     N, V);
  expect_close(losses, losses_r, "losses");
  expect_close(probs, probs_r, "probs");

  const float dloss = 1.0f / N;
  Floats dlogits = random_floats(N * V, 42), dlogits_r = dlogits;
  cpu::softmax_cross_entropy_backward(dlogits.data(), probs_r.data(), targets.data(), dloss, N, V);
  ref::softmax_cross_entropy_backward(dlogits_r.data(), probs_r.data(), targets.data(), dloss, N,
                                      V);
  expect_close(dlogits, dlogits_r, "dlogits");
}

// Note [Ignored targets]: a kIgnoreTarget row has loss 0 and leaves its dlogits as they were, in
// both kernels; the other rows are as without it.
TEST(KernelsCpu, SoftmaxCrossEntropyIgnoresMarkedTargets) {
  const int64_t N = 6, V = 257;
  const Floats logits = random_floats(N * V, 43, -4.0f, 4.0f);
  std::vector<int32_t> targets = test::random_ints(N, 44, 0, static_cast<int32_t>(V));
  const std::vector<int32_t> all = targets;
  targets[1] = targets[4] = kIgnoreTarget;
  const Floats before = random_floats(N * V, 45);
  for (bool fast : {true, false}) {
    auto fwd = fast ? cpu::softmax_cross_entropy_forward : ref::softmax_cross_entropy_forward;
    auto bwd = fast ? cpu::softmax_cross_entropy_backward : ref::softmax_cross_entropy_backward;
    Floats losses(N, kNaN), probs(N * V, kNaN), losses_all(N), probs_all(N * V);
    fwd(losses.data(), probs.data(), logits.data(), targets.data(), N, V);
    fwd(losses_all.data(), probs_all.data(), logits.data(), all.data(), N, V);
    Floats d = before, d_all = before;
    bwd(d.data(), probs.data(), targets.data(), 0.25f, N, V);
    bwd(d_all.data(), probs_all.data(), all.data(), 0.25f, N, V);
    for (int64_t i = 0; i < N; i++) {
      const bool ignored = i == 1 || i == 4;
      EXPECT_EQ(losses[i], ignored ? 0.0f : losses_all[i]) << "row " << i << " fast " << fast;
      for (int64_t v = 0; v < V; v++) {
        ASSERT_EQ(d[i * V + v], ignored ? before[i * V + v] : d_all[i * V + v])
            << "row " << i << " fast " << fast;
      }
    }
  }
}

// ---- embedding ----------------------------------------------------------------------------------

TEST(KernelsCpu, EmbeddingMatchesRef) {
  const int64_t B = 3, T = 5, C = 133, V = 11, maxT = 7;  // 15 tokens from 11: repeats
  const std::vector<int32_t> tokens = test::random_ints(B * T, 50, 0, static_cast<int32_t>(V));
  const Floats wte = random_floats(V * C, 51), wpe = random_floats(maxT * C, 52);
  Floats out(B * T * C, kNaN), out_r(B * T * C);
  cpu::embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
  ref::embedding_forward(out_r.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
  expect_close(out, out_r, "out");

  const Floats dout = random_floats(B * T * C, 53);
  Floats dwte = random_floats(V * C, 54), dwpe = random_floats(maxT * C, 55);
  Floats dwte_r = dwte, dwpe_r = dwpe;
  cpu::embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
  ref::embedding_backward(dwte_r.data(), dwpe_r.data(), dout.data(), tokens.data(), B, T, C);
  expect_close(dwte, dwte_r, "dwte");
  expect_close(dwpe, dwpe_r, "dwpe");
}

// Llama: no position table. out = wte[tokens] exactly, and the backward updates dwte only, as it
// does with a table.
TEST(KernelsCpu, EmbeddingWithoutPositionsMatchesRef) {
  const int64_t B = 3, T = 5, C = 133, V = 11, maxT = 7;
  const std::vector<int32_t> tokens = test::random_ints(B * T, 56, 0, static_cast<int32_t>(V));
  const Floats wte = random_floats(V * C, 57);
  for (bool fast : {true, false}) {
    SCOPED_TRACE(fast ? "fast" : "ref");
    Floats out(B * T * C, kNaN);
    (fast ? cpu::embedding_forward : ref::embedding_forward)(out.data(), tokens.data(), wte.data(),
                                                             nullptr, B, T, C);
    for (int64_t bt = 0; bt < B * T; bt++) {
      EXPECT_EQ(std::memcmp(&out[bt * C], &wte[tokens[bt] * C], C * sizeof(float)), 0) << bt;
    }
    const Floats dout = random_floats(B * T * C, 58);
    const Floats dwte0 = random_floats(V * C, 59), dwpe0 = random_floats(maxT * C, 60);
    Floats dwte = dwte0, with_pos = dwte0, dwpe = dwpe0;
    auto backward = fast ? cpu::embedding_backward : ref::embedding_backward;
    backward(dwte.data(), nullptr, dout.data(), tokens.data(), B, T, C);
    backward(with_pos.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
    EXPECT_EQ(std::memcmp(dwte.data(), with_pos.data(), dwte.size() * sizeof(float)), 0);
  }
}

// ---- elementwise --------------------------------------------------------------------------------

TEST(KernelsCpu, AddAndScaledAddMatchRef) {
  const int64_t n = 1001;
  const Floats a = random_floats(n, 60), b = random_floats(n, 61);
  Floats out(n, kNaN), out_r(n);
  cpu::add(out.data(), a.data(), b.data(), n);
  ref::add(out_r.data(), a.data(), b.data(), n);
  expect_close(out, out_r, "add");
  Floats in_place = a;  // the residual add writes over one of its inputs
  cpu::add(in_place.data(), in_place.data(), b.data(), n);
  expect_close(in_place, out_r, "add in place");

  Floats y = random_floats(n, 62), y_r = y;
  cpu::scaled_add(y.data(), a.data(), -0.37f, n);
  ref::scaled_add(y_r.data(), a.data(), -0.37f, n);
  expect_close(y, y_r, "scaled_add");
}

TEST(KernelsCpu, ScaledCopy2dMatchesRefBitForBit) {
  const int64_t rows = 37, cols = 19, ldx = 23, ldy = 29;  // column ranges of wider rows
  const Floats x = random_floats(rows * ldx, 63);
  for (bool acc : {false, true}) {
    Floats y = random_floats(rows * ldy, 64), y_r = y;
    cpu::scaled_copy_2d(y.data() + 3, ldy, x.data() + 2, ldx, rows, cols, 0.37f, acc);
    ref::scaled_copy_2d(y_r.data() + 3, ldy, x.data() + 2, ldx, rows, cols, 0.37f, acc);
    EXPECT_EQ(0, std::memcmp(y.data(), y_r.data(), y.size() * 4)) << "accumulate " << acc;
    // Outside the column range nothing changed; inside, something did.
    const Floats before = random_floats(rows * ldy, 64);
    EXPECT_EQ(y[0], before[0]);
    EXPECT_EQ(y[ldy - 1], before[ldy - 1]);
    EXPECT_NE(y[3], before[3]);
  }
}

// Note [Adapter dropout]: the fast kernel and the reference give the same bits; about p of the
// elements drop, the rest are scaled by 1 / (1 - p); another stream gives another mask.
TEST(KernelsCpu, DropoutApplyMatchesRefBitForBit) {
  const int64_t n = 100003;
  const Floats x = random_floats(n, 65);
  const DropoutMask m = dropout_mask(0x1234567890abcdefull, 0.25);
  for (bool acc : {false, true}) {
    Floats y = random_floats(n, 66), y_r = y;
    cpu::dropout_apply(y.data(), x.data(), n, m, acc);
    ref::dropout_apply(y_r.data(), x.data(), n, m, acc);
    EXPECT_EQ(0, std::memcmp(y.data(), y_r.data(), y.size() * 4)) << "accumulate " << acc;
  }
  Floats y(n), other(n);
  cpu::dropout_apply(y.data(), x.data(), n, m, false);
  cpu::dropout_apply(other.data(), x.data(), n, dropout_mask(m.stream + 1, 0.25), false);
  int64_t dropped = 0, differ = 0;
  for (int64_t i = 0; i < n; i++) {
    if (y[i] == 0.0f) {
      dropped++;
    } else {
      ASSERT_EQ(y[i], x[i] * (1.0f / 0.75f)) << i;
    }
    differ += (y[i] == 0.0f) != (other[i] == 0.0f) ? 1 : 0;
  }
  EXPECT_NEAR(static_cast<double>(dropped) / n, 0.25, 0.01);
  EXPECT_GT(differ, n / 4);  // independent masks disagree on 2 p (1 - p) = 37.5% of elements
  Floats none(n);
  cpu::dropout_apply(none.data(), x.data(), n, dropout_mask(m.stream, 0.0), false);
  EXPECT_EQ(0, std::memcmp(none.data(), x.data(), x.size() * 4)) << "p = 0 keeps every bit";
}

TEST(KernelsCpu, ConversionsMatchRefBitForBit) {
  const int64_t n = 4099;
  // Random bit patterns: every exponent, NaNs and infinities included.
  const std::vector<int32_t> hi = test::random_ints(n, 70, 0, 1 << 16);
  const std::vector<int32_t> lo = test::random_ints(n, 71, 0, 1 << 16);
  Floats f(n);
  for (int64_t i = 0; i < n; i++) {
    const uint32_t bits = (static_cast<uint32_t>(hi[i]) << 16) | static_cast<uint32_t>(lo[i]);
    std::memcpy(&f[i], &bits, 4);
  }
  std::vector<bf16_t> h(n), h_r(n);
  cpu::convert_f32_to_bf16(h.data(), f.data(), n);
  ref::convert_f32_to_bf16(h_r.data(), f.data(), n);
  EXPECT_EQ(h, h_r);
  Floats back(n), back_r(n);
  cpu::convert_bf16_to_f32(back.data(), h.data(), n);
  ref::convert_bf16_to_f32(back_r.data(), h.data(), n);
  EXPECT_EQ(std::memcmp(back.data(), back_r.data(), n * sizeof(float)), 0);
}

TEST(KernelsCpu, SumSquaresMatchesRef) {
  for (int64_t n : {0, 1, 1001, 200003}) {  // 200003: four chunks, the last one partial
    const Floats x = random_floats(n, 80);
    double got = -1, want = -1;
    cpu::sum_squares(&got, x.data(), n);
    ref::sum_squares(&want, x.data(), n);
    EXPECT_NEAR(got, want, 1e-12 * std::max(1.0, want)) << "n=" << n;
  }
}

// ---- thread-count invariance, larger sizes so that every parallel loop really splits ---------

TEST(KernelsCpu, MatmulIsRepeatableAndBiasBackwardThreadInvariant) {
  const int64_t M = 67, N = 129, K = 65;
  const Floats a = random_floats(M * K, 90), b = random_floats(K * N, 91);
  const Floats bias = random_floats(N, 92), init = random_floats(M * N, 93);
  for (bool trans_a : {false, true}) {
    for (bool trans_b : {false, true}) {
      expect_repeatable("matmul", [&] {
        Floats out = init;
        cpu::matmul(out.data(), a.data(), b.data(), bias.data(), M, N, K, trans_a, trans_b, true);
        return out;
      });
    }
  }
  const Floats dout = random_floats(1000 * 200, 94);
  expect_thread_invariant("bias_backward", [&] {
    Floats dbias = random_floats(200, 95);
    cpu::bias_backward(dbias.data(), dout.data(), 1000, 200);
    return dbias;
  });
}

TEST(KernelsCpu, LayernormIsThreadInvariant) {
  const int64_t N = 301, C = 129;
  const Floats inp = random_floats(N * C, 100), w = random_floats(C, 101);
  const Floats b = random_floats(C, 102), dout = random_floats(N * C, 103);
  expect_thread_invariant("layernorm", [&] {
    Floats out(N * C), mean(N), rstd(N);
    cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N,
                           C);
    Floats dinp = random_floats(N * C, 104), dw = random_floats(C, 105), db(C, 0.5f);
    cpu::layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(),
                            mean.data(), rstd.data(), N, C);
    return concat({&out, &mean, &rstd, &dinp, &dw, &db});
  });
}

TEST(KernelsCpu, AttentionIsRepeatable) {
  const int64_t B = 2, T = 300, C = 24, NH = 3;
  const Floats qkv = random_floats(B * T * 3 * C, 110, -2.0f, 2.0f);
  const Floats dout = random_floats(B * T * C, 111);
  expect_repeatable("attention", [&] {
    Floats out(B * T * C), att(B * NH * T * T), scratch(B * NH * T * T);
    cpu::attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
    Floats dqkv = random_floats(B * T * 3 * C, 112);
    cpu::attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), B, T,
                            C, NH);
    return concat({&out, &att, &dqkv});
  });
}

TEST(KernelsCpu, LossAndEmbeddingAreThreadInvariant) {
  const int64_t N = 37, V = 1001;
  const Floats logits = random_floats(N * V, 120, -4.0f, 4.0f);
  const std::vector<int32_t> targets = test::random_ints(N, 121, 0, static_cast<int32_t>(V));
  expect_thread_invariant("softmax_cross_entropy", [&] {
    Floats losses(N), probs(N * V), dlogits = random_floats(N * V, 122);
    cpu::softmax_cross_entropy_forward(losses.data(), probs.data(), logits.data(), targets.data(),
                                       N, V);
    cpu::softmax_cross_entropy_backward(dlogits.data(), probs.data(), targets.data(), 0.1f, N, V);
    return concat({&losses, &probs, &dlogits});
  });

  const int64_t B = 4, T = 64, C = 200, Vocab = 50;
  const std::vector<int32_t> tokens = test::random_ints(B * T, 123, 0, Vocab);
  const Floats wte = random_floats(Vocab * C, 124), wpe = random_floats(T * C, 125);
  const Floats dout = random_floats(B * T * C, 126);
  expect_thread_invariant("embedding", [&] {
    Floats out(B * T * C), dwte = random_floats(Vocab * C, 127), dwpe = random_floats(T * C, 128);
    cpu::embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
    cpu::embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
    return concat({&out, &dwte, &dwpe});
  });
}

TEST(KernelsCpu, ElementwiseIsThreadInvariant) {
  const int64_t n = 100003;
  const Floats x = random_floats(n, 130, -6.0f, 6.0f), d = random_floats(n, 131);
  expect_thread_invariant("gelu, add, scaled_add, conversions", [&] {
    Floats out(n), dinp = random_floats(n, 132), sum(n), y = random_floats(n, 133), back(n);
    std::vector<bf16_t> h(n);
    cpu::gelu_forward(out.data(), x.data(), n);
    cpu::gelu_backward(dinp.data(), x.data(), d.data(), n);
    cpu::add(sum.data(), x.data(), d.data(), n);
    cpu::scaled_add(y.data(), x.data(), 0.3f, n);
    cpu::convert_f32_to_bf16(h.data(), x.data(), n);
    cpu::convert_bf16_to_f32(back.data(), h.data(), n);
    return concat({&out, &dinp, &sum, &y, &back});
  });
  const Floats big = random_floats(1000003, 134);
  expect_thread_invariant("sum_squares", [&] {
    std::vector<double> out(1);
    cpu::sum_squares(out.data(), big.data(), static_cast<int64_t>(big.size()));
    return out;
  });
}

}  // namespace
}  // namespace strata
