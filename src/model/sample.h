// Text generation from a trained GPT whose weights arrive slab by slab (`strata sample`).
//
// Note [Sampling]
// Each new token runs the forward over the window (the last model.context_length tokens) as one
// (1, T) sequence: embeddings, every block, the final LayerNorm, and the tied head for the last
// position only. The blocks' weights are fetched one block at a time for every token, so host
// memory is the embedding and final slabs (kept: the head reads wte), one block's weights and
// one window's activations, never the model: a model larger than memory samples, at the price
// of reading every block per token. There is no KV cache yet: each token recomputes the window
// (O(T^2) attention per token). The next token is picked from the last position's logits by
// pick_token: at temperature 0 the greedy argmax (the lowest index among equal maxima);
// otherwise the top_k largest logits (all when 0; ties to the lower index), divided by the
// temperature, softmaxed in double, and one uniform draw from the seeded Rng, so a seed fixes
// the text on every machine.
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
};

// Fills slab `slab`'s weights into dst: (slab numel) f32, in layout order.
using SlabWeightsFn = std::function<Status(int64_t slab, float* dst)>;

// The prompt (at least one token, each below model.vocab_size) followed by o.new_tokens new ones.
Result<std::vector<int32_t>> generate(Device& dev, const ModelConfig& model,
                                      const SlabWeightsFn& weights, std::vector<int32_t> prompt,
                                      const SampleOptions& o);

// The next token from one position's logits (V): Note [Sampling].
int32_t pick_token(const float* logits, int64_t V, const SampleOptions& o, Rng& rng);

}  // namespace strata
