// The executor: runs a plan (plan.h) for real, one worker thread per resource (docs/design.md §5).
//
// Contract
//  - Ordering: exactly Note [Happens-before in plans] and nothing more. Each resource's tasks run
//    one at a time on that resource's own thread, in plan order; a task starts once its queue
//    predecessor and every task in its deps have finished. Tasks on different resources with no
//    ordering between them run concurrently ("nothing waits that need not wait"). A plan that
//    passed check_plan therefore needs no other lock or event around its slots.
//  - Threads: execute_plan starts one thread per resource that has tasks (none for idle
//    resources), blocks the caller until all of them have joined, and leaves no thread behind.
//    Waiting is on condition variables, never spinning.
//  - Ownership: the executor owns nothing the actions touch. The plan, the actions and
//    everything they capture (device, streams, buffers, the storage engine) are borrowed and must
//    outlive the call. Each action runs on the thread of its task's resource, so state that a
//    single action uses across calls (a stream, an engine queue) is touched by one thread only;
//    state shared between resources is protected by the plan's ordering, not by the executor.
//  - Completion: when an action returns, its work must be done (device work synchronised, I/O
//    waited), or the actions must order themselves past the return: the executor sees only the
//    return and then starts the dependents, so their actions must wait for the unfinished work
//    first (the offloaded trainer on a discrete device does, with one event per task: Note
//    [Ordering by events] in train/offload_actions.h).
//  - Failure: the first action to fail (a non-ok Status, or an exception, reported as internal)
//    stops the run: tasks not yet started are skipped, tasks already running finish, then the
//    call returns that Status with the task's description in front of its message. Nothing is
//    retried; the caller decides whether the slots' contents are still usable (they generally
//    are not).
#pragma once

#include <array>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <vector>

#include "core/status.h"
#include "sched/plan.h"

namespace strata {

// What a task does, supplied by the schedule that built the plan: runs on the resource's own
// worker thread; returns a Status (a storage error, say). Device work it enqueues must be finished
// (or synchronised) before it returns, so completion means the data is there, unless the actions
// order themselves (the Completion contract above).
using TaskAction = std::function<Status()>;

struct ExecutorOptions {
  bool record_trace = false;  // keep per-task timings in the report (for execution_trace_json)
};

struct TaskTiming {
  double start_s = 0, end_s = 0;  // seconds since run() began
};

struct ExecutionReport {
  double wall_s = 0;
  std::array<double, kResourceCount> busy_s{};  // per resource (indexed by Resource): sum of
                                                // its tasks' durations
  std::vector<TaskTiming> timings;              // per task, indexed like plan.tasks (record_trace)
};

// Runs every task of `plan`: each resource has one worker thread taking its tasks in plan order
// (queue order); a task starts when its predecessor on the queue and all its deps have finished.
// The first failing action stops the run: tasks not yet started are skipped, running ones finish,
// and the Status returned is that failure, same code, its message prefixed with the task's
// description: "task 'fetch blk.3' (storage_read): pread ...", so to_string() reads
// "io_error: task 'fetch blk.3' (storage_read): pread ...".
// A plan must have passed check_plan. Before starting anything the executor still refuses, with
// invalid_argument, what would crash or hang it: actions.size() != tasks, an empty action, a dep
// out of range, a task on an unknown resource, or a cycle in the happens-before graph
// (O(tasks + deps), over the edges of sched/happens_before.h).
Result<ExecutionReport> execute_plan(const Plan& plan, const std::vector<TaskAction>& actions,
                                     const ExecutorOptions& options = {});

// Chrome trace / Perfetto JSON, to load in ui.perfetto.dev or chrome://tracing:
// {"traceEvents": [...], "displayTimeUnit": "ms"} with one track (tid = resource index) per
// resource that has tasks, named by "M" thread_name events, and one "X" complete event per task:
// name = label, cat = task kind, ts/dur in microseconds, args {task, block, micro_batch, bytes}.
// A report without timings (record_trace off) gives the tracks and no events.
nlohmann::json execution_trace_json(const Plan& plan, const ExecutionReport& report);

}  // namespace strata
