// Text generation from a trained model whose weights arrive slab by slab (`strata sample`).
//
// Note [Sampling]
// The prompt's window (its last context_length tokens) runs once as one (1, T) sequence through
// every block (the prefill), filling a device key/value cache of (L, context_length, 2 NKV hs)
// floats. Each new token then runs alone at the next position (block_decode): its query attends to
// the cache (Device::attention_decode) and its k|v join it, O(T) per token. Once the sequence
// outgrows the context the window slides, every position moves, and each token runs the prefill
// again. The head runs for one row. Blocks that fit SampleOptions::resident_bytes are read once
// and kept; the others are fetched one at a time per token, so memory is the embed and final
// slabs, one block, one window's activations and the cache: never the model.
// pick_token: at temperature 0 the greedy argmax (the lowest index among ties); otherwise the top_k
// largest logits (all when 0; ties to the lower index) over the temperature, softmaxed in double,
// and one uniform draw from the seeded Rng, so a seed fixes the text on every machine.
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
  // false: every token runs the prefill over its whole window (no key/value cache), the way
  // sampling worked before the cache; the same tokens, for comparison (bench/sample_kv.sh).
  bool kv_cache = true;
  // When every block's weights together take at most this many bytes they are read once and
  // kept on the device; otherwise each token reads every block again (a model larger than
  // memory). 0: always stream.
  int64_t resident_bytes = 0;
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
