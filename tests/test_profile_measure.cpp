// The arithmetic of `strata profile` (planner/profile_measure.h) on made-up timings: outliers
// rejected by Tukey's fences (Note [Robust timings]), speed-ups recorded only when the timings
// tell them from 1, what ran beside each task of a run, the
// shared-core paces and the storage cost fitted from contended tasks (Note [Shared cores]), and
// how busy the machine was.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "planner/profile_measure.h"
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

}  // namespace
}  // namespace strata
