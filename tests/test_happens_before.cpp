// The direct happens-before edges (CTest names plan_happens_before.*), checked against Note
// [Happens-before in plans] written out by hand: the checker, the executor and their tests all
// build on these edges, so they are tested here on their own, against expectations that do not
// use them.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "sched/happens_before.h"
#include "sched/plan.h"
#include "test_util.h"

namespace strata {
namespace {

std::vector<int32_t> as_vector(std::span<const int32_t> s) {
  return {s.begin(), s.end()};
}

using test::make_task;

// Two queues interleaved, a third on its own, a duplicate dep, a dep that is also the queue
// predecessor, and a dep pointing forward in `tasks`.
Plan small_plan() {
  Plan plan;
  plan.add_task(make_task(Resource::compute, "a"));          // 0
  plan.add_task(make_task(Resource::h2d, "b", {0}));         // 1
  plan.add_task(make_task(Resource::compute, "c", {1, 1}));  // 2: duplicate dep
  plan.add_task(make_task(Resource::h2d, "d", {4}));         // 3: forward dep
  plan.add_task(make_task(Resource::d2h, "e", {0}));         // 4
  plan.add_task(make_task(Resource::compute, "f", {2}));     // 5: dep == queue predecessor
  return plan;
}

TEST(plan_happens_before, EdgesAreQueuePredecessorThenDepsWithDuplicates) {
  const Plan plan = small_plan();
  auto edges = happens_before_edges(plan);
  ASSERT_TRUE(edges.ok()) << edges.status().to_string();
  const HappensBefore& hb = edges.value();
  ASSERT_EQ(hb.task_count(), 6);
  const std::vector<std::vector<int32_t>> preds = {{}, {0}, {0, 1, 1}, {1, 4}, {0}, {2, 2}};
  const std::vector<std::vector<int32_t>> succs = {{1, 2, 4}, {2, 2, 3}, {5, 5}, {}, {3}, {}};
  for (int32_t t = 0; t < 6; ++t) {
    EXPECT_EQ(as_vector(hb.predecessors(t)), preds[t]) << plan.describe(t);
    EXPECT_EQ(as_vector(hb.successors(t)), succs[t]) << plan.describe(t);
  }
}

TEST(plan_happens_before, QueuesFollowPlanOrderPerResource) {
  const Plan plan = small_plan();
  auto edges = happens_before_edges(plan);
  ASSERT_TRUE(edges.ok()) << edges.status().to_string();
  const HappensBefore& hb = edges.value();
  EXPECT_EQ(hb.queue(Resource::compute), (std::vector<int32_t>{0, 2, 5}));
  EXPECT_EQ(hb.queue(Resource::h2d), (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(hb.queue(Resource::d2h), (std::vector<int32_t>{4}));
  EXPECT_TRUE(hb.queue(Resource::storage_read).empty());
  EXPECT_TRUE(hb.queue(Resource::storage_write).empty());
  EXPECT_TRUE(hb.queue(Resource::cpu_optim).empty());
  const std::vector<int32_t> pred = {-1, -1, 0, 1, -1, 2}, next = {2, 3, 5, -1, -1, -1},
                             pos = {0, 0, 1, 1, 0, 2};
  for (int32_t t = 0; t < 6; ++t) {
    EXPECT_EQ(hb.queue_pred(t), pred[t]) << plan.describe(t);
    EXPECT_EQ(hb.queue_next(t), next[t]) << plan.describe(t);
    EXPECT_EQ(hb.queue_pos(t), pos[t]) << plan.describe(t);
  }
}

TEST(plan_happens_before, EmptyPlanHasNoEdges) {
  auto edges = happens_before_edges(Plan{});
  ASSERT_TRUE(edges.ok()) << edges.status().to_string();
  EXPECT_EQ(edges->task_count(), 0);
  for (int r = 0; r < kResourceCount; ++r)
    EXPECT_TRUE(edges->queue(static_cast<Resource>(r)).empty());
}

// What would make an edge something other than a task index is refused, naming the task; cycles
// are not this function's business.
TEST(plan_happens_before, RefusesEdgesThatAreNotTaskIndices) {
  auto refused = [](const Plan& plan, const std::string& expected) {
    auto edges = happens_before_edges(plan);
    if (edges.ok()) return ::testing::AssertionFailure() << "accepted";
    if (edges.status().code() != ErrorCode::invalid_argument ||
        edges.status().message().find(expected) == std::string::npos) {
      return ::testing::AssertionFailure() << edges.status().to_string();
    }
    return ::testing::AssertionSuccess();
  };
  Plan plan = small_plan();
  plan.tasks[3].deps = {6};
  EXPECT_TRUE(refused(plan, "plan: task 'd' (h2d) depends on task #6, but the plan has 6 tasks"));
  plan.tasks[3].deps = {-1};
  EXPECT_TRUE(refused(plan, "plan: task 'd' (h2d) depends on task #-1"));
  plan.tasks[3].deps = {3};
  EXPECT_TRUE(refused(plan, "plan: task 'd' (h2d) depends on itself"));
  plan = small_plan();
  plan.tasks[4].kind = static_cast<TaskKind>(kTaskKindCount);  // so no queue
  EXPECT_TRUE(refused(plan, "plan: task #4 'e' has an unknown kind, so no queue"));

  Plan cycle;
  cycle.add_task(make_task(Resource::compute, "x", {1}));
  cycle.add_task(make_task(Resource::h2d, "y", {0}));
  EXPECT_TRUE(happens_before_edges(cycle).ok()) << "a cycle is still a set of edges";
}

// Random plans over every resource, against the Note computed the naive way: the queue
// predecessor is the nearest earlier task on the same resource.
TEST(plan_happens_before, RandomPlansMatchTheNote) {
  std::mt19937 rng(42);
  for (int trial = 0; trial < 200; ++trial) {
    Plan plan;
    const int n = 1 + static_cast<int>(rng() % 40);
    for (int t = 0; t < n; ++t) {
      // append, not "t" + ...: GCC 12 warns falsely (-Wrestrict) on that.
      Task task = make_task(static_cast<Resource>(rng() % kResourceCount),
                            std::string("t").append(std::to_string(t)));
      const int ndeps = static_cast<int>(rng() % 4);
      for (int k = 0; k < ndeps && n > 1; ++k) {
        int32_t d = static_cast<int32_t>(rng() % n);
        if (d != t) task.deps.push_back(d);
      }
      plan.add_task(std::move(task));
    }
    auto edges = happens_before_edges(plan);
    ASSERT_TRUE(edges.ok()) << edges.status().to_string();
    std::vector<std::vector<int32_t>> expected_succ(n);
    for (int32_t t = 0; t < n; ++t) {
      std::vector<int32_t> expected;
      for (int32_t p = t - 1; p >= 0; --p) {
        if (plan.tasks[p].resource() == plan.tasks[t].resource()) {
          expected.push_back(p);
          break;
        }
      }
      expected.insert(expected.end(), plan.tasks[t].deps.begin(), plan.tasks[t].deps.end());
      for (int32_t p : expected) expected_succ[p].push_back(t);
      ASSERT_EQ(as_vector(edges->predecessors(t)), expected) << "trial " << trial << " task " << t;
    }
    for (int32_t t = 0; t < n; ++t) {
      ASSERT_EQ(as_vector(edges->successors(t)), expected_succ[t]) << "trial " << trial;
    }
  }
}

}  // namespace
}  // namespace strata
