// The vertical schedule (GreedySnake; docs/design.md §5.6) as a plan.
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
//    device once per block into its own slot ("grad.store.blkL"), or, when the block's gradient
//    lives on storage, into a host stage from which only part 1's range is written out (read
//    back before the pending step); its sum of squares is taken on cpu_optim.
//  - optimizer (Note [Optimizer split]): part 0 of a block (split_elems elements; speculative
//    with clipping on, Note [Speculative steps]; deferred with the rest when defer_part0) is
//    stepped right after its gradient reached host, while earlier blocks'
//    backward computes; part 1 is left pending and this plan's successor (pending_steps) steps
//    it just before the block's first fetch, in forward, reading the state ahead and writing
//    the new params straight into the stage the fetch copies from (part 0's range is read from
//    storage into the same stage), so no block is ever computed with stale weights. The flush
//    plan (iteration = false) runs only the pending steps, after the last iteration; the repair
//    plan (repair) redoes every block's speculative part 0 (Note [Speculative steps]).
//  - the embedding group steps after the global norm at the end of the iteration (its state on
//    host, or on storage stepped in chunks: Note [Embed step in chunks]; it is needed first thing
//    in the next forward).
// Gradients w.r.t. block outputs ("dact.mb<m>") stay on the device between blocks (M slots).
// Placement::device for params or optim is treated as host.
// Requires blocks >= 1, micro_batches >= 1. Deps are derived from slot uses (PlanBuilder).
Plan make_vertical_plan(const ScheduleSpec& spec);

// Micro-batch order of block l in the vertical schedule (the snake).
int32_t vertical_micro_batch(int32_t block, int32_t position, int32_t micro_batches);

// Whether the saved activations of block l's micro-batch at `position` stay in host memory although
// the block offloads them to storage (forwarded): the first two of the first block whose backward
// follows the turn, needed as soon as the last block is done.
bool vertical_acts_forwarded(int32_t block, int32_t position, int32_t blocks);

// Whether the checkpoint of block l's input for the micro-batch at `position` in block l's
// order stays on host whatever the placement (first and last two).
bool vertical_checkpoint_pinned(int32_t position, int32_t micro_batches);

}  // namespace strata
