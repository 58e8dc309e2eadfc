// The arithmetic of `strata profile` (planner/profile_measure.h, planner/profile_pool.h) on
// made-up timings: outliers rejected by Tukey's fences (Note [Robust timings]), speed-ups
// recorded only when the timings tell them from 1, what ran beside each task of a run, the
// shared-core paces and the storage cost fitted from contended tasks (Note [Shared cores]), how
// busy the machine was, and how the timings of made-up runs are classified, pooled and turned
// into a profile's figures.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "planner/profile_measure.h"
#include "planner/profile_pool.h"
#include "test_util.h"

namespace strata {
namespace {

constexpr double kEps = 1e-9;

TEST(ProfileMeasure, OutliersAreRejectedAndTheRestAveraged) {
  // One disturbed task among steady ones.
  TimingSummary s = summarize_timings({1.0, 1.1, 0.9, 1.0, 1.0, 1.05, 0.95, 10.0});
  EXPECT_EQ(s.kept, 7);
  EXPECT_EQ(s.rejected, 1);
  EXPECT_NEAR(s.mean, 1.0, kEps);
  // Too fast is as suspect as too slow.
  s = summarize_timings({1.0, 1.1, 0.9, 1.0, 1.0, 1.05, 0.95, 0.01});
  EXPECT_EQ(s.rejected, 1);
  EXPECT_NEAR(s.mean, 1.0, kEps);
  // Nothing to reject: the plain mean (not the median: ordinary jitter is part of a run), and
  // its standard error (sample deviation sqrt(5/3) over sqrt(4)).
  s = summarize_timings({1, 2, 3, 4});
  EXPECT_EQ(s.kept, 4);
  EXPECT_NEAR(s.mean, 2.5, kEps);
  EXPECT_NEAR(s.sem, std::sqrt(5.0 / 3) / 2, kEps);
  EXPECT_EQ(summarize_timings({7}).sem, 0);
  s = summarize_timings({});
  EXPECT_EQ(s.kept + s.rejected, 0);
  EXPECT_EQ(s.mean, 0);
  EXPECT_EQ(within_fences({5, 5, 5, 6}), (std::vector<bool>{true, true, true, false}));
}

TEST(ProfileMeasure, ASpeedUpIsRecordedOnlyWhenTheTimingsTellItFromOne) {
  EXPECT_NEAR(significant_speedup(1.2, 0.01, 1.0, 0.01), 1.2, kEps);
  // 1.02 within two standard errors (about 0.028 here) of 1: no measurable gain.
  EXPECT_EQ(significant_speedup(1.02, 0.02, 1.0, 0.01), 1.0);
  EXPECT_NEAR(significant_speedup(0.9, 0.001, 1.0, 0.001), 0.9, kEps);  // slower counts too
  // No answer: a time that is not positive, or a ratio no cache gives.
  EXPECT_EQ(significant_speedup(0, 0, 1, 0), 0);
  EXPECT_EQ(significant_speedup(1, 0, -1, 0), 0);
  EXPECT_EQ(significant_speedup(3, 0, 1, 0), 0);
  EXPECT_EQ(significant_speedup(1, 0, 3, 0), 0);
}

TEST(ProfileMeasure, TaskSamplesSeeWhatRanBesideThem) {
  Plan p;
  p.add_task(test::make_task(Resource::compute, "c"));
  p.add_task(test::make_task(Resource::cpu_optim, "o"));
  p.add_task(test::make_task(Resource::storage_read, "r"));
  p.add_task(test::make_task(Resource::storage_write, "w"));
  p.tasks[2].bytes = 100;
  p.tasks[3].bytes = 100;
  ExecutionReport rep;
  rep.timings = {{0, 2}, {1, 3}, {0, 1}, {1.5, 2.5}};
  const std::vector<TaskSample> s = task_samples(p, rep);
  ASSERT_EQ(s.size(), 4u);
  EXPECT_NEAR(s[0].seconds, 2, kEps);
  EXPECT_NEAR(s[0].beside_optim_s, 1, kEps);
  EXPECT_NEAR(s[0].beside_compute_s, 2, kEps);      // its own queue: itself
  EXPECT_NEAR(s[0].storage_bytes, 100 + 50, kEps);  // all of the read, half of the write
  EXPECT_NEAR(s[1].beside_compute_s, 1, kEps);
  EXPECT_NEAR(s[1].storage_bytes, 100, kEps);  // the write, none of the read that ended at 1
  // A report without timings (not recorded) gives nothing.
  EXPECT_TRUE(task_samples(p, ExecutionReport{}).empty());
}

TEST(ProfileMeasure, PacesAndCostsFitTheirModel) {
  // Tasks of 1 s alone run at pace 0.4 for `contended` s: they take 0.6 x contended longer.
  std::vector<Contended> c;
  for (double o : {0.6, 0.8, 1.0, 1.2}) c.push_back({1 + 0.6 * o, 1, o});
  EXPECT_NEAR(fitted_pace(c, 0.5), 0.4, 1e-9);
  // Barely contended tasks say too little and are left out; without any, the fallback.
  EXPECT_NEAR(fitted_pace({{1.5, 1, 0.3}}, 0.7), 0.7, kEps);  // 0.3 of 1.5 s: under a quarter
  EXPECT_NEAR(fitted_pace({}, 0.7), 0.7, kEps);
  // Clamped into [0.05, 1].
  EXPECT_NEAR(fitted_pace({{0.5, 1, 1}}, 0.5), 1, kEps);
  EXPECT_NEAR(fitted_pace({{100, 1, 100}}, 0.5), 0.05, kEps);
  // Storage costs 2e-9 s per byte; one disturbed task is rejected.
  std::vector<Contended> io;
  for (double b : {1e6, 2e6, 3e6, 4e6, 5e6, 6e6}) io.push_back({1 + 2e-9 * b, 1, b});
  io.push_back({9, 1, 1e6});
  io.push_back({1.5, 1, 0});  // no traffic beside it: says nothing
  EXPECT_NEAR(fitted_cost(io), 2e-9, 1e-15);
  EXPECT_EQ(fitted_cost({}), 0);
  EXPECT_EQ(fitted_cost({{0.9, 1, 1e6}}), 0);  // never negative
}

TEST(ProfileMeasure, MachineLoadFromProcStat) {
  CpuSnapshot a, b;
  ASSERT_TRUE(parse_proc_stat("cpu  100 0 50 1000 10 5 5 20 0 0", 100, a));
  EXPECT_NEAR(a.busy_s, 1.6, kEps);  // user + nice + system + irq + softirq
  EXPECT_NEAR(a.steal_s, 0.2, kEps);
  EXPECT_FALSE(parse_proc_stat("cpu0 1 2 3 4 5 6 7 8", 100, b));
  EXPECT_FALSE(parse_proc_stat("cpu 1 2 3", 100, b));
  EXPECT_FALSE(parse_proc_stat("cpu 1 2 3 4 5 6 7 8", 0, b));
  // 10 s on 2 cores: 20 s of CPU; we used 12 s, the machine was busy 14 s and 1 s was stolen.
  a = {.ok = true, .wall_s = 100, .busy_s = 50, .steal_s = 3, .own_s = 5};
  b = {.ok = true, .wall_s = 110, .busy_s = 64, .steal_s = 4, .own_s = 17};
  const MachineLoad m = machine_load(a, b, 2);
  EXPECT_NEAR(m.other_cpu, 2.0 / 20, kEps);
  EXPECT_NEAR(m.steal, 1.0 / 20, kEps);
  b.ok = false;
  EXPECT_EQ(machine_load(a, b, 2).other_cpu, 0);
  // This machine's own figures read.
  const CpuSnapshot now = cpu_snapshot();
  EXPECT_TRUE(now.ok);
  EXPECT_GT(now.busy_s, 0);
  EXPECT_GE(load_average(), 0);
}

// ---- Pooling the runs (planner/profile_pool.h) -------------------------------------------------

Task timed_task(TaskKind kind, int64_t bytes = 0, int32_t block = 0) {
  Task t;
  t.kind = kind;
  t.bytes = bytes;
  t.block = block;
  return t;
}

// The schedule figures the made-up runs' rates divide by.
ScheduleSpec made_up_spec() {
  ScheduleSpec s;
  s.block_fwd_flops = 1e9;
  s.block_bwd_flops = 2e9;
  s.head_flops = 5e8;
  s.block_grad_bytes = 1000;
  s.block_elems = 100;
  s.block_optim_bytes = 1200;  // 12 bytes a parameter
  return s;
}

// A made-up run of `tasks`, nothing reused, each of `steps` steps timing task i at seconds[i]
// alone.
ProfileRunTimings made_up_run(ProfileRunKind kind, int64_t B, const std::vector<Task>& tasks,
                              const std::vector<double>& seconds, int steps) {
  ProfileRunTimings r;
  r.kind = kind;
  r.B = B;
  r.spec = made_up_spec();
  for (const Task& t : tasks) r.plan.add_task(t);
  r.reused.assign(tasks.size(), false);
  for (int s = 0; s < steps; ++s) {
    std::vector<TaskSample> step;
    for (size_t i = 0; i < tasks.size(); ++i) {
      step.push_back({.task = static_cast<int32_t>(i), .seconds = seconds[i]});
    }
    r.steps.push_back(step);
  }
  return r;
}

TEST(ProfilePool, EachTaskKindHasItsClass) {
  using enum TaskKind;
  EXPECT_EQ(timing_class(timed_task(block_forward)), TimingClass::fwd);
  Task bwd = timed_task(block_backward);
  EXPECT_EQ(timing_class(bwd), TimingClass::bwd);
  bwd.fused = true;  // no recompute in it: a class of its own
  EXPECT_EQ(timing_class(bwd), TimingClass::fused_bwd);
  EXPECT_EQ(timing_class(timed_task(head_loss)), TimingClass::head);
  EXPECT_EQ(timing_class(timed_task(embed_forward)), TimingClass::embed);
  EXPECT_EQ(timing_class(timed_task(embed_backward)), TimingClass::embed);
  EXPECT_EQ(timing_class(timed_task(grad_zero)), TimingClass::zero);
  // The embed group's gradient is too small to time.
  EXPECT_EQ(timing_class(timed_task(grad_zero, 0, -1)), std::nullopt);
  EXPECT_EQ(timing_class(timed_task(block_step)), TimingClass::step);
  EXPECT_EQ(timing_class(timed_task(embed_step)), TimingClass::step);
  EXPECT_EQ(timing_class(timed_task(grad_accumulate)), TimingClass::reduce);
  EXPECT_EQ(timing_class(timed_task(grad_sumsq)), TimingClass::reduce);
  // Transfers by their link, when they move anything; storage is measured apart.
  EXPECT_EQ(timing_class(timed_task(params_fetch, 64)), TimingClass::h2d);
  EXPECT_EQ(timing_class(timed_task(params_fetch, 0)), std::nullopt);
  EXPECT_EQ(timing_class(timed_task(grad_out, 64)), TimingClass::d2h);
  EXPECT_EQ(timing_class(timed_task(params_read, 64)), std::nullopt);
  EXPECT_EQ(timing_class(timed_task(grad_norm)), std::nullopt);
}

TEST(ProfilePool, ATimingIsSecondsOrARate) {
  ProfileRunTimings r;
  r.spec = made_up_spec();
  const int32_t grad = r.plan.add_slot("grad", Tier::device, 1000);
  Task zero = timed_task(TaskKind::grad_zero);
  zero.uses = {slot_write(grad)};
  const Task step = timed_task(TaskKind::block_step, 1200);
  const Task fetch = timed_task(TaskKind::params_fetch, 4000);
  const Task fwd = timed_task(TaskKind::block_forward);
  EXPECT_NEAR(timing_value(TimingClass::fwd, r, fwd, 0.5, 64), 0.5, kEps);
  EXPECT_NEAR(timing_value(TimingClass::embed, r, fwd, 0.5, 64), 0.5 / 64, kEps);  // per token
  EXPECT_NEAR(timing_value(TimingClass::zero, r, zero, 0.5, 64), 2000, kEps);      // written bytes
  // 1200 optimizer bytes are 100 parameters.
  EXPECT_NEAR(timing_value(TimingClass::step, r, step, 0.5, 64), 200, kEps);
  EXPECT_NEAR(timing_value(TimingClass::h2d, r, fetch, 0.5, 64), 8000, kEps);
  // A rate's time is at least a nanosecond; a compute time is as timed.
  EXPECT_NEAR(timing_value(TimingClass::h2d, r, fetch, 0, 64), 4000 / 1e-9, 1);
  EXPECT_EQ(timing_value(TimingClass::fwd, r, fwd, 0, 64), 0);
}

TEST(ProfilePool, OnlyTasksThatRanAloneArePooled) {
  // Compute beside the optimizer for at most 2% of its time, and beside no storage traffic.
  EXPECT_TRUE(ran_alone(TimingClass::fwd, {.seconds = 1, .beside_optim_s = 0.02}));
  EXPECT_FALSE(ran_alone(TimingClass::fwd, {.seconds = 1, .beside_optim_s = 0.03}));
  EXPECT_FALSE(ran_alone(TimingClass::fwd, {.seconds = 1, .storage_bytes = 1}));
  // The optimizer's tasks beside compute for at most 2% of their time.
  EXPECT_TRUE(ran_alone(TimingClass::step, {.seconds = 1, .beside_compute_s = 0.02}));
  EXPECT_FALSE(ran_alone(TimingClass::reduce, {.seconds = 1, .beside_compute_s = 0.5}));
  EXPECT_TRUE(ran_alone(TimingClass::step, {.seconds = 1, .storage_bytes = 1e6}));
}

TEST(ProfilePool, HorizontalRunsGiveTheTablesRatesAndPaces) {
  using enum TaskKind;
  const double T = 32;  // tokens a sequence
  ProfileRuns m;
  m.rounds = 1;
  for (int64_t B : kProfileMicroBatchSizes) {
    const double b = static_cast<double>(B);
    ProfileRunTimings r =
        made_up_run(ProfileRunKind::horizontal, B,
                    {timed_task(block_forward), timed_task(block_backward), timed_task(head_loss),
                     timed_task(grad_zero), timed_task(block_step, 1200),
                     timed_task(params_fetch, 1000000), timed_task(grad_out, 2000000),
                     timed_task(grad_accumulate, 4000000), timed_task(embed_forward)},
                    {0.1 * b, 0.3 * b, 0.05 * b, 1e-6, 1e-4, 1e-3, 1e-3, 1e-3, 1e-4 * b}, 4);
    r.plan.tasks[3].uses = {slot_write(r.plan.add_slot("grad", Tier::device, 1000))};
    if (B == 1) {
      // A disturbed forward, rejected; a forward at pace 0.4 beside the optimizer for 0.1 s, and
      // a step at pace 0.25 beside compute all along: not pooled, but the paces' samples.
      r.steps.push_back({{.task = 0, .seconds = 1.0},
                         {.task = 0, .seconds = 0.1 + 0.6 * 0.1, .beside_optim_s = 0.1},
                         {.task = 4, .seconds = 4e-4, .beside_compute_s = 4e-4}});
    }
    m.runs.push_back(std::move(r));
    m.round_of.push_back(0);
  }
  HardwareProfile prof;
  fill_profile(m, T, prof);
  EXPECT_NEAR(prof.memset_bytes_per_s, 1000 / 1e-6, 1e-3);
  EXPECT_NEAR(prof.optim_params_per_s, 100 / 1e-4, 1e-6);
  EXPECT_NEAR(prof.h2d_bytes_per_s, 1e9, 1e-3);
  EXPECT_NEAR(prof.d2h_bytes_per_s, 2e9, 1e-3);
  EXPECT_NEAR(prof.reduce_bytes_per_s, 4e9, 1e-3);
  EXPECT_NEAR(prof.embed_s_per_token, 1e-4 / T, 1e-15);  // the same at every B
  ASSERT_EQ(prof.block_fwd.size(), 3u);
  ASSERT_EQ(prof.block_bwd.size(), 3u);
  ASSERT_EQ(prof.head.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    const double b = static_cast<double>(kProfileMicroBatchSizes[i]);
    EXPECT_EQ(prof.block_fwd[i].first, b * T);
    EXPECT_NEAR(prof.block_fwd[i].second, 1e9 / (0.1 * b), 1e-3);
    // The backward less its recompute and its gradient's zeroing (1000 bytes at the memset rate).
    EXPECT_NEAR(prof.block_bwd[i].second, 2e9 / (0.3 * b - 0.1 * b - 1e-6), 1e-3);
    EXPECT_NEAR(prof.head[i].second, 5e8 / (0.05 * b), 1e-3);
  }
  EXPECT_TRUE(prof.block_fwd_reuse.empty());  // no vertical runs
  EXPECT_NEAR(prof.compute_shared_speed, 0.4, 1e-9);
  EXPECT_NEAR(prof.optim_shared_speed, 0.25, 1e-9);
  EXPECT_EQ(prof.io_s_per_byte, 0);  // no run with its state on storage
  EXPECT_EQ(prof.measurement.samples, 3 * 9 * 4);
  EXPECT_EQ(prof.measurement.rejected, 1);
  EXPECT_EQ(prof.measurement.round_spread, 0);
}

TEST(ProfilePool, VerticalRunsGiveTheReuseSpeedUpsAndTheStorageCost) {
  using enum TaskKind;
  ProfileRuns m;
  m.rounds = 1;
  const Task fwd = timed_task(block_forward);
  const Task bwd = timed_task(block_backward);
  // Each block's first micro-batch, then one with the weights just used.
  ProfileRunTimings v =
      made_up_run(ProfileRunKind::vertical, 1, {fwd, fwd, bwd, bwd}, {0.1, 0.08, 0.3, 0.25}, 3);
  v.reused = {false, true, false, true};
  // The same forward with its state on storage: 1e-9 s a byte of traffic beside it, once also
  // beside the optimizer (taken off at the fallback pace 0.5). Its embedding task is not pooled.
  ProfileRunTimings st = made_up_run(ProfileRunKind::vertical_storage, 1,
                                     {fwd, timed_task(embed_forward)}, {0.1, 5.0}, 2);
  st.steps[0][0].seconds = 0.1 + 1e-9 * 1e7;
  st.steps[0][0].storage_bytes = 1e7;
  st.steps[1][0] = {.task = 0,
                    .seconds = 0.1 + 0.5 * 0.05 + 1e-9 * 2e7,
                    .beside_optim_s = 0.05,
                    .storage_bytes = 2e7};
  m.runs = {v, st};
  m.round_of = {0, 0};
  HardwareProfile prof;
  fill_profile(m, 32, prof);
  ASSERT_EQ(prof.block_fwd_reuse.size(), 1u);
  EXPECT_EQ(prof.block_fwd_reuse[0].first, 32);
  EXPECT_NEAR(prof.block_fwd_reuse[0].second, 0.1 / 0.08, 1e-9);
  // The backward proper: less its recompute.
  EXPECT_NEAR(prof.block_bwd_reuse[0].second, (0.3 - 0.1) / (0.25 - 0.08), 1e-9);
  EXPECT_TRUE(prof.block_fwd.empty());  // no horizontal runs
  EXPECT_NEAR(prof.io_s_per_byte, 1e-9, 1e-15);
  EXPECT_EQ(prof.embed_s_per_token, 0);
  EXPECT_EQ(prof.measurement.samples, 4 * 3);
}

TEST(ProfilePool, TheRoundSpreadComparesTheRounds) {
  using enum TaskKind;
  ProfileRuns m;
  m.rounds = 2;
  const std::vector<Task> tasks = {timed_task(block_forward), timed_task(block_backward)};
  m.runs = {made_up_run(ProfileRunKind::horizontal, 1, tasks, {0.1, 0.3}, 2),
            made_up_run(ProfileRunKind::horizontal, 1, tasks, {0.12, 0.36}, 2)};
  m.round_of = {0, 1};
  HardwareProfile prof;
  fill_profile(m, 32, prof);
  EXPECT_NEAR(prof.measurement.round_spread, 0.2, 1e-9);  // the second round 20% slower
  EXPECT_EQ(prof.measurement.samples, 8);
  // Both rounds pooled: the mean forward 0.11 s.
  EXPECT_NEAR(prof.block_fwd[0].second, 1e9 / 0.11, 1e-3);
}

}  // namespace
}  // namespace strata
