// Llama block, forward and backward (Note [Llama blocks] in model/block.h).
#include "model/block_arch.h"
#include "model/norm.h"

namespace strata {

namespace {
NormSpec rms(const BlockDims& d) {
  return NormSpec{ModelArch::llama, d.norm_eps};
}
int64_t head_size(const BlockDims& d) {
  return d.C / d.NH;
}
// The rotated heads of a q|k|v row: every query head and every key head, which lead the row.
int64_t rotated_heads(const BlockDims& d) {
  return d.NH + d.NKV;
}
}  // namespace

void llama_block_forward(Device& dev, Stream& s, float* out, const BlockActs& a, const float* inp,
                         const BlockView& w, const BlockDims& d, const BlockGemm* gemm) {
  const int64_t BT = d.B * d.T, C = d.C, W = d.qkv_width, hs = head_size(d);
  norm_forward(dev, s, rms(d), a.ln1, nullptr, a.ln1_rstd, inp, w.ln1_w, nullptr, BT, C);
  linear_forward(dev, s, a.qkv_pre, a.ln1, w.qkv_w, nullptr, BT, C, W, gemm);
  lora_forward(dev, s, a.qkv_pre, a.ln1, BlockLinear::qkv, w, a, d, BT);
  dev.rope_forward(s, a.qkv, a.qkv_pre, d.rope, d.B, d.T, W, rotated_heads(d), hs);
  dev.repeat_kv_forward(s, a.qkv_rep, a.qkv, d.B, d.T, d.NH, d.NKV, hs);
  dev.attention_forward(s, a.atty, a.att, a.qkv_rep, d.B, d.T, C, d.NH);
  linear_forward(dev, s, a.attproj, a.atty, w.proj_w, nullptr, BT, C, C, gemm);
  lora_forward(dev, s, a.attproj, a.atty, BlockLinear::proj, w, a, d, BT);
  dev.add(s, a.res2, inp, a.attproj, BT * C);
  norm_forward(dev, s, rms(d), a.ln2, nullptr, a.ln2_rstd, a.res2, w.ln2_w, nullptr, BT, C);
  linear_forward(dev, s, a.fch, a.ln2, w.fc_w, nullptr, BT, C, 2 * d.F, gemm);
  lora_forward(dev, s, a.fch, a.ln2, BlockLinear::fc, w, a, d, BT);
  dev.swiglu_forward(s, a.fch_gelu, a.fch, BT, d.F);
  linear_forward(dev, s, a.fcproj, a.fch_gelu, w.fcproj_w, nullptr, BT, d.F, C, gemm);
  lora_forward(dev, s, a.fcproj, a.fch_gelu, BlockLinear::fcproj, w, a, d, BT);
  dev.add(s, out, a.res2, a.fcproj, BT * C);
}

void llama_block_backward(Device& dev, Stream& s, float* dinp, const BlockView& gw,
                          const BlockGradScratch& g, const float* dout, const float* inp,
                          const BlockActs& a, const BlockView& w, const BlockDims& d,
                          const BlockGemm* gemm) {
  const int64_t BT = d.B * d.T, C = d.C, W = d.qkv_width, F = d.F, hs = head_size(d);
  const int64_t f = static_cast<int64_t>(sizeof(float));
  // The scratch is shared by all blocks: zero what this block accumulates into.
  dev.fill_zero(s, g.dfch_gelu, BT * F * f);
  dev.fill_zero(s, g.dfch, BT * 2 * F * f);
  dev.fill_zero(s, g.dln, BT * C * f);
  dev.fill_zero(s, g.datty, BT * C * f);
  dev.fill_zero(s, g.dqkv, BT * 3 * C * f);
  dev.fill_zero(s, g.dqkv_rot, BT * W * f);
  dev.fill_zero(s, g.dqkv_pre, BT * W * f);

  // out = res2 + down(h): both see dout.
  dev.copy(s, g.dres2, dout, BT * C * f);
  linear_backward(dev, s, g.dfch_gelu, gw.fcproj_w, nullptr, dout, a.fch_gelu, w.fcproj_w, BT, F, C,
                  gemm);
  lora_backward(dev, s, g.dfch_gelu, gw, dout, a.fch_gelu, BlockLinear::fcproj, w, a, g, d, BT);
  dev.swiglu_backward(s, g.dfch, a.fch, g.dfch_gelu, BT, F);
  linear_backward(dev, s, g.dln, gw.fc_w, nullptr, g.dfch, a.ln2, w.fc_w, BT, C, 2 * F, gemm);
  lora_backward(dev, s, g.dln, gw, g.dfch, a.ln2, BlockLinear::fc, w, a, g, d, BT);
  norm_backward(dev, s, rms(d), g.dres2, gw.ln2_w, nullptr, g.dln, a.res2, w.ln2_w, nullptr,
                a.ln2_rstd, BT, C);

  // res2 = inp + o(atty): both see dres2.
  dev.scaled_add(s, dinp, g.dres2, 1.0f, BT * C);
  linear_backward(dev, s, g.datty, gw.proj_w, nullptr, g.dres2, a.atty, w.proj_w, BT, C, C, gemm);
  lora_backward(dev, s, g.datty, gw, g.dres2, a.atty, BlockLinear::proj, w, a, g, d, BT);
  dev.repeat_kv_forward(s, g.qkv_rep, a.qkv, d.B, d.T, d.NH, d.NKV, hs);
  dev.attention_backward(s, g.dqkv, g.datt, g.datty, g.qkv_rep, a.att, d.B, d.T, C, d.NH);
  dev.repeat_kv_backward(s, g.dqkv_rot, g.dqkv, d.B, d.T, d.NH, d.NKV, hs);
  dev.rope_backward(s, g.dqkv_pre, g.dqkv_rot, d.rope, d.B, d.T, W, rotated_heads(d), hs);
  dev.fill_zero(s, g.dln, BT * C * f);
  linear_backward(dev, s, g.dln, gw.qkv_w, nullptr, g.dqkv_pre, a.ln1, w.qkv_w, BT, C, W, gemm);
  lora_backward(dev, s, g.dln, gw, g.dqkv_pre, a.ln1, BlockLinear::qkv, w, a, g, d, BT);
  norm_backward(dev, s, rms(d), dinp, gw.ln1_w, nullptr, g.dln, inp, w.ln1_w, nullptr, a.ln1_rstd,
                BT, C);
}

}  // namespace strata
