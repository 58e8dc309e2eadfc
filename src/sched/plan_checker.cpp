#include "sched/plan_checker.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <queue>

#include "core/format.h"
#include "sched/happens_before.h"

namespace strata {

// Note [Checking races with vector clocks]
// Each queue is totally ordered, so the tasks that happen before B are described by one number
// per queue: the position of the last task there that happens before B (or is B). That vector is
// B's clock (as in race detectors, queues for threads), computed once in a topological order:
//   clock[B][q] = max of clock[P][q] over B's direct predecessors P (happens_before.h's edges),
//   clock[B][queue of B] = position of B.
// Then A -> B (or A == B) exactly when pos(A) <= clock[B][queue of A]: an O(1) query in
// O(tasks * kResourceCount) memory, no n^2 bitset.
// Races: one walk over a topological order T, keeping per slot its last write W and the reads
// since W. A read R needs W -> R; a write X needs W -> X and R -> X for each read R since W. That
// orders every conflicting pair, and only those are checked, so exactly the correct plans pass
// (why: docs/design.md §5.3). Each use is looked at a constant number of times: linear. An
// `initialized` slot starts with a virtual write that happens before everything.

namespace {

constexpr int32_t kNoWrite = -1;      // nothing has written the slot yet
constexpr int32_t kInitialData = -2;  // the slot's initial data: ordered before every task

// The happens-before graph in the form the checks need.
struct Order {
  HappensBefore edges;         // the direct edges and queues (happens_before.h)
  std::vector<int32_t> topo;   // a topological order, plan order where possible
  std::vector<int32_t> clock;  // tasks x kResourceCount; see the Note above
  std::vector<int32_t> path;   // tasks on the longest chain ending at each task

  // a happens before b, or a == b.
  bool ordered(const Plan& plan, int32_t a, int32_t b) const {
    int q = static_cast<int>(plan.tasks[a].resource());
    return edges.queue_pos(a) <= clock[static_cast<size_t>(b) * kResourceCount + q];
  }
};

Status check_structure(const Plan& plan) {
  const int64_t n = static_cast<int64_t>(plan.tasks.size());
  if (n > INT32_MAX / kResourceCount) {
    return plan_error(std::to_string(n) + " tasks is more than a plan can index");
  }
  for (int32_t s = 0; s < static_cast<int32_t>(plan.slots.size()); ++s) {
    const Slot& slot = plan.slots[s];
    if (static_cast<int>(slot.tier) >= kTierCount) {
      return plan_error("slot '" + slot.name + "' has an unknown tier");
    }
    if (slot.bytes < 0) {
      return plan_error("slot " + plan.describe_slot(s) + " has negative size " +
                        std::to_string(slot.bytes));
    }
  }
  for (int32_t t = 0; t < static_cast<int32_t>(n); ++t) {
    const Task& task = plan.tasks[t];
    STRATA_RETURN_IF_ERROR(check_task_edges(plan, t));
    for (const SlotUse& u : task.uses) {
      if (u.slot < 0 || u.slot >= static_cast<int32_t>(plan.slots.size())) {
        return plan_error("task " + plan.describe(t) + " uses slot #" + std::to_string(u.slot) +
                          ", but the plan has " + std::to_string(plan.slots.size()) + " slots");
      }
    }
  }
  return Status();
}

// After Kahn's algorithm stalls, every task not yet emitted has a predecessor that was not
// emitted either; walking predecessors from one of them must revisit a task: that is a cycle.
Status cycle_error(const Plan& plan, const Order& order, const std::vector<char>& emitted) {
  const int32_t n = static_cast<int32_t>(plan.tasks.size());
  std::vector<int32_t> walk, seen_at(n, -1);
  int32_t v = 0;
  while (emitted[v]) ++v;
  while (seen_at[v] < 0) {
    seen_at[v] = static_cast<int32_t>(walk.size());
    walk.push_back(v);
    int32_t next = -1;
    for (int32_t p : order.edges.predecessors(v)) {  // the queue predecessor first, then deps
      if (!emitted[p]) {
        next = p;
        break;
      }
    }
    v = next;  // exists: v was not emitted, so some predecessor was not either
  }
  // walk[seen_at[v]..] goes against the edges; reverse it to read "must finish before".
  std::vector<int32_t> cycle(walk.begin() + seen_at[v], walk.end());
  std::reverse(cycle.begin(), cycle.end());
  std::rotate(cycle.begin(), std::min_element(cycle.begin(), cycle.end()), cycle.end());
  cycle.push_back(cycle.front());
  std::string text;
  const size_t shown = 12;
  for (size_t i = 0; i < cycle.size(); ++i) {
    if (i > 0) {
      const std::vector<int32_t>& deps = plan.tasks[cycle[i]].deps;
      bool by_dep = std::find(deps.begin(), deps.end(), cycle[i - 1]) != deps.end();
      text += by_dep ? " -> " : " -[queue]-> ";
    }
    if (i == shown && cycle.size() > shown + 1) {
      text += "... -> ";
      i = cycle.size() - 1;
    }
    text += plan.describe(cycle[i]);
  }
  return plan_error("dependency cycle of " + std::to_string(cycle.size() - 1) +
                    " tasks (-> dep, -[queue]-> queue order): " + text);
}

// The edges, a topological order, clocks and path lengths; a cycle is an error.
// Requires check_structure to have passed.
Status build_order(const Plan& plan, Order& order) {
  const int32_t n = static_cast<int32_t>(plan.tasks.size());
  STRATA_ASSIGN_OR_RETURN(order.edges, happens_before_edges(plan));
  const HappensBefore& edges = order.edges;
  // In-degrees count duplicate edges as often as they appear, as predecessors() lists them.
  std::vector<int64_t> indegree(n, 0);
  for (int32_t t = 0; t < n; ++t) indegree[t] = static_cast<int64_t>(edges.predecessors(t).size());
  // Kahn's algorithm, smallest index first, so that the order (and the first error) follows
  // the plan where the plan allows it.
  std::priority_queue<int32_t, std::vector<int32_t>, std::greater<int32_t>> ready;
  for (int32_t t = 0; t < n; ++t) {
    if (indegree[t] == 0) ready.push(t);
  }
  std::vector<char> emitted(n, 0);
  order.topo.clear();
  order.topo.reserve(n);
  while (!ready.empty()) {
    int32_t t = ready.top();
    ready.pop();
    emitted[t] = 1;
    order.topo.push_back(t);
    for (int32_t s : edges.successors(t)) {
      if (--indegree[s] == 0) ready.push(s);
    }
  }
  if (static_cast<int32_t>(order.topo.size()) < n) return cycle_error(plan, order, emitted);

  order.clock.assign(static_cast<size_t>(n) * kResourceCount, -1);
  order.path.assign(n, 1);
  for (int32_t t : order.topo) {
    int32_t* c = &order.clock[static_cast<size_t>(t) * kResourceCount];
    auto join = [&](int32_t p) {
      const int32_t* pc = &order.clock[static_cast<size_t>(p) * kResourceCount];
      for (int q = 0; q < kResourceCount; ++q) c[q] = std::max(c[q], pc[q]);
      order.path[t] = std::max(order.path[t], order.path[p] + 1);
    };
    for (int32_t p : edges.predecessors(t)) join(p);
    c[static_cast<int>(plan.tasks[t].resource())] = edges.queue_pos(t);
  }
  return Status();
}

bool writes_slot(const Task& task, int32_t slot) {
  for (const SlotUse& u : task.uses) {
    if (u.slot == slot && u.write) return true;
  }
  return false;
}

// Rules 2 and 3: one walk over the topological order (Note [Checking races with vector clocks]).
Status check_slot_uses(const Plan& plan, const Order& order) {
  const int32_t num_slots = static_cast<int32_t>(plan.slots.size());
  std::vector<int32_t> last_write(num_slots);
  std::vector<std::vector<int32_t>> readers(num_slots);  // reads since last_write
  for (int32_t s = 0; s < num_slots; ++s) {
    last_write[s] = plan.slots[s].initialized ? kInitialData : kNoWrite;
  }
  auto ordered = [&](int32_t a, int32_t b) { return order.ordered(plan, a, b); };
  auto first_writer = [&](int32_t s, const std::function<bool(int32_t)>& pred) {
    for (int32_t t = 0; t < static_cast<int32_t>(plan.tasks.size()); ++t) {
      if (writes_slot(plan.tasks[t], s) && pred(t)) return t;
    }
    return int32_t{-1};
  };

  for (int32_t t : order.topo) {
    const Task& task = plan.tasks[t];
    for (const SlotUse& u : task.uses) {  // reads first: a task's own write comes after them
      if (u.write) continue;
      const int32_t s = u.slot, w = last_write[s];
      const std::string head =
          "task " + plan.describe(t) + " reads slot '" + plan.slots[s].name + "'";
      if (w == kNoWrite) {
        int32_t any = first_writer(s, [](int32_t) { return true; });
        return plan_error(head + " but no write of it happens before (" +
                          (any >= 0 ? "writer " + plan.describe(any) + " is not ordered before it"
                                    : "nothing writes it and it is not marked initialized") +
                          ")");
      }
      if (w >= 0 && !ordered(w, t)) {
        bool seen = plan.slots[s].initialized ||
                    first_writer(s, [&](int32_t x) { return x != t && ordered(x, t); }) >= 0;
        if (!seen) {
          return plan_error(head + " but no write of it happens before (last writer " +
                            plan.describe(w) + " is not ordered before it)");
        }
        return plan_error(head + " while " + plan.describe(w) +
                          " may be writing it (race: neither is ordered before the other)");
      }
      readers[s].push_back(t);
    }
    for (const SlotUse& u : task.uses) {
      if (!u.write) continue;
      const int32_t s = u.slot, w = last_write[s];
      const std::string head =
          "task " + plan.describe(t) + " writes slot '" + plan.slots[s].name + "'";
      if (w >= 0 && !ordered(w, t)) {
        return plan_error(head + " while " + plan.describe(w) +
                          " may still be writing it (race: neither write is ordered before the "
                          "other)");
      }
      for (int32_t r : readers[s]) {
        if (!ordered(r, t)) {
          return plan_error(head + " while " + plan.describe(r) +
                            " may still read it (the reader is not ordered before the write)");
        }
      }
      last_write[s] = t;
      readers[s].clear();
    }
  }
  return Status();
}

std::array<int64_t, kTierCount> bytes_per_tier(const Plan& plan) {
  std::array<int64_t, kTierCount> bytes{};
  for (const Slot& s : plan.slots) {
    if (static_cast<int>(s.tier) < kTierCount) bytes[static_cast<int>(s.tier)] += s.bytes;
  }
  return bytes;
}

Status check_budgets(const Plan& plan, const TierBudgets& budgets) {
  const std::array<int64_t, kTierCount> budget = {budgets.device, budgets.host, budgets.storage};
  const std::array<int64_t, kTierCount> needed = bytes_per_tier(plan);
  for (int tier = 0; tier < kTierCount; ++tier) {
    const int64_t need = needed[tier];
    if (budget[tier] <= 0 || need <= budget[tier]) continue;
    std::vector<int32_t> on_tier;
    for (int32_t s = 0; s < static_cast<int32_t>(plan.slots.size()); ++s) {
      if (static_cast<int>(plan.slots[s].tier) == tier) on_tier.push_back(s);
    }
    std::stable_sort(on_tier.begin(), on_tier.end(), [&](int32_t a, int32_t b) {
      return plan.slots[a].bytes > plan.slots[b].bytes;
    });
    std::string largest;
    const size_t shown = std::min<size_t>(3, on_tier.size());
    for (size_t i = 0; i < shown; ++i) {
      const Slot& slot = plan.slots[on_tier[i]];
      largest += (i ? ", " : "") + slot.name + " " + format_bytes(slot.bytes);
    }
    if (on_tier.size() > shown) {
      largest += " and " + std::to_string(on_tier.size() - shown) + " more slots";
    }
    return plan_error(std::string(tier_name(static_cast<Tier>(tier))) + " budget: plan needs " +
                      format_bytes(need) + " (" + largest + "), budget is " +
                      format_bytes(budget[tier]));
  }
  return Status();
}

}  // namespace

Status check_plan(const Plan& plan, const TierBudgets& budgets) {
  STRATA_RETURN_IF_ERROR(check_structure(plan));
  Order order;
  STRATA_RETURN_IF_ERROR(build_order(plan, order));
  STRATA_RETURN_IF_ERROR(check_slot_uses(plan, order));
  return check_budgets(plan, budgets);
}

PlanStats plan_stats(const Plan& plan) {
  PlanStats stats;
  for (const Task& t : plan.tasks) {
    int q = static_cast<int>(t.resource());
    if (q < kResourceCount) ++stats.tasks_per_resource[q];
  }
  stats.bytes_per_tier = bytes_per_tier(plan);
  stats.traffic = plan_traffic(plan);
  Order order;
  if (check_structure(plan).ok() && build_order(plan, order).ok()) {
    stats.critical_path_tasks = 0;
    for (int32_t p : order.path)
      stats.critical_path_tasks = std::max<int64_t>(stats.critical_path_tasks, p);
  }
  return stats;
}

}  // namespace strata
