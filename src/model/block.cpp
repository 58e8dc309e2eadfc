#include "model/block.h"

#include <algorithm>

#include "core/check.h"
#include "model/block_arch.h"

namespace strata {

BlockDims block_dims(const DeviceTraits& dev, const ModelConfig& m, int64_t B, int64_t T,
                     const float* rope) {
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
    dev.matmul(s, dW, dy, x, nullptr, out_features, in_features, rows,
               {.trans_a = true, .accumulate = true});
  } else {
    bf16_t* dyb = gemm->scratch;                       // (rows, out_features)
    bf16_t* xb = gemm->scratch + rows * out_features;  // (rows, in_features)
    dev.convert_f32_to_bf16(s, dyb, dy, rows * out_features);
    dev.convert_f32_to_bf16(s, xb, x, rows * in_features);
    check_bf16(dev.matmul_bf16(s, dx, dyb, bf16_weights(*gemm, W), nullptr, rows, in_features,
                               out_features, {.accumulate = true}));
    check_bf16(dev.matmul_bf16(s, dW, dyb, xb, nullptr, out_features, in_features, rows,
                               {.trans_a = true, .accumulate = true}));
  }
  if (db != nullptr) dev.bias_backward(s, db, dy, rows, out_features);
}

}  // namespace strata
