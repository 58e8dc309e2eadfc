// Plan checker tests (CTest names plan_checker.*): hand-built pipelines that must pass, hand-broken
// ones that must fail with the right message, and random pipelines compared with a naive
// all-pairs reference checker.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "sched/happens_before.h"
#include "sched/plan.h"
#include "sched/plan_checker.h"
#include "test_util.h"

namespace strata {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGiB = int64_t{1} << 30;

// ---- A double-buffered forward pipeline -------------------------------------------------------
// Per block l: [storage_read params.store.blk<l> -> stage.buf<l%B> (host)], h2d fetch into
// params.buf<l%B> (device), then per micro-batch m: d2h store of act.mb<m> (the block's input)
// into ckpt.blk<l>.mb<m>, and compute "fwd blk.l mb.m" that reads params.buf<l%B> and updates
// act.mb<m> in place. Every dep is written out, the events a real schedule would record.
struct PipelineShape {
  int blocks = 3, micro_batches = 4, buffers = 2;
  bool staged = false;  // parameters come from storage through host staging buffers
  bool snake = false;   // micro-batch order alternates per block
};

struct Pipeline {
  Plan plan;
  std::vector<int32_t> fetch, read;             // per block
  std::vector<std::vector<int32_t>> fwd, ckpt;  // [block][micro-batch]
};

Pipeline make_pipeline(const PipelineShape& s) {
  Pipeline p;
  Plan& plan = p.plan;
  const int64_t P = 64 * kMiB, A = 4 * kMiB;
  std::vector<int32_t> store, stage, buf, act;
  for (int l = 0; l < s.blocks; ++l) {
    store.push_back(plan.add_slot("params.store.blk" + std::to_string(l),
                                  s.staged ? Tier::storage : Tier::host, P, true));
  }
  for (int k = 0; k < s.buffers; ++k) {
    if (s.staged) stage.push_back(plan.add_slot("stage.buf" + std::to_string(k), Tier::host, P));
    buf.push_back(plan.add_slot("params.buf" + std::to_string(k), Tier::device, P));
  }
  for (int m = 0; m < s.micro_batches; ++m) {
    act.push_back(plan.add_slot("act.mb" + std::to_string(m), Tier::device, A, true));
  }
  p.fwd.assign(s.blocks, std::vector<int32_t>(s.micro_batches, -1));
  p.ckpt = p.fwd;
  std::vector<int32_t> last_fwd(s.blocks, -1);  // the last compute task reading params of blk l
  for (int l = 0; l < s.blocks; ++l) {
    const int k = l % s.buffers;
    const std::string blk = "blk." + std::to_string(l);
    int32_t src = store[l];
    if (s.staged) {
      Task t{.kind = TaskKind::params_read, .label = "read " + blk};
      t.block = l;
      t.uses = {slot_read(store[l]), slot_write(stage[k])};
      if (l >= s.buffers) t.deps.push_back(p.fetch[l - s.buffers]);  // stage buffer free
      p.read.push_back(plan.add_task(t));
      src = stage[k];
    }
    Task f{.kind = TaskKind::params_fetch, .label = "fetch " + blk};
    f.block = l;
    f.bytes = P;
    f.uses = {slot_read(src), slot_write(buf[k])};
    if (s.staged) f.deps.push_back(p.read[l]);
    if (l >= s.buffers) f.deps.push_back(last_fwd[l - s.buffers]);  // device buffer free
    p.fetch.push_back(plan.add_task(f));
    for (int i = 0; i < s.micro_batches; ++i) {
      const int m = (s.snake && l % 2 == 1) ? s.micro_batches - 1 - i : i;
      const std::string mb = " mb." + std::to_string(m);
      const int32_t ck = plan.add_slot("ckpt." + blk + mb.substr(1), Tier::host, A);
      Task c{.kind = TaskKind::ckpt_write, .label = "ckpt " + blk + mb};
      c.uses = {slot_read(act[m]), slot_write(ck)};
      if (l > 0) c.deps.push_back(p.fwd[l - 1][m]);  // the input is the previous block's output
      p.ckpt[l][m] = plan.add_task(c);
      Task t{.kind = TaskKind::block_forward, .label = "fwd " + blk + mb};
      t.block = l;
      t.micro_batch = m;
      t.flops = 1e9;
      t.uses = {slot_read(buf[k]), slot_read(act[m]), slot_write(act[m])};
      if (i == 0) t.deps.push_back(p.fetch[l]);  // params arrived
      t.deps.push_back(p.ckpt[l][m]);            // input saved before it is overwritten
      p.fwd[l][m] = last_fwd[l] = plan.add_task(t);
    }
  }
  return p;
}

void remove_dep(Plan& plan, int32_t task, int32_t dep) {
  std::vector<int32_t>& d = plan.tasks[task].deps;
  auto it = std::find(d.begin(), d.end(), dep);
  ASSERT_NE(it, d.end()) << plan.describe(task) << " has no dep on " << plan.describe(dep);
  d.erase(it);
}

// ---- A naive reference checker: reachability by DFS from every task, all pairs -----------------
// It shares only the direct edges with check_plan (happens_before.h, tested on its own in
// test_happens_before.cpp); the closure, cycles and slot rules are its own, done the slow way.
bool reference_ok(const Plan& plan, const TierBudgets& b) {
  const int n = static_cast<int>(plan.tasks.size());
  auto edges = happens_before_edges(plan);
  if (!edges.ok()) return false;  // a bad dep
  for (int t = 0; t < n; ++t) {
    for (const SlotUse& u : plan.tasks[t].uses) {
      if (u.slot < 0 || u.slot >= static_cast<int32_t>(plan.slots.size())) return false;
    }
  }
  std::vector<std::vector<char>> hb(n, std::vector<char>(n, 0));  // hb[a][b]: a -> b, strict
  for (int a = 0; a < n; ++a) {
    std::vector<int> stack(edges->successors(a).begin(), edges->successors(a).end());
    while (!stack.empty()) {
      int v = stack.back();
      stack.pop_back();
      if (hb[a][v]) continue;
      hb[a][v] = 1;
      for (int w : edges->successors(v)) stack.push_back(w);
    }
    if (hb[a][a]) return false;  // cycle
  }
  for (int32_t s = 0; s < static_cast<int32_t>(plan.slots.size()); ++s) {
    std::vector<std::pair<int, bool>> uses;
    for (int t = 0; t < n; ++t) {
      for (const SlotUse& u : plan.tasks[t].uses) {
        if (u.slot == s) uses.push_back({t, u.write});
      }
    }
    for (auto [t, w] : uses) {
      if (w || plan.slots[s].initialized) continue;
      bool seen = false;
      for (auto [x, xw] : uses) seen = seen || (xw && hb[x][t]);
      if (!seen) return false;
    }
    for (auto [a, aw] : uses) {
      for (auto [c, cw] : uses) {
        if (a != c && (aw || cw) && !hb[a][c] && !hb[c][a]) return false;
      }
    }
  }
  std::array<int64_t, kTierCount> need{}, budget = {b.device, b.host, b.storage};
  for (const Slot& s : plan.slots) need[static_cast<int>(s.tier)] += s.bytes;
  for (int i = 0; i < kTierCount; ++i) {
    if (budget[i] > 0 && need[i] > budget[i]) return false;
  }
  return true;
}

// ---- Plans that must pass --------------------------------------------------------------------

TEST(plan_checker, AcceptsDoubleBufferedPipeline) {
  for (bool staged : {false, true}) {
    Pipeline p = make_pipeline({.blocks = 5, .micro_batches = 3, .buffers = 2, .staged = staged});
    Status st = check_plan(p.plan, {.device = 2 * 64 * kMiB + 3 * 4 * kMiB});
    EXPECT_TRUE(st.ok()) << st.to_string();
    EXPECT_TRUE(reference_ok(p.plan, {}));
  }
}

// Builds correct plans the way a generator would: deps from slot uses (the slot's last writer
// for a read; its last writer and the reads since for a write), leaving out those that queue
// order already gives.
struct AutoDeps {
  Plan plan;
  std::vector<int32_t> last_write;
  std::vector<std::vector<int32_t>> readers;

  int32_t slot(const std::string& name, Tier tier, int64_t bytes, bool init = false) {
    last_write.push_back(-1);
    readers.emplace_back();
    return plan.add_slot(name, tier, bytes, init);
  }
  int32_t task(TaskKind kind, const std::string& label, std::vector<SlotUse> uses) {
    Task t{.kind = kind, .label = label};
    t.uses = std::move(uses);
    auto dep = [&](int32_t d) {
      if (d >= 0 && plan.tasks[d].resource() != t.resource() &&
          std::find(t.deps.begin(), t.deps.end(), d) == t.deps.end()) {
        t.deps.push_back(d);
      }
    };
    const int32_t id = static_cast<int32_t>(plan.tasks.size());
    for (const SlotUse& u : t.uses) {
      dep(last_write[u.slot]);
      if (u.write) {
        for (int32_t x : readers[u.slot]) dep(x);
      }
    }
    for (const SlotUse& u : t.uses) {
      if (u.write) {
        last_write[u.slot] = id;
        readers[u.slot].clear();
      }
    }
    for (const SlotUse& u : t.uses) {
      if (!u.write) readers[u.slot].push_back(id);
    }
    return plan.add_task(t);
  }
};

std::string tag(int l, int m = -1) {
  return "blk." + std::to_string(l) + (m >= 0 ? " mb." + std::to_string(m) : "");
}

// ZeRO-Infinity's order, 3 blocks x 4 micro-batches: per micro-batch forward through all blocks,
// then backward; params fetched per use into two device buffers; gradients accumulated on host.
TEST(plan_checker, AcceptsHorizontalToyPlan) {
  const int L = 3, M = 4;
  AutoDeps b;
  std::vector<int32_t> params, state, ghost, act, buf, gdev;
  for (int l = 0; l < L; ++l) {
    params.push_back(b.slot("params.host.blk" + std::to_string(l), Tier::host, 64 * kMiB, true));
    state.push_back(b.slot("optim.blk" + std::to_string(l), Tier::storage, 512 * kMiB, true));
    ghost.push_back(b.slot("grad.host.blk" + std::to_string(l), Tier::host, 64 * kMiB));
    act.push_back(b.slot("act.blk" + std::to_string(l), Tier::device, 8 * kMiB));
  }
  const int32_t x = b.slot("batch", Tier::device, kMiB, true),
                dx = b.slot("dact", Tier::device, kMiB);
  for (int k = 0; k < 2; ++k) {
    buf.push_back(b.slot("params.buf" + std::to_string(k), Tier::device, 64 * kMiB));
    gdev.push_back(b.slot("grad.buf" + std::to_string(k), Tier::device, 64 * kMiB));
  }
  for (int l = 0; l < L; ++l) {
    b.task(TaskKind::grad_accumulate, "zero grad " + tag(l), {slot_write(ghost[l])});
  }
  int fetches = 0, grads = 0;
  for (int m = 0; m < M; ++m) {
    for (int l = 0; l < L; ++l) {
      int32_t k = buf[fetches++ % 2];
      b.task(TaskKind::params_fetch, "fetch " + tag(l, m), {slot_read(params[l]), slot_write(k)});
      b.task(TaskKind::block_forward, "fwd " + tag(l, m),
             {slot_read(k), slot_read(l == 0 ? x : act[l - 1]), slot_write(act[l])});
    }
    b.task(TaskKind::head_loss, "loss " + tag(L - 1, m), {slot_read(act[L - 1]), slot_write(dx)});
    for (int l = L - 1; l >= 0; --l) {
      int32_t k = buf[fetches++ % 2], g = gdev[grads++ % 2];
      b.task(TaskKind::params_fetch, "fetch bwd " + tag(l, m),
             {slot_read(params[l]), slot_write(k)});
      b.task(TaskKind::block_backward, "bwd " + tag(l, m),
             {slot_read(k), slot_read(l == 0 ? x : act[l - 1]), slot_read(dx), slot_write(dx),
              slot_write(g)});
      b.task(TaskKind::ckpt_write, "grad " + tag(l, m),
             {slot_read(g), slot_read(ghost[l]), slot_write(ghost[l])});
    }
  }
  for (int l = L - 1; l >= 0; --l) {
    b.task(TaskKind::block_step, "step " + tag(l),
           {slot_read(ghost[l]), slot_read(state[l]), slot_write(state[l]), slot_read(params[l]),
            slot_write(params[l])});
  }
  Status st = check_plan(b.plan, {.device = kGiB, .host = kGiB});
  EXPECT_TRUE(st.ok()) << st.to_string();
  EXPECT_TRUE(reference_ok(b.plan, {}));
  PlanStats stats = plan_stats(b.plan);
  EXPECT_EQ(stats.tasks_per_resource[static_cast<int>(Resource::h2d)], 2 * L * M);
  EXPECT_EQ(stats.tasks_per_resource[static_cast<int>(Resource::cpu_optim)], 2 * L);
  EXPECT_EQ(stats.bytes_per_tier[static_cast<int>(Tier::storage)], 3 * 512 * kMiB);
  // Compute is one queue: forward, loss and backward of every micro-batch, plus the zeroes before
  // and the steps after it at least.
  EXPECT_GE(stats.critical_path_tasks, M * (2 * L + 1));
}

// GreedySnake's order, 3 blocks x 4 micro-batches: params fetched once per block and pass, snake
// micro-batch order, block inputs checkpointed to host, the last block does forward, loss and
// backward together, backward recomputes from checkpoints prefetched into two device buffers,
// gradients accumulated on the device and moved off once per block.
TEST(plan_checker, AcceptsVerticalToyPlan) {
  const int L = 3, M = 4;
  AutoDeps b;
  std::vector<int32_t> params, ghost, act, dact, buf, cbuf, gacc;
  std::vector<std::vector<int32_t>> ckpt(L);
  for (int l = 0; l < L; ++l) {
    params.push_back(b.slot("params.host.blk" + std::to_string(l), Tier::host, 64 * kMiB, true));
    ghost.push_back(b.slot("grad.host.blk" + std::to_string(l), Tier::host, 64 * kMiB));
    for (int m = 0; m < M; ++m) ckpt[l].push_back(b.slot("ckpt." + tag(l, m), Tier::host, kMiB));
  }
  for (int m = 0; m < M; ++m) {
    act.push_back(b.slot("act.mb" + std::to_string(m), Tier::device, kMiB, true));
    dact.push_back(b.slot("dact.mb" + std::to_string(m), Tier::device, kMiB));
  }
  for (int k = 0; k < 2; ++k) {
    buf.push_back(b.slot("params.buf" + std::to_string(k), Tier::device, 64 * kMiB));
    cbuf.push_back(b.slot("ckpt.buf" + std::to_string(k), Tier::device, kMiB));
    gacc.push_back(b.slot("grad.acc" + std::to_string(k), Tier::device, 64 * kMiB));
  }
  auto order = [&](int l) {
    std::vector<int> o(M);
    for (int i = 0; i < M; ++i) o[i] = l % 2 == 0 ? i : M - 1 - i;
    return o;
  };
  int fetches = 0, loads = 0;
  for (int l = 0; l < L; ++l) {  // forward; the last block also does loss and backward
    int32_t k = buf[fetches++ % 2];
    b.task(TaskKind::params_fetch, "fetch " + tag(l), {slot_read(params[l]), slot_write(k)});
    if (l == L - 1) b.task(TaskKind::grad_zero, "zero grad " + tag(l), {slot_write(gacc[l % 2])});
    for (int m : order(l)) {
      b.task(TaskKind::ckpt_write, "ckpt " + tag(l, m),
             {slot_read(act[m]), slot_write(ckpt[l][m])});
      if (l < L - 1) {
        b.task(TaskKind::block_forward, "fwd " + tag(l, m),
               {slot_read(k), slot_read(act[m]), slot_write(act[m])});
      } else {
        b.task(TaskKind::head_loss, "fwd+loss+bwd " + tag(l, m),
               {slot_read(k), slot_read(act[m]), slot_write(dact[m]), slot_read(gacc[l % 2]),
                slot_write(gacc[l % 2])});
      }
    }
    if (l == L - 1) {
      b.task(TaskKind::ckpt_write, "grad " + tag(l),
             {slot_read(gacc[l % 2]), slot_write(ghost[l])});
    }
  }
  for (int l = L - 2; l >= 0; --l) {  // backward
    int32_t k = buf[fetches++ % 2];
    b.task(TaskKind::params_fetch, "fetch bwd " + tag(l), {slot_read(params[l]), slot_write(k)});
    b.task(TaskKind::grad_zero, "zero grad " + tag(l), {slot_write(gacc[l % 2])});
    for (int m : order(l + 1)) {  // snake: continue from the micro-batch the last block ended on
      int32_t c = cbuf[loads++ % 2];
      b.task(TaskKind::params_fetch, "load ckpt " + tag(l, m),
             {slot_read(ckpt[l][m]), slot_write(c)});
      b.task(TaskKind::block_backward, "bwd " + tag(l, m),
             {slot_read(k), slot_read(c), slot_read(dact[m]), slot_write(dact[m]),
              slot_read(gacc[l % 2]), slot_write(gacc[l % 2])});
    }
    b.task(TaskKind::ckpt_write, "grad " + tag(l), {slot_read(gacc[l % 2]), slot_write(ghost[l])});
    b.task(TaskKind::block_step, "step " + tag(l + 1),
           {slot_read(ghost[l + 1]), slot_read(params[l + 1]), slot_write(params[l + 1])});
  }
  b.task(TaskKind::block_step, "step " + tag(0),
         {slot_read(ghost[0]), slot_read(params[0]), slot_write(params[0])});
  Status st = check_plan(b.plan, {.device = kGiB});
  EXPECT_TRUE(st.ok()) << st.to_string();
  EXPECT_TRUE(reference_ok(b.plan, {}));
}

// ---- Plans that must fail, each with its message ----------------------------------------------

void expect_rejected(const Plan& plan, const TierBudgets& b,
                     const std::vector<std::string>& parts) {
  Status st = check_plan(plan, b);
  ASSERT_FALSE(st.ok()) << "accepted a broken plan";
  EXPECT_EQ(st.code(), ErrorCode::invalid_argument);
  for (const std::string& part : parts) {
    EXPECT_NE(st.message().find(part), std::string::npos) << st.message() << "\n  lacks: " << part;
  }
  EXPECT_EQ(st.message().find('\n'), std::string::npos) << "one line: " << st.message();
  EXPECT_FALSE(reference_ok(plan, b));
}

TEST(plan_checker, RejectsReadBeforeItsWrite) {
  Pipeline p = make_pipeline({});
  remove_dep(p.plan, p.fwd[1][0], p.fetch[1]);  // compute may start before the params arrive
  expect_rejected(
      p.plan, {},
      {"plan: task 'fwd blk.1 mb.0' (compute) reads slot 'params.buf1' but no write of it "
       "happens before",
       "'fetch blk.1' (h2d) is not ordered before it"});
}

TEST(plan_checker, RejectsSlotReusedEarly) {
  Pipeline p = make_pipeline({});
  // The third fetch goes into buf0 without waiting for the compute that still reads it.
  remove_dep(p.plan, p.fetch[2], p.fwd[0][3]);
  expect_rejected(p.plan, {},
                  {"task 'fetch blk.2' (h2d) writes slot 'params.buf0' while 'fwd blk.0 mb.0' "
                   "(compute) may still read it"});
}

TEST(plan_checker, RejectsCheckpointOverwrittenBeforeSaved) {
  Pipeline p = make_pipeline({.staged = true});
  remove_dep(p.plan, p.fwd[1][2], p.ckpt[1][2]);
  expect_rejected(p.plan, {},
                  {"'fwd blk.1 mb.2' (compute) writes slot 'act.mb2' while 'ckpt blk.1 mb.2' (d2h) "
                   "may still read it"});
}

TEST(plan_checker, RejectsBudgetExceeded) {
  Plan plan;
  int32_t a = plan.add_slot("params.buf0", Tier::device, kGiB);
  plan.add_slot("params.buf1", Tier::device, kGiB);
  plan.add_slot("grad.acc", Tier::device, kGiB + kGiB / 5);
  plan.add_slot("act", Tier::device, kMiB);
  plan.add_task({.kind = TaskKind::grad_zero, .label = "zero", .uses = {slot_write(a)}});
  EXPECT_TRUE(check_plan(plan, {.device = 4 * kGiB, .host = 1}).ok());
  expect_rejected(
      plan, {.device = 2 * kGiB},
      {"plan: device budget: plan needs 3.2 GiB (grad.acc 1.2 GiB, params.buf0 1.0 GiB, "
       "params.buf1 1.0 GiB and 1 more slots), budget is 2.0 GiB"});
}

TEST(plan_checker, RejectsDependencyCycle) {
  Pipeline p = make_pipeline({});
  p.plan.tasks[p.fetch[1]].deps.push_back(
      p.fwd[2][0]);  // fetch 1 -> fwd 1 -> ... -> fwd 2 -> fetch 1
  expect_rejected(p.plan, {},
                  {"plan: dependency cycle of ", "'fetch blk.1' (h2d) -> 'fwd blk.1 mb.0'",
                   "-[queue]-> ", "'fwd blk.2 mb.0' (compute) -> 'fetch blk.1' (h2d)"});
}

TEST(plan_checker, RejectsDepsThatContradictQueueOrder) {
  Plan plan;
  int32_t a = plan.add_task({.kind = TaskKind::params_fetch, .label = "a"});
  int32_t b = plan.add_task({.kind = TaskKind::params_fetch, .label = "b"});
  plan.tasks[a].deps.push_back(b);
  expect_rejected(plan, {},
                  {"dependency cycle of 2 tasks", "'a' (h2d) -[queue]-> 'b' (h2d) -> 'a' (h2d)"});
}

TEST(plan_checker, RejectsBadIndices) {
  Pipeline p = make_pipeline({});
  p.plan.tasks[p.fwd[0][1]].deps.push_back(1000);
  expect_rejected(p.plan, {},
                  {"task 'fwd blk.0 mb.1' (compute) depends on task #1000, but the plan has"});
  p = make_pipeline({});
  p.plan.tasks[p.fwd[0][1]].deps.push_back(p.fwd[0][1]);
  expect_rejected(p.plan, {}, {"task 'fwd blk.0 mb.1' (compute) depends on itself"});
  p = make_pipeline({});
  p.plan.tasks[p.fetch[1]].uses.push_back(slot_read(-1));
  expect_rejected(p.plan, {}, {"task 'fetch blk.1' (h2d) uses slot #-1"});
}

TEST(plan_checker, AcceptsOrderingByQueueOrderAlone) {
  Plan plan;
  int32_t s = plan.add_slot("buf", Tier::device, 16);
  plan.add_task({.kind = TaskKind::params_fetch, .label = "w1", .uses = {slot_write(s)}});
  plan.add_task({.kind = TaskKind::block_forward, .label = "unrelated"});
  plan.add_task({.kind = TaskKind::params_fetch, .label = "r", .uses = {slot_read(s)}});
  plan.add_task({.kind = TaskKind::params_fetch, .label = "w2", .uses = {slot_write(s)}});
  Status st = check_plan(plan, {});
  EXPECT_TRUE(st.ok()) << st.to_string();
  // The same tasks on two queues with no deps race.
  plan.tasks[2].kind = TaskKind::grad_out;  // the d2h queue
  expect_rejected(plan, {}, {"task 'r' (d2h) reads slot 'buf' but no write of it happens before"});
}

TEST(plan_checker, InitializedSlotNeedsNoWriter) {
  Plan plan;
  int32_t s = plan.add_slot("params.store.blk0", Tier::storage, 16, true);
  plan.add_task({.kind = TaskKind::params_read, .label = "read", .uses = {slot_read(s)}});
  Status st = check_plan(plan, {});
  EXPECT_TRUE(st.ok()) << st.to_string();
  plan.slots[s].initialized = false;
  expect_rejected(
      plan, {},
      {"'read' (storage_read) reads slot 'params.store.blk0' but no write of it happens "
       "before (nothing writes it and it is not marked initialized)"});
  // Initial data still races with an unordered write-back.
  plan.slots[s].initialized = true;
  plan.add_task({.kind = TaskKind::params_write, .label = "write back", .uses = {slot_write(s)}});
  expect_rejected(plan, {},
                  {"'write back' (storage_write) writes slot 'params.store.blk0' while 'read' "
                   "(storage_read) may still read it"});
}

// ---- Random pipelines ------------------------------------------------------------------------
// Over a grid of shapes: add deps that change nothing (already implied), check the plan passes;
// then remove each dep in turn and require the checker to agree with the reference checker; the
// fetch -> first-use dep is necessary by construction (the only edge from the h2d queue into
// the block's compute), so it must be among the rejected ones.
TEST(plan_checker, RandomPipelinesAgreeWithReference) {
  std::mt19937 rng(1234);
  int rejected = 0, accepted = 0;
  for (int blocks = 1; blocks <= 6; ++blocks) {
    for (int mbs = 1; mbs <= 5; ++mbs) {
      for (int buffers = 2; buffers <= 3; ++buffers) {
        PipelineShape shape{blocks, mbs, buffers, rng() % 2 == 0, rng() % 2 == 0};
        Pipeline p = make_pipeline(shape);
        Plan& plan = p.plan;
        const int32_t n = static_cast<int32_t>(plan.tasks.size());
        auto edges = happens_before_edges(plan);  // queue order does not change with deps
        ASSERT_TRUE(edges.ok()) << edges.status().to_string();
        for (int32_t t = 0; t < n; ++t) {  // implied deps: queue predecessors of what t waits for
          std::vector<int32_t>& deps = plan.tasks[t].deps;
          const int32_t pred = edges->queue_pred(t);
          if (pred >= 0 && rng() % 3 == 0) deps.push_back(pred);
          if (!deps.empty() && rng() % 2 == 0) {
            int32_t d = deps[rng() % deps.size()];
            deps.push_back(edges->queue_pred(d) >= 0 && rng() % 2 ? edges->queue_pred(d) : d);
          }
          std::shuffle(deps.begin(), deps.end(), rng);
        }
        Status st = check_plan(plan, {});
        ASSERT_TRUE(st.ok()) << st.to_string();
        for (int32_t t = 0; t < n; ++t) {
          for (size_t i = 0; i < plan.tasks[t].deps.size(); ++i) {
            Plan broken = plan;
            broken.tasks[t].deps.erase(broken.tasks[t].deps.begin() + i);
            const bool ok = check_plan(broken, {}).ok();
            ASSERT_EQ(ok, reference_ok(broken, {}))
                << "removing dep " << plan.describe(plan.tasks[t].deps[i]) << " of "
                << plan.describe(t);
            (ok ? accepted : rejected)++;
          }
        }
        for (int l = 0; l < blocks; ++l) {
          Plan broken = plan;
          const int first = (shape.snake && l % 2 == 1) ? mbs - 1 : 0;
          std::vector<int32_t>& deps = broken.tasks[p.fwd[l][first]].deps;
          std::erase(deps, p.fetch[l]);
          EXPECT_FALSE(check_plan(broken, {}).ok()) << "fetch blk." << l;
        }
      }
    }
  }
  EXPECT_GT(rejected, 100);
  EXPECT_GT(accepted, 100);  // the implied deps
}

// Random small plans, mostly broken: the checker must agree with the reference on every one.
TEST(plan_checker, RandomPlansAgreeWithReference) {
  std::mt19937 rng(99);
  int ok_count = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    Plan plan;
    const int slots = 1 + rng() % 3, tasks = 2 + rng() % 7;
    for (int s = 0; s < slots; ++s)
      plan.add_slot(std::string("s").append(std::to_string(s)), Tier::host, 8, rng() % 3 == 0);
    for (int t = 0; t < tasks; ++t) {
      Task task{.kind = test::kind_on(static_cast<Resource>(rng() % 3)),
                .label = std::string("t").append(std::to_string(t))};
      for (int d = 0; d < t; ++d) {
        if (rng() % 3 == 0) task.deps.push_back(d);
      }
      if (t > 0 && rng() % 20 == 0) task.deps.push_back(t + rng() % (tasks - t));  // forward dep
      for (int s = 0; s < slots; ++s) {
        if (rng() % 2) task.uses.push_back({s, rng() % 2 == 0});
      }
      plan.add_task(task);
    }
    const TierBudgets budgets{.host = rng() % 10 == 0 ? 8 : 0};
    Status st = check_plan(plan, budgets);
    ASSERT_EQ(st.ok(), reference_ok(plan, budgets)) << st.to_string() << "\n"
                                                    << plan_to_json(plan).dump();
    ok_count += st.ok();
  }
  EXPECT_GT(ok_count, 100);
  EXPECT_LT(ok_count, 2900);
}

TEST(plan_checker, LargePlanIsFast) {
  Pipeline p = make_pipeline(
      {.blocks = 4000, .micro_batches = 12, .buffers = 2, .staged = true, .snake = true});
  ASSERT_GT(p.plan.tasks.size(), 100000u);
  auto t0 = std::chrono::steady_clock::now();
  Status st = check_plan(p.plan, {});
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(st.ok()) << st.to_string();
  EXPECT_LT(seconds, 5.0);
  std::printf("check_plan: %zu tasks in %.3f s\n", p.plan.tasks.size(), seconds);
  EXPECT_EQ(plan_stats(p.plan).critical_path_tasks > 4000 * 12, true);
}

TEST(plan_checker, StatsAndJson) {
  Pipeline p = make_pipeline({.blocks = 2, .micro_batches = 2, .buffers = 2});
  PlanStats stats = plan_stats(p.plan);
  EXPECT_EQ(stats.tasks_per_resource[static_cast<int>(Resource::compute)], 4);
  EXPECT_EQ(stats.tasks_per_resource[static_cast<int>(Resource::h2d)], 2);
  EXPECT_EQ(stats.tasks_per_resource[static_cast<int>(Resource::d2h)], 4);
  EXPECT_EQ(stats.bytes_per_tier[static_cast<int>(Tier::device)], 2 * 64 * kMiB + 2 * 4 * kMiB);
  // ckpt blk.0 mb.0 -> fwd blk.0 mb.0 -> fwd blk.0 mb.1 -> fwd blk.1 mb.0 -> fwd blk.1 mb.1
  EXPECT_EQ(stats.critical_path_tasks, 5);
  nlohmann::json j = plan_to_json(p.plan);
  ASSERT_EQ(j["tasks"].size(), p.plan.tasks.size());
  const nlohmann::json& f = j["tasks"][p.fwd[1][0]];
  EXPECT_EQ(f["label"], "fwd blk.1 mb.0");
  EXPECT_EQ(f["resource"], "compute");
  EXPECT_EQ(f["kind"], "block_forward");
  EXPECT_EQ(f["writes"].size(), 1u);
  EXPECT_EQ(j["slots"][0]["tier"], "host");
  EXPECT_EQ(j["slots"][0]["initialized"], true);
  Pipeline cyclic = make_pipeline({});
  cyclic.plan.tasks[cyclic.fetch[0]].deps.push_back(cyclic.fwd[0][0]);
  EXPECT_EQ(plan_stats(cyclic.plan).critical_path_tasks, -1);
}

}  // namespace
}  // namespace strata
