// Every backward kernel against central finite differences of its forward, for both the fast
// kernels and the references. The scalar loss is L = sum(out * w) with fixed random w (so
// dout = w), accumulated in double; for the cross-entropy, L = mean(losses).
//
// Note [Finite-difference tolerances]
// The forwards run in f32. Between the two evaluations only the outputs that depend on the
// perturbed input change, each with a rounding error of ~6e-8 relative; for tens of outputs of
// order 1 that is ~1e-7..1e-6 in L, i.e. ~1e-5..5e-5 in a derivative after dividing by the step
// 2h = 2e-2. The truncation error of a central difference is h^2/6 * f''' ~ 2e-5 for the smooth
// ops here (inputs of order 1) and exactly 0 for the linear ones (matmul, bias, embedding, rope,
// repeat_kv).
// Derivatives are of order 0.1 to 1. So we require
//     max_i |fd_i - grad_i| <= tol * max_i |grad_i|
// with tol = 1e-4 for the linear ops and 5e-4 for the others. Observed worst cases (fast and ref
// alike) are 5e-6 and 1e-4 (attention, T = 129), so the margin is 5-20x. A wrong sign, a missing
// term or factor, or a misplaced index gives errors of order 1, and a backward that overwrites
// instead of accumulating into the prefilled gradient buffer shows up the same way.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "backend/cpu/kernels.h"
#include "test_util.h"

namespace strata {
namespace {

using test::random_floats;
using Floats = std::vector<float>;

constexpr float kStep = 1e-2f;       // h of the central difference
constexpr double kTolLinear = 1e-4;  // Note [Finite-difference tolerances]
constexpr double kTolSmooth = 5e-4;

// One implementation of the kernels under test: the fast ones or the references.
struct Kernels {
  const char* name;
  decltype(&cpu::matmul) matmul;
  decltype(&cpu::bias_backward) bias_backward;
  decltype(&cpu::layernorm_forward) layernorm_forward;
  decltype(&cpu::layernorm_backward) layernorm_backward;
  decltype(&cpu::gelu_forward) gelu_forward;
  decltype(&cpu::gelu_backward) gelu_backward;
  decltype(&cpu::attention_forward) attention_forward;
  decltype(&cpu::attention_backward) attention_backward;
  decltype(&cpu::softmax_cross_entropy_forward) softmax_cross_entropy_forward;
  decltype(&cpu::softmax_cross_entropy_backward) softmax_cross_entropy_backward;
  decltype(&cpu::embedding_forward) embedding_forward;
  decltype(&cpu::embedding_backward) embedding_backward;
  decltype(&cpu::rmsnorm_forward) rmsnorm_forward;
  decltype(&cpu::rmsnorm_backward) rmsnorm_backward;
  decltype(&cpu::rope_forward) rope_forward;
  decltype(&cpu::rope_backward) rope_backward;
  decltype(&cpu::swiglu_forward) swiglu_forward;
  decltype(&cpu::swiglu_backward) swiglu_backward;
  decltype(&cpu::repeat_kv_forward) repeat_kv_forward;
  decltype(&cpu::repeat_kv_backward) repeat_kv_backward;
};

const Kernels kFast = {"fast",
                       &cpu::matmul,
                       &cpu::bias_backward,
                       &cpu::layernorm_forward,
                       &cpu::layernorm_backward,
                       &cpu::gelu_forward,
                       &cpu::gelu_backward,
                       &cpu::attention_forward,
                       &cpu::attention_backward,
                       &cpu::softmax_cross_entropy_forward,
                       &cpu::softmax_cross_entropy_backward,
                       &cpu::embedding_forward,
                       &cpu::embedding_backward,
                       &cpu::rmsnorm_forward,
                       &cpu::rmsnorm_backward,
                       &cpu::rope_forward,
                       &cpu::rope_backward,
                       &cpu::swiglu_forward,
                       &cpu::swiglu_backward,
                       &cpu::repeat_kv_forward,
                       &cpu::repeat_kv_backward};
const Kernels kRef = {"ref",
                      &cpu::ref::matmul,
                      &cpu::ref::bias_backward,
                      &cpu::ref::layernorm_forward,
                      &cpu::ref::layernorm_backward,
                      &cpu::ref::gelu_forward,
                      &cpu::ref::gelu_backward,
                      &cpu::ref::attention_forward,
                      &cpu::ref::attention_backward,
                      &cpu::ref::softmax_cross_entropy_forward,
                      &cpu::ref::softmax_cross_entropy_backward,
                      &cpu::ref::embedding_forward,
                      &cpu::ref::embedding_backward,
                      &cpu::ref::rmsnorm_forward,
                      &cpu::ref::rmsnorm_backward,
                      &cpu::ref::rope_forward,
                      &cpu::ref::rope_backward,
                      &cpu::ref::swiglu_forward,
                      &cpu::ref::swiglu_backward,
                      &cpu::ref::repeat_kv_forward,
                      &cpu::ref::repeat_kv_backward};

// sum(out * w) in double.
double weighted_sum(const Floats& out, const Floats& w) {
  double sum = 0.0;
  for (size_t i = 0; i < out.size(); i++) sum += static_cast<double>(out[i]) * w[i];
  return sum;
}

// Expects `grad` (the backward's contribution, i.e. the gradient buffer after backward minus
// its prefill) to match central differences of loss() with respect to x, which it perturbs in
// place and restores.
void expect_matches_fd(const char* what, Floats& x, const Floats& grad,
                       const std::function<double()>& loss, double tol) {
  ASSERT_EQ(x.size(), grad.size()) << what;
  double max_err = 0.0, max_grad = 0.0;
  size_t worst = 0;
  std::vector<double> fd(x.size());
  for (size_t i = 0; i < x.size(); i++) {
    const float x0 = x[i];
    x[i] = x0 + kStep;
    const float up = x[i];
    const double l_up = loss();
    x[i] = x0 - kStep;
    const float down = x[i];
    const double l_down = loss();
    x[i] = x0;
    fd[i] = (l_up - l_down) / (static_cast<double>(up) - down);  // the step as rounded
    const double err = std::fabs(fd[i] - grad[i]);
    if (err > max_err) max_err = err, worst = i;
    max_grad = std::max(max_grad, std::fabs(static_cast<double>(grad[i])));
  }
  EXPECT_GT(max_grad, 1e-3) << what << ": a vanishing gradient would make the check vacuous";
  EXPECT_LE(max_err, tol * max_grad) << what << ": worst element " << worst << " grad "
                                     << grad[worst] << " vs finite difference " << fd[worst];
}

// after - before: what a backward added to a prefilled gradient buffer.
Floats added(const Floats& after, const Floats& before) {
  Floats d(after.size());
  for (size_t i = 0; i < d.size(); i++) d[i] = after[i] - before[i];
  return d;
}

class KernelGrad : public ::testing::TestWithParam<const Kernels*> {};

// The linear layer as the model uses it: out = inp @ W^T + b; dinp += dout @ W;
// dW += dout^T @ inp; db += column sums of dout. Covers three of the four transpose
// combinations and bias_backward.
TEST_P(KernelGrad, LinearLayer) {
  const Kernels& k = *GetParam();
  const int64_t M = 5, K = 7, N = 6;  // rows, in features, out features
  Floats inp = random_floats(M * K, 1), W = random_floats(N * K, 2), b = random_floats(N, 3);
  const Floats w = random_floats(M * N, 4);  // loss weights = dout
  auto loss = [&] {
    Floats out(M * N);
    k.matmul(out.data(), inp.data(), W.data(), b.data(), M, N, K, false, true, false);
    return weighted_sum(out, w);
  };
  const Floats dinp0 = random_floats(M * K, 5), dW0 = random_floats(N * K, 6);
  const Floats db0 = random_floats(N, 7);
  Floats dinp = dinp0, dW = dW0, db = db0;
  k.matmul(dinp.data(), w.data(), W.data(), nullptr, M, K, N, false, false, true);
  k.matmul(dW.data(), w.data(), inp.data(), nullptr, N, K, M, true, false, true);
  k.bias_backward(db.data(), w.data(), M, N);
  expect_matches_fd("dinp", inp, added(dinp, dinp0), loss, kTolLinear);
  expect_matches_fd("dW", W, added(dW, dW0), loss, kTolLinear);
  expect_matches_fd("db", b, added(db, db0), loss, kTolLinear);
}

TEST_P(KernelGrad, Layernorm) {
  const Kernels& k = *GetParam();
  const int64_t N = 5, C = 9;
  Floats inp = random_floats(N * C, 10, -2.0f, 2.0f);
  Floats weight = random_floats(C, 11, 0.5f, 1.5f), bias = random_floats(C, 12);
  const Floats w = random_floats(N * C, 13);
  Floats mean(N), rstd(N);
  auto loss = [&] {
    Floats out(N * C), m(N), r(N);
    k.layernorm_forward(out.data(), m.data(), r.data(), inp.data(), weight.data(), bias.data(), N,
                        C);
    return weighted_sum(out, w);
  };
  Floats out(N * C);
  k.layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), bias.data(),
                      N, C);
  const Floats dinp0 = random_floats(N * C, 14), dw0 = random_floats(C, 15);
  const Floats db0 = random_floats(C, 16);
  Floats dinp = dinp0, dw = dw0, db = db0;
  k.layernorm_backward(dinp.data(), dw.data(), db.data(), w.data(), inp.data(), weight.data(),
                       mean.data(), rstd.data(), N, C);
  expect_matches_fd("dinp", inp, added(dinp, dinp0), loss, kTolSmooth);
  expect_matches_fd("dweight", weight, added(dw, dw0), loss, kTolSmooth);
  expect_matches_fd("dbias", bias, added(db, db0), loss, kTolSmooth);
}

TEST_P(KernelGrad, Gelu) {
  const Kernels& k = *GetParam();
  const int64_t n = 101;
  Floats x = random_floats(n, 20, -5.0f, 5.0f);
  const Floats w = random_floats(n, 21);
  auto loss = [&] {
    Floats out(n);
    k.gelu_forward(out.data(), x.data(), n);
    return weighted_sum(out, w);
  };
  const Floats dinp0 = random_floats(n, 22);
  Floats dinp = dinp0;
  k.gelu_backward(dinp.data(), x.data(), w.data(), n);
  expect_matches_fd("dinp", x, added(dinp, dinp0), loss, kTolSmooth);
}

struct AttnSize {
  int64_t B, T, C, NH;
};

TEST_P(KernelGrad, Attention) {
  const Kernels& k = *GetParam();
  // The second size spans two row blocks of the fast kernel (Note [Block-triangular attention]);
  // it stays below kMinParallelWork so that the ~3000 forward calls run without waking threads.
  for (AttnSize s : {AttnSize{2, 5, 8, 2}, AttnSize{1, 129, 4, 1}}) {
    SCOPED_TRACE(testing::Message() << "B=" << s.B << " T=" << s.T << " C=" << s.C);
    const int64_t B = s.B, T = s.T, C = s.C, NH = s.NH;
    Floats qkv = random_floats(B * T * 3 * C, 30, -2.0f, 2.0f);
    const Floats w = random_floats(B * T * C, 31);
    auto loss = [&] {
      Floats out(B * T * C), att(B * NH * T * T);
      k.attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
      return weighted_sum(out, w);
    };
    Floats out(B * T * C), att(B * NH * T * T), scratch(B * NH * T * T);
    k.attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
    const Floats dqkv0 = random_floats(B * T * 3 * C, 32);
    Floats dqkv = dqkv0;
    k.attention_backward(dqkv.data(), scratch.data(), w.data(), qkv.data(), att.data(), B, T, C,
                         NH);
    expect_matches_fd("dqkv", qkv, added(dqkv, dqkv0), loss, kTolSmooth);
  }
}

// loss = mean over rows of -log softmax(logits)[target], so dloss = 1/N per row.
TEST_P(KernelGrad, SoftmaxCrossEntropy) {
  const Kernels& k = *GetParam();
  const int64_t N = 5, V = 13;
  Floats logits = random_floats(N * V, 40, -3.0f, 3.0f);
  const std::vector<int32_t> targets = test::random_ints(N, 41, 0, static_cast<int32_t>(V));
  auto loss = [&] {
    Floats losses(N), probs(N * V);
    k.softmax_cross_entropy_forward(losses.data(), probs.data(), logits.data(), targets.data(), N,
                                    V);
    double sum = 0.0;
    for (float l : losses) sum += l;
    return sum / N;
  };
  Floats losses(N), probs(N * V);
  k.softmax_cross_entropy_forward(losses.data(), probs.data(), logits.data(), targets.data(), N, V);
  const Floats dlogits0 = random_floats(N * V, 42);
  Floats dlogits = dlogits0;
  k.softmax_cross_entropy_backward(dlogits.data(), probs.data(), targets.data(), 1.0f / N, N, V);
  expect_matches_fd("dlogits", logits, added(dlogits, dlogits0), loss, kTolSmooth);
}

TEST_P(KernelGrad, Embedding) {
  const Kernels& k = *GetParam();
  const int64_t B = 2, T = 4, C = 5, V = 6, maxT = 6;
  const std::vector<int32_t> tokens = {3, 1, 3, 0, 5, 3, 1, 1};  // repeats must add up
  Floats wte = random_floats(V * C, 50), wpe = random_floats(maxT * C, 51);
  const Floats w = random_floats(B * T * C, 52);
  auto loss = [&] {
    Floats out(B * T * C);
    k.embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
    return weighted_sum(out, w);
  };
  const Floats dwte0 = random_floats(V * C, 53), dwpe0 = random_floats(maxT * C, 54);
  Floats dwte = dwte0, dwpe = dwpe0;
  k.embedding_backward(dwte.data(), dwpe.data(), w.data(), tokens.data(), B, T, C);
  expect_matches_fd("dwte", wte, added(dwte, dwte0), loss, kTolLinear);
  expect_matches_fd("dwpe", wpe, added(dwpe, dwpe0), loss, kTolLinear);
}

// Llama has no learned positions: wpe and dwpe null, only dwte receives gradients.
TEST_P(KernelGrad, EmbeddingWithoutPositions) {
  const Kernels& k = *GetParam();
  const int64_t B = 2, T = 4, C = 5, V = 6;
  const std::vector<int32_t> tokens = {3, 1, 3, 0, 5, 3, 1, 1};
  Floats wte = random_floats(V * C, 55);
  const Floats w = random_floats(B * T * C, 56);
  auto loss = [&] {
    Floats out(B * T * C);
    k.embedding_forward(out.data(), tokens.data(), wte.data(), nullptr, B, T, C);
    return weighted_sum(out, w);
  };
  const Floats dwte0 = random_floats(V * C, 57);
  Floats dwte = dwte0;
  k.embedding_backward(dwte.data(), nullptr, w.data(), tokens.data(), B, T, C);
  expect_matches_fd("dwte", wte, added(dwte, dwte0), loss, kTolLinear);
}

// ---- Llama ops ----------------------------------------------------------------------------------

TEST_P(KernelGrad, Rmsnorm) {
  const Kernels& k = *GetParam();
  const int64_t N = 5, C = 9;
  const float eps = 1e-5f;
  Floats inp = random_floats(N * C, 60, -2.0f, 2.0f);
  Floats weight = random_floats(C, 61, 0.5f, 1.5f);
  const Floats w = random_floats(N * C, 62);
  auto loss = [&] {
    Floats out(N * C), r(N);
    k.rmsnorm_forward(out.data(), r.data(), inp.data(), weight.data(), N, C, eps);
    return weighted_sum(out, w);
  };
  Floats out(N * C), rstd(N);
  k.rmsnorm_forward(out.data(), rstd.data(), inp.data(), weight.data(), N, C, eps);
  const Floats dinp0 = random_floats(N * C, 63), dw0 = random_floats(C, 64);
  Floats dinp = dinp0, dw = dw0;
  k.rmsnorm_backward(dinp.data(), dw.data(), w.data(), inp.data(), weight.data(), rstd.data(), N,
                     C);
  expect_matches_fd("dinp", inp, added(dinp, dinp0), loss, kTolSmooth);
  expect_matches_fd("dweight", weight, added(dw, dw0), loss, kTolSmooth);
}

// Linear in the input for a fixed table. Any table exercises the transpose; a random one (not
// a rotation) also catches a backward that inverts instead of transposing.
TEST_P(KernelGrad, Rope) {
  const Kernels& k = *GetParam();
  const int64_t B = 2, T = 3, hs = 4, n_rot = 2, row = n_rot * hs + 3;  // 3 floats unrotated
  const Floats table = random_floats(T * (hs / 2) * 2, 70);
  Floats inp = random_floats(B * T * row, 71);
  const Floats w = random_floats(B * T * row, 72);
  auto loss = [&] {
    Floats out(B * T * row);
    k.rope_forward(out.data(), inp.data(), table.data(), B, T, row, n_rot, hs);
    return weighted_sum(out, w);
  };
  const Floats dinp0 = random_floats(B * T * row, 73);
  Floats dinp = dinp0;
  k.rope_backward(dinp.data(), w.data(), table.data(), B, T, row, n_rot, hs);
  expect_matches_fd("dinp", inp, added(dinp, dinp0), loss, kTolLinear);
}

TEST_P(KernelGrad, Swiglu) {
  const Kernels& k = *GetParam();
  const int64_t N = 3, F = 7;
  Floats gu = random_floats(N * 2 * F, 80, -5.0f, 5.0f);
  const Floats w = random_floats(N * F, 81);
  auto loss = [&] {
    Floats out(N * F);
    k.swiglu_forward(out.data(), gu.data(), N, F);
    return weighted_sum(out, w);
  };
  const Floats dgu0 = random_floats(N * 2 * F, 82);
  Floats dgu = dgu0;
  k.swiglu_backward(dgu.data(), gu.data(), w.data(), N, F);
  expect_matches_fd("dgu", gu, added(dgu, dgu0), loss, kTolSmooth);
}

struct KvSize {
  int64_t NH, NKV;
};

TEST_P(KernelGrad, RepeatKv) {
  const Kernels& k = *GetParam();
  for (KvSize s : {KvSize{4, 2}, KvSize{4, 1}, KvSize{3, 3}}) {
    SCOPED_TRACE(testing::Message() << "NH=" << s.NH << " NKV=" << s.NKV);
    const int64_t B = 2, T = 3, hs = 3, NH = s.NH, NKV = s.NKV;
    const int64_t in_n = B * T * (NH + 2 * NKV) * hs, out_n = B * T * 3 * NH * hs;
    Floats inp = random_floats(in_n, 90);
    const Floats w = random_floats(out_n, 91);
    auto loss = [&] {
      Floats out(out_n);
      k.repeat_kv_forward(out.data(), inp.data(), B, T, NH, NKV, hs);
      return weighted_sum(out, w);
    };
    const Floats dinp0 = random_floats(in_n, 92);
    Floats dinp = dinp0;
    k.repeat_kv_backward(dinp.data(), w.data(), B, T, NH, NKV, hs);
    expect_matches_fd("dinp", inp, added(dinp, dinp0), loss, kTolLinear);
  }
}

INSTANTIATE_TEST_SUITE_P(Impl, KernelGrad, ::testing::Values(&kFast, &kRef),
                         [](const ::testing::TestParamInfo<const Kernels*>& info) {
                           return std::string(info.param->name);
                         });

}  // namespace
}  // namespace strata
