// The LM head: the final norm (LayerNorm or RMSNorm) of the last block's output, the logits
// through the head (tied to the token embedding, or its own), softmax cross-entropy, and their
// backward; and the one-row form sampling decodes with. One implementation that the in-memory
// model (model/gpt.cpp), the offloaded head task and validation (train/offload_actions.cpp,
// train/offload_eval.cpp) and sampling (model/sample.cpp) all call, so their bits agree by
// construction rather than by keeping three copies in step.
#pragma once

#include <cstdint>

#include "backend/backend.h"
#include "core/config.h"
#include "model/layout.h"
#include "model/norm.h"

namespace strata {

// The head's buffers over N rows (positions). Callers lay them out (model/gpt.cpp,
// train/offload_workspace.h, model/sample.cpp); a buffer a call does not touch may be null.
struct HeadActs {
  float* lnf = nullptr;       // (N, C) the final norm's output
  float* lnf_mean = nullptr;  // (N)    LayerNorm (GPT-2) only
  float* lnf_rstd = nullptr;  // (N)
  float* logits = nullptr;    // (N, V)
  float* probs = nullptr;     // (N, V) softmax of the logits (lm_head_forward)
  float* losses = nullptr;    // (N)    per-row cross-entropy (lm_head_forward)
  float* dlogits = nullptr;   // (N, V) backward scratch
  float* dlnf = nullptr;      // (N, C) backward scratch
};

// The model's final norm (LayerNorm or RMSNorm).
NormSpec final_norm_spec(const ModelConfig& cfg);

// a.logits (N, V) <- head(final_norm(x)), x (N, C); fills a.lnf, a.lnf_mean, a.lnf_rstd.
// Sampling calls it on one row.
void lm_head_logits(Device& dev, Stream& s, const HeadActs& a, const float* x, const EmbedView& e,
                    const FinalView& fin, const ModelConfig& cfg, int64_t N);
// lm_head_logits, then a.losses (N) and a.probs (N, V) against targets (N) int32.
void lm_head_forward(Device& dev, Stream& s, const HeadActs& a, const float* x, const EmbedView& e,
                     const FinalView& fin, const int32_t* targets, const ModelConfig& cfg,
                     int64_t N);
// After lm_head_forward: dx (N, C) <- d(sum of losses * dloss)/dx (overwritten); the head's and
// the final norm's gradients += theirs (ge, gfin). Uses a.dlogits and a.dlnf as scratch.
void lm_head_backward(Device& dev, Stream& s, float* dx, const EmbedView& ge, const FinalView& gfin,
                      const HeadActs& a, const float* x, const EmbedView& e, const FinalView& fin,
                      const int32_t* targets, float dloss, const ModelConfig& cfg, int64_t N);

}  // namespace strata
