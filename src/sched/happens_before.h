// The direct happens-before edges of a plan, derived in one place for everyone who needs "what
// must finish before task t starts": the plan checker (plan_checker.cpp), the executor
// (executor.cpp) and the tests that check either against the definition.
//
// Note [Happens-before in plans] (plan.h) defines the relation: its direct edges are
//   1. deps:        d -> t for every d in t.deps;
//   2. queue order: p -> t where p is the task before t on t's resource (each resource is one
//                   in-order queue, run in plan order);
// and happens-before is their transitive closure. This file builds exactly those edges and the
// queues behind rule 2, reading only Task::deps and Task::resource, and nothing else: no
// transitive closure, no acyclicity check (check_plan and execute_plan each decide what a cycle
// means to them), no slot uses.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "sched/plan.h"

namespace strata {

// An invalid plan: invalid_argument, the message prefixed "plan: " (the checker's and the
// happens-before graph's errors read alike).
inline Status plan_error(const std::string& message) {
  return invalid_argument("plan: " + message);
}

class HappensBefore {
 public:
  int32_t task_count() const { return static_cast<int32_t>(queue_pred_.size()); }

  // ---- all direct edges (rules 1 and 2) --------------------------------------------------------
  // What must finish before t starts: t's queue predecessor first (when it has one), then t.deps
  // in the order listed. Duplicates are kept (a dep listed twice, or a dep that is also the queue
  // predecessor, gives two edges), so size() is the in-degree that Kahn's algorithm, or a count
  // of unfinished predecessors, must count down. t in [0, task_count()).
  std::span<const int32_t> predecessors(int32_t t) const { return edges(pred_begin_, pred_, t); }
  // The reverse: the tasks that have t among their predecessors, in ascending order, once per
  // edge (so a task listing t twice appears twice).
  std::span<const int32_t> successors(int32_t t) const { return edges(succ_begin_, succ_, t); }

  // ---- queue order (rule 2) --------------------------------------------------------------------
  // Resource r's tasks in plan order: the queue its executor thread runs.
  const std::vector<int32_t>& queue(Resource r) const { return queues_[static_cast<int>(r)]; }
  int32_t queue_pred(int32_t t) const { return queue_pred_[t]; }  // the task before t, or -1
  int32_t queue_next(int32_t t) const { return queue_next_[t]; }  // the task after t, or -1
  int32_t queue_pos(int32_t t) const { return queue_pos_[t]; }    // t's index in its queue

 private:
  friend Result<HappensBefore> happens_before_edges(const Plan& plan);

  static std::span<const int32_t> edges(const std::vector<int64_t>& begin,
                                        const std::vector<int32_t>& targets, int32_t t) {
    return std::span<const int32_t>(targets.data() + begin[t], targets.data() + begin[t + 1]);
  }

  std::array<std::vector<int32_t>, kResourceCount> queues_;
  std::vector<int32_t> queue_pred_, queue_next_, queue_pos_;
  // Compressed rows: the edges of task t are targets[begin[t] .. begin[t + 1]). 64-bit offsets:
  // the edge count is tasks + deps, which int32 task indices do not bound.
  std::vector<int64_t> pred_begin_, succ_begin_;
  std::vector<int32_t> pred_, succ_;
};

// The edges of `plan`, in O(tasks + deps) time and memory. invalid_argument, one line starting
// "plan: ", for a plan whose edges would not be indices: more tasks than int32_t indexes, a task
// on an unknown resource, a dep out of range or on the task itself (first such task in plan
// order). check_plan and execute_plan refuse those first in their own words, so for them this
// does not fail; tests' reference checkers use it to reject them.
Result<HappensBefore> happens_before_edges(const Plan& plan);

// OK, or the one-line "plan: ..." error above for task t alone (unknown resource, a dep on
// itself or out of range): the edge checks check_plan's structure rule shares.
Status check_task_edges(const Plan& plan, int32_t t);

}  // namespace strata
