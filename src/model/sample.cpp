// Note [Sampling] in sample.h.
#include "model/sample.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>

#include "model/block.h"
#include "model/block_decode.h"
#include "model/gpt.h"
#include "model/layout.h"
#include "model/norm.h"
#include "model/rope.h"

namespace strata {

int32_t pick_token(const float* logits, int64_t V, const SampleOptions& o, Rng& rng) {
  if (o.temperature <= 0) {
    return static_cast<int32_t>(std::max_element(logits, logits + V) - logits);
  }
  std::vector<int32_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  const int64_t k = o.top_k > 0 ? std::min(o.top_k, V) : V;
  // The k largest, larger first, ties to the lower index.
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  std::vector<double> p(static_cast<size_t>(k));
  const double top = logits[order[0]];
  double sum = 0;
  for (int64_t i = 0; i < k; ++i) {
    p[static_cast<size_t>(i)] =
        std::exp((logits[order[static_cast<size_t>(i)]] - top) / o.temperature);
    sum += p[static_cast<size_t>(i)];
  }
  const double u = rng.next_unit() * sum;  // in (0, sum]
  double acc = 0;
  for (int64_t i = 0; i < k; ++i) {
    acc += p[static_cast<size_t>(i)];
    if (u <= acc) return order[static_cast<size_t>(i)];
  }
  return order[static_cast<size_t>(k - 1)];  // rounding left u above the last sum
}

namespace {

// The device state of one generation: the embedding and final slabs (kept), one block's weights
// at a time, the window's activations, the key/value cache of every block, and the head's
// buffers (Note [Sampling]).
class Sampler {
 public:
  // window: the most positions a window holds (Note [Sampling]), at most the model's context.
  Sampler(Device& dev, const ModelConfig& model, const SlabWeightsFn& weights,
          int64_t resident_bytes, int64_t window)
      : dev_(dev),
        model_(model),
        layout_(make_param_layout(model)),
        weights_(weights),
        resident_bytes_(resident_bytes),
        window_(window) {}

  Status allocate();
  // The window (T tokens at positions 0 .. T-1) through every block; the cache holds their keys
  // and values afterwards. Leaves the last block's output in x_ (T, C).
  Status prefill(const int32_t* window, int64_t T);
  // One token at position pos through every block with the cache (positions 0 .. pos-1 cached).
  // Leaves its last block's output in x_ (1, C).
  Status decode(int32_t token, int64_t pos);
  // The logits (V) of row `row` of x_, on the host: the final norm of that row (the norm is per
  // position), then the head.
  Status logits(int64_t row, float* host_logits);

 private:
  Status fetch(int64_t slab, Buffer& dst);
  // Block l's weights on the device: the resident copy, or fetched now into block_.
  Result<float*> block_weights(int64_t l);

  Device& dev_;
  const ModelConfig& model_;
  const ParamLayout layout_;
  const SlabWeightsFn& weights_;
  const int64_t resident_bytes_;
  const int64_t window_;
  std::unique_ptr<Stream> s_;
  std::vector<Buffer> resident_;  // (L) each (block slab): every block, when they fit
  Buffer embed_, final_, block_;  // (embed slab), (final slab), (block slab)
  Buffer x_, y_;                  // (context, C) each: a block's input and output
  Buffer acts_;                   // block_acts_floats of a (1, context) window
  Buffer decode_;                 // decode_scratch_floats
  Buffer cache_;                  // (L, context, kv_row_floats) every block's keys and values
  Buffer head_;                   // mean, rstd (1 each), lnf (C), logits (V): one row
  Buffer tokens_;                 // (context) int32
  Buffer rope_;                   // Llama's cos/sin table; empty for GPT-2
  std::vector<float> staged_;     // (largest slab) host staging for the weights
};

Status Sampler::allocate() {
  const int64_t Tmax = window_, C = model_.n_embd, V = model_.vocab_size;
  const int64_t es = layout_.slabs[static_cast<size_t>(layout_.embed_slab())].numel;
  const int64_t fs = layout_.slabs[static_cast<size_t>(layout_.final_slab())].numel;
  const int64_t bs = layout_.slabs[static_cast<size_t>(layout_.block_slab(0))].numel;
  const BlockDims widest = block_dims(dev_, model_, 1, Tmax);
  const BlockDims one = block_dims(dev_, model_, 1, 1);
  s_ = dev_.create_stream("sample");
  STRATA_ASSIGN_OR_RETURN(embed_, dev_.alloc(es * 4));
  STRATA_ASSIGN_OR_RETURN(final_, dev_.alloc(fs * 4));
  STRATA_ASSIGN_OR_RETURN(block_, dev_.alloc(bs * 4));
  STRATA_ASSIGN_OR_RETURN(x_, dev_.alloc(Tmax * C * 4));
  STRATA_ASSIGN_OR_RETURN(y_, dev_.alloc(Tmax * C * 4));
  STRATA_ASSIGN_OR_RETURN(acts_, dev_.alloc(block_acts_floats(widest) * 4));
  STRATA_ASSIGN_OR_RETURN(decode_, dev_.alloc(decode_scratch_floats(one, Tmax) * 4));
  STRATA_ASSIGN_OR_RETURN(cache_, dev_.alloc(model_.n_layer * Tmax * kv_row_floats(one) * 4));
  STRATA_ASSIGN_OR_RETURN(head_, dev_.alloc((2 + C + V) * 4));
  STRATA_ASSIGN_OR_RETURN(tokens_, dev_.alloc(Tmax * 4));
  STRATA_ASSIGN_OR_RETURN(rope_, upload_rope_table(dev_, model_, Tmax));
  staged_.resize(static_cast<size_t>(std::max({es, fs, bs})));
  STRATA_RETURN_IF_ERROR(fetch(layout_.embed_slab(), embed_));
  STRATA_RETURN_IF_ERROR(fetch(layout_.final_slab(), final_));
  if (model_.n_layer * bs * 4 <= resident_bytes_) {  // every block read once, kept
    for (int64_t l = 0; l < model_.n_layer; ++l) {
      STRATA_ASSIGN_OR_RETURN(Buffer b, dev_.alloc(bs * 4));
      STRATA_RETURN_IF_ERROR(fetch(layout_.block_slab(l), b));
      resident_.push_back(std::move(b));
    }
  }
  return Status();
}

Result<float*> Sampler::block_weights(int64_t l) {
  if (!resident_.empty()) return resident_[static_cast<size_t>(l)].f32();
  STRATA_RETURN_IF_ERROR(fetch(layout_.block_slab(l), block_));
  return block_.f32();
}

Status Sampler::fetch(int64_t slab, Buffer& dst) {
  s_->synchronize();  // dst may still be read by work enqueued for the previous block
  STRATA_RETURN_IF_ERROR(weights_(slab, staged_.data()));
  dev_.copy(*s_, dst.data(), staged_.data(), layout_.slabs[static_cast<size_t>(slab)].numel * 4);
  s_->synchronize();
  return Status();
}

Status Sampler::prefill(const int32_t* window, int64_t T) {
  const int64_t C = model_.n_embd, Tmax = window_;
  const EmbedView e = embed_slab_view(layout_, embed_.f32());
  dev_.copy(*s_, tokens_.data(), window, T * 4);
  dev_.embedding_forward(*s_, x_.f32(), tokens_.i32(), e.wte, e.wpe, 1, T, C);
  FloatCarver carve(acts_.f32());
  const BlockDims d = block_dims(dev_, model_, 1, T, rope_.f32());
  const BlockActs a = block_acts_carve(carve, d);
  const int64_t kv = kv_row_floats(d);
  for (int64_t l = 0; l < model_.n_layer; ++l) {
    STRATA_ASSIGN_OR_RETURN(float* weights, block_weights(l));
    block_forward(dev_, *s_, y_.f32(), a, x_.f32(), block_slab_view(layout_, weights, l), d);
    // Each position's k|v (the tail of its q|k|v row, k rotated for Llama) into the cache.
    float* cache = cache_.f32() + l * Tmax * kv;
    for (int64_t t = 0; t < T; ++t) {
      dev_.copy(*s_, cache + t * kv, a.qkv + t * d.qkv_width + C, kv * 4);
    }
    std::swap(x_, y_);
  }
  s_->synchronize();  // the window's tokens were read from the caller's memory
  return Status();
}

Status Sampler::decode(int32_t token, int64_t pos) {
  const int64_t C = model_.n_embd, Tmax = window_;
  const EmbedView e = embed_slab_view(layout_, embed_.f32());
  dev_.copy(*s_, tokens_.data(), &token, 4);
  // Position pos's learned embedding (GPT-2): the table from its row pos.
  dev_.embedding_forward(*s_, x_.f32(), tokens_.i32(), e.wte,
                         e.wpe != nullptr ? e.wpe + pos * C : nullptr, 1, 1, C);
  const BlockDims d = block_dims(dev_, model_, 1, 1, rope_.f32());
  FloatCarver carve(decode_.f32());
  const DecodeScratch g = decode_scratch_carve(carve, d, Tmax);
  const int64_t kv = kv_row_floats(d);
  for (int64_t l = 0; l < model_.n_layer; ++l) {
    STRATA_ASSIGN_OR_RETURN(float* weights, block_weights(l));
    block_decode(dev_, *s_, y_.f32(), g, x_.f32(), cache_.f32() + l * Tmax * kv, pos,
                 block_slab_view(layout_, weights, l), d);
    std::swap(x_, y_);
  }
  s_->synchronize();  // `token` lives on this frame
  return Status();
}

Status Sampler::logits(int64_t row, float* host_logits) {
  const int64_t C = model_.n_embd, V = model_.vocab_size;
  const EmbedView e = embed_slab_view(layout_, embed_.f32());
  const FinalView fin = final_slab_view(layout_, final_.f32());
  HeadActs a;
  a.lnf_mean = head_.f32();     // (1)
  a.lnf_rstd = a.lnf_mean + 1;  // (1)
  a.lnf = a.lnf_rstd + 1;       // (C) the row's
  a.logits = a.lnf + C;         // (V)
  // The final norm is per position: only the row's is needed.
  lm_head_logits(dev_, *s_, a, x_.f32() + row * C, e, fin, model_, 1);
  dev_.copy(*s_, host_logits, a.logits, V * 4);
  s_->synchronize();
  return Status();
}

}  // namespace

Status check_prompt(const ModelConfig& model, const std::vector<int32_t>& prompt) {
  if (prompt.empty()) return invalid_argument("the prompt has no tokens");
  for (int32_t t : prompt) {
    if (t < 0 || t >= model.vocab_size) {
      return invalid_argument("prompt token " + std::to_string(t) + " is outside the vocabulary (" +
                              std::to_string(model.vocab_size) + " tokens)");
    }
  }
  return Status();
}

Result<std::vector<int32_t>> generate(Device& dev, const ModelConfig& model,
                                      const SlabWeightsFn& weights, std::vector<int32_t> prompt,
                                      const SampleOptions& o, const SampleHooks& hooks) {
  STRATA_RETURN_IF_ERROR(check_prompt(model, prompt));
  // The window never holds more than the prompt and the new tokens: nothing is allocated by a
  // context (Llama 3.1's 131072) the sample does not reach; past the context it slides as before.
  const auto prompt_len = static_cast<int64_t>(prompt.size());
  const int64_t Tmax =
      std::min(model.context_length, prompt_len + std::max<int64_t>(o.new_tokens, 1));
  Sampler sampler(dev, model, weights, o.resident_bytes, Tmax);
  STRATA_RETURN_IF_ERROR(sampler.allocate());
  const int64_t keep = std::max<int64_t>(1, Tmax / 2);  // a slide's window (Note [Sampling])
  SampleStats local;
  SampleStats& stats = hooks.stats != nullptr ? *hooks.stats : local;
  stats = SampleStats();
  std::vector<float> host_logits(static_cast<size_t>(model.vocab_size));
  Rng rng(o.seed);
  std::vector<int32_t> out = std::move(prompt);
  // The window is out[start, len); the keys and values of its first `cached` tokens are cached.
  int64_t start = std::max<int64_t>(0, static_cast<int64_t>(out.size()) - Tmax);
  int64_t cached = 0;
  for (int64_t n = 0; n < o.new_tokens; ++n) {
    if (hooks.stop && hooks.stop()) break;
    const auto len = static_cast<int64_t>(out.size());
    if (len - start > Tmax) {  // the window is full: slide, every position moves
      start = len - keep;
      cached = 0;
    }
    const int64_t T = len - start;
    int64_t row = 0;
    if (o.kv_cache && cached > 0 && cached == T - 1) {  // one new token at the next position
      STRATA_RETURN_IF_ERROR(sampler.decode(out.back(), T - 1));
      ++stats.decodes;
    } else {  // the first window, or one that slid
      STRATA_RETURN_IF_ERROR(sampler.prefill(out.data() + start, T));
      ++stats.prefills;
      row = T - 1;
    }
    cached = T;
    STRATA_RETURN_IF_ERROR(sampler.logits(row, host_logits.data()));
    out.push_back(pick_token(host_logits.data(), model.vocab_size, o, rng));
    if (hooks.on_token) STRATA_RETURN_IF_ERROR(hooks.on_token(out.back()));
  }
  return out;
}

}  // namespace strata
