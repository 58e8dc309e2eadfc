#include "model/block_decode.h"

#include "model/norm.h"

namespace strata {

namespace {}  // namespace

DecodeScratch decode_scratch_carve(FloatCarver& c, const BlockDims& d, int64_t context_length) {
  DecodeScratch g{};
  g.ln1 = c.take(d.C);
  g.mean = c.take(1);
  g.rstd = c.take(1);
  g.qkv_pre = c.take(d.qkv_width);
  g.qkv = c.take(d.qkv_width);
  g.atty = c.take(d.C);
  g.attproj = c.take(d.C);
  g.res2 = c.take(d.C);
  g.ln2 = c.take(d.C);
  g.fch = c.take(block_fc_width(d));
  g.fch_act = c.take(d.F);
  g.fcproj = c.take(d.C);
  g.scores = c.take(d.NH * context_length);
  return g;
}

void block_decode(Device& dev, Stream& s, float* out, const DecodeScratch& g, const float* x,
                  float* kv_cache, int64_t pos, const BlockView& w, const BlockDims& d) {
  const int64_t C = d.C, W = d.qkv_width, hs = C / d.NH, kv = kv_row_floats(d);
  const NormSpec norm{d.arch, d.norm_eps};
  norm_forward(dev, s, norm, g.ln1, g.mean, g.rstd, x, w.ln1_w, w.ln1_b, 1, C);
  if (block_is_llama(d)) {
    dev.matmul(s, g.qkv_pre, g.ln1, w.qkv_w, nullptr, 1, W, C, {.trans_b = true});
    // Position pos's cos/sin: the table from its row pos, as a sequence of one at position 0.
    const float* rope_at = d.rope + pos * (hs / 2) * 2;
    dev.rope_forward(s, g.qkv, g.qkv_pre, rope_at, 1, 1, W, d.NH + d.NKV, hs);
  } else {
    dev.matmul(s, g.qkv, g.ln1, w.qkv_w, w.qkv_b, 1, W, C, {.trans_b = true});
  }
  dev.copy(s, kv_cache + pos * kv, g.qkv + C, kv * 4);
  dev.attention_decode(s, g.atty, g.scores, g.qkv, kv_cache, pos + 1, d.NH, d.NKV, hs);
  dev.matmul(s, g.attproj, g.atty, w.proj_w, w.proj_b, 1, C, C, {.trans_b = true});
  dev.add(s, g.res2, x, g.attproj, C);
  norm_forward(dev, s, norm, g.ln2, g.mean, g.rstd, g.res2, w.ln2_w, w.ln2_b, 1, C);
  dev.matmul(s, g.fch, g.ln2, w.fc_w, w.fc_b, 1, block_fc_width(d), C, {.trans_b = true});
  if (block_is_llama(d)) {
    dev.swiglu_forward(s, g.fch_act, g.fch, 1, d.F);
  } else {
    dev.gelu_forward(s, g.fch_act, g.fch, d.F);
  }
  dev.matmul(s, g.fcproj, g.fch_act, w.fcproj_w, w.fcproj_b, 1, C, d.F, {.trans_b = true});
  dev.add(s, out, g.res2, g.fcproj, C);
}

}  // namespace strata
