#include "model/gpt.h"

#include "model/norm.h"

namespace strata {

namespace {
GptActs gpt_acts_carve(const Device& dev, FloatCarver& c, const ModelConfig& cfg, int64_t B,
                       int64_t T, const float* rope, const LoraConfig& lora) {
  const BlockDims d = block_dims(dev, cfg, B, T, rope, lora);
  const int64_t BT = B * T, C = cfg.n_embd, V = cfg.vocab_size, L = cfg.n_layer;
  GptActs a;
  a.B = B;
  a.T = T;
  a.dims = d;
  a.residual = c.take((L + 1) * BT * C);
  for (int64_t l = 0; l < L; l++) a.blocks.push_back(block_acts_carve(c, d));
  a.head.lnf = c.take(BT * C);
  a.head.lnf_mean = c.take(BT);
  a.head.lnf_rstd = c.take(BT);
  a.head.logits = c.take(BT * V);
  a.head.probs = c.take(BT * V);
  a.head.losses = c.take(BT);
  a.head.dlogits = c.take(BT * V);
  a.head.dlnf = c.take(BT * C);
  a.dres_a = c.take(BT * C);
  a.dres_b = c.take(BT * C);
  a.scratch = block_grad_scratch_carve(c, d);
  return a;
}
}  // namespace

GptActs gpt_acts_at(const Device& dev, float* base, const ModelConfig& cfg, int64_t B, int64_t T,
                    const float* rope, const LoraConfig& lora) {
  FloatCarver c(base);
  return gpt_acts_carve(dev, c, cfg, B, T, rope, lora);
}

int64_t gpt_acts_floats(const Device& dev, const ModelConfig& cfg, int64_t B, int64_t T,
                        const LoraConfig& lora) {
  FloatCarver counter(nullptr);
  gpt_acts_carve(dev, counter, cfg, B, T, nullptr, lora);
  return counter.used();
}

void gpt_forward(Device& dev, Stream& s, const GptActs& a, const ParamLayout& layout, float* params,
                 const int32_t* tokens, const int32_t* targets, const BlockGemm* gemm,
                 const LoraDropoutAt* drop) {
  const ModelConfig& cfg = layout.config;
  const int64_t B = a.B, T = a.T, BT = B * T, C = cfg.n_embd;
  const BlockDims& d = a.dims;
  const EmbedView emb = embed_view(layout, params);
  const FinalView fin = final_view(layout, params);

  dev.embedding_forward(s, a.residual, tokens, emb.wte, emb.wpe, B, T, C);
  for (int64_t l = 0; l < cfg.n_layer; l++) {
    const float* inp = a.residual + l * BT * C;
    float* out = a.residual + (l + 1) * BT * C;
    block_forward(dev, s, out, with_dropout(a.blocks[static_cast<size_t>(l)], drop, l), inp,
                  block_view(layout, params, l), d, gemm);
  }
  lm_head_forward(dev, s, a.head, a.residual + cfg.n_layer * BT * C, emb, fin, targets, cfg, BT);
}

void gpt_backward(Device& dev, Stream& s, const GptActs& a, const ParamLayout& layout,
                  float* params, float* grads, const int32_t* tokens, const int32_t* targets,
                  float dloss, const BlockGemm* gemm, const LoraDropoutAt* drop) {
  const ModelConfig& cfg = layout.config;
  const int64_t B = a.B, T = a.T, BT = B * T, C = cfg.n_embd;
  const int64_t f = static_cast<int64_t>(sizeof(float));
  const BlockDims& d = a.dims;
  const EmbedView emb = embed_view(layout, params), gemb = embed_view(layout, grads, ViewOf::grads);
  const FinalView fin = final_view(layout, params), gfin = final_view(layout, grads, ViewOf::grads);

  float* dout = a.dres_a;
  float* dinp = a.dres_b;
  lm_head_backward(dev, s, dout, gemb, gfin, a.head, a.residual + cfg.n_layer * BT * C, emb, fin,
                   targets, dloss, cfg, BT);

  for (int64_t l = cfg.n_layer - 1; l >= 0; l--) {
    dev.fill_zero(s, dinp, BT * C * f);
    block_backward(dev, s, dinp, block_view(layout, grads, l, ViewOf::grads), a.scratch, dout,
                   a.residual + l * BT * C, with_dropout(a.blocks[static_cast<size_t>(l)], drop, l),
                   block_view(layout, params, l), d, gemm);
    std::swap(dout, dinp);
  }
  if (gemb.wte != nullptr) dev.embedding_backward(s, gemb.wte, gemb.wpe, dout, tokens, B, T, C);
}

double block_matmul_params(const ModelConfig& cfg) {
  const double C = static_cast<double>(cfg.n_embd), F = static_cast<double>(cfg.ffn());
  const double qkv = static_cast<double>(cfg.n_embd + 2 * cfg.kv_width());
  // q|k|v, the attention's output projection, and the MLP's (gate|up or fc, and down or proj).
  const double mlp_in = cfg.arch == ModelArch::llama ? 2 * F : F;
  return qkv * C + C * C + mlp_in * C + F * C;
}

double gpt_train_flops(const ModelConfig& cfg, int64_t T, int64_t tokens) {
  const double C = static_cast<double>(cfg.n_embd), L = static_cast<double>(cfg.n_layer);
  // Matmul parameters touched per token: the blocks' plus the V x C head.
  const double matmul_params =
      block_matmul_params(cfg) * L + static_cast<double>(cfg.vocab_size) * C;
  // Attention scores and weighted sum: 2 matmuls of T x T x C per block forward, counted full
  // (as the common 6N + 12 L T C estimate does).
  const double per_token = 6.0 * matmul_params + 12.0 * L * static_cast<double>(T) * C;
  return per_token * static_cast<double>(tokens);
}

}  // namespace strata
