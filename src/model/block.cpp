#include "model/block.h"

#include <algorithm>

#include "core/check.h"
#include "core/dropout_mask.h"
#include "model/block_arch.h"

namespace strata {

BlockDims block_dims(const DeviceTraits& dev, const ModelConfig& m, int64_t B, int64_t T,
                     const float* rope, const LoraConfig& lora) {
  BlockDims d;
  d.arch = m.arch;
  d.B = B;
  d.T = T;
  d.C = m.n_embd;
  d.NH = m.n_head;
  d.NKV = m.kv_heads();
  d.F = m.ffn();
  d.qkv_width = m.n_embd + 2 * m.kv_width();
  d.norm_eps = static_cast<float>(m.norm_eps);
  d.rope = rope;
  d.att_saved = dev.attention_saved_floats(B, T, m.n_head);
  d.att_scratch = dev.attention_scratch_floats(B, T, m.n_head);
  if (lora.enabled()) {
    d.lora_rank = lora.rank;
    d.lora_scale = lora.alpha / static_cast<float>(lora.rank);
    const auto on = lora_targeted(m, lora);
    for (int slot = 0; slot < static_cast<int>(lora_modules(m.arch).size()); slot++) {
      d.lora_slots[static_cast<size_t>(slot)] = lora_geometry(m, slot);
      if (on[static_cast<size_t>(slot)]) {
        d.lora_widest_out =
            std::max(d.lora_widest_out, d.lora_slots[static_cast<size_t>(slot)].out);
        d.lora_widest_in = std::max(d.lora_widest_in, d.lora_slots[static_cast<size_t>(slot)].in);
      }
    }
    d.lora_dropout = lora.dropout;
  }
  return d;
}

namespace {

void carve_saved(FloatCarver& c, const BlockDims& d, BlockActs& a) {
  const int64_t BT = d.B * d.T, C = d.C;
  a.ln1 = c.take(BT * C);
  a.ln1_mean = block_is_llama(d) ? nullptr : c.take(BT);
  a.ln1_rstd = c.take(BT);
  a.qkv = c.take(BT * d.qkv_width);
  a.atty = c.take(BT * C);
  a.att = c.take(d.att_saved);
  a.res2 = c.take(BT * C);
  a.ln2 = c.take(BT * C);
  a.ln2_mean = block_is_llama(d) ? nullptr : c.take(BT);
  a.ln2_rstd = c.take(BT);
  a.fch = c.take(BT * block_fc_width(d));
  a.fch_gelu = c.take(BT * d.F);
}
}  // namespace

BlockActs block_acts_carve(FloatCarver& c, const BlockDims& d) {
  const int64_t BT = d.B * d.T, C = d.C;
  BlockActs a{};
  carve_saved(c, d, a);
  a.attproj = c.take(BT * C);  // Note [Saved activations]: forward-only tensors last
  a.fcproj = c.take(BT * C);
  a.qkv_pre = block_is_llama(d) ? c.take(BT * d.qkv_width) : nullptr;
  a.qkv_rep = block_is_llama(d) ? c.take(BT * 3 * C) : nullptr;
  a.lora_t = d.lora_rank > 0 ? c.take(BT * d.lora_rank) : nullptr;
  a.lora_u = d.lora_rank > 0 ? c.take(BT * d.lora_widest_out) : nullptr;
  a.lora_x = d.lora_dropout > 0 ? c.take(BT * d.lora_widest_in) : nullptr;
  return a;
}

int64_t block_saved_floats(const BlockDims& d) {
  FloatCarver counter(nullptr);
  BlockActs a{};
  carve_saved(counter, d, a);
  return counter.used();
}

BlockGradScratch block_grad_scratch_carve(FloatCarver& c, const BlockDims& d) {
  const int64_t BT = d.B * d.T, C = d.C;
  BlockGradScratch g{};
  g.dres2 = c.take(BT * C);
  g.datty = c.take(BT * C);
  g.dqkv = c.take(BT * 3 * C);
  g.dln = c.take(BT * C);
  g.dfch = c.take(BT * block_fc_width(d));
  g.dfch_gelu = c.take(BT * d.F);
  g.datt = c.take(d.att_scratch);
  g.qkv_rep = block_is_llama(d) ? c.take(BT * 3 * C) : nullptr;
  g.dqkv_rot = block_is_llama(d) ? c.take(BT * d.qkv_width) : nullptr;
  g.dqkv_pre = block_is_llama(d) ? c.take(BT * d.qkv_width) : nullptr;
  g.lora_dy = d.lora_rank > 0 ? c.take(BT * d.lora_widest_out) : nullptr;
  g.lora_t = d.lora_rank > 0 ? c.take(BT * d.lora_rank) : nullptr;
  g.lora_dt = d.lora_rank > 0 ? c.take(BT * d.lora_rank) : nullptr;
  g.lora_x = d.lora_dropout > 0 ? c.take(BT * d.lora_widest_in) : nullptr;
  return g;
}

int64_t block_gemm_scratch_elems(const BlockDims& d) {
  const int64_t widest_out = std::max({d.qkv_width, d.C, block_fc_width(d)});
  const int64_t widest_in = std::max(d.C, d.F);
  return d.B * d.T * (widest_out + widest_in);  // dy and x of the backward's widest layers
}

void block_forward(Device& dev, Stream& s, float* out, const BlockActs& a, const float* inp,
                   const BlockView& w, const BlockDims& d, const BlockGemm* gemm) {
  if (block_is_llama(d)) {
    STRATA_CHECK_MSG(d.rope != nullptr, "a Llama block's forward needs the rope table");
    llama_block_forward(dev, s, out, a, inp, w, d, gemm);
  } else {
    gpt2_block_forward(dev, s, out, a, inp, w, d, gemm);
  }
}

void block_backward(Device& dev, Stream& s, float* dinp, const BlockView& gw,
                    const BlockGradScratch& g, const float* dout, const float* inp,
                    const BlockActs& a, const BlockView& w, const BlockDims& d,
                    const BlockGemm* gemm) {
  if (block_is_llama(d)) {
    STRATA_CHECK_MSG(d.rope != nullptr, "a Llama block's backward needs the rope table");
    llama_block_backward(dev, s, dinp, gw, g, dout, inp, a, w, d, gemm);
  } else {
    gpt2_block_backward(dev, s, dinp, gw, g, dout, inp, a, w, d, gemm);
  }
}

namespace {

// The bf16 twin of the f32 weight matrix at W (Note [bf16 GEMMs]).
const bf16_t* bf16_weights(const BlockGemm& g, const float* W) {
  return g.weights + (W - g.f32_base);
}

// Trainers ask supports(Capability::bf16_matmul) before they hand out a BlockGemm, so a refusal
// here is a bug.
void check_bf16(const Status& st) {
  STRATA_CHECK_MSG(st.ok(), st.to_string().c_str());
}

}  // namespace

void linear_forward(Device& dev, Stream& s, float* y, const float* x, const float* W,
                    const float* b, int64_t rows, int64_t in_features, int64_t out_features,
                    const BlockGemm* gemm) {
  if (gemm == nullptr) {
    dev.matmul(s, y, x, W, b, rows, out_features, in_features, {.trans_b = true});
    return;
  }
  bf16_t* xb = gemm->scratch;  // (rows, in_features)
  dev.convert_f32_to_bf16(s, xb, x, rows * in_features);
  check_bf16(dev.matmul_bf16(s, y, xb, bf16_weights(*gemm, W), b, rows, out_features, in_features,
                             {.trans_b = true}));
}

void linear_backward(Device& dev, Stream& s, float* dx, float* dW, float* db, const float* dy,
                     const float* x, const float* W, int64_t rows, int64_t in_features,
                     int64_t out_features, const BlockGemm* gemm) {
  if (gemm == nullptr) {
    dev.matmul(s, dx, dy, W, nullptr, rows, in_features, out_features, {.accumulate = true});
    if (dW != nullptr) {
      dev.matmul(s, dW, dy, x, nullptr, out_features, in_features, rows,
                 {.trans_a = true, .accumulate = true});
    }
  } else {
    bf16_t* dyb = gemm->scratch;                       // (rows, out_features)
    bf16_t* xb = gemm->scratch + rows * out_features;  // (rows, in_features)
    dev.convert_f32_to_bf16(s, dyb, dy, rows * out_features);
    if (dW != nullptr) dev.convert_f32_to_bf16(s, xb, x, rows * in_features);
    check_bf16(dev.matmul_bf16(s, dx, dyb, bf16_weights(*gemm, W), nullptr, rows, in_features,
                               out_features, {.accumulate = true}));
    if (dW != nullptr) {
      check_bf16(dev.matmul_bf16(s, dW, dyb, xb, nullptr, out_features, in_features, rows,
                                 {.trans_a = true, .accumulate = true}));
    }
  }
  if (db != nullptr) dev.bias_backward(s, db, dy, rows, out_features);
}

namespace {

DropoutMask lora_dropout_mask(const BlockDims& d, uint64_t key, size_t slot) {
  return dropout_mask(lora_dropout_stream(key, static_cast<int>(slot)), d.lora_dropout);
}

}  // namespace

void lora_forward(Device& dev, Stream& s, float* y, const float* x, BlockLinear linear,
                  const BlockView& w, const BlockActs& a, const BlockDims& d, int64_t rows) {
  const int64_t r = d.lora_rank;
  for (size_t slot = 0; slot < w.lora.size() && r > 0; slot++) {
    const LoraGeometry& g = d.lora_slots[slot];
    const LoraPair& p = w.lora[slot];
    if (p.A == nullptr || g.linear != linear) continue;
    const float* xd = x;  // (rows, in) dropout(x)
    if (a.lora_drop && d.lora_dropout > 0) {
      dev.dropout_apply(s, a.lora_x, x, rows * g.in, lora_dropout_mask(d, a.lora_key, slot), false);
      xd = a.lora_x;
    }
    dev.matmul(s, a.lora_t, xd, p.A, nullptr, rows, r, g.in, {.trans_b = true});  // (rows, r)
    dev.matmul(s, a.lora_u, a.lora_t, p.B, nullptr, rows, g.out, r,
               {.trans_b = true});  // (rows, out)
    dev.scaled_copy_2d(s, y + g.out_begin, g.out_width, a.lora_u, g.out, rows, g.out, d.lora_scale,
                       true);
  }
}

void lora_backward(Device& dev, Stream& s, float* dx, const BlockView& gw, const float* dy,
                   const float* x, BlockLinear linear, const BlockView& w, const BlockActs& a,
                   const BlockGradScratch& g, const BlockDims& d, int64_t rows) {
  const int64_t r = d.lora_rank;
  for (size_t slot = 0; slot < w.lora.size() && r > 0; slot++) {
    const LoraGeometry& geo = d.lora_slots[slot];
    const LoraPair& p = w.lora[slot];
    if (p.A == nullptr || geo.linear != linear) continue;
    const int64_t out = geo.out, in = geo.in;
    // dys = scale dy[:, range] (rows, out); t = xd A^T (rows, r), recomputed; xd = dropout(x).
    const bool drop = a.lora_drop && d.lora_dropout > 0;
    const DropoutMask mask = drop ? lora_dropout_mask(d, a.lora_key, slot) : DropoutMask{};
    const float* xd = x;
    if (drop) {
      dev.dropout_apply(s, g.lora_x, x, rows * in, mask, false);
      xd = g.lora_x;
    }
    dev.scaled_copy_2d(s, g.lora_dy, out, dy + geo.out_begin, geo.out_width, rows, out,
                       d.lora_scale, false);
    dev.matmul(s, g.lora_t, xd, p.A, nullptr, rows, r, in, {.trans_b = true});
    const LoraPair& gp = gw.lora[slot];
    if (gp.B != nullptr) {  // dB (out, r) += dys^T t
      dev.matmul(s, gp.B, g.lora_dy, g.lora_t, nullptr, out, r, rows,
                 {.trans_a = true, .accumulate = true});
    }
    dev.matmul(s, g.lora_dt, g.lora_dy, p.B, nullptr, rows, r, out, {});  // dt (rows, r) = dys B
    if (gp.A != nullptr) {                                                // dA (r, in) += dt^T xd
      dev.matmul(s, gp.A, g.lora_dt, xd, nullptr, r, in, rows,
                 {.trans_a = true, .accumulate = true});
    }
    if (!drop) {
      dev.matmul(s, dx, g.lora_dt, p.A, nullptr, rows, in, r, {.accumulate = true});  // dx += dt A
    } else {  // dx += dropout(dt A), the same mask
      dev.matmul(s, g.lora_x, g.lora_dt, p.A, nullptr, rows, in, r, {});
      dev.dropout_apply(s, dx, g.lora_x, rows * in, mask, true);
    }
  }
}

}  // namespace strata
