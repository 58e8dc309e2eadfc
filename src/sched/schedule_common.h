// The pieces both offloaded generators share: the slots every plan has, an iteration's first and
// last tasks (tokens in; the embed group's gradient, the norm, the embed step), a block's CPU
// optimizer step, and the sums of squares behind the global norm. docs/design.md §5.
#pragma once

#include <cstdint>

#include "sched/plan_builder.h"
#include "sched/schedule_spec.h"
#include "sched/slot_names.h"

namespace strata {

// Slots every offloaded plan has, beside the per-block ones (names: slot_names.h).
struct CommonSlots {
  int32_t tokens_host;        // host (M, 2, B, T) int32, initialized: inputs then targets
  int32_t tokens_device;      // device copy, uploaded by the first task
  int32_t workspace;          // device scratch of compute tasks (no uses: only its bytes count)
  int32_t embed;              // device embed group params, initialized
  int32_t embed_grad;         // device, accumulated by the loss and embed backward tasks
  int32_t embed_grad_host;    // host
  int32_t embed_state;        // host master + m + v, initialized
  int32_t embed_params_host;  // host, the new working params on their way to the device
  int32_t sums;               // host, one double per slab
  int32_t clip;               // host, the clip factor; initialized when steps are pending
  int32_t losses;             // host (M, B, T) f32, per-position losses written by the loss tasks
};
CommonSlots add_common_slots(PlanBuilder& b, const ScheduleSpec& s);

// First tasks of an iteration: upload the tokens, zero the embed gradient.
void add_iteration_start(PlanBuilder& b, const CommonSlots& c, const ScheduleSpec& s);

// A block's gradient from device slot `grad` into host slot `host` (the whole block's layout).
// Where block_grad_scatter says device, it is first reduce-scattered there
// (grad_reduce_scatter_device, on the net queue) and only this rank's host_device_ranges leave
// (Note [ZeRO-3 on the device]); else the whole gradient leaves.
void add_block_grad_out(PlanBuilder& b, const TaskTag& tag, int32_t grad, int32_t host,
                        const ScheduleSpec& s);

// One block's host gradient (block -1: the embed group), as soon as it is complete on host: with
// several ranks summed over them in place (a block's reduce-scattered to the owners of its
// optimizer shards where block_grad_scatter says host_whole, Note [Sharded optimizer state] in
// schedule_spec.h; the embed group's all-reduced, Note [Data parallel ranks] in
// dist/communicator.h), then its sums of squares into its entries of the sums slot. Every later
// reader of the gradient (a step, a write to storage) is ordered after both by the slot's uses.
void add_grad_done(PlanBuilder& b, const CommonSlots& c, const ScheduleSpec& s, int32_t block,
                   int32_t grad_host, int64_t grad_bytes);
// Once every sum is in (with several ranks, the blocks' summed over them first): the global
// norm, and from it the clip slot (the clip factor, or "skip"
// for a non-finite norm), which every step that must see the norm reads.
void add_grad_norm(PlanBuilder& b, const CommonSlots& c, const ScheduleSpec& s);

// Last tasks of an iteration: the embed gradient out and its sums of squares, the norm, then
// `steps` (the block steps that must see the norm), then the embed step and its new params
// back to the device.
void add_embed_grad_out(PlanBuilder& b, const CommonSlots& c, const ScheduleSpec& s);
// The embed step stages its state through `state_ring` when it lives on storage (Note [Embed
// step in chunks] in schedule_spec.h).
void add_embed_step(PlanBuilder& b, const CommonSlots& c, const ScheduleSpec& s,
                    SlotRing& state_ring);
// A frozen embed group (Note [Frozen base]) has neither its gradient out nor its step.
template <typename Steps>
void add_iteration_end(PlanBuilder& b, const CommonSlots& c, const ScheduleSpec& s,
                       SlotRing& state_ring, Steps&& steps) {
  if (!s.embed_frozen) add_embed_grad_out(b, c, s);
  add_grad_norm(b, c, s);
  steps();
  if (!s.embed_frozen) add_embed_step(b, c, s, state_ring);
}

// One block's CPU optimizer step (or one part of it, Note [Optimizer split]) once its gradient
// is in host slot `grad` and, when `needs_norm`, the clip factor is known: the part's optimizer
// state is read from `state_store` (through the next stage of `state_ring` when on storage);
// AdamW runs on cpu_optim and writes the part's range of the new working params into
// `params_out` (with several ranks its shard of the part: Note [Sharded optimizer state]): the
// store itself when the params live in host memory (with several ranks a store of this rank's
// ranges, Note [Sharded working params]), else a host stage in the block's layout whose range
// (this rank's ranges) then goes to the store; with `gather` (the plan fetches that stage) a
// param_allgather brings every rank's shard into it first. Shared by both schedules.
// `state_out`, when not -1, is where the new state goes instead of back into state_store (a slot
// on state_store's tier: Note [Speculative steps]).
struct OptimizerStep {
  int32_t block = -1, part = -1;
  int32_t grad = -1, state_store = -1, params_out = -1, params_store = -1;
  bool needs_norm = true;
  int32_t state_out = -1;
  bool gather = false;
};
void add_optimizer_step(PlanBuilder& b, const CommonSlots& c, const ScheduleSpec& s,
                        const OptimizerStep& step, SlotRing& state_ring);

// Part `part` (-1: all) of block `block`'s working params from its `store` into the host stage
// `stage` (the block's layout). From storage: the part's range, or with several ranks this
// rank's ranges, then every rank's shard gathered, part by part; from a host store (several
// ranks) one param_gather (Note [Sharded working params]).
void add_params_read(PlanBuilder& b, const ScheduleSpec& s, int32_t block, int32_t part,
                     int32_t store, int32_t stage);
// The frozen prefix of block `block`'s params (Note [Frozen base]) from its store on storage into
// the host stage `stage`, where pending steps write the rest: nothing when all of it trains.
void add_frozen_params_read(PlanBuilder& b, const ScheduleSpec& s, int32_t block, int32_t store,
                            int32_t stage);
// Block `block`'s working params from host slot `src` (a stage in the block's layout, or its
// host store `store` itself) to device slot `dst`: the whole block, or where they are gathered on
// the device this rank's ranges and then, part by part, every rank's shard (Note [ZeRO-3 on the
// device] in schedule_spec.h).
void add_params_fetch(PlanBuilder& b, const ScheduleSpec& s, int32_t block, int32_t src,
                      int32_t store, int32_t dst);
// Bytes of a block's params store (Note [Sharded working params]).
int64_t params_store_bytes(const ScheduleSpec& s);

// A ring of two slots named by `ring` (slot_names.h) on `tier`: a device double buffer or a host
// staging ring; empty when not `needed` (nothing of that kind on storage).
SlotRing add_ring(PlanBuilder& b, const slot_names::Ring& ring, Tier tier, int64_t bytes,
                  bool needed = true);

}  // namespace strata
