// Executor tests (CTest names executor.*): ordering from a log of real runs, real concurrency
// between resources, stopping on failure without hanging, busy/wall accounting, the trace JSON,
// and a double-buffered pipeline on the CPU device that must give the serial result bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "sched/executor.h"
#include "sched/happens_before.h"
#include "sched/plan.h"
#include "sched/plan_checker.h"
#include "test_util.h"

namespace strata {
namespace {

using namespace std::chrono_literals;

// execute_plan with a deadline: a hung executor would otherwise hang ctest. The run can't be
// cancelled and borrows the caller's stack, so on timeout the only safe way out is to abort.
Result<ExecutionReport> run_guarded(const Plan& plan, const std::vector<TaskAction>& actions,
                                    const ExecutorOptions& options = {}) {
  std::packaged_task<Result<ExecutionReport>()> task(
      [&] { return execute_plan(plan, actions, options); });
  auto future = task.get_future();
  std::thread runner(std::move(task));
  if (future.wait_for(10s) != std::future_status::ready) {
    std::fprintf(stderr, "execute_plan did not return within 10 s: hung\n");
    std::abort();
  }
  runner.join();
  return future.get();
}

using test::kind_on;
using test::make_task;

// What actions write: one line per start and per end, in the order they happened.
struct EventLog {
  std::mutex mu;
  int64_t next_seq = 0;
  std::vector<int64_t> start_seq, end_seq;  // per task, -1 until seen
  std::vector<int> runs;                    // per task

  explicit EventLog(size_t n) : start_seq(n, -1), end_seq(n, -1), runs(n, 0) {}
  void start(int32_t i) {
    std::lock_guard<std::mutex> lock(mu);
    start_seq[i] = next_seq++;
    ++runs[i];
  }
  void end(int32_t i) {
    std::lock_guard<std::mutex> lock(mu);
    end_seq[i] = next_seq++;
  }
};

// A random plan over all six resources whose deps cross resources and often point forward in
// `tasks`: tasks are generated in a topological order (deps on earlier generated ones), then
// stably grouped by resource, which keeps each queue's order but scatters the indices.
Plan random_cross_plan(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Task> gen(n);
  for (int g = 0; g < n; ++g) {
    gen[g].kind = kind_on(static_cast<Resource>(g < kResourceCount ? g : rng() % kResourceCount));
    gen[g].label = "t" + std::to_string(g);
    const int ndeps = g == 0 ? 0 : static_cast<int>(rng() % 3);
    for (int k = 0; k < ndeps; ++k) gen[g].deps.push_back(static_cast<int32_t>(rng() % g));
  }
  std::vector<int32_t> order(n);
  for (int g = 0; g < n; ++g) order[g] = g;
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return gen[a].resource() > gen[b].resource();  // cpu_optim first: deps point forward often
  });
  std::vector<int32_t> index_of(n);
  for (int i = 0; i < n; ++i) index_of[order[i]] = i;
  Plan plan;
  for (int i = 0; i < n; ++i) {
    Task t = gen[order[i]];
    for (int32_t& d : t.deps) d = index_of[d];
    plan.add_task(std::move(t));
  }
  return plan;
}

TEST(executor, RespectsDepsAndQueueOrder) {
  const int n = 60;
  Plan plan = random_cross_plan(n, 7);
  ASSERT_TRUE(check_plan(plan, {}).ok());
  int forward_deps = 0;
  for (int i = 0; i < n; ++i) {
    for (int32_t d : plan.tasks[i].deps) forward_deps += d > i;
  }
  ASSERT_GT(forward_deps, 5);  // the plan really exercises deps to later indices

  EventLog log(n);
  std::vector<TaskAction> actions;
  for (int32_t i = 0; i < n; ++i) {
    const auto sleep = std::chrono::microseconds(std::mt19937(i)() % 2000);
    actions.push_back([&log, i, sleep] {
      log.start(i);
      std::this_thread::sleep_for(sleep);
      log.end(i);
      return Status();
    });
  }
  auto report = run_guarded(plan, actions, {.record_trace = true});
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  ASSERT_EQ(report->timings.size(), static_cast<size_t>(n));

  auto edges = happens_before_edges(plan);
  ASSERT_TRUE(edges.ok()) << edges.status().to_string();
  for (int32_t i = 0; i < n; ++i) {
    EXPECT_EQ(log.runs[i], 1) << "task " << i;
    // Its deps and its queue predecessor (Note [Happens-before in plans]).
    for (int32_t b : edges->predecessors(i)) {
      EXPECT_GT(log.start_seq[i], log.end_seq[b]) << "task " << i << " started before " << b;
      // The executor's own clock agrees: a dependent starts no earlier than its dep ended.
      EXPECT_GE(report->timings[i].start_s, report->timings[b].end_s);
    }
  }
}

TEST(executor, ResourcesRunConcurrently) {
  // A (compute) waits until B (h2d) has started; nothing orders them, so a correct executor runs
  // both at once. A serialising one would time out A instead of hanging.
  Plan plan;
  plan.add_task(make_task(Resource::compute, "A"));
  plan.add_task(make_task(Resource::h2d, "B"));
  std::mutex mu;
  std::condition_variable cv;
  bool b_started = false;
  std::vector<TaskAction> actions = {[&]() -> Status {
                                       std::unique_lock<std::mutex> lock(mu);
                                       if (!cv.wait_for(lock, 5s, [&] { return b_started; })) {
                                         return Status(ErrorCode::internal,
                                                       "B never started while A ran");
                                       }
                                       return Status();
                                     },
                                     [&] {
                                       {
                                         std::lock_guard<std::mutex> lock(mu);
                                         b_started = true;
                                       }
                                       cv.notify_all();
                                       return Status();
                                     }};
  auto report = run_guarded(plan, actions);
  EXPECT_TRUE(report.ok()) << report.status().to_string();
}

TEST(executor, FailureStopsTheRun) {
  Plan plan;
  const int32_t fetch0 = plan.add_task(make_task(Resource::storage_read, "fetch blk.0"));
  const int32_t fetch1 = plan.add_task(make_task(Resource::storage_read, "fetch blk.1"));
  const int32_t fetch2 = plan.add_task(make_task(Resource::storage_read, "fetch blk.2"));
  const int32_t fwd0 = plan.add_task(make_task(Resource::compute, "fwd blk.0", {fetch0}));
  const int32_t fwd1 = plan.add_task(make_task(Resource::compute, "fwd blk.1", {fetch1}));
  const int32_t fwd2 = plan.add_task(make_task(Resource::compute, "fwd blk.2", {fetch2}));
  const int32_t optim = plan.add_task(make_task(Resource::cpu_optim, "optim blk.9"));
  const int32_t after = plan.add_task(make_task(Resource::storage_write, "store", {fwd2}));
  ASSERT_TRUE(check_plan(plan, {}).ok());

  std::vector<std::atomic<int>> ran(plan.tasks.size());
  std::atomic<bool> optim_running{false}, optim_finished{false};
  std::vector<TaskAction> actions(plan.tasks.size());
  for (size_t i = 0; i < actions.size(); ++i) {
    actions[i] = [&ran, i] {
      ++ran[i];
      return Status();
    };
  }
  // The failure comes while the optimizer task is running, which must still finish.
  actions[fetch1] = [&] {
    ++ran[fetch1];
    for (int k = 0; k < 5000 && !optim_running; ++k) std::this_thread::sleep_for(1ms);
    return io_error("pread params.bin offset 4096: Input/output error");
  };
  actions[optim] = [&] {
    ++ran[optim];
    optim_running = true;
    std::this_thread::sleep_for(20ms);
    optim_finished = true;
    return Status();
  };

  auto report = run_guarded(plan, actions);
  ASSERT_FALSE(report.ok());
  const Status& s = report.status();
  EXPECT_EQ(s.code(), ErrorCode::io_error);
  EXPECT_EQ(s.message(),
            "task 'fetch blk.1' (storage_read): pread params.bin offset 4096: "
            "Input/output error");
  EXPECT_EQ(ran[fetch0], 1);
  EXPECT_EQ(ran[fetch1], 1);
  EXPECT_EQ(ran[fetch2], 0);  // behind the failure on its queue
  EXPECT_EQ(ran[fwd1], 0);    // its dep failed
  EXPECT_EQ(ran[fwd2], 0);    // behind fwd1 on its queue
  EXPECT_EQ(ran[after], 0);
  EXPECT_EQ(ran[optim], 1);
  EXPECT_TRUE(optim_finished);  // a running task finishes before execute_plan returns
  (void)fwd0;                   // may or may not have run: it races with the failure
}

TEST(executor, ExceptionBecomesInternalError) {
  Plan plan;
  plan.add_task(make_task(Resource::compute, "boom"));
  plan.add_task(make_task(Resource::compute, "after"));
  bool after_ran = false;
  std::vector<TaskAction> actions = {[]() -> Status { throw std::runtime_error("bad_alloc-ish"); },
                                     [&] {
                                       after_ran = true;
                                       return Status();
                                     }};
  auto report = run_guarded(plan, actions);
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().code(), ErrorCode::internal);
  EXPECT_NE(report.status().message().find("task 'boom' (compute)"), std::string::npos);
  EXPECT_FALSE(after_ran);
}

TEST(executor, RefusesWhatWouldHangOrCrash) {
  Plan plan;
  plan.add_task(make_task(Resource::compute, "a", {1}));
  plan.add_task(make_task(Resource::h2d, "b", {0}));  // a cycle: execute would wait forever
  std::vector<TaskAction> ok = {[] { return Status(); }, [] { return Status(); }};
  auto cyc = run_guarded(plan, ok);
  ASSERT_FALSE(cyc.ok());
  EXPECT_EQ(cyc.status().code(), ErrorCode::invalid_argument);
  EXPECT_NE(cyc.status().message().find("cycle"), std::string::npos);

  plan.tasks[1].deps = {};
  EXPECT_TRUE(run_guarded(plan, ok).ok());
  EXPECT_EQ(run_guarded(plan, {ok[0]}).status().code(), ErrorCode::invalid_argument);
  EXPECT_EQ(run_guarded(plan, {ok[0], TaskAction{}}).status().code(), ErrorCode::invalid_argument);
  plan.tasks[1].deps = {5};
  EXPECT_EQ(run_guarded(plan, ok).status().code(), ErrorCode::invalid_argument);
  EXPECT_TRUE(run_guarded(Plan{}, {}).ok());  // an empty plan starts no thread and succeeds
}

TEST(executor, BusyTimeAndWallTime) {
  Plan plan;
  std::vector<double> enforced;
  for (int k = 0; k < 3; ++k) {
    plan.add_task(make_task(Resource::compute, "c" + std::to_string(k)));
    enforced.push_back(0.002);
  }
  for (int k = 0; k < 2; ++k) {
    plan.add_task(make_task(Resource::storage_read, "r" + std::to_string(k)));
    enforced.push_back(0.003);
  }
  std::vector<double> measured(plan.tasks.size(), 0);
  std::vector<TaskAction> actions;
  for (size_t i = 0; i < plan.tasks.size(); ++i) {
    actions.push_back([&, i] {
      const auto t0 = std::chrono::steady_clock::now();
      std::this_thread::sleep_for(std::chrono::duration<double>(enforced[i]));
      measured[i] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      return Status();
    });
  }
  auto report = run_guarded(plan, actions, {.record_trace = true});
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  std::array<double, kResourceCount> enforced_sum{}, measured_sum{}, timing_sum{};
  for (size_t i = 0; i < plan.tasks.size(); ++i) {
    const int r = static_cast<int>(plan.tasks[i].resource());
    enforced_sum[r] += enforced[i];
    measured_sum[r] += measured[i];
    timing_sum[r] += report->timings[i].end_s - report->timings[i].start_s;
  }
  double max_busy = 0;
  for (int r = 0; r < kResourceCount; ++r) {
    EXPECT_GE(report->busy_s[r], enforced_sum[r]) << resource_name(static_cast<Resource>(r));
    EXPECT_GE(report->busy_s[r], measured_sum[r]);
    EXPECT_LE(report->busy_s[r], measured_sum[r] + 0.05);  // the executor adds only bookkeeping
    EXPECT_NEAR(report->busy_s[r], timing_sum[r], 1e-9);
    max_busy = std::max(max_busy, report->busy_s[r]);
  }
  EXPECT_EQ(report->busy_s[static_cast<int>(Resource::h2d)], 0.0);
  EXPECT_GE(report->wall_s, max_busy);
}

TEST(executor, TraceJson) {
  Plan plan;
  Task fetch = make_task(Resource::h2d, "fetch blk.0");
  fetch.kind = TaskKind::params_fetch;
  fetch.block = 0;
  fetch.bytes = 4096;
  const int32_t f = plan.add_task(fetch);
  Task fwd = make_task(Resource::compute, "fwd blk.0 mb.1", {f});
  fwd.kind = TaskKind::block_forward;
  fwd.block = 0;
  fwd.micro_batch = 1;
  plan.add_task(fwd);
  plan.add_task(make_task(Resource::d2h, "store act", {1}));
  plan.add_task(make_task(Resource::compute, "fwd blk.1 mb.1"));
  std::vector<TaskAction> actions(plan.tasks.size(), [] { return Status(); });
  auto report = run_guarded(plan, actions, {.record_trace = true});
  ASSERT_TRUE(report.ok()) << report.status().to_string();

  // Round trip through text, as a viewer would read it.
  const nlohmann::json j = nlohmann::json::parse(execution_trace_json(plan, *report).dump());
  ASSERT_TRUE(j.contains("traceEvents"));
  std::vector<std::string> tracks;
  std::vector<nlohmann::json> complete;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") {
      tracks.push_back(e["args"]["name"]);
      EXPECT_EQ(e["args"]["name"], resource_name(static_cast<Resource>(e["tid"].get<int>())));
    }
    if (e["ph"] == "X") complete.push_back(e);
  }
  std::sort(tracks.begin(), tracks.end());
  EXPECT_EQ(tracks, (std::vector<std::string>{"compute", "d2h", "h2d"}));
  ASSERT_EQ(complete.size(), plan.tasks.size());
  for (const auto& e : complete) {
    const int i = e["args"]["task"];
    const Task& t = plan.tasks[i];
    EXPECT_EQ(e["name"], t.label);
    EXPECT_EQ(e["tid"], static_cast<int>(t.resource()));
    EXPECT_EQ(e["args"]["block"], t.block);
    EXPECT_EQ(e["args"]["micro_batch"], t.micro_batch);
    EXPECT_EQ(e["args"]["bytes"], t.bytes);
    EXPECT_GE(e["ts"].get<double>(), 0.0);
    EXPECT_GE(e["dur"].get<double>(), 0.0);
    EXPECT_NEAR(e["ts"].get<double>(), report->timings[i].start_s * 1e6, 1e-3);
  }
  EXPECT_EQ(complete[1]["cat"], "block_forward");

  // Without timings: the tracks, no events.
  const nlohmann::json bare = execution_trace_json(plan, ExecutionReport{});
  for (const auto& e : bare["traceEvents"]) EXPECT_NE(e["ph"], "X");
}

// A toy double-buffered pipeline on the CPU device: h2d "fetch blk.l" copies host block l into
// device slot buf[l % 2]; compute "fwd blk.l" does acc += alpha_l * buf[l % 2]. fetch l+2 may
// overwrite buf[l % 2] only after fwd l has read it (the dep a real schedule writes as an event).
TEST(executor, DoubleBufferedPipelineMatchesSerial) {
  const int blocks = 12;
  const int64_t n = 1 << 14, bytes = n * static_cast<int64_t>(sizeof(float));
  std::unique_ptr<Device> dev = create_cpu_device();
  std::vector<std::vector<float>> host;
  std::vector<float> alpha;
  for (int l = 0; l < blocks; ++l) {
    host.push_back(test::random_floats(n, 100 + l));
    alpha.push_back(0.37f + 0.11f * static_cast<float>(l));
  }
  std::vector<Buffer> buf;
  for (int k = 0; k < 2; ++k) {
    auto b = dev->alloc(bytes);
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    buf.push_back(std::move(b).value());
  }
  auto acc_or = dev->alloc(bytes);
  ASSERT_TRUE(acc_or.ok());
  Buffer acc = std::move(acc_or).value();
  std::unique_ptr<Stream> compute = dev->create_stream("compute"), h2d = dev->create_stream("h2d");

  Plan plan;
  std::vector<int32_t> store, slot;
  for (int l = 0; l < blocks; ++l) {
    store.push_back(plan.add_slot("params.host.blk" + std::to_string(l), Tier::host, bytes, true));
  }
  for (int k = 0; k < 2; ++k)
    slot.push_back(plan.add_slot("params.buf" + std::to_string(k), Tier::device, bytes));
  const int32_t acc_slot = plan.add_slot("acc", Tier::device, bytes);
  std::vector<TaskAction> actions;

  Task zero = make_task(Resource::compute, "zero acc");
  zero.kind = TaskKind::grad_zero;
  zero.uses = {slot_write(acc_slot)};
  plan.add_task(zero);
  actions.push_back([&] {
    dev->fill_zero(*compute, acc.data(), bytes);
    compute->synchronize();
    return Status();
  });
  std::vector<int32_t> fwd(blocks, -1);
  for (int l = 0; l < blocks; ++l) {
    const int k = l % 2;
    Task fetch = make_task(Resource::h2d, "fetch blk." + std::to_string(l));
    fetch.kind = TaskKind::params_fetch;
    fetch.block = l;
    fetch.bytes = bytes;
    fetch.uses = {slot_read(store[l]), slot_write(slot[k])};
    if (l >= 2) fetch.deps = {fwd[l - 2]};  // WAR: buf[k] is free once fwd l-2 has read it
    const int32_t f = plan.add_task(fetch);
    actions.push_back([&, l, k] {
      // A little jitter so a missing dep would show up as a wrong result, not just in theory.
      std::this_thread::sleep_for(std::chrono::microseconds((l * 37) % 300));
      dev->copy(*h2d, buf[k].data(), host[l].data(), bytes);
      h2d->synchronize();
      return Status();
    });
    Task compute_task = make_task(Resource::compute, "fwd blk." + std::to_string(l), {f});
    compute_task.kind = TaskKind::block_forward;
    compute_task.block = l;
    compute_task.uses = {slot_read(slot[k]), slot_read(acc_slot), slot_write(acc_slot)};
    fwd[l] = plan.add_task(compute_task);
    actions.push_back([&, l, k] {
      dev->scaled_add(*compute, acc.f32(), buf[k].f32(), alpha[l], n);
      compute->synchronize();
      return Status();
    });
  }
  ASSERT_TRUE(check_plan(plan, {}).ok()) << check_plan(plan, {}).to_string();
  auto report = run_guarded(plan, actions, {.record_trace = true});
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  std::vector<float> got(n);
  dev->copy(*compute, got.data(), acc.data(), bytes);
  compute->synchronize();

  // Serial reference: the same kernels, one stream, one slot.
  dev->fill_zero(*compute, acc.data(), bytes);
  for (int l = 0; l < blocks; ++l) {
    dev->copy(*compute, buf[0].data(), host[l].data(), bytes);
    dev->scaled_add(*compute, acc.f32(), buf[0].f32(), alpha[l], n);
  }
  std::vector<float> want(n);
  dev->copy(*compute, want.data(), acc.data(), bytes);
  compute->synchronize();
  EXPECT_EQ(std::memcmp(got.data(), want.data(), bytes), 0);
  EXPECT_GT(report->busy_s[static_cast<int>(Resource::h2d)], 0.0);
}

}  // namespace
}  // namespace strata
