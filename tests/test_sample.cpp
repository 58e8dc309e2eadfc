// Sampling (Note [Sampling] in model/sample.h):
//  - pick_token: greedy takes the first of equal maxima; top-k never leaves the k largest; a
//    seed fixes the draw; a low temperature concentrates it on the maximum;
//  - generate, greedy, on random weights: every new token is the argmax of the last position's
//    logits of the whole-model forward (gpt_forward, the training code) over the window the Note
//    documents, past the context length (sliding), for GPT-2 and Llama, with a prefill at most
//    once per context/2 tokens; weights are asked for one slab at a time, each block once per
//    token; the hooks see each token as it is made and stop generation;
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

// The documented window (Note [Sampling]): the start, in the sequence of `len` tokens, of the
// window that predicts the next token, given the previous window's start (-1 before the first).
int64_t documented_window_start(int64_t prev, int64_t len, int64_t context) {
  if (prev < 0) return std::max<int64_t>(0, len - context);
  if (len - prev > context) return len - std::max<int64_t>(1, context / 2);
  return prev;
}

// Greedy: every new token is the argmax of the last logits row of gpt_forward (the training
// code, no cache) over exactly the documented window.
void expect_documented_windows(Device& dev, const ModelConfig& m, const ParamLayout& layout,
                               std::vector<float>& params, const std::vector<int32_t>& out,
                               size_t prompt) {
  Buffer rope = upload_rope_table(dev, m, m.context_length).value();
  int64_t start = -1;
  for (size_t n = prompt; n < out.size(); ++n) {
    start = documented_window_start(start, static_cast<int64_t>(n), m.context_length);
    const int64_t T = static_cast<int64_t>(n) - start;
    std::vector<int32_t> window(out.begin() + start, out.begin() + static_cast<int64_t>(n));
    std::vector<int32_t> targets(window.size(), 0);
    std::vector<float> acts_mem(static_cast<size_t>(gpt_acts_floats(dev, m, 1, T)));
    const GptActs acts = gpt_acts_at(dev, acts_mem.data(), m, 1, T, rope.f32());
    auto s = dev.create_stream("ref");
    gpt_forward(dev, *s, acts, layout, params.data(), window.data(), targets.data());
    s->synchronize();
    const float* last = acts.head.logits + (T - 1) * m.vocab_size;
    const auto want = static_cast<int32_t>(std::max_element(last, last + m.vocab_size) - last);
    ASSERT_EQ(out[n], want) << "token " << n << ", window [" << start << ", " << n << ")";
  }
}

// Past the context the window slides by the documented rule, and the cache is rebuilt at most
// once per context/2 tokens: with a short prompt and with one longer than the context.
TEST_P(GenerateArch, GreedyTokensAreTheArgmaxOfTheForwardOverTheDocumentedWindow) {
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
  o.new_tokens = 30;  // past the 8-token context, several slides
  for (const std::vector<int32_t>& prompt :
       {std::vector<int32_t>{5, 9, 1}, std::vector<int32_t>{3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5}}) {
    const auto P = static_cast<int64_t>(prompt.size());
    asked.clear();
    SampleStats stats;
    SampleHooks counted;
    counted.stats = &stats;
    auto out = generate(*dev, m, weights, prompt, o, counted);
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    ASSERT_EQ(static_cast<int64_t>(out->size()), P + o.new_tokens);
    expect_documented_windows(*dev, m, layout, params, *out, prompt.size());
    // Embedding and final slabs once, then every block once per new token.
    EXPECT_EQ(static_cast<int64_t>(asked.size()), 2 + o.new_tokens * m.n_layer);
    // The cost: one prefill for the prompt, then at most one per context/2 tokens made from a
    // sequence longer than the context.
    const int64_t past = std::min(o.new_tokens, P + o.new_tokens - 1 - m.context_length);
    const int64_t half = m.context_length / 2;
    EXPECT_EQ(stats.prefills + stats.decodes, o.new_tokens);
    EXPECT_GE(stats.prefills, 3) << "P " << P;  // it did slide
    EXPECT_LE(stats.prefills - 1, (past + half - 1) / half) << "P " << P;
    // Without the cache every token runs its window whole: the same windows, the same tokens.
    SampleOptions plain = o;
    plain.kv_cache = false;
    auto again = generate(*dev, m, weights, prompt, plain, counted);
    ASSERT_TRUE(again.ok()) << again.status().to_string();
    EXPECT_EQ(*again, *out);
    EXPECT_EQ(stats.prefills, o.new_tokens);
    // With room for every block they are read once, and the tokens are the same.
    asked.clear();
    SampleOptions kept = o;
    kept.resident_bytes = layout.total_elems * 4;
    auto resident = generate(*dev, m, weights, prompt, kept);
    ASSERT_TRUE(resident.ok()) << resident.status().to_string();
    EXPECT_EQ(*resident, *out);
    EXPECT_EQ(static_cast<int64_t>(asked.size()), 2 + m.n_layer);
  }
}

// Each token reaches on_token as soon as it is made, in order; `stop` ends generation with the
// tokens so far; an error from on_token ends it with that error.
TEST(Generate, HooksSeeEachTokenAndStopIt) {
  const ModelConfig m = tiny_model();
  const ParamLayout layout = make_param_layout(m);
  std::vector<float> params(static_cast<size_t>(layout.total_elems));
  init_params(layout, params.data(), 5);
  auto weights = [&](int64_t slab, float* dst) {
    const Slab& s = layout.slabs[static_cast<size_t>(slab)];
    std::copy_n(params.data() + s.offset, s.numel, dst);
    return Status();
  };
  auto dev = create_cpu_device();
  SampleOptions o;
  o.new_tokens = 20;
  std::vector<int32_t> seen;
  SampleHooks hooks;
  hooks.on_token = [&](int32_t t) {
    seen.push_back(t);
    return Status();
  };
  auto all = generate(*dev, m, weights, {7}, o, hooks);
  ASSERT_TRUE(all.ok()) << all.status().to_string();
  EXPECT_EQ(seen, std::vector<int32_t>(all->begin() + 1, all->end()));
  seen.clear();
  hooks.stop = [&] { return seen.size() == 6; };
  auto stopped = generate(*dev, m, weights, {7}, o, hooks);
  ASSERT_TRUE(stopped.ok()) << stopped.status().to_string();
  EXPECT_EQ(*stopped, std::vector<int32_t>(all->begin(), all->begin() + 7));  // the same seed
  hooks.stop = {};
  hooks.on_token = [&](int32_t) { return io_error("cannot write the sample to stdout"); };
  test::expect_error(generate(*dev, m, weights, {7}, o, hooks).status(), ErrorCode::io_error,
                     {"stdout"});
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
  Buffer rope = upload_rope_table(*dev, m, m.context_length).value();
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
