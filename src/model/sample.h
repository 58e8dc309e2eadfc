// Text generation from a trained model whose weights arrive slab by slab (`strata sample`).
//
// Note [Sampling]
// The token after out[0, n) (the prompt, P tokens, then those made) comes from the window
// out[s, n) at positions 0 .. n-s-1. s starts at max(0, P - context); when the window would pass
// the context (n - s > context) it slides once to keep its last max(1, context/2) tokens:
// s = n - max(1, context/2). So past the context a token sees from context/2 to context tokens,
// not always the last context (a slide moves every position: recomputing the last context tokens
// for each token would give other tokens). A window runs whole once (the prefill: one (1, T)
// sequence through every block), filling the key/value cache (L, W, 2 NKV hs), W = min(context,
// P + new tokens): nothing is sized by a context the sample does not reach; each later
// token runs alone at the next position against it (block_decode): at most one prefill per
// context/2 + 1 tokens. Blocks that fit SampleOptions::resident_bytes are read once and kept, the
// others fetched one at a time per token: memory is the embed and final slabs, one block, one
// window's activations and the cache.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "backend/backend.h"
#include "core/config.h"
#include "core/rng.h"
#include "core/status.h"

namespace strata {

struct SampleOptions {
  int64_t new_tokens = 64;
  double temperature = 1.0;  // 0: greedy
  int64_t top_k = 0;         // 0: every token
  uint64_t seed = 1337;
  // false: every token runs the prefill over its whole window (no key/value cache); the same
  // windows, so the same tokens, for comparison (bench/sample_kv.sh).
  bool kv_cache = true;
  // When every block's weights together take at most this many bytes they are read once and
  // kept on the device; otherwise each token reads every block again (a model larger than
  // memory). 0: always stream.
  int64_t resident_bytes = 0;
};

// What generate did, for tests of its cost.
struct SampleStats {
  int64_t prefills = 0;  // windows run whole: the first, then one per slide (every token without
                         // the cache)
  int64_t decodes = 0;   // tokens run alone against the cache
};

// How generate reports as it goes and is stopped; each may be empty.
struct SampleHooks {
  // Each new token as soon as it is picked; an error ends generate with it.
  std::function<Status(int32_t token)> on_token;
  // Asked before each token; true ends generate with the tokens so far.
  std::function<bool()> stop;
  SampleStats* stats = nullptr;  // counted as generate goes
};

// Fills slab `slab`'s weights into dst: (slab numel) f32, in layout order.
using SlabWeightsFn = std::function<Status(int64_t slab, float* dst)>;

// invalid_argument unless the prompt has a token and each is below model.vocab_size.
Status check_prompt(const ModelConfig& model, const std::vector<int32_t>& prompt);

// The prompt (at least one token, each below model.vocab_size) followed by o.new_tokens new ones
// (fewer when hooks.stop ends it).
Result<std::vector<int32_t>> generate(Device& dev, const ModelConfig& model,
                                      const SlabWeightsFn& weights, std::vector<int32_t> prompt,
                                      const SampleOptions& o, const SampleHooks& hooks = {});

// The next token from one position's logits (V): at temperature 0 the greedy argmax (the lowest
// index among ties); otherwise the top_k largest logits (all when 0; ties to the lower index) over
// the temperature, softmaxed in double, and one uniform draw from the seeded Rng, so a seed fixes
// the text on every machine.
int32_t pick_token(const float* logits, int64_t V, const SampleOptions& o, Rng& rng);

}  // namespace strata
