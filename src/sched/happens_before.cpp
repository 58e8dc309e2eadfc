#include "sched/happens_before.h"

#include <cstdint>
#include <string>

namespace strata {

Result<HappensBefore> happens_before_edges(const Plan& plan) {
  const int64_t task_count = static_cast<int64_t>(plan.tasks.size());
  if (task_count > INT32_MAX) {
    return plan_error(std::to_string(task_count) + " tasks is more than a plan can index");
  }
  const auto n = static_cast<int32_t>(task_count);
  HappensBefore hb;
  hb.queue_pred_.assign(n, -1);
  hb.queue_next_.assign(n, -1);
  hb.queue_pos_.assign(n, 0);
  hb.pred_begin_.assign(n + 1, 0);

  // Rule 2 (queues), the checks that keep every edge an index, and the predecessor counts.
  for (int32_t t = 0; t < n; ++t) {
    const Task& task = plan.tasks[t];
    const int q = static_cast<int>(task.resource());
    STRATA_RETURN_IF_ERROR(check_task_edges(plan, t));
    std::vector<int32_t>& queue = hb.queues_[q];
    if (!queue.empty()) {
      hb.queue_pred_[t] = queue.back();
      hb.queue_next_[queue.back()] = t;
    }
    hb.queue_pos_[t] = static_cast<int32_t>(queue.size());
    queue.push_back(t);
    const int64_t count = static_cast<int64_t>(task.deps.size()) + (hb.queue_pred_[t] >= 0);
    hb.pred_begin_[t + 1] = hb.pred_begin_[t] + count;
  }

  // Predecessors: the queue predecessor, then the deps as listed (rule 1).
  hb.pred_.resize(hb.pred_begin_[n]);
  for (int32_t t = 0; t < n; ++t) {
    int64_t at = hb.pred_begin_[t];
    if (hb.queue_pred_[t] >= 0) hb.pred_[at++] = hb.queue_pred_[t];
    for (int32_t d : plan.tasks[t].deps) hb.pred_[at++] = d;
  }

  // Successors: the same edges reversed. Filling in ascending t keeps each row ascending.
  hb.succ_begin_.assign(n + 1, 0);
  for (int32_t p : hb.pred_) ++hb.succ_begin_[p + 1];
  for (int32_t t = 0; t < n; ++t) hb.succ_begin_[t + 1] += hb.succ_begin_[t];
  hb.succ_.resize(hb.pred_.size());
  std::vector<int64_t> fill(hb.succ_begin_.begin(), hb.succ_begin_.end() - 1);
  for (int32_t t = 0; t < n; ++t) {
    for (int32_t p : hb.predecessors(t)) hb.succ_[fill[p]++] = t;
  }
  return hb;
}

Status check_task_edges(const Plan& plan, int32_t t) {
  const auto n = static_cast<int64_t>(plan.tasks.size());
  const Task& task = plan.tasks[static_cast<size_t>(t)];
  if (static_cast<int>(task.resource()) >= kResourceCount) {
    return plan_error("task #" + std::to_string(t) + " '" + task.label +
                      "' has an unknown kind, so no queue");
  }
  for (int32_t d : task.deps) {
    if (d == t) return plan_error("task " + plan.describe(t) + " depends on itself");
    if (d < 0 || d >= n) {
      return plan_error("task " + plan.describe(t) + " depends on task #" + std::to_string(d) +
                        ", but the plan has " + std::to_string(n) + " tasks");
    }
  }
  return Status::ok_status();
}

}  // namespace strata
