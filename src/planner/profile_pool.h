// How `strata profile` turns the task timings of its instrumented runs into a profile's compute,
// link, optimizer and contention figures (docs/design.md §7, docs/planner.md). Each task's
// duration in the executor's report is divided into its bytes or FLOPs: measuring the tasks the
// planner will later predict, as the executor runs them, keeps the profile honest about per-task
// costs that op microbenchmarks miss. The timings of tasks that ran alone are pooled per class
// over the rounds and summarised robustly (Note [Robust timings] in planner/profile_measure.h);
// tasks that overlapped the CPU optimizer give the shared-core paces, and those of the run with
// its state on storage the compute time storage traffic takes (Note [Shared cores] in
// simulator.h). The command runs the trainer and writes the profile; this is kept apart from it
// so that tests can feed it made-up runs.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "planner/profile.h"
#include "planner/profile_measure.h"
#include "sched/plan.h"
#include "sched/schedule_spec.h"

namespace strata {

// The instrumented runs: which order, and whether the state lives on storage.
enum class ProfileRunKind { horizontal, vertical, vertical_storage };
// The micro-batch sizes of the runs in both orders: the compute tables' token points.
inline constexpr std::array<int64_t, 3> kProfileMicroBatchSizes = {1, 2, 4};

// The timings of one instrumented run: its plan and, per recorded step, every task's sample.
struct ProfileRunTimings {
  ProfileRunKind kind = ProfileRunKind::horizontal;
  int64_t B = 1;
  ScheduleSpec spec;
  Plan plan;
  std::vector<bool> reused;  // weights_reused(plan)
  std::vector<std::vector<TaskSample>> steps;
};

// Every round's instrumented runs, round_of[i] the round of runs[i] (from 0).
struct ProfileRuns {
  int rounds = 0;
  std::vector<ProfileRunTimings> runs;
  std::vector<int> round_of;
};

// What a timing measures: compute classes in seconds per task (their work is fixed per run),
// the others as a rate (their bytes vary from task to task).
enum class TimingClass { fwd, bwd, fused_bwd, head, embed, zero, h2d, d2h, step, reduce };

// The class of a task's timing; nullopt for a task not timed (a transfer without bytes, the
// embed group's gradient zeroing, which is too small to time).
std::optional<TimingClass> timing_class(const Task& t);

// A timing's value for its class: seconds for compute, seconds per token for the embedding,
// bytes or parameters per second for the rest (`tokens`: of the run's micro-batch).
double timing_value(TimingClass c, const ProfileRunTimings& r, const Task& t, double seconds,
                    double tokens);

// Whether a sample ran alone: compute beside no optimizer task and no storage traffic, an
// optimizer task beside no compute (Note [Shared cores]).
bool ran_alone(TimingClass c, const TaskSample& s);

// The profile's figures from the runs of sequences of `seq_len` tokens: the compute tables at
// each micro-batch size, the speed-ups of tasks with weights just used (Note [Weights reused]),
// the rates that do not depend on B, the shared-core paces, the storage cost, and the
// measurement's sample counts and round spread.
void fill_profile(const ProfileRuns& m, double seq_len, HardwareProfile& prof);

}  // namespace strata
