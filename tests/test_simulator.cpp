// The simulator and cost model on hand-built plans with known answers (docs/design.md §7): pure
// compute, pure I/O, perfect overlap, a serial chain, a slot-limited pipeline; plus shared cores
// (each side at its own pace, storage traffic slowing compute), weights reused in the vertical
// order, a fresh gradient's zeroing, forward deps, cycles, the trace, and the profile's JSON.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/config.h"
#include "planner/planner.h"
#include "planner/profile.h"
#include "planner/simulator.h"
#include "sched/plan.h"
#include "sched/plan_builder.h"
#include "sched/plan_checker.h"
#include "test_util.h"
#include "train/offload_spec.h"

namespace strata {
namespace {

constexpr double kEps = 1e-9;

int32_t add(Plan& p, Resource r, std::string label, std::vector<int32_t> deps = {},
            int64_t bytes = 0, std::optional<TaskKind> kind = std::nullopt) {
  Task t = test::make_task(r, std::move(label), std::move(deps));
  if (kind) t.kind = *kind;
  t.bytes = bytes;
  return p.add_task(std::move(t));
}

double busy(const SimResult& r, Resource res) {
  return r.report.busy_s[static_cast<size_t>(res)];
}

// A profile where each figure is a round number, so the cost model's answers are exact.
HardwareProfile round_profile() {
  HardwareProfile p;
  p.block_fwd = {{1, 100}};  // 100 FLOP/s at every micro-batch size
  p.block_bwd = {{1, 50}};
  p.head = {{1, 10}};
  p.h2d_bytes_per_s = p.d2h_bytes_per_s = 1000;
  p.storage_dirs = {{"/a", 100, 50, 0}, {"/b", 100, 50, 0}};  // striped: 200 read, 100 write
  p.optim_params_per_s = 10;
  p.reduce_bytes_per_s = 40;
  p.memset_bytes_per_s = 8;
  return p;
}

TEST(Simulator, PureComputeIsTheSumOfDurations) {
  Plan p;
  for (int i = 0; i < 3; ++i) add(p, Resource::compute, "c" + std::to_string(i));
  auto r = simulate(p, {1, 2, 3});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_NEAR(r->iter_s, 6, kEps);
  EXPECT_NEAR(busy(*r, Resource::compute), 6, kEps);
  EXPECT_NEAR(r->roofline_s, 6, kEps);
  EXPECT_EQ(r->bound, Resource::compute);
  EXPECT_NEAR(r->report.timings[2].start_s, 3, kEps);
}

TEST(Simulator, PureIoIsBytesOverStripedRate) {
  Plan p;
  add(p, Resource::storage_read, "r0", {}, 100);
  add(p, Resource::storage_read, "r1", {}, 300);
  add(p, Resource::storage_write, "w0", {}, 100);
  const std::vector<double> d = task_durations(p, round_profile(), {});
  EXPECT_NEAR(d[0], 0.5, kEps);  // 100 B at 2 x 100 B/s
  EXPECT_NEAR(d[1], 1.5, kEps);
  EXPECT_NEAR(d[2], 1.0, kEps);  // 100 B at 2 x 50 B/s
  auto r = simulate(p, d);
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->iter_s, 2.0, kEps);  // reads and writes are separate queues
  EXPECT_EQ(r->bound, Resource::storage_read);
  // A rate limit replaces the profile's rates, as the storage engine's limiter does.
  CostContext ctx;
  ctx.read_bytes_per_s = 400;
  EXPECT_NEAR(task_durations(p, round_profile(), ctx)[1], 0.75, kEps);
}

// Note [Deterministic all-reduce]: a rank sends 2 (N-1)/N of a gradient's bytes, at the
// profile's network rate, after its latency.
TEST(Simulator, AllReduceSendsTwiceTheShardsOfOtherRanks) {
  Plan p;
  Task t;
  t.kind = TaskKind::grad_allreduce;
  t.bytes = 300;
  p.add_task(t);
  HardwareProfile prof = round_profile();
  prof.net_bytes_per_s = 100;
  prof.net_latency_s = 0.5;
  CostContext ctx;
  ctx.ranks = 3;
  EXPECT_NEAR(task_durations(p, prof, ctx)[0], 0.5 + 2.0 * 2 / 3 * 300 / 100, kEps);
  ctx.ranks = 2;
  EXPECT_NEAR(task_durations(p, prof, ctx)[0], 0.5 + 300.0 / 100, kEps);
  ctx.ranks = 1;  // a plan of one rank has none; were there one, it would move nothing
  EXPECT_NEAR(task_durations(p, prof, ctx)[0], 0.5, kEps);
}

TEST(Simulator, IndependentQueuesOverlapPerfectly) {
  Plan p;
  for (int i = 0; i < 4; ++i) {
    add(p, Resource::compute, "c");
    add(p, Resource::storage_read, "r");
    add(p, Resource::h2d, "h");
  }
  std::vector<double> d;
  for (int i = 0; i < 4; ++i) d.insert(d.end(), {1.0, 1.0, 0.5});
  auto r = simulate(p, d);
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->iter_s, 4, kEps);
  EXPECT_NEAR(r->roofline_s, 4, kEps);
  EXPECT_NEAR(busy(*r, Resource::h2d), 2, kEps);
}

TEST(Simulator, SerialChainAcrossResourcesAddsUp) {
  Plan p;
  const int32_t a = add(p, Resource::storage_read, "read");
  const int32_t b = add(p, Resource::h2d, "h2d", {a});
  const int32_t c = add(p, Resource::compute, "fwd", {b});
  const int32_t d = add(p, Resource::d2h, "d2h", {c});
  add(p, Resource::storage_write, "write", {d});
  auto r = simulate(p, {1, 2, 3, 1, 2});
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->iter_s, 9, kEps);
  EXPECT_NEAR(r->roofline_s, 3, kEps);  // nothing overlaps: 3x the roofline
  EXPECT_NEAR(r->report.timings[4].start_s, 7, kEps);
}

// Reads into `buffers` staging slots, each consumed by a compute task: the slot rule (a read may
// not overwrite a buffer until the compute reading it is done) limits the pipeline. Built by the
// same PlanBuilder the schedules use, so the deps are the real ones.
Plan slot_pipeline(int n, int buffers) {
  PlanBuilder b;
  const int32_t src = b.slot("store", Tier::storage, 1, true);
  std::vector<int32_t> buf;
  for (int k = 0; k < buffers; ++k) buf.push_back(b.slot("buf" + std::to_string(k), Tier::host, 1));
  const int32_t out = b.slot("out", Tier::device, 1, true);
  for (int i = 0; i < n; ++i) {
    const int32_t s = buf[static_cast<size_t>(i % buffers)];
    b.transfer(TaskKind::params_read, {.block = i}, src, s, 0);
    b.task(
        TaskKind::block_forward, {.block = i},
        {slot_read(s, Role::params), slot_read(out, Role::input), slot_write(out, Role::output)});
  }
  return b.take();
}

std::vector<double> alternating(int n, double read, double compute) {
  std::vector<double> d;
  for (int i = 0; i < n; ++i) d.insert(d.end(), {read, compute});
  return d;
}

TEST(Simulator, SlotLimitedPipeline) {
  // Compute-bound, double-buffered: the first read, then 4 computes back to back.
  Plan two = slot_pipeline(4, 2);
  ASSERT_TRUE(check_plan(two, {}).ok());
  auto r = simulate(two, alternating(4, 1, 2));
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->iter_s, 1 + 4 * 2, kEps);
  // Read 2 must wait for compute 0 to release buf0 (t = 3), not just for read 1 (t = 2).
  EXPECT_NEAR(r->report.timings[4].start_s, 3, kEps);
  // Storage-bound: 4 reads back to back, then the last compute.
  r = simulate(two, alternating(4, 3, 1));
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->iter_s, 4 * 3 + 1, kEps);
  // One buffer: nothing overlaps.
  Plan one = slot_pipeline(4, 1);
  r = simulate(one, alternating(4, 1, 2));
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->iter_s, 4 * (1 + 2), kEps);
}

TEST(Simulator, SharedCoresStretchBothWhileTheyOverlap) {
  Plan p;
  add(p, Resource::compute, "c");
  add(p, Resource::cpu_optim, "o");
  SimOptions o;
  o.shared_cores = true;
  o.compute_speed = o.optim_speed = 0.5;
  auto r = simulate(p, {2, 1}, o);
  ASSERT_TRUE(r.ok());
  // Both at half speed until the optimizer's 1 s of work is done at t = 2; compute then has
  // 1 s left at full speed.
  EXPECT_NEAR(r->report.timings[1].end_s, 2, kEps);
  EXPECT_NEAR(r->iter_s, 3, kEps);
  EXPECT_NEAR(r->roofline_s, 3, kEps);  // compute + cpu_optim counted as one
  auto plain = simulate(p, {2, 1});
  EXPECT_NEAR(plain->iter_s, 2, kEps);
  // Each side at its own pace: the optimizer's 1 s at 0.25 takes until t = 4, compute does
  // 0.9 x 4 = 3.6 s of work by then: its 2 s are done at 2 / 0.9.
  o.compute_speed = 0.9;
  o.optim_speed = 0.25;
  r = simulate(p, {2, 1}, o);
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->report.timings[0].end_s, 2 / 0.9, kEps);
  // Alone from then on: 1 - 0.25 x 2 / 0.9 of its work left at full pace.
  EXPECT_NEAR(r->report.timings[1].end_s, 2 / 0.9 + 1 - 0.25 * 2 / 0.9, kEps);
}

TEST(Simulator, StorageTrafficSlowsCompute) {
  Plan p;
  add(p, Resource::compute, "c");
  add(p, Resource::storage_read, "r", {}, 100);
  add(p, Resource::storage_write, "w", {}, 50);
  SimOptions o;
  o.shared_cores = true;
  o.io_s_per_byte = 0.002;
  // Reads at 100 B/s and writes at 50 B/s for their first second: compute's pace is
  // 1 - 0.002 x 150 = 0.7, then 1 once they are done: 2 - 0.7 = 1.3 s of work left.
  auto r = simulate(p, {2, 1, 1}, o);
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->iter_s, 1 + 1.3, kEps);
  // The pace never drops below kMinComputePace.
  o.io_s_per_byte = 1;
  r = simulate(p, {2, 1, 1}, o);
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->iter_s, 1 + 2 - kMinComputePace, kEps);
  // A profile without shared cores (a GPU server) never applies it.
  HardwareProfile gpu;
  gpu.io_s_per_byte = 1;
  EXPECT_EQ(sim_options(gpu).io_s_per_byte, 0);
  gpu.shared_cores = true;
  EXPECT_EQ(sim_options(gpu).io_s_per_byte, 1);
}

TEST(Simulator, ForwardDepsAndCycles) {
  Plan p;
  add(p, Resource::compute, "fwd", {1});  // waits for the later h2d
  add(p, Resource::h2d, "h2d");
  auto r = simulate(p, {1, 2});
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->iter_s, 3, kEps);
  EXPECT_NEAR(r->report.timings[0].start_s, 2, kEps);
  Plan cyc;
  add(cyc, Resource::compute, "a", {1});
  add(cyc, Resource::h2d, "b", {0});
  auto bad = simulate(cyc, {1, 1});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("cycle"), std::string::npos) << bad.status().message();
  EXPECT_FALSE(simulate(cyc, {1}).ok());
}

TEST(CostModel, TaskKindsFollowTheProfile) {
  Plan p;
  const int32_t g = p.add_slot("grad", Tier::device, 16);
  Task f{.kind = TaskKind::block_forward, .label = "fwd"};
  f.block = 0;
  f.flops = 200;
  p.add_task(f);  // 200 / 100 = 2 s
  Task bwd{.kind = TaskKind::block_backward, .label = "bwd"};
  bwd.block = 0;
  bwd.flops = 300;  // recompute 100 at 100 FLOP/s + 200 at 50 FLOP/s = 5 s
  p.add_task(bwd);
  bwd.fused = true;  // all 300 at the backward rate
  p.add_task(bwd);
  Task loss{.kind = TaskKind::head_loss, .label = "loss"};
  loss.flops = 30;
  p.add_task(loss);
  Task z{.kind = TaskKind::grad_zero, .label = "grad.zero"};
  z.uses = {slot_write(g)};
  p.add_task(z);
  Task opt{.kind = TaskKind::block_step, .label = "adamw"};
  opt.bytes = 120;  // 10 parameters of 12 bytes at 10 params/s
  p.add_task(opt);
  add(p, Resource::cpu_optim, "acc blk.0 mb.0", {}, 80, TaskKind::grad_accumulate);
  add(p, Resource::h2d, "fetch", {}, 500);
  CostContext ctx;
  ctx.block_fwd_flops = 100;
  ctx.optim_bytes_per_param = 12;
  const std::vector<double> d = task_durations(p, round_profile(), ctx);
  const std::vector<double> want = {2, 5, 6, 3, 2, 1, 2, 0.5};
  ASSERT_EQ(d.size(), want.size());
  for (size_t i = 0; i < d.size(); ++i) EXPECT_NEAR(d[i], want[i], kEps) << p.describe(i);
}

// A block task on the compute queue reading `params` for `block`.
int32_t block_task(Plan& p, TaskKind kind, int block, int32_t params, double flops = 100) {
  Task t{.kind = kind, .label = "t"};
  t.block = block;
  t.flops = flops;
  t.uses = {slot_read(params, Role::params)};
  return p.add_task(std::move(t));
}

TEST(CostModel, WeightsReusedFollowsTheComputeQueue) {
  Plan p;
  const int32_t b0 = p.add_slot("params.buf0", Tier::device, 8),
                b1 = p.add_slot("params.buf1", Tier::device, 8);
  block_task(p, TaskKind::block_forward, 0, b0);                  // 0: first use
  block_task(p, TaskKind::block_forward, 0, b0);                  // 1: reused
  add(p, Resource::compute, "loss", {}, 0, TaskKind::head_loss);  // 2: not a block task
  block_task(p, TaskKind::block_backward, 0, b0);                 // 3: reused across the loss
  add(p, Resource::h2d, "fetch", {}, 8, TaskKind::params_fetch);  // 4: another queue
  block_task(p, TaskKind::block_forward, 1, b1);                  // 5: another block
  block_task(p, TaskKind::block_forward, 1, b0);                  // 6: same block, another slot
  block_task(p, TaskKind::block_forward, 1, b0);                  // 7: reused
  const std::vector<bool> want = {false, true, false, true, false, false, false, true};
  EXPECT_EQ(weights_reused(p), want);
  // Faster by the profile's speed-up (interpolated like the rate tables); none without one.
  HardwareProfile prof = round_profile();
  CostContext ctx;
  ctx.tokens = 10;
  EXPECT_NEAR(task_durations(p, prof, ctx)[1], 1.0, kEps);  // 100 FLOPs at 100 FLOP/s
  prof.block_fwd_reuse = {{1, 2}, {100, 4}};                // 3x at 10 tokens
  prof.block_bwd_reuse = {{1, 5}};
  const std::vector<double> d = task_durations(p, prof, ctx);
  EXPECT_NEAR(d[0], 1.0, kEps);
  EXPECT_NEAR(d[1], 1.0 / 3, kEps);
  EXPECT_NEAR(d[3], 100.0 / (5 * 50), kEps);  // no recompute recorded: all at the backward rate
  EXPECT_NEAR(d[6], 1.0, kEps);
}

// The trainer's own plans: in the vertical order every micro-batch of a block after its first
// reuses the block's weights, and the last block's fused backward those of its forward; the
// horizontal order fetches a block anew for every task.
TEST(CostModel, WeightsReusedInTheTrainersPlans) {
  TrainConfig c = test::tiny_offload_config("vertical", "unused");
  c.batch_size = 1;
  c.grad_accum = 4;
  c.optim.grad_clip = 0;
  c.optim.alpha = 0.5;
  c.offload.grads_on_host = 1;
  HardwareProfile prof = round_profile();
  const auto count = [&](Schedule s) {
    c.schedule = s;
    const std::vector<bool> r = weights_reused(make_offload_plan(planner_spec(c, prof), s));
    return std::count(r.begin(), r.end(), true);
  };
  const int L = 3, M = 4;
  EXPECT_EQ(count(Schedule::vertical), 2 * (L - 1) * (M - 1) + 2 * M - 1);
  EXPECT_EQ(count(Schedule::horizontal), 0);
}

TEST(CostModel, AFreshGradientIsZeroedFirst) {
  Plan p;
  const int32_t params = p.add_slot("params", Tier::device, 8),
                grad = p.add_slot("grad", Tier::device, 16);
  Task bwd{.kind = TaskKind::block_backward, .label = "bwd"};
  bwd.block = 0;
  bwd.flops = 100;
  bwd.fused = true;
  bwd.uses = {slot_read(params, Role::params), slot_write(grad, Role::grad)};
  p.add_task(bwd);  // horizontal: a per-micro-batch gradient, zeroed then written
  bwd.uses = {slot_read(params, Role::params), slot_read(grad, Role::grad),
              slot_write(grad, Role::grad)};
  p.add_task(bwd);  // vertical: accumulated into, zeroed once by its own task
  const std::vector<double> d = task_durations(p, round_profile(), {});
  EXPECT_NEAR(d[0], 100.0 / 50 + 16.0 / 8, kEps);
  EXPECT_NEAR(d[1], 100.0 / 50, kEps);
}

TEST(Simulator, TraceIsTheExecutorsFormat) {
  Plan p = slot_pipeline(3, 2);
  auto r = simulate(p, alternating(3, 1, 2));
  ASSERT_TRUE(r.ok());
  const nlohmann::json j = execution_trace_json(p, r->report);
  int complete = 0;
  for (const auto& e : j["traceEvents"]) complete += e["ph"] == "X";
  EXPECT_EQ(complete, 6);
  EXPECT_EQ(r->peak_bytes[static_cast<size_t>(Tier::host)], 2);
}

TEST(Profile, JsonRoundTripAndErrors) {
  HardwareProfile p = round_profile();
  p.name = "round";
  p.sources["link.h2d_bytes_per_s"] = "made up";
  auto back = profile_from_json(profile_to_json(p), "mem");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->storage_read_bytes_per_s(), 200);
  EXPECT_EQ(back->sources.at("link.h2d_bytes_per_s"), "made up");
  nlohmann::json j = profile_to_json(p);
  j["link"]["h2d_bytes_per_s"] = -1;
  auto bad = profile_from_json(j, "hw.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("link.h2d_bytes_per_s"), std::string::npos)
      << bad.status().message();
  j = profile_to_json(p);
  j["compute"]["flops"] = 1;
  EXPECT_FALSE(profile_from_json(j, "hw.json").ok());
  EXPECT_NEAR(rate_at({{100, 1}, {10000, 3}}, 1000), 2, kEps);  // log-linear
  EXPECT_NEAR(rate_at({{100, 1}, {10000, 3}}, 1), 1, kEps);
}

// The network section is optional and written back only when the profile has one (strata
// profile does not measure it, so it never writes a made-up figure).
TEST(Profile, NetworkSectionIsOptionalAndRoundTrips) {
  HardwareProfile p = round_profile();
  EXPECT_FALSE(profile_to_json(p).contains("network"));
  nlohmann::json j = profile_to_json(p);
  j["network"] = {{"bytes_per_s", 2.5e10}, {"latency_s", 2e-5}};
  auto back = profile_from_json(j, "hw.json");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_TRUE(back->has_network);
  EXPECT_EQ(back->net_bytes_per_s, 2.5e10);
  EXPECT_EQ(back->net_latency_s, 2e-5);
  EXPECT_EQ(profile_to_json(*back)["network"], j["network"]);
  j["network"]["bytes_per_s"] = 0;
  test::expect_error(profile_from_json(j, "hw.json").status(), ErrorCode::invalid_argument,
                     {"hw.json", "network.bytes_per_s"});
  j["network"] = {{"bandwidth", 1}};
  test::expect_error(profile_from_json(j, "hw.json").status(), ErrorCode::invalid_argument,
                     {"hw.json", "network", "bandwidth"});
}

TEST(Profile, MeasuredFieldsRoundTrip) {
  HardwareProfile p = round_profile();
  p.block_fwd_reuse = {{256, 1.1}};
  p.block_bwd_reuse = {{256, 0.9}, {1024, 1.0}};
  p.shared_cores = true;
  p.compute_shared_speed = 0.9;
  p.optim_shared_speed = 0.3;
  p.io_s_per_byte = 2e-10;
  p.measurement.rounds = 3;
  p.measurement.load_before = 0.2;
  p.measurement.other_cpu = 0.01;
  p.measurement.rejected = 7;
  const nlohmann::json j = profile_to_json(p);
  auto back = profile_from_json(j, "mem");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->block_fwd_reuse, p.block_fwd_reuse);
  EXPECT_EQ(back->block_bwd_reuse, p.block_bwd_reuse);
  EXPECT_EQ(back->compute_shared_speed, 0.9);
  EXPECT_EQ(back->optim_shared_speed, 0.3);
  EXPECT_EQ(back->io_s_per_byte, 2e-10);
  EXPECT_EQ(back->measurement.rounds, 3);
  EXPECT_EQ(back->measurement.rejected, 7);
  EXPECT_EQ(back->measurement.load_before, 0.2);
  // A hand-written profile has none of them: no speed-up, no measurement written back.
  const nlohmann::json plain = profile_to_json(round_profile());
  EXPECT_FALSE(plain["compute"].contains("block_fwd_reuse"));
  EXPECT_FALSE(plain.contains("measurement"));
  // The older symmetric key sets both paces; the specific ones win; paces are in (0, 1].
  nlohmann::json old = plain;
  old["cores"] = {{"shared", true}, {"shared_speed", 0.4}};
  auto legacy = profile_from_json(old, "old.json");
  ASSERT_TRUE(legacy.ok()) << legacy.status().to_string();
  EXPECT_EQ(legacy->compute_shared_speed, 0.4);
  EXPECT_EQ(legacy->optim_shared_speed, 0.4);
  old["cores"]["optim_speed"] = 0.2;
  EXPECT_EQ(profile_from_json(old, "old.json")->optim_shared_speed, 0.2);
  old["cores"]["compute_speed"] = 1.5;
  test::expect_error(profile_from_json(old, "old.json").status(), ErrorCode::invalid_argument,
                     {"cores.compute_speed", "(0, 1]"});
  nlohmann::json bad = j;
  bad["compute"]["block_fwd_reuse"] = {{256, 0}};
  test::expect_error(profile_from_json(bad, "hw.json").status(), ErrorCode::invalid_argument,
                     {"compute.block_fwd_reuse", "speedup > 0"});
  bad = j;
  bad["measurement"]["rounds"] = "three";
  EXPECT_FALSE(profile_from_json(bad, "hw.json").ok());
}

TEST(Profile, ShippedProfilesLoad) {
  for (const char* name : {"a100-80gb-4nvme", "h200-141gb-4nvme"}) {
    auto p = load_profile(std::string(STRATA_SOURCE_DIR) + "/profiles/" + name + ".json");
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    EXPECT_FALSE(p->shared_cores) << name;
    EXPECT_TRUE(p->block_fwd_reuse.empty()) << name;
    EXPECT_EQ(p->measurement.rounds, 0) << name;
  }
}

}  // namespace
}  // namespace strata
