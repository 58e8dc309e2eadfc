#include "sched/schedule_common.h"

#include <algorithm>

#include "sched/slot_names.h"

namespace strata {

namespace names = slot_names;

CommonSlots add_common_slots(PlanBuilder& b, const ScheduleSpec& s) {
  CommonSlots c{};
  c.tokens_host = b.slot(names::kTokensHost, Tier::host, s.tokens_bytes, true);
  c.tokens_device = b.slot(names::kTokensDevice, Tier::device, s.tokens_bytes);
  c.workspace = b.slot(names::kWorkspace, Tier::device, s.workspace_bytes);
  c.embed = b.slot(names::kEmbedParams, Tier::device, s.embed_param_bytes, true);
  // A frozen embed group (Note [Frozen base]) has no gradient: its slots hold nothing.
  const int64_t embed_grad_bytes = s.embed_frozen ? 0 : s.embed_param_bytes;
  c.embed_grad = b.slot(names::kEmbedGrad, Tier::device, embed_grad_bytes);
  c.embed_grad_host = b.slot(names::kEmbedGradHost, Tier::host, embed_grad_bytes);
  c.embed_state =
      b.slot(names::kEmbedOptim, offload_tier(s.embed_optim), s.embed_optim_bytes, true);
  c.embed_params_host = b.slot(names::kEmbedParamsHost, Tier::host, s.embed_param_bytes);
  c.sums = b.slot(names::kGradSums, Tier::host, int64_t{8} * (s.blocks + 2));
  c.clip = b.slot(names::kGradClip, Tier::host, 8, s.pending_steps || s.repair);
  c.losses = b.slot(names::kLosses, Tier::host, s.losses_bytes);
  return c;
}

void add_iteration_start(PlanBuilder& b, const CommonSlots& c, const ScheduleSpec& s) {
  b.transfer(TaskKind::tokens_upload, {}, c.tokens_host, c.tokens_device, s.tokens_bytes);
  // (A frozen embed group's gradient slot has no bytes, but its readers are ordered after this.)
  b.task(TaskKind::grad_zero, {}, {slot_write(c.embed_grad, Role::grad)});
}

void add_block_grad_out(PlanBuilder& b, const TaskTag& tag, int32_t grad, int32_t host,
                        const ScheduleSpec& s) {
  if (block_grad_scatter(s) == BlockGradScatter::device) {
    b.task(TaskKind::grad_reduce_scatter_device, tag,
           {slot_read(grad, Role::grad), slot_write(grad, Role::grad)}, s.block_grad_bytes);
  }
  for (const StoreRange& r : host_device_ranges(s, s.block_grad_bytes)) {
    b.transfer_range(TaskKind::grad_out, tag, grad, r.stage_at, host, r.stage_at, r.bytes);
  }
}

void add_grad_done(PlanBuilder& b, const CommonSlots& c, const ScheduleSpec& s, int32_t block,
                   int32_t grad_host, int64_t grad_bytes) {
  // A block's gradient only where its optimizer state is (Note [Sharded optimizer state]), unless
  // it was scattered elsewhere (block_grad_scatter); the embed group's, replicated, everywhere.
  const BlockGradScatter where = block_grad_scatter(s);
  if (block >= 0 ? where == BlockGradScatter::host_whole
                 : where != BlockGradScatter::none && where != BlockGradScatter::device) {
    b.task(block >= 0 ? TaskKind::grad_reduce_scatter : TaskKind::grad_allreduce, {.block = block},
           {slot_read(grad_host, Role::grad), slot_write(grad_host, Role::grad)}, grad_bytes);
  }
  b.task(TaskKind::grad_sumsq, {.block = block},
         {slot_read(grad_host, Role::grad), slot_write(c.sums, Role::sums)}, grad_bytes);
}

void add_grad_norm(PlanBuilder& b, const CommonSlots& c, const ScheduleSpec& s) {
  if (s.ranks > 1) {  // the blocks' sums are per shard (Note [Sharded optimizer state])
    b.task(TaskKind::norm_allreduce, {},
           {slot_read(c.sums, Role::sums), slot_write(c.sums, Role::sums)}, int64_t{8} * s.blocks);
  }
  b.task(TaskKind::grad_norm, {}, {slot_read(c.sums, Role::sums), slot_write(c.clip, Role::clip)});
}

void add_embed_grad_out(PlanBuilder& b, const CommonSlots& c, const ScheduleSpec& s) {
  if (block_grad_scatter(s) == BlockGradScatter::device) {  // Note [ZeRO-3 on the device]
    b.task(TaskKind::grad_allreduce_device, {},
           {slot_read(c.embed_grad, Role::grad), slot_write(c.embed_grad, Role::grad)},
           s.embed_param_bytes);
  }
  b.transfer(TaskKind::grad_out, {}, c.embed_grad, c.embed_grad_host, s.embed_param_bytes);
  add_grad_done(b, c, s, -1, c.embed_grad_host, s.embed_param_bytes);
}

namespace {

// One embed step task over the state in host slot `state` (the group's, or a chunk's stage).
void add_embed_step_task(PlanBuilder& b, const CommonSlots& c, int32_t chunk, int32_t state,
                         int64_t state_bytes) {
  b.task(TaskKind::embed_step, {.part = chunk},
         {slot_read(c.embed_grad_host, Role::grad), slot_read(c.clip, Role::clip),
          slot_read(state, Role::state), slot_write(state, Role::state),
          slot_write(c.embed_params_host, Role::params)},
         state_bytes);
}

}  // namespace

void add_embed_step(PlanBuilder& b, const CommonSlots& c, const ScheduleSpec& s,
                    SlotRing& state_ring) {
  if (b.tier(c.embed_state) != Tier::storage) {
    add_embed_step_task(b, c, -1, c.embed_state, s.embed_optim_bytes);
  } else {  // Note [Embed step in chunks]
    const int64_t E = s.embed_elems, S = embed_chunk_elems_for(s);
    const int64_t width = s.embed_optim_bytes / (3 * E);  // bytes per element of each array
    for (int32_t k = 0; int64_t{k} * S < E; ++k) {
      const int64_t lo = k * S, len = std::min(S, E - lo);
      const int32_t stage = state_ring.take();
      for (int64_t a = 0; a < 3; ++a) {
        b.transfer_range(TaskKind::optim_read, {.part = k}, c.embed_state, (a * E + lo) * width,
                         stage, a * len * width, len * width);
      }
      add_embed_step_task(b, c, k, stage, 3 * len * width);
      for (int64_t a = 0; a < 3; ++a) {
        b.transfer_range(TaskKind::optim_write, {.part = k}, stage, a * len * width, c.embed_state,
                         (a * E + lo) * width, len * width);
      }
    }
  }
  b.transfer(TaskKind::params_fetch, {}, c.embed_params_host, c.embed, s.embed_param_bytes);
}

void add_optimizer_step(PlanBuilder& b, const CommonSlots& c, const ScheduleSpec& s,
                        const OptimizerStep& x, SlotRing& state_ring) {
  const TaskTag tag{.block = x.block, .part = x.part};
  const int64_t n = s.block_elems, a = s.split_elems;
  const int64_t O = optim_part_bytes(s, x.part);
  const int64_t P = part_bytes(s.block_param_bytes, n, a, x.part);

  const int32_t state = b.to_host(TaskKind::optim_read, tag, x.state_store, state_ring, O);
  const int32_t dest = x.state_out >= 0 ? x.state_out : x.state_store;
  // On host a separate destination is written by the step itself; through a stage, by the
  // stage's write-back.
  const bool step_writes_out = state == x.state_store && dest != x.state_store;
  std::vector<SlotUse> uses = {slot_read(x.grad, Role::grad), slot_read(state, Role::state),
                               slot_write(x.params_out, Role::params)};
  uses.push_back(step_writes_out ? slot_write(dest, Role::state_out)
                                 : slot_write(state, Role::state));
  if (x.needs_norm) uses.push_back(slot_read(c.clip, Role::clip));
  b.task(TaskKind::block_step, tag, std::move(uses), O);
  if (state != x.state_store) b.transfer(TaskKind::optim_write, tag, state, dest, O);
  if (params_gather(s) == ParamsGather::host && x.gather) {  // Note [Sharded working params]
    b.task(TaskKind::param_allgather, tag,
           {slot_read(x.params_out, Role::params), slot_write(x.params_out, Role::params)}, P);
  }
  if (x.params_store != x.params_out) {  // on storage: this rank's ranges, or the part's
    for (const StoreRange& r : shard_store_ranges(s, s.block_param_bytes, x.part)) {
      b.transfer_range(TaskKind::params_write, tag, x.params_out, r.stage_at, x.params_store,
                       r.store_at, r.bytes);
    }
  }
}

void add_params_read(PlanBuilder& b, const ScheduleSpec& s, int32_t block, int32_t part,
                     int32_t store, int32_t stage) {
  if (b.tier(store) != Tier::storage) {  // a host store holds this rank's shard
    b.task(TaskKind::param_gather, {.block = block, .part = part},
           {slot_read(store, Role::src), slot_write(stage, Role::dst)},
           part_bytes(s.block_param_bytes, s.block_elems, s.split_elems, part));
    return;
  }
  for (const StoreRange& r : params_store_ranges(s, part)) {
    b.transfer_range(TaskKind::params_read, {.block = block, .part = part}, store, r.store_at,
                     stage, r.stage_at, r.bytes);
  }
  if (params_gather(s) != ParamsGather::host) return;  // Note [ZeRO-3 on the device]
  for (int32_t q : block_param_parts(s, part)) {
    b.task(TaskKind::param_allgather, {.block = block, .part = q},
           {slot_read(stage, Role::params), slot_write(stage, Role::params)},
           part_bytes(s.block_param_bytes, s.block_elems, s.split_elems, q));
  }
}

void add_frozen_params_read(PlanBuilder& b, const ScheduleSpec& s, int32_t block, int32_t store,
                            int32_t stage) {
  for (const StoreRange& r : frozen_params_ranges(s)) {
    b.transfer_range(TaskKind::params_read, {.block = block}, store, r.store_at, stage, r.stage_at,
                     r.bytes);
  }
}

void add_params_fetch(PlanBuilder& b, const ScheduleSpec& s, int32_t block, int32_t src,
                      int32_t store, int32_t dst) {
  const TaskTag tag{.block = block};
  for (const StoreRange& r : host_device_ranges(s, s.block_param_bytes)) {
    b.transfer_range(TaskKind::params_fetch, tag, src, src == store ? r.store_at : r.stage_at, dst,
                     r.stage_at, r.bytes);
  }
  if (params_gather(s) != ParamsGather::device) return;
  for (int32_t q : block_param_parts(s)) {
    b.task(TaskKind::param_allgather_device, {.block = block, .part = q},
           {slot_read(dst, Role::params), slot_write(dst, Role::params)},
           part_bytes(s.block_param_bytes, s.block_elems, s.split_elems, q));
  }
}

int64_t params_store_bytes(const ScheduleSpec& s) {
  return params_sharded(s) ? shard_store_bytes(s, s.block_param_bytes) : s.block_param_bytes;
}

SlotRing add_ring(PlanBuilder& b, const slot_names::Ring& ring, Tier tier, int64_t bytes,
                  bool needed) {
  SlotRing r;
  for (int k = 0; needed && k < 2; ++k) r.slots.push_back(b.slot(ring.at(k), tier, bytes));
  return r;
}

}  // namespace strata
