// Sampling (Note [Sampling] in model/sample.h):
//  - pick_token: greedy takes the first of equal maxima; top-k never leaves the k largest; a
//    seed fixes the draw; a low temperature concentrates it on the maximum;
//  - generate, greedy, on random weights: every new token is the argmax of the last position's
//    logits of the whole-model forward (gpt_forward, the training code) over the window, past the
//    context length; and weights are asked for one slab at a time, each block once per token.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

#include "backend/backend.h"
#include "model/gpt.h"
#include "model/init.h"
#include "model/layout.h"
#include "model/sample.h"
#include "test_util.h"

namespace strata {
namespace {

TEST(PickToken, GreedyTakesTheFirstOfEqualMaxima) {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f};
  Rng rng(1);
  SampleOptions o;
  o.temperature = 0;
  EXPECT_EQ(pick_token(logits.data(), 4, o, rng), 1);
}

TEST(PickToken, TopKKeepsTheLargestAndASeedFixesTheDraw) {
  const std::vector<float> logits = {3.0f, 0.0f, 2.9f, 2.8f, -5.0f, 2.95f};
  SampleOptions o;
  o.temperature = 1.0;
  o.top_k = 3;
  Rng a(42), b(42);
  std::set<int32_t> seen;
  for (int i = 0; i < 200; ++i) {
    const int32_t x = pick_token(logits.data(), 6, o, a);
    EXPECT_EQ(x, pick_token(logits.data(), 6, o, b));  // same seed, same draws
    seen.insert(x);
  }
  EXPECT_EQ(seen, (std::set<int32_t>{0, 5, 2}));  // the three largest, each drawn
  o.top_k = 0;
  o.temperature = 1e-3;  // nearly greedy
  Rng c(3);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(pick_token(logits.data(), 6, o, c), 0);
}

// A GPT of 2 blocks, 32 channels, an 8-token context and a 64-token vocabulary.
ModelConfig tiny_model() {
  ModelConfig m;
  m.vocab_size = 64;
  m.context_length = 8;
  m.n_layer = 2;
  m.n_head = 2;
  m.n_embd = 32;
  return m;
}

TEST(Generate, GreedyTokensAreTheArgmaxOfTheWholeModelForward) {
  const ModelConfig m = tiny_model();
  const ParamLayout layout = make_param_layout(m);
  std::vector<float> params(static_cast<size_t>(layout.total_elems));
  init_params(layout, params.data(), 11);
  std::vector<int64_t> asked;
  auto weights = [&](int64_t slab, float* dst) {
    asked.push_back(slab);
    const Slab& s = layout.slabs[static_cast<size_t>(slab)];
    std::copy_n(params.data() + s.offset, s.numel, dst);
    return Status();
  };
  auto dev = create_cpu_device();
  SampleOptions o;
  o.temperature = 0;
  o.new_tokens = 12;  // past the 8-token context
  auto out = generate(*dev, m, weights, {5, 9, 1}, o);
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  ASSERT_EQ(out->size(), 15u);
  // The reference: gpt_forward over each window, then the argmax of its last logits row.
  for (size_t n = 3; n < out->size(); ++n) {
    const int64_t T = std::min<int64_t>(static_cast<int64_t>(n), m.context_length);
    std::vector<int32_t> window(out->begin() + static_cast<int64_t>(n) - T,
                                out->begin() + static_cast<int64_t>(n));
    std::vector<int32_t> targets(window.size(), 0);
    std::vector<float> acts_mem(static_cast<size_t>(gpt_acts_floats(*dev, m, 1, T)));
    const GptActs acts = gpt_acts_at(*dev, acts_mem.data(), m, 1, T, nullptr);
    auto s = dev->create_stream("ref");
    gpt_forward(*dev, *s, acts, layout, params.data(), window.data(), targets.data());
    s->synchronize();
    const float* last = acts.logits + (T - 1) * m.vocab_size;
    const auto want = static_cast<int32_t>(std::max_element(last, last + m.vocab_size) - last);
    EXPECT_EQ((*out)[n], want) << "token " << n;
  }
  // Embedding and final slabs once, then every block once per new token.
  EXPECT_EQ(static_cast<int64_t>(asked.size()), 2 + o.new_tokens * m.n_layer);
}

TEST(Generate, RefusesAPromptOutsideTheVocabulary) {
  auto dev = create_cpu_device();
  auto out = generate(*dev, tiny_model(), [](int64_t, float*) { return Status(); }, {3, 64}, {});
  test::expect_error(out.status(), ErrorCode::invalid_argument, {"64", "vocabulary"});
}

}  // namespace
}  // namespace strata
