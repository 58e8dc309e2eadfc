// The vertical schedule (GreedySnake, DESIGN.md §5, research/greedysnake.md) as a plan.
#pragma once

#include "sched/plan.h"
#include "sched/schedule_spec.h"

namespace strata {

// One training iteration, block by block:
//  - forward: each block's params fetched once (storage -> host stage -> device double buffer,
//    the next block's fetch queued ahead of this block's work) and applied to every micro-batch
//    in snake order (block l: 0..M-1 if l is even, M-1..0 if odd). The micro-batch that ends
//    block l starts block l+1 from the device without a reload; every other input is loaded
//    from its checkpoint into a device double buffer, the next one queued ahead.
//  - checkpoints: the input of block l for micro-batch m is "ckpt blk.l mb.m", written d2h
//    (and on to storage when checkpoints are on storage, except the first and last two
//    micro-batches in block l's order, which always stay on host: they are needed too soon).
//  - the last block runs forward, loss and backward together per micro-batch; its params are
//    fetched once and serve both passes (so it has one fetch, every other block two).
//  - backward, blocks L-2..0, each in its forward order (which continues the snake): params
//    fetched once, per micro-batch the checkpoint loaded (double buffer), the block recomputed
//    and back-propagated, its gradient accumulated in a device slot; the gradient leaves the
//    device once per block, then that block's optimizer step (state read, AdamW on cpu_optim,
//    state and new working params written back) runs while earlier blocks' backward computes.
// Not in scope yet: the α split of the optimizer step (part stepped during the next forward)
// and deferral of steps for global-norm clipping; here every block steps after its backward,
// which is exact only with clipping off. Gradients w.r.t. block outputs ("dact.mb<m>") stay on
// the device between blocks (M slots). Placement::device for params or optim is treated as host;
// the embedding/head stays on the device and its optimizer step is not part of this plan.
// Requires blocks >= 1, micro_batches >= 1. Deps are derived from slot uses (SlotDepBuilder).
Plan make_vertical_plan(const ScheduleSpec& spec);

// Micro-batch order of block l in the vertical schedule (the snake).
int32_t vertical_micro_batch(int32_t block, int32_t position, int32_t micro_batches);

// Whether the checkpoint of block l's input for the micro-batch at `position` in block l's
// order stays on host whatever the placement (first and last two).
bool vertical_checkpoint_pinned(int32_t position, int32_t micro_batches);

}  // namespace strata
