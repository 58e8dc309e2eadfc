// The plan checker proves a plan correct without running it (docs/design.md §5). Generators call it
// on every plan they build; `strata train` calls it before step 1 so that a plan that does not
// fit its budgets is refused with the numbers; tests call it on every generated plan.
#pragma once

#include <array>
#include <cstdint>

#include "core/status.h"
#include "sched/plan.h"

namespace strata {

// Bytes available per tier; 0 means unlimited.
struct TierBudgets {
  int64_t device = 0, host = 0, storage = 0;
};

// OK, or invalid_argument with one line ("plan: ...") naming the tasks and slot of the first
// violation found, in this order:
//  1. structure: deps index existing tasks, no self-deps, slot uses index existing slots, slot
//     bytes >= 0; the happens-before graph (Note [Happens-before in plans]) is acyclic, else
//     one cycle's members are listed;
//  2. every read of a slot has a write of it that happens before it (or the slot is
//     `initialized`);
//  3. no race: any two uses of one slot, at least one a write, are ordered by happens-before;
//  4. the sum of slot bytes per tier is within its budget (slots are static, so that sum is the
//     peak); the error names the tier, needed and available bytes and the largest slots.
// Rules 2 and 3 are checked together in one pass, so "first" means first in a topological order
// of the tasks that follows plan order where it can.
// Cost: O((tasks + deps) * kResourceCount + uses + slots) time and memory; 100k tasks take
// milliseconds. See Note [Checking races with vector clocks] in plan_checker.cpp.
Status check_plan(const Plan& plan, const TierBudgets& budgets);

struct PlanStats {
  std::array<int64_t, kResourceCount> tasks_per_resource{};  // indexed by Resource
  std::array<int64_t, kTierCount> bytes_per_tier{};          // indexed by Tier: sum of slots
  // Tasks on the longest happens-before chain; -1 when the plan has a bad dep or a cycle.
  int64_t critical_path_tasks = -1;
  PlanTraffic traffic;  // bytes moved per resource and kind of state
};
PlanStats plan_stats(const Plan& plan);

}  // namespace strata
