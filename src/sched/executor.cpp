#include "sched/executor.h"

#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <system_error>
#include <thread>

#include "sched/happens_before.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;

int res_index(const Task& t) {
  return static_cast<int>(t.resource());
}

// The checks that stand between a bad plan and a crash or a hang. check_plan does them too (and
// much more), but a run that hangs forever on a forgotten check_plan is worse than one O(n) pass.
// Returns the plan's happens-before edges, which the run then follows.
Result<HappensBefore> validate(const Plan& plan, const std::vector<TaskAction>& actions) {
  const int32_t n = static_cast<int32_t>(plan.tasks.size());
  if (actions.size() != plan.tasks.size()) {
    return invalid_argument("executor: " + std::to_string(actions.size()) + " actions for " +
                            std::to_string(n) + " tasks");
  }
  for (int32_t i = 0; i < n; ++i) {
    if (!actions[i])
      return invalid_argument("executor: task " + plan.describe(i) + " has no action");
  }
  // Refuses a dep out of range or on the task itself, and a task on an unknown resource.
  STRATA_ASSIGN_OR_RETURN(HappensBefore edges, happens_before_edges(plan));
  // Kahn's algorithm over all the direct edges (deps and queue order).
  std::vector<int64_t> indegree(n, 0);
  std::vector<int32_t> ready;
  for (int32_t i = 0; i < n; ++i) {
    indegree[i] = static_cast<int64_t>(edges.predecessors(i).size());
    if (indegree[i] == 0) ready.push_back(i);
  }
  int32_t visited = 0;
  while (!ready.empty()) {
    const int32_t i = ready.back();
    ready.pop_back();
    ++visited;
    for (int32_t s : edges.successors(i)) {
      if (--indegree[s] == 0) ready.push_back(s);
    }
  }
  if (visited != n) {
    for (int32_t i = 0; i < n; ++i) {
      if (indegree[i] > 0) {
        return invalid_argument("executor: the plan's happens-before graph has a cycle through " +
                                plan.describe(i) + " (run check_plan)");
      }
    }
  }
  return edges;
}

// Shared state of one run. Everything below `mu` is guarded by it; `timings[i]` is written only
// by the worker of task i's resource and read after the join, so it needs no lock.
class Run {
 public:
  Run(const Plan& plan, const HappensBefore& edges, const std::vector<TaskAction>& actions)
      : plan_(plan),
        edges_(edges),
        actions_(actions),
        pending_(plan.tasks.size(), 0),
        timings_(plan.tasks.size(), TaskTiming{-1, -1}) {
    for (int32_t i = 0; i < edges.task_count(); ++i) {
      pending_[i] = static_cast<int64_t>(edges.predecessors(i).size());
    }
  }

  void start_clock() { t0_ = Clock::now(); }
  double now() const { return std::chrono::duration<double>(Clock::now() - t0_).count(); }

  // The body of one resource's thread: its tasks in plan order.
  void work(int resource, const std::vector<int32_t>& queue) {
    for (int32_t i : queue) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_[resource].wait(lock, [&] { return failed_ || pending_[i] == 0; });
        if (failed_) return;  // skip everything not yet started
      }
      TaskTiming& timing = timings_[i];
      timing.start_s = now();
      Status s = invoke(i);
      timing.end_s = now();
      if (!s.ok()) {
        fail(Status(s.code(), "task " + plan_.describe(i) + ": " + s.message()));
        return;
      }
      finish(i);
    }
  }

  // Records the first failure and wakes every waiter: a waiting task whose dep will now never
  // run must not sleep forever.
  void fail(Status s) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (failed_) return;
      failed_ = true;
      failure_ = std::move(s);
    }
    for (auto& cv : cv_) cv.notify_all();
  }

  bool failed() const { return failed_; }  // after the join only
  const Status& failure() const { return failure_; }
  std::vector<TaskTiming>& timings() { return timings_; }

 private:
  Status invoke(int32_t i) {
    // An exception escaping a worker thread would terminate the process; report it instead.
    try {
      return actions_[i]();
    } catch (const std::exception& e) {
      return Status(ErrorCode::internal, std::string("action threw: ") + e.what());
    } catch (...) {
      return Status(ErrorCode::internal, "action threw a non-standard exception");
    }
  }

  // Marks task i done; wakes only the resources holding a task whose last predecessor this was.
  // i's own resource needs no wake-up: its only waiter is this thread, which runs its next task
  // itself (and finds i counted off, under the mutex).
  void finish(int32_t i) {
    std::array<bool, kResourceCount> wake{};
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (int32_t s : edges_.successors(i)) {
        if (--pending_[s] == 0) wake[res_index(plan_.tasks[s])] = true;
      }
    }
    wake[res_index(plan_.tasks[i])] = false;
    // Notifying after unlocking is safe: a waiter re-checks pending_ under the mutex before it
    // sleeps, so it cannot miss the change.
    for (int r = 0; r < kResourceCount; ++r) {
      if (wake[r]) cv_[r].notify_all();
    }
  }

  const Plan& plan_;
  const HappensBefore& edges_;
  const std::vector<TaskAction>& actions_;
  Clock::time_point t0_{};
  std::mutex mu_;
  std::array<std::condition_variable, kResourceCount> cv_;  // one per resource's worker
  // Unfinished predecessors per task (Note [Happens-before in plans]: its deps and its queue
  // predecessor; the latter is always done by the time the task's own thread reaches it).
  std::vector<int64_t> pending_;
  bool failed_ = false;
  Status failure_;
  std::vector<TaskTiming> timings_;
};

}  // namespace

Result<ExecutionReport> execute_plan(const Plan& plan, const std::vector<TaskAction>& actions,
                                     const ExecutorOptions& options) {
  STRATA_ASSIGN_OR_RETURN(const HappensBefore edges, validate(plan, actions));

  Run run(plan, edges, actions);
  std::vector<std::thread> workers;
  run.start_clock();
  for (int r = 0; r < kResourceCount; ++r) {
    const std::vector<int32_t>& queue = edges.queue(static_cast<Resource>(r));
    if (queue.empty()) continue;  // idle resources get no thread
    try {
      workers.emplace_back([&run, &queue, r] { run.work(r, queue); });
    } catch (const std::system_error& e) {
      // Stop the threads already started rather than run the plan on fewer queues than it needs.
      run.fail(Status(ErrorCode::internal,
                      std::string("executor: cannot start a worker thread: ") + e.what()));
      break;
    }
  }
  for (std::thread& t : workers) t.join();

  ExecutionReport report;
  report.wall_s = run.now();
  if (run.failed()) return run.failure();
  for (size_t i = 0; i < plan.tasks.size(); ++i) {
    const TaskTiming& t = run.timings()[i];
    report.busy_s[res_index(plan.tasks[i])] += t.end_s - t.start_s;
  }
  if (options.record_trace) report.timings = std::move(run.timings());
  return report;
}

nlohmann::json execution_trace_json(const Plan& plan, const ExecutionReport& report) {
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"name", "process_name"},
                    {"ph", "M"},
                    {"pid", 0},
                    {"tid", 0},
                    {"args", {{"name", "strata"}}}});
  std::array<bool, kResourceCount> used{};
  for (const Task& t : plan.tasks) used[res_index(t)] = true;
  for (int r = 0; r < kResourceCount; ++r) {
    if (!used[r]) continue;
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", 0},
                      {"tid", r},
                      {"args", {{"name", resource_name(static_cast<Resource>(r))}}}});
    // Keep the tracks in Resource order (compute first) instead of the viewer's own order.
    events.push_back({{"name", "thread_sort_index"},
                      {"ph", "M"},
                      {"pid", 0},
                      {"tid", r},
                      {"args", {{"sort_index", r}}}});
  }
  if (report.timings.size() == plan.tasks.size()) {
    for (size_t i = 0; i < plan.tasks.size(); ++i) {
      const Task& t = plan.tasks[i];
      const TaskTiming& tm = report.timings[i];
      events.push_back({{"name", t.label.empty() ? "#" + std::to_string(i) : t.label},
                        {"cat", task_kind_name(t.kind)},
                        {"ph", "X"},
                        {"pid", 0},
                        {"tid", res_index(t)},
                        {"ts", tm.start_s * 1e6},
                        {"dur", (tm.end_s - tm.start_s) * 1e6},
                        {"args",
                         {{"task", i},
                          {"block", t.block},
                          {"micro_batch", t.micro_batch},
                          {"bytes", t.bytes}}}});
    }
  }
  return {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
}

}  // namespace strata
