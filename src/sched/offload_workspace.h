// The device scratch of the offloaded schedules' compute tasks (plan slot "compute.workspace").
#pragma once

#include <cstdint>

#include "model/block.h"

namespace strata {

// The device scratch of the compute tasks (slot "compute.workspace").
struct OffloadWorkspace {
  BlockActs acts;            // one block, one micro-batch
  BlockGradScratch scratch;  // block backward
  float* recompute_out;      // (B, T, C) output of a recomputed forward, discarded
  float* dinp;               // (B, T, C) gradient w.r.t. a block's input, before it replaces dout
  float* lnf;                // (B, T, C)
  float* lnf_mean;           // (B, T)
  float* lnf_rstd;           // (B, T)
  float* logits;             // (B, T, V)
  float* probs;              // (B, T, V)
  float* dlogits;            // (B, T, V)
  float* dlnf;               // (B, T, C)
  float* losses;             // (B, T)
  // (widened_param_elems) f32: bf16 mode's working params of one block widened for its forward
  // or backward (Note [Precision modes] in sched/trainer.h); null in f32 mode.
  float* params_f32;
};
// Lays it out in consecutive floats; a null base only counts (FloatCarver). widened_param_elems
// is a block's element count in bf16 mode, 0 in f32 mode (no scratch: the params are f32).
inline OffloadWorkspace carve_offload_workspace(FloatCarver& c, const BlockDims& d, int64_t V,
                                                int64_t widened_param_elems) {
  const int64_t BT = d.B * d.T, C = d.C;
  OffloadWorkspace w{};
  w.acts = block_acts_carve(c, d);
  w.scratch = block_grad_scratch_carve(c, d);
  w.recompute_out = c.take(BT * C);
  w.dinp = c.take(BT * C);
  w.lnf = c.take(BT * C);
  w.lnf_mean = c.take(BT);
  w.lnf_rstd = c.take(BT);
  w.logits = c.take(BT * V);
  w.probs = c.take(BT * V);
  w.dlogits = c.take(BT * V);
  w.dlnf = c.take(BT * C);
  w.losses = c.take(BT);
  w.params_f32 = widened_param_elems > 0 ? c.take(widened_param_elems) : nullptr;
  return w;
}

}  // namespace strata
