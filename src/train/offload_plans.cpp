// The offloaded trainer's plans: the keys a run reaches and each plan built and checked.
#include "train/offload_plans.h"

#include <algorithm>
#include <string>

#include "sched/plan_checker.h"
#include "sched/schedule_vertical.h"
#include "train/offload_spec.h"

namespace strata {

std::vector<PlanKey> offload_plan_keys(const OffloadShape& shape) {
  if (!shape.vertical) return {PlanKey{}};
  // What an iteration leaves pending: part 1 after an early part 0, both when part 0 waited.
  const Pending early = shape.split_elems < shape.block_elems ? Pending::part1 : Pending::none;
  if (!shape.speculative) {
    return {{.pending = Pending::none}, {.pending = early}, {.pending = early, .iteration = false}};
  }
  const Speculation mode = shape.cfg.optim.speculation;
  std::vector<bool> defers;
  if (mode != Speculation::off) defers.push_back(false);
  if (mode != Speculation::on) defers.push_back(true);
  std::vector<PlanKey> keys;
  for (Pending pending : {Pending::none, early, Pending::both}) {
    const bool reachable =
        pending == Pending::none ||
        (pending == Pending::both ? mode != Speculation::on : mode != Speculation::off);
    if (!reachable) continue;
    for (bool defer : defers) {
      const PlanKey k{.pending = pending, .defer_part0 = defer};
      if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
    }
    if (pending != Pending::none) keys.push_back({.pending = pending, .iteration = false});
  }
  if (mode != Speculation::off) keys.push_back({.iteration = false, .repair = true});
  return keys;
}

PlanKey iteration_key(const OffloadShape& shape, Pending pending, bool defer_part0) {
  if (!shape.vertical) return PlanKey{};
  return {.pending = pending, .defer_part0 = shape.speculative && defer_part0};
}

Status build_offload_plan(Device& dev, const OffloadShape& shape, const PlanSite& site,
                          const PlanKey& key, BoundPlan& out) {
  out.key = key;
  const bool iteration = key.iteration;
  ScheduleSpec spec =
      offload_schedule_spec(dev, shape.cfg, key.pending != Pending::none, iteration);
  spec.rank = site.rank;
  spec.device_collectives = site.device_collectives;
  spec.pending_part0 = key.pending == Pending::both;
  spec.defer_part0 = key.defer_part0;
  spec.speculative = shape.speculative && iteration && !key.defer_part0;
  spec.repair = key.repair;
  if (!spec.acts_at.empty() && site.acts_policy != nullptr) spec.acts_at = *site.acts_policy;
  out.plan = make_offload_plan(spec, shape.cfg.schedule);
  out.traffic = plan_traffic(out.plan);
  // Saved sets kept in host memory although their block offloads to storage: forwarded.
  out.acts_forwarded = 0;
  for (int32_t l = 0; iteration && l < static_cast<int32_t>(spec.acts_at.size()); ++l) {
    for (int32_t i = 0; i < spec.micro_batches; ++i) {
      out.acts_forwarded += spec.acts_at[static_cast<size_t>(l)] == ActPolicy::storage &&
                            vertical_acts_forwarded(l, i, spec.blocks);
    }
  }
  STRATA_RETURN_IF_ERROR(check_task_signatures(out.plan));
  if (!spec.compute_reads_host) STRATA_RETURN_IF_ERROR(check_task_tiers(out.plan));
  const TierBudgets budgets{shape.cfg.memory.device_bytes, shape.cfg.memory.host_bytes, 0};
  Status st = check_plan(out.plan, budgets);
  if (!st.ok()) {
    return Status(st.code(),
                  std::string("the ") + enum_name(shape.cfg.schedule) +
                      " plan does not fit: " + st.message() +
                      " (lower train.batch_size or train.grad_accum, keep less on host with "
                      "offload.*_on_host, or raise memory.device_bytes / memory.host_bytes)");
  }
  return Status::ok_status();
}

}  // namespace strata
