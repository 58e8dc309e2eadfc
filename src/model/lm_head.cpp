#include "model/lm_head.h"

namespace strata {

NormSpec final_norm_spec(const ModelConfig& cfg) {
  return NormSpec{cfg.arch, static_cast<float>(cfg.norm_eps)};
}

void lm_head_logits(Device& dev, Stream& s, const HeadActs& a, const float* x, const EmbedView& e,
                    const FinalView& fin, const ModelConfig& cfg, int64_t N) {
  const int64_t C = cfg.n_embd, V = cfg.vocab_size;
  norm_forward(dev, s, final_norm_spec(cfg), a.lnf, a.lnf_mean, a.lnf_rstd, x, fin.lnf_w, fin.lnf_b,
               N, C);
  dev.matmul(s, a.logits, a.lnf, lm_head_of(e, fin), nullptr, N, V, C, {.trans_b = true});
}

void lm_head_forward(Device& dev, Stream& s, const HeadActs& a, const float* x, const EmbedView& e,
                     const FinalView& fin, const int32_t* targets, const ModelConfig& cfg,
                     int64_t N) {
  lm_head_logits(dev, s, a, x, e, fin, cfg, N);
  dev.softmax_cross_entropy_forward(s, a.losses, a.probs, a.logits, targets, N, cfg.vocab_size);
}

void lm_head_backward(Device& dev, Stream& s, float* dx, const EmbedView& ge, const FinalView& gfin,
                      const HeadActs& a, const float* x, const EmbedView& e, const FinalView& fin,
                      const int32_t* targets, float dloss, const ModelConfig& cfg, int64_t N) {
  const int64_t C = cfg.n_embd, V = cfg.vocab_size, f = 4;
  // logits = lnf @ head^T: d head += dlogits^T @ lnf, d lnf = dlogits @ head.
  dev.fill_zero(s, a.dlogits, N * V * f);
  dev.softmax_cross_entropy_backward(s, a.dlogits, a.probs, targets, dloss, N, V);
  // The head's gradient: the untied head's, or the token embedding's; null when frozen.
  float* ghead = fin.lm_head != nullptr ? gfin.lm_head : ge.wte;
  if (ghead != nullptr) {
    dev.matmul(s, ghead, a.dlogits, a.lnf, nullptr, V, C, N, {.trans_a = true, .accumulate = true});
  }
  dev.matmul(s, a.dlnf, a.dlogits, lm_head_of(e, fin), nullptr, N, C, V, {});
  dev.fill_zero(s, dx, N * C * f);
  norm_backward(dev, s, final_norm_spec(cfg), dx, gfin.lnf_w, gfin.lnf_b, a.dlnf, x, fin.lnf_w,
                a.lnf_mean, a.lnf_rstd, N, C);
}

}  // namespace strata
