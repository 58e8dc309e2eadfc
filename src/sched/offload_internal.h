// Pieces of the offloaded trainer shared by its two source files (offload_trainer.cpp: plans,
// memory, the step loop; offload_actions.cpp: what each task does). Not a public header.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/block.h"
#include "sched/offload_trainer.h"

namespace strata {

// The memory behind one slot name, shared by every plan that names it.
struct OffloadTrainer::SlotMemory {
  std::string name;
  Tier tier = Tier::host;
  int64_t bytes = 0;
  Buffer buf;         // device or host tier
  size_t extent = 0;  // storage tier: the store's extent
};

struct OffloadTrainer::BoundPlan {
  Plan plan;
  std::vector<TaskAction> actions;  // one per task
  std::vector<SlotMemory*> slots;   // one per plan slot
  bool pending_steps = false, iteration = true;
  int64_t acts_forwarded = 0;  // saved sets per step served from host instead of storage
};

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
};
// Lays it out in consecutive floats; a null base only counts (FloatCarver).
inline OffloadWorkspace carve_offload_workspace(FloatCarver& c, const BlockDims& d, int64_t V) {
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
  return w;
}

}  // namespace strata
