// The cost model and the discrete-event simulator (docs/design.md §7).
//
// Cost model: every task of a plan gets a duration from a hardware profile (profile.h):
//   compute  forward   block_fwd_flops / block_fwd(tokens) (+ task overhead); embedding tasks
//                      (no FLOPs recorded) embed_s_per_token x tokens
//            backward  fused: flops / block_bwd(tokens); else the recompute at the forward rate
//                      plus the rest at the backward rate
//            loss      flops / head(tokens)
//            zero      the slot's bytes / memset rate
//   h2d, d2h           latency + bytes / link rate
//   storage            latency + bytes / (sum of the directories' rates, or the rate limit)
//   cpu_optim          optimizer: bytes / optimizer-state bytes per parameter / params_per_s;
//                      "acc" and "sumsq": bytes / reduce rate; anything else: latency
// Simulator: the executor's rule and nothing else (Note [Happens-before in plans]): one in-order
// queue per resource, a task starts when its queue predecessor and every dep have finished.
// Time advances from event to event (a task finishing); on a profile with shared cores, compute
// and the CPU optimizer each run at shared_speed while both have a task, so their work is
// stretched as it is when the two compete for the same cores.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/status.h"
#include "plan/profile.h"
#include "sched/executor.h"
#include "sched/plan.h"
#include "sched/schedule_spec.h"

namespace strata {

struct CostContext {
  double tokens = 0;                  // B x T of one micro-batch
  double block_fwd_flops = 0;         // splits a non-fused backward into recompute and backward
  double optim_bytes_per_param = 12;  // optimizer task bytes -> parameters
  double read_bytes_per_s = 0;        // storage rate limits; 0: the profile's storage rates
  double write_bytes_per_s = 0;
};
CostContext cost_context(const ScheduleSpec& spec, double tokens_per_micro_batch);

// Seconds per task, indexed like plan.tasks.
std::vector<double> task_durations(const Plan& plan, const HardwareProfile& profile,
                                   const CostContext& ctx);

struct SimOptions {
  bool shared_cores = false;
  double shared_speed = 0.5;
  bool record_trace = true;  // keep per-task start/end (report.timings)
};

struct SimResult {
  // wall_s, busy_s per resource (wall time each resource had a task, as the executor reports)
  // and, with record_trace, per-task timings: execution_trace_json(plan, report) opens it.
  ExecutionReport report;
  double iter_s = 0;
  std::array<double, kResourceCount> work_s{};  // sum of task durations, no contention
  // The roofline ideal: the busiest resource's work (compute + cpu_optim as one with shared
  // cores), i.e. the iteration time if everything overlapped perfectly.
  double roofline_s = 0;
  Resource bound = Resource::compute;            // the resource (group) that sets the roofline
  std::array<int64_t, kTierCount> peak_bytes{};  // sum of slot bytes per tier (slots are static)
};

// invalid_argument for durations of the wrong size, a bad dep, or a cycle.
Result<SimResult> simulate(const Plan& plan, const std::vector<double>& durations,
                           const SimOptions& options = {});

SimOptions sim_options(const HardwareProfile& profile);

}  // namespace strata
