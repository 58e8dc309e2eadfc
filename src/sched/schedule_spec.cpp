#include "sched/schedule_spec.h"

#include <cmath>

namespace strata {

const char* act_policy_name(ActPolicy p) {
  switch (p) {
    case ActPolicy::recompute:
      return "recompute";
    case ActPolicy::keep:
      return "keep";
    case ActPolicy::host:
      return "host";
    case ActPolicy::storage:
      return "storage";
  }
  return "?";
}

std::vector<Placement> placement_by_fraction(int32_t blocks, double fraction_on_host) {
  const auto on_host = static_cast<int32_t>(std::lround(fraction_on_host * blocks));
  std::vector<Placement> at(static_cast<size_t>(blocks), Placement::storage);
  for (int32_t l = 0; l < on_host && l < blocks; ++l) at[static_cast<size_t>(l)] = Placement::host;
  return at;
}

BlockTiers block_tiers(const ScheduleSpec& s) {
  BlockTiers t;
  for (int l = 0; l < s.blocks; ++l) {
    t.params.push_back(offload_tier(placement_of(s.params_at, s.params, l)));
    t.optim.push_back(offload_tier(placement_of(s.optim_at, s.optim, l)));
    t.checkpoints.push_back(offload_tier(placement_of(s.checkpoints_at, s.checkpoints, l)));
    t.params_on_storage |= t.params.back() == Tier::storage;
    t.optim_on_storage |= t.optim.back() == Tier::storage;
    t.checkpoints_on_storage |= t.checkpoints.back() == Tier::storage;
  }
  return t;
}

int64_t part_bytes(int64_t bytes, int64_t elems, int64_t split, int32_t part) {
  if (part < 0 || elems <= 0) return bytes;
  // bytes * split / elems without overflow for any realistic size.
  const int64_t first = bytes / elems * split + bytes % elems * split / elems;
  return part == 0 ? first : bytes - first;
}

void add_optimizer_step(SlotDepBuilder& b, const ScheduleSpec& s, int32_t l, int32_t part,
                        const OptimizerStepSlots& x) {
  const std::string tag = blk_tag(l) + (part >= 0 ? " p" + std::to_string(part) : std::string());
  const int64_t n = s.block_elems, a = s.split_elems;
  const int64_t O = part_bytes(s.block_optim_bytes, n, a, part);
  const int64_t P = part_bytes(s.block_param_bytes, n, a, part);
  const int64_t p_off = part == 1 ? part_bytes(s.block_param_bytes, n, a, 0) : 0;

  int32_t state = x.state_store;
  if (x.state_stage >= 0) {
    state = x.state_stage;
    Task t{
        .kind = TaskKind::fetch, .resource = Resource::storage_read, .label = "read.optim " + tag};
    t.block = l;
    t.uses = {slot_read(x.state_store), slot_write(state)};
    t.bytes = O;
    b.task(std::move(t));
  }
  Task step{.kind = TaskKind::optimizer, .resource = Resource::cpu_optim, .label = "adamw " + tag};
  step.block = l;
  step.part = part;
  step.uses = {slot_read(x.grad), slot_read(state), slot_write(state), slot_write(x.params_out)};
  if (x.clip >= 0) step.uses.push_back(slot_read(x.clip));
  step.bytes = O;
  b.task(std::move(step));
  if (x.state_stage >= 0) {
    Task t{.kind = TaskKind::store,
           .resource = Resource::storage_write,
           .label = "write.optim " + tag};
    t.block = l;
    t.uses = {slot_read(state), slot_write(x.state_store)};
    t.bytes = O;
    b.task(std::move(t));
  }
  if (x.params_store != x.params_out) {
    Task t{.kind = TaskKind::store,
           .resource = Resource::storage_write,
           .label = "write.params " + tag};
    t.block = l;
    t.uses = {slot_read(x.params_out), slot_write(x.params_store)};
    t.bytes = P;
    t.src_offset = p_off;
    t.dst_offset = p_off;
    b.task(std::move(t));
  }
}

void add_embed_grad_out(SlotDepBuilder& b, const ScheduleSpec& s, const EmbedStepSlots& x,
                        int32_t sums) {
  b.task(TaskKind::store, Resource::d2h, "grad.out embed", -1, -1,
         {slot_read(x.grad_device), slot_write(x.grad_host)}, s.embed_param_bytes);
  add_grad_sumsq(b, -1, x.grad_host, s.embed_param_bytes, sums);
}

void add_grad_norm(SlotDepBuilder& b, int32_t sums, int32_t clip) {
  b.task(TaskKind::other, Resource::cpu_optim, "grad.norm", -1, -1,
         {slot_read(sums), slot_write(clip)});
}

void add_embed_step(SlotDepBuilder& b, const ScheduleSpec& s, const EmbedStepSlots& x) {
  b.task(TaskKind::optimizer, Resource::cpu_optim, "adamw embed", -1, -1,
         {slot_read(x.grad_host), slot_read(x.clip), slot_read(x.state), slot_write(x.state),
          slot_write(x.params_host)},
         s.embed_optim_bytes);
  b.task(TaskKind::fetch, Resource::h2d, "fetch.params embed", -1, -1,
         {slot_read(x.params_host), slot_write(x.params_device)}, s.embed_param_bytes);
}

int32_t add_grad_sumsq(SlotDepBuilder& b, int32_t l, int32_t grad_host, int64_t grad_bytes,
                       int32_t sums) {
  return b.task(TaskKind::other, Resource::cpu_optim, "sumsq " + (l >= 0 ? blk_tag(l) : "embed"), l,
                -1, {slot_read(grad_host), slot_write(sums)}, grad_bytes);
}

CommonSlots add_common_slots(SlotDepBuilder& b, const ScheduleSpec& s) {
  CommonSlots c{};
  c.tokens_host = b.slot("tokens.host", Tier::host, s.tokens_bytes, true);
  c.tokens_device = b.slot("tokens", Tier::device, s.tokens_bytes);
  c.workspace = b.slot("compute.workspace", Tier::device, s.workspace_bytes);
  c.embed = b.slot("embed.params", Tier::device, s.embed_param_bytes, true);
  c.embed_grad = b.slot("embed.grad", Tier::device, s.embed_param_bytes);
  c.embed_grad_host = b.slot("embed.grad.host", Tier::host, s.embed_param_bytes);
  c.embed_state = b.slot("embed.optim", Tier::host, s.embed_optim_bytes, true);
  c.embed_params_host = b.slot("embed.params.host", Tier::host, s.embed_param_bytes);
  c.sums = b.slot("grad.sums", Tier::host, int64_t{8} * (s.blocks + 2));
  c.clip = b.slot("grad.clip", Tier::host, 8, s.pending_steps);
  c.losses = b.slot("losses.host", Tier::host, s.losses_bytes);
  return c;
}

void add_iteration_start(SlotDepBuilder& b, const CommonSlots& c, const ScheduleSpec& s) {
  b.task(TaskKind::fetch, Resource::h2d, "tokens.load", -1, -1,
         {slot_read(c.tokens_host), slot_write(c.tokens_device)}, s.tokens_bytes);
  b.task(TaskKind::zero, Resource::compute, "grad.zero embed", -1, -1, {slot_write(c.embed_grad)});
}

}  // namespace strata
