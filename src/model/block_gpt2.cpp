// GPT-2 block (pre-LN), forward and backward (model/block.h).
#include "model/block_arch.h"

namespace strata {

void gpt2_block_forward(Device& dev, Stream& s, float* out, const BlockActs& a, const float* inp,
                        const BlockView& w, const BlockDims& d, const BlockGemm* gemm) {
  const int64_t BT = d.B * d.T, C = d.C;
  dev.layernorm_forward(s, a.ln1, a.ln1_mean, a.ln1_rstd, inp, w.ln1_w, w.ln1_b, BT, C);
  linear_forward(dev, s, a.qkv, a.ln1, w.qkv_w, w.qkv_b, BT, C, 3 * C, gemm);
  lora_forward(dev, s, a.qkv, a.ln1, BlockLinear::qkv, w, a, d, BT);
  dev.attention_forward(s, a.atty, a.att, a.qkv, d.B, d.T, C, d.NH);
  linear_forward(dev, s, a.attproj, a.atty, w.proj_w, w.proj_b, BT, C, C, gemm);
  lora_forward(dev, s, a.attproj, a.atty, BlockLinear::proj, w, a, d, BT);
  dev.add(s, a.res2, inp, a.attproj, BT * C);
  dev.layernorm_forward(s, a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, w.ln2_w, w.ln2_b, BT, C);
  linear_forward(dev, s, a.fch, a.ln2, w.fc_w, w.fc_b, BT, C, 4 * C, gemm);
  lora_forward(dev, s, a.fch, a.ln2, BlockLinear::fc, w, a, d, BT);
  dev.gelu_forward(s, a.fch_gelu, a.fch, BT * 4 * C);
  linear_forward(dev, s, a.fcproj, a.fch_gelu, w.fcproj_w, w.fcproj_b, BT, 4 * C, C, gemm);
  lora_forward(dev, s, a.fcproj, a.fch_gelu, BlockLinear::fcproj, w, a, d, BT);
  dev.add(s, out, a.res2, a.fcproj, BT * C);
}

void gpt2_block_backward(Device& dev, Stream& s, float* dinp, const BlockView& gw,
                         const BlockGradScratch& g, const float* dout, const float* inp,
                         const BlockActs& a, const BlockView& w, const BlockDims& d,
                         const BlockGemm* gemm) {
  const int64_t BT = d.B * d.T, C = d.C;
  const int64_t f = static_cast<int64_t>(sizeof(float));
  // The scratch is shared by all blocks: zero what this block accumulates into.
  dev.fill_zero(s, g.dfch_gelu, BT * 4 * C * f);
  dev.fill_zero(s, g.dfch, BT * 4 * C * f);
  dev.fill_zero(s, g.dln, BT * C * f);
  dev.fill_zero(s, g.datty, BT * C * f);
  dev.fill_zero(s, g.dqkv, BT * 3 * C * f);

  // out = res2 + fcproj: both see dout.
  dev.copy(s, g.dres2, dout, BT * C * f);
  linear_backward(dev, s, g.dfch_gelu, gw.fcproj_w, gw.fcproj_b, dout, a.fch_gelu, w.fcproj_w, BT,
                  4 * C, C, gemm);
  lora_backward(dev, s, g.dfch_gelu, gw, dout, a.fch_gelu, BlockLinear::fcproj, w, a, g, d, BT);
  dev.gelu_backward(s, g.dfch, a.fch, g.dfch_gelu, BT * 4 * C);
  linear_backward(dev, s, g.dln, gw.fc_w, gw.fc_b, g.dfch, a.ln2, w.fc_w, BT, C, 4 * C, gemm);
  lora_backward(dev, s, g.dln, gw, g.dfch, a.ln2, BlockLinear::fc, w, a, g, d, BT);
  dev.layernorm_backward(s, g.dres2, gw.ln2_w, gw.ln2_b, g.dln, a.res2, w.ln2_w, a.ln2_mean,
                         a.ln2_rstd, BT, C);

  // res2 = inp + attproj: both see dres2.
  dev.scaled_add(s, dinp, g.dres2, 1.0f, BT * C);
  linear_backward(dev, s, g.datty, gw.proj_w, gw.proj_b, g.dres2, a.atty, w.proj_w, BT, C, C, gemm);
  lora_backward(dev, s, g.datty, gw, g.dres2, a.atty, BlockLinear::proj, w, a, g, d, BT);
  dev.attention_backward(s, g.dqkv, g.datt, g.datty, a.qkv, a.att, d.B, d.T, C, d.NH);
  dev.fill_zero(s, g.dln, BT * C * f);
  linear_backward(dev, s, g.dln, gw.qkv_w, gw.qkv_b, g.dqkv, a.ln1, w.qkv_w, BT, C, 3 * C, gemm);
  lora_backward(dev, s, g.dln, gw, g.dqkv, a.ln1, BlockLinear::qkv, w, a, g, d, BT);
  dev.layernorm_backward(s, dinp, gw.ln1_w, gw.ln1_b, g.dln, inp, w.ln1_w, a.ln1_mean, a.ln1_rstd,
                         BT, C);
}

}  // namespace strata
