// The arithmetic of `strata profile` (docs/design.md §7, docs/planner.md): robust statistics of
// task timings, what ran beside each task of an instrumented run, the contention figures of the
// cost model (Note [Shared cores] in simulator.h), and how busy the machine was while measuring.
// Kept apart from the command so that tests can feed it made-up timings.
//
// Note [Robust timings]
// One step of a short run is a handful of tasks per class, and on a shared machine a task now
// and then takes far longer (another process, the hypervisor): a profile taken once from one
// step carried that into every prediction (15-50% apart between two profiles of one machine).
// So `strata profile` repeats its runs in rounds, keeps every task's timing of the steps after
// the first, and summarises each class by Tukey's fences: timings outside [q1 - 1.5 IQR,
// q3 + 1.5 IQR] are rejected as disturbed and the rest averaged (the mean, not the median: a run
// pays the ordinary jitter too). Rates from different rounds are compared, and a large spread, a
// high load average, CPU time taken by other processes or stolen by the hypervisor is logged as a
// warning and written into the profile ("measurement").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sched/executor.h"
#include "sched/plan.h"

namespace strata {

struct TimingSummary {
  double mean = 0;  // of the kept timings (0 when there are none)
  double sem = 0;   // the mean's standard error (0 with fewer than two kept)
  int64_t kept = 0, rejected = 0;
};
// Note [Robust timings].
TimingSummary summarize_timings(std::vector<double> timings);
// Which values lie within Tukey's fences (Note [Robust timings]), indexed like `values`.
std::vector<bool> within_fences(const std::vector<double>& values);

// The ratio a / b of two measured times (each with its standard error) when the timings tell it
// from 1: 1 when it lies within two standard errors of 1, 0 (no answer) when a or b is not
// positive or the ratio is outside 0.5..2, which a disturbed measurement gives, not a cache.
double significant_speedup(double a, double a_sem, double b, double b_sem);

// One task of an instrumented run and what ran beside it.
struct TaskSample {
  int32_t task = -1;
  double seconds = 0;
  double beside_optim_s = 0;    // seconds of it during which cpu_optim had a task
  double beside_compute_s = 0;  // seconds of it during which compute had a task
  double storage_bytes = 0;     // storage bytes moved while it ran (each storage task's bytes
                                // spread evenly over its duration)
};
// Every task of a recorded run (report.timings indexed like plan.tasks).
std::vector<TaskSample> task_samples(const Plan& plan, const ExecutionReport& report);

// A task's time against what it takes alone, and how much contention it met.
struct Contended {
  double seconds = 0, alone_s = 0, contended = 0;
};
// The pace of tasks that ran at it for `contended` seconds: such a task takes
// seconds - alone = (1 - pace) x contended. Each sample contended for at least a quarter of its
// time gives one estimate, and their robust mean (Note [Robust timings]) is the pace, in
// [0.05, 1]; `fallback` without such samples. (On the CPU backend the optimizer's burst at the
// start of a forward also slows the next compute tasks, which ran beside nothing: the fitted pace
// carries that cost too, since the overlapped task alone is charged with it.)
double fitted_pace(const std::vector<Contended>& samples, double fallback);
// Seconds lost per unit of contention (storage bytes moved beside the task): seconds - alone =
// cost x contended, summed over the samples with contended > 0 whose own estimate
// (seconds - alone) / contended lies within Tukey's fences, sum over sum (so a task that met
// much contention weighs more); >= 0, and 0 without samples.
double fitted_cost(const std::vector<Contended>& samples);

// The whole machine's CPU time and this process's, at one moment.
struct CpuSnapshot {
  bool ok = false;
  double wall_s = 0;   // a steady clock
  double busy_s = 0;   // every core's time not idle, iowait or stolen (/proc/stat)
  double steal_s = 0;  // every core's time stolen by the hypervisor
  double own_s = 0;    // this process's CPU time, every thread (getrusage)
};
CpuSnapshot cpu_snapshot();
// The first line of /proc/stat ("cpu  user nice system idle iowait irq softirq steal ...", in
// clock ticks) into busy_s and steal_s at `ticks_per_s`; false if it is not one.
bool parse_proc_stat(const std::string& line, double ticks_per_s, CpuSnapshot& out);

struct MachineLoad {
  double other_cpu = 0;  // other processes' CPU time / (wall x cores)
  double steal = 0;      // stolen time / (wall x cores)
};
MachineLoad machine_load(const CpuSnapshot& before, const CpuSnapshot& after, int cores);
// /proc/loadavg's one-minute figure, or -1.
double load_average();

}  // namespace strata
