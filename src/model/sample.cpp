// Note [Sampling] in sample.h.
#include "model/sample.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "model/block.h"
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

Result<std::vector<int32_t>> generate(Device& dev, const ModelConfig& model,
                                      const SlabWeightsFn& weights, std::vector<int32_t> prompt,
                                      const SampleOptions& o) {
  if (prompt.empty()) return invalid_argument("the prompt has no tokens");
  for (int32_t t : prompt) {
    if (t < 0 || t >= model.vocab_size) {
      return invalid_argument("prompt token " + std::to_string(t) + " is outside the vocabulary (" +
                              std::to_string(model.vocab_size) + " tokens)");
    }
  }
  const ParamLayout layout = make_param_layout(model);
  const int64_t Tmax = model.context_length, C = model.n_embd, V = model.vocab_size;
  const Slab& es = layout.slabs[static_cast<size_t>(layout.embed_slab())];
  const Slab& fs = layout.slabs[static_cast<size_t>(layout.final_slab())];
  const Slab& bs = layout.slabs[static_cast<size_t>(layout.block_slab(0))];
  const BlockDims widest = block_dims(dev, model, 1, Tmax);
  std::unique_ptr<Stream> s = dev.create_stream("sample");
  // Device memory, and host staging for the weights (a device's copies come from host).
  STRATA_ASSIGN_OR_RETURN(Buffer embed, dev.alloc(es.numel * 4));    // (embed slab)
  STRATA_ASSIGN_OR_RETURN(Buffer final_w, dev.alloc(fs.numel * 4));  // (final slab)
  STRATA_ASSIGN_OR_RETURN(Buffer block, dev.alloc(bs.numel * 4));    // (block slab)
  STRATA_ASSIGN_OR_RETURN(Buffer x, dev.alloc(Tmax * C * 4));        // (1, T, C)
  STRATA_ASSIGN_OR_RETURN(Buffer y, dev.alloc(Tmax * C * 4));        // (1, T, C)
  STRATA_ASSIGN_OR_RETURN(Buffer acts, dev.alloc(block_acts_floats(widest) * 4));
  STRATA_ASSIGN_OR_RETURN(Buffer head,
                          dev.alloc((2 * Tmax + C + V) * 4));           // mean, rstd, lnf, logits
  STRATA_ASSIGN_OR_RETURN(Buffer tokens, dev.alloc(Tmax * 4));          // (1, T) int32
  STRATA_ASSIGN_OR_RETURN(Buffer rope, upload_rope_table(dev, model));  // Llama's, or empty
  std::vector<float> staged(static_cast<size_t>(std::max({es.numel, fs.numel, bs.numel})));
  auto fetch = [&](int64_t slab, Buffer& dst) -> Status {
    STRATA_RETURN_IF_ERROR(weights(slab, staged.data()));
    dev.copy(*s, dst.data(), staged.data(), layout.slabs[static_cast<size_t>(slab)].numel * 4);
    s->synchronize();
    return Status();
  };
  STRATA_RETURN_IF_ERROR(fetch(layout.embed_slab(), embed));
  STRATA_RETURN_IF_ERROR(fetch(layout.final_slab(), final_w));
  const EmbedView e = embed_slab_view(layout, embed.f32());
  const FinalView fin = final_slab_view(layout, final_w.f32());
  float* mean = head.f32();   // (T)
  float* rstd = mean + Tmax;  // (T)
  float* lnf = rstd + Tmax;   // (C) the last position's
  float* logits = lnf + C;    // (V)
  std::vector<float> host_logits(static_cast<size_t>(V));
  Rng rng(o.seed);

  std::vector<int32_t> out = std::move(prompt);
  for (int64_t n = 0; n < o.new_tokens; ++n) {
    const int64_t T = std::min<int64_t>(static_cast<int64_t>(out.size()), Tmax);
    const int32_t* window = out.data() + out.size() - static_cast<size_t>(T);
    dev.copy(*s, tokens.data(), window, T * 4);
    dev.embedding_forward(*s, x.f32(), tokens.i32(), e.wte, e.wpe, 1, T, C);
    FloatCarver carve(acts.f32());
    const BlockDims d = block_dims(dev, model, 1, T, rope.f32());
    const BlockActs a = block_acts_carve(carve, d);
    for (int64_t l = 0; l < model.n_layer; ++l) {
      s->synchronize();  // the block buffer is about to be refilled
      STRATA_RETURN_IF_ERROR(fetch(layout.block_slab(l), block));
      block_forward(dev, *s, y.f32(), a, x.f32(), block_slab_view(layout, block.f32(), l), d);
      std::swap(x, y);
    }
    // The head for the last position: the final norm over the window (per position), then its
    // row.
    norm_forward(dev, *s, final_norm_spec(model), y.f32(), mean, rstd, x.f32(), fin.lnf_w,
                 fin.lnf_b, T, C);
    dev.copy(*s, lnf, y.f32() + (T - 1) * C, C * 4);
    dev.matmul(*s, logits, lnf, lm_head_of(e, fin), nullptr, 1, V, C, false, true, false);
    dev.copy(*s, host_logits.data(), logits, V * 4);
    s->synchronize();
    out.push_back(pick_token(host_logits.data(), V, o, rng));
  }
  return out;
}

}  // namespace strata
