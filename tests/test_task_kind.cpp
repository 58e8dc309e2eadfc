// Typed tasks (Note [Task signatures]): the signature check accepts well-formed tasks and names
// what is wrong with the others; slots are found by role; a plan's traffic is a static sum per
// resource and kind of state; labels come from kind and tag. (Every generated plan is also
// checked in plan_schedules.*.)
#include <gtest/gtest.h>

#include <string>

#include "sched/plan.h"
#include "sched/plan_builder.h"
#include "test_util.h"

namespace strata {
namespace {

// A plan with three host slots and one device slot, and one task added by the test.
struct OneTask {
  Plan plan;
  int32_t a, b, c, dev;
  OneTask() {
    a = plan.add_slot("a", Tier::host, 64);
    b = plan.add_slot("b", Tier::host, 64);
    c = plan.add_slot("c", Tier::host, 64);
    dev = plan.add_slot("d", Tier::device, 64);
  }
  Status check(Task t) {
    plan.tasks = {std::move(t)};
    return check_task_signatures(plan);
  }
};

Task step_task(OneTask& p) {
  Task t{.kind = TaskKind::block_step, .label = "adamw"};
  t.uses = {slot_read(p.a, Role::grad), slot_read(p.b, Role::state), slot_write(p.b, Role::state),
            slot_write(p.c, Role::params)};
  return t;
}

TEST(TaskSignature, AcceptsWellFormedTasksWithAndWithoutOptionalRoles) {
  OneTask p;
  EXPECT_TRUE(p.check(step_task(p)).ok());
  Task clipped = step_task(p);
  clipped.uses.push_back(slot_read(p.dev, Role::clip));  // optional
  EXPECT_TRUE(p.check(clipped).ok());
  Task copy{.kind = TaskKind::ckpt_load};
  copy.uses = {slot_read(p.a, Role::src), slot_write(p.dev, Role::dst)};
  EXPECT_TRUE(p.check(copy).ok());
}

TEST(TaskSignature, NamesWhatIsWrong) {
  OneTask p;
  Task unknown = step_task(p);  // a queue that disagrees with the kind cannot be written
  unknown.kind = static_cast<TaskKind>(kTaskKindCount);
  test::expect_error(p.check(unknown), ErrorCode::invalid_argument, {"'adamw'", "unknown kind"});
  Task missing = step_task(p);
  missing.uses.pop_back();  // no params
  test::expect_error(p.check(missing), ErrorCode::invalid_argument, {"has no 'params' slot"});
  Task foreign = step_task(p);
  foreign.uses.push_back(slot_read(p.dev, Role::saved));
  test::expect_error(p.check(foreign), ErrorCode::invalid_argument,
                     {"as 'saved', which block_step does not have"});
  Task write_only_state = step_task(p);
  write_only_state.uses.erase(write_only_state.uses.begin() + 1);  // state only written
  test::expect_error(p.check(write_only_state), ErrorCode::invalid_argument,
                     {"'state' must be read"});
  Task read_state_out = step_task(p);  // Note [Speculative steps]: state_out is written only
  read_state_out.uses.push_back(slot_read(p.c, Role::state_out));
  test::expect_error(p.check(read_state_out), ErrorCode::invalid_argument,
                     {"'state_out' must be written"});
  Task unnamed = step_task(p);
  unnamed.uses.push_back(slot_read(p.dev));  // no role
  test::expect_error(p.check(unnamed), ErrorCode::invalid_argument, {"'unspecified'"});
}

TEST(TaskSignature, SlotsAreFoundByRole) {
  OneTask p;
  Task t{.kind = TaskKind::block_backward};
  t.uses = {slot_read(p.a, Role::params), slot_read(p.b, Role::input), slot_read(p.c, Role::dact),
            slot_write(p.c, Role::dact), slot_write(p.dev, Role::grad)};
  EXPECT_TRUE(p.check(t).ok());
  EXPECT_EQ(slot_of(t, Role::input), p.b);
  EXPECT_EQ(slot_of(t, Role::grad), p.dev);
  EXPECT_EQ(slot_of(t, Role::saved), -1);   // optional and absent: recompute
  EXPECT_FALSE(reads_role(t, Role::grad));  // a fresh gradient, not an accumulation
  t.uses.push_back(slot_read(p.dev, Role::grad));
  EXPECT_TRUE(reads_role(t, Role::grad));
  EXPECT_TRUE(p.check(t).ok());
}

TEST(PlanTraffic, SumsTransfersPerQueueAndState) {
  PlanBuilder b;
  const int32_t store = b.slot("store", Tier::storage, 4096, true);
  const int32_t acts = b.slot("acts", Tier::storage, 4096);
  SlotRing ring{{b.slot("stage0", Tier::host, 4096), b.slot("stage1", Tier::host, 4096)}};
  const int32_t dev = b.slot("dev", Tier::device, 4096);
  const int32_t host = b.to_host(TaskKind::params_read, {.block = 0}, store, ring, 1000);
  b.transfer(TaskKind::params_fetch, {.block = 0}, host, dev, 1000);
  b.move_out(TaskKind::acts_write, TaskKind::acts_flush, {.block = 0, .micro_batch = 1}, dev, acts,
             ring, 300);
  b.task(TaskKind::grad_zero, {.block = 0}, {slot_write(dev, Role::grad)});
  const Plan plan = b.take();
  ASSERT_TRUE(check_task_signatures(plan).ok());
  const PlanTraffic t = plan_traffic(plan);
  EXPECT_EQ(t.of(StateKind::params, Resource::storage_read), 1000);
  EXPECT_EQ(t.of(StateKind::params, Resource::h2d), 1000);
  EXPECT_EQ(t.of(StateKind::acts, Resource::d2h), 300);
  EXPECT_EQ(t.of(StateKind::acts, Resource::storage_write), 300);
  EXPECT_EQ(t.on(Resource::storage_write), 300);
  EXPECT_EQ(t.on(Resource::compute), 0);
  // Through storage, both directions took the ring's next stage in turn.
  EXPECT_EQ(plan.tasks[0].uses[1].slot, ring.slots[0]);
  EXPECT_EQ(plan.tasks[2].uses[1].slot, ring.slots[1]);
}

TEST(PlanBuilder, ResourceAndLabelComeFromTheKind) {
  PlanBuilder b;
  const int32_t s = b.slot("s", Tier::host, 8);
  const int32_t x = b.slot("x", Tier::host, 8, true);
  b.task(TaskKind::grad_norm, {}, {slot_read(x, Role::sums), slot_write(s, Role::clip)});
  b.task(TaskKind::embed_step, {}, {});
  b.task(TaskKind::block_step, {.block = 3, .part = 1}, {});
  b.task(TaskKind::head_loss, {.micro_batch = 2}, {});
  const Plan p = b.take();
  EXPECT_EQ(p.tasks[0].resource(), Resource::cpu_optim);
  EXPECT_EQ(p.tasks[0].label, "grad.norm");
  EXPECT_EQ(p.tasks[1].label, "adamw embed");
  EXPECT_EQ(p.tasks[2].label, "adamw blk.3 p1");
  EXPECT_EQ(p.tasks[3].label, "loss mb.2");
  EXPECT_EQ(p.tasks[3].resource(), Resource::compute);
  EXPECT_STREQ(task_kind_name(TaskKind::acts_flush), "acts_flush");
  EXPECT_STREQ(role_name(Role::saved), "saved");
  EXPECT_EQ(kind_resource(TaskKind::ckpt_read), Resource::storage_read);
  EXPECT_TRUE(is_transfer(TaskKind::grad_out));
  EXPECT_FALSE(is_transfer(TaskKind::grad_accumulate));
}

}  // namespace
}  // namespace strata
