// The plans an offloaded run may use, one per PlanKey: which keys a run reaches, and each one
// built from its schedule spec and checked (signatures, tiers, the memory.* budgets) before
// step 1. OffloadTrainer binds them to memory and actions and picks one per run.
#pragma once

#include <vector>

#include "backend/backend.h"
#include "core/status.h"
#include "sched/schedule_spec.h"
#include "train/offload_actions.h"
#include "train/offload_shape.h"

namespace strata {

// Every key a run of this shape may ask for. Vertical: the first iteration, the steady ones
// (steps pending from the previous), the flush, and with speculation its repair (Note
// [Speculative steps] in schedule_spec.h). Horizontal: the default key alone.
std::vector<PlanKey> offload_plan_keys(const OffloadShape& shape);

// The key of the next iteration, given what the last one left pending and whether this one
// defers part 0 (speculation off for this step).
PlanKey iteration_key(const OffloadShape& shape, Pending pending, bool defer_part0);

// Where the plans run and how their blocks keep activations ("auto" decided per block).
struct PlanSite {
  int rank = 0;
  bool device_collectives = false;  // ScheduleSpec::device_collectives
  const std::vector<ActPolicy>* acts_policy = nullptr;
};

// out.plan for `key`, its traffic and forwarded saved sets, checked; an error names the schedule
// and what to change when the plan does not fit the budgets.
Status build_offload_plan(Device& dev, const OffloadShape& shape, const PlanSite& site,
                          const PlanKey& key, BoundPlan& out);

}  // namespace strata
