// The cost model and the discrete-event simulator (docs/design.md §7).
//
// Cost model: every task of a plan gets a duration from a hardware profile (profile.h):
//   compute  forward   block_fwd_flops / block_fwd(tokens) (+ task overhead); embedding tasks
//                      (no FLOPs recorded) embed_s_per_token x tokens
//            backward  fused: flops / block_bwd(tokens); else the recompute at the forward rate
//                      plus the rest at the backward rate; a backward that writes its gradient
//                      without reading it (a fresh per-micro-batch gradient) first zeroes it:
//                      + the slot's bytes / memset rate
//            (block tasks whose weights were just used run faster: Note [Weights reused])
//            loss      flops / head(tokens)
//            zero      the slot's bytes / memset rate
//   h2d, d2h           latency + bytes / link rate
//   storage            latency + bytes / (sum of the directories' rates, or the rate limit)
//   cpu_optim          optimizer: bytes / optimizer-state bytes per parameter / params_per_s;
//                      "acc" and "sumsq": bytes / reduce rate; anything else: latency
//   net                latency + 2 (ranks-1)/ranks x bytes / network rate (Note [Deterministic
//                      all-reduce]: a reduce-scatter, then an all-gather)
// Simulator: the executor's rule and nothing else (Note [Happens-before in plans]): one in-order
// queue per resource, a task starts when its queue predecessor and every dep have finished.
// Time advances from event to event (a task starting or finishing); on a profile with shared
// cores, compute and the CPU optimizer slow each other down and storage traffic slows compute
// (Note [Shared cores]).
//
// Note [Weights reused]
// A block task whose block's weights the previous block task on the compute queue used (same
// block, same params slot) finds them in cache when a block fits there: the vertical order's
// micro-batches after a block's first, and the last block's fused backward after its forward.
// `strata profile` records the speed-up of such tasks over the others per micro-batch size,
// measured within its vertical runs so that the machine's drift between runs cancels out, and
// only where the timings tell it from 1 (block_fwd_reuse, block_bwd_reuse; 1 where absent, as in
// the GPU profiles, whose blocks are far larger than any cache). The cost model reads the property
// from the plan (queue order and slot uses, weights_reused), not from the schedule's name, so a
// horizontal plan with one block gets it as well as a vertical one.

// Note [Shared cores]
// On the CPU backend compute (GEMMs over all cores), the CPU optimizer and the storage engine run
// on the same cores. While compute and the optimizer both have a task, each runs at its own
// measured pace (compute_shared_speed, optim_shared_speed: measured, compute keeps most of the
// cores). Storage traffic costs compute io_s_per_byte seconds per byte moved while it runs: with
// storage tasks moving r bytes/s (each its bytes over its duration), compute's pace is
// 1 - io_s_per_byte x r (not below kMinComputePace). Paces change only at events, so a step of
// the simulation is exact for piecewise-constant rates.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/status.h"
#include "planner/profile.h"
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
  int32_t ranks = 1;  // of a data-parallel run: a collective sends 2 (ranks-1)/ranks of its bytes
};
CostContext cost_context(const ScheduleSpec& spec, double tokens_per_micro_batch);

// Per task: whether it is a block task whose weights the previous block task on the compute
// queue used (Note [Weights reused]).
std::vector<bool> weights_reused(const Plan& plan);

// Seconds per task, indexed like plan.tasks.
std::vector<double> task_durations(const Plan& plan, const HardwareProfile& profile,
                                   const CostContext& ctx);

inline constexpr double kMinComputePace = 0.1;

struct SimOptions {
  bool shared_cores = false;
  double compute_speed = 0.5, optim_speed = 0.5;  // paces while both have a task (shared cores)
  double io_s_per_byte = 0;                       // compute time per storage byte (shared cores)
  bool record_trace = true;                       // keep per-task start/end (report.timings)
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
