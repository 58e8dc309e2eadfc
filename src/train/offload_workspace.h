// The device scratch of the offloaded schedules' compute tasks (plan slot "compute.workspace").
#pragma once

#include <cstdint>

#include "core/config.h"
#include "model/block.h"
#include "model/lm_head.h"

namespace strata {

// The device scratch of the compute tasks (slot "compute.workspace").
struct OffloadWorkspace {
  BlockActs acts;            // one block, one micro-batch
  BlockGradScratch scratch;  // block backward
  float* recompute_out;      // (B, T, C) output of a recomputed forward, discarded
  float* dinp;               // (B, T, C) gradient w.r.t. a block's input, before it replaces dout
  HeadActs head;             // N = B T rows: lnf, dlnf (B, T, C), logits, probs, dlogits (B, T, V)
  // (block elems) f32: bf16 mode's working params of one block widened for its forward or
  // backward (Note [Precision modes] in train/trainer.h); null in f32 mode.
  float* params_f32;
  // (block_gemm_scratch_elems) bf16: the GEMMs' rounded operands with train.matmul bf16 (Note
  // [bf16 GEMMs] in model/block.h); null otherwise.
  bf16_t* gemm_scratch;
};
// Lays it out in consecutive floats for cfg (its model, precision and matmul); a null base only
// counts (FloatCarver). block_elems: one block's parameters.
inline OffloadWorkspace carve_offload_workspace(FloatCarver& c, const BlockDims& d,
                                                const TrainConfig& cfg, int64_t block_elems) {
  const int64_t BT = d.B * d.T, C = d.C, V = cfg.model.vocab_size;
  OffloadWorkspace w{};
  w.acts = block_acts_carve(c, d);
  w.scratch = block_grad_scratch_carve(c, d);
  w.recompute_out = c.take(BT * C);
  w.dinp = c.take(BT * C);
  w.head.lnf = c.take(BT * C);
  w.head.lnf_mean = c.take(BT);
  w.head.lnf_rstd = c.take(BT);
  w.head.logits = c.take(BT * V);
  w.head.probs = c.take(BT * V);
  w.head.dlogits = c.take(BT * V);
  w.head.dlnf = c.take(BT * C);
  w.head.losses = c.take(BT);
  w.params_f32 = cfg.precision == Precision::bf16 ? c.take(block_elems) : nullptr;
  if (cfg.matmul == MatmulPrecision::bf16) {
    const int64_t elems = block_gemm_scratch_elems(d);  // two per float, rounded up
    w.gemm_scratch = reinterpret_cast<bf16_t*>(c.take((elems + 1) / 2));
  }
  return w;
}

}  // namespace strata
