// Sampling (Note [Sampling] in model/sample.h):
//  - pick_token: greedy takes the first of equal maxima; top-k never leaves the k largest; a
//    seed fixes the draw; a low temperature concentrates it on the maximum;
//  - generate, greedy, on random weights: every new token is the argmax of the last position's
//    logits of the whole-model forward (gpt_forward, the training code) over the window, past the
//    context length, for GPT-2 and Llama; and weights are asked for one slab at a time, each
//    block once per token;
//  - block_decode, one token at a time with the key/value cache, gives every row of
//    block_forward over the whole sequence.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/rng.h"
#include "model/block_decode.h"
#include "model/gpt.h"
#include "model/init.h"
#include "model/layout.h"
#include "model/rope.h"
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

// A model of 2 blocks, 32 channels, an 8-token context and a 64-token vocabulary; Llama with
// 2 query heads on 1 key/value head and an untied head.
ModelConfig tiny_model(const std::string& arch = "gpt2") {
  ModelConfig m;
  m.vocab_size = 64;
  m.context_length = 8;
  m.n_layer = 2;
  m.n_head = 2;
  m.n_embd = 32;
  if (arch == "llama") {
    m.arch = ModelArch::llama;
    m.n_kv_head = 1;
    m.ffn_hidden = 40;
    m.tie_embeddings = false;
  }
  return m;
}

class GenerateArch : public ::testing::TestWithParam<std::string> {};

TEST_P(GenerateArch, GreedyTokensAreTheArgmaxOfTheWholeModelForward) {
  const ModelConfig m = tiny_model(GetParam());
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
  Buffer rope = upload_rope_table(*dev, m).value();
  for (size_t n = 3; n < out->size(); ++n) {
    const int64_t T = std::min<int64_t>(static_cast<int64_t>(n), m.context_length);
    std::vector<int32_t> window(out->begin() + static_cast<int64_t>(n) - T,
                                out->begin() + static_cast<int64_t>(n));
    std::vector<int32_t> targets(window.size(), 0);
    std::vector<float> acts_mem(static_cast<size_t>(gpt_acts_floats(*dev, m, 1, T)));
    const GptActs acts = gpt_acts_at(*dev, acts_mem.data(), m, 1, T, rope.f32());
    auto s = dev->create_stream("ref");
    gpt_forward(*dev, *s, acts, layout, params.data(), window.data(), targets.data());
    s->synchronize();
    const float* last = acts.head.logits + (T - 1) * m.vocab_size;
    const auto want = static_cast<int32_t>(std::max_element(last, last + m.vocab_size) - last);
    EXPECT_EQ((*out)[n], want) << "token " << n;
  }
  // Embedding and final slabs once, then every block once per new token.
  EXPECT_EQ(static_cast<int64_t>(asked.size()), 2 + o.new_tokens * m.n_layer);
  // With room for every block they are read once, and the tokens are the same.
  asked.clear();
  o.resident_bytes = layout.total_elems * 4;
  auto kept = generate(*dev, m, weights, {5, 9, 1}, o);
  ASSERT_TRUE(kept.ok()) << kept.status().to_string();
  EXPECT_EQ(*kept, *out);
  EXPECT_EQ(static_cast<int64_t>(asked.size()), 2 + m.n_layer);
}

// One token at a time through a block with its key/value cache gives each row of the block's
// forward over the whole sequence: the cache holds exactly what the forward computes.
TEST_P(GenerateArch, BlockDecodeGivesEveryRowOfTheForward) {
  const ModelConfig m = tiny_model(GetParam());
  const ParamLayout layout = make_param_layout(m);
  std::vector<float> params(static_cast<size_t>(layout.total_elems));
  init_params(layout, params.data(), 3);
  auto dev = create_cpu_device();
  auto s = dev->create_stream("test");
  Buffer rope = upload_rope_table(*dev, m).value();
  const int64_t T = m.context_length, C = m.n_embd;
  const BlockView w = block_view(layout, params.data(), 1);
  Rng rng(4);
  std::vector<float> x(static_cast<size_t>(T * C));  // (T, C)
  for (float& v : x) v = static_cast<float>(rng.next_normal());

  const BlockDims full = block_dims(*dev, m, 1, T, rope.f32());
  std::vector<float> acts(static_cast<size_t>(block_acts_floats(full)));
  FloatCarver ca(acts.data());
  const BlockActs a = block_acts_carve(ca, full);
  std::vector<float> want(x.size());  // (T, C)
  block_forward(*dev, *s, want.data(), a, x.data(), w, full);

  const BlockDims one = block_dims(*dev, m, 1, 1, rope.f32());
  std::vector<float> scratch(static_cast<size_t>(decode_scratch_floats(one, T)));
  FloatCarver cs(scratch.data());
  const DecodeScratch g = decode_scratch_carve(cs, one, T);
  std::vector<float> cache(static_cast<size_t>(T * kv_row_floats(one)));
  std::vector<float> got(x.size());
  for (int64_t t = 0; t < T; ++t) {
    block_decode(*dev, *s, got.data() + t * C, g, x.data() + t * C, cache.data(), t, w, one);
  }
  s->synchronize();
  const double err = test::max_rel_error(got.data(), want.data(), T * C);
  std::printf("%s: decode vs forward max rel error %.3g\n", GetParam().c_str(), err);
  EXPECT_LE(err, 5e-6);  // attention_decode may sum in another order than the forward's sgemm
}

INSTANTIATE_TEST_SUITE_P(Generate, GenerateArch, ::testing::Values("gpt2", "llama"));

TEST(Generate, RefusesAPromptOutsideTheVocabulary) {
  auto dev = create_cpu_device();
  auto out = generate(*dev, tiny_model(), [](int64_t, float*) { return Status(); }, {3, 64}, {});
  test::expect_error(out.status(), ErrorCode::invalid_argument, {"64", "vocabulary"});
}

}  // namespace
}  // namespace strata
