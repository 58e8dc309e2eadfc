// A plan: one training iteration (or any piece of one) as data. An ordered list of tasks per
// resource, with explicit dependencies and explicit buffer slots (docs/design.md §5).
//
// Who reads a plan:
//  - the schedule generators (in-memory, horizontal, vertical) write it;
//  - the checker (plan_checker.h) proves, without running anything, that every read sees a
//    write, that no slot is overwritten while in use, and that the slots fit the tier budgets;
//  - the executor runs it: one queue per resource, a task starts when the tasks before it in its
//    queue and all its deps have finished; it never reorders a queue;
//  - the simulator replays it with a cost model (bytes, flops) to predict iteration time.
//
// What a plan that passes check_plan guarantees to the executor: if it honours queue order and
// deps and nothing else, every run sees the same data in every slot at every read, whatever the
// timing. It needs no other locks or events.
//
// Note [Happens-before in plans]
// A task A happens before B (A -> B) when B cannot start until A has finished. Exactly two things
// create that ordering, and the relation is their transitive closure:
//   1. deps: B lists A in B.deps;
//   2. queue order: A and B are on the same resource, A first in `tasks`. Each resource is one
//      in-order queue (a CUDA stream, an I/O submission queue, the optimizer pool seen as one).
// Nothing else orders tasks: not their index across resources, not their kind, not timing. A plan
// is correct when any two uses of a slot, one a write, are ordered, and every read follows a write
// (or the slot is `initialized`). A task that reads and writes a slot lists it twice; its own uses
// never conflict. Deps may point forward while the relation stays acyclic (a dep against queue
// order is a cycle). A plan runs once, start to finish; data that outlives it sits in
// `initialized` slots, and the executor runs successive plans with a full barrier between them.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "sched/task_kind.h"

namespace strata {

// One in-order queue of the executor.
enum class Resource : uint8_t {
  compute,        // the device's compute stream
  h2d,            // host -> device copy stream
  d2h,            // device -> host copy stream
  storage_read,   // storage -> host reads (the storage engine's read queue)
  storage_write,  // host -> storage writes
  cpu_optim,      // CPU optimizer workers (AdamW over host buffers)
  net,            // collectives between the ranks of a data-parallel run (dist/communicator.h)
};
inline constexpr int kResourceCount = 7;
const char* resource_name(Resource r);  // "compute", "h2d", ...

enum class Tier : uint8_t { device, host, storage };
inline constexpr int kTierCount = 3;
const char* tier_name(Tier t);  // "device", "host", "storage"

// A fixed buffer (or storage extent) that the plan reuses, e.g. "params.buf0" on device,
// "ckpt.blk3.mb2" on host. Slots are static: all of them exist for the whole plan, so a tier's
// peak is the sum of its slots' bytes.
struct Slot {
  std::string name;
  Tier tier = Tier::device;
  int64_t bytes = 0;
  // Holds data before the plan starts (parameters on storage, the batch on host): reads need no
  // earlier write in the plan. Writes to it must still be ordered with every read.
  bool initialized = false;
};

// One slot a task reads or writes, and what it is to the task (Note [Task signatures] in
// task_kind.h). A task that reads and writes a slot lists it twice, with the same role.
struct SlotUse {
  int32_t slot = -1;
  bool write = false;
  Role role = Role::unspecified;
};
inline SlotUse slot_read(int32_t slot, Role role = Role::unspecified) {
  return {slot, false, role};
}
inline SlotUse slot_write(int32_t slot, Role role = Role::unspecified) {
  return {slot, true, role};
}

struct Task {
  TaskKind kind{};      // what it does; fixes its queue and the roles of its uses
  std::string label{};  // "fwd blk.3 mb.2": for people (traces, errors); never interpreted
  int32_t block = -1, micro_batch = -1;
  std::vector<int32_t> deps{};  // indices of tasks that must finish before this one starts
  std::vector<SlotUse> uses{};  // slots read / written
  int64_t bytes = 0;            // bytes moved (transfers), for the cost model
  double flops = 0;             // for compute tasks, for the cost model
  // Transfers (fetch, store): bytes [src_offset, src_offset + bytes) of the slot read go to
  // [dst_offset, dst_offset + bytes) of the slot written, so a task may move part of a slot.
  int64_t src_offset = 0, dst_offset = 0;
  // Optimizer steps: which part of the block's parameters (Note [Optimizer split] in
  // schedule_spec.h); -1 is the whole block.
  int32_t part = -1;
  // Backward: the block's forward ran just before on the same queue and its activations are
  // still in the compute workspace, so nothing is recomputed.
  bool fused = false;

  // The queue it runs on: its kind's (kind_resource), never stored, so it cannot disagree.
  // An unknown kind gives kResourceCount, which check_plan refuses.
  Resource resource() const { return kind_resource(kind); }
};

struct Plan {
  std::vector<Slot> slots;
  // Tasks on one resource run in the order they appear here (one queue per resource, like a
  // stream); see Note [Happens-before in plans].
  std::vector<Task> tasks;

  // Builders: append and return the new index. They do not validate; check_plan does.
  int32_t add_slot(std::string name, Tier tier, int64_t bytes, bool initialized = false);
  int32_t add_task(Task task);

  // "'fwd blk.3 mb.2' (compute)", or "task #12 (out of range)": for error messages.
  std::string describe(int32_t task) const;
  // "'params.buf0' (device)", or "slot #3 (out of range)".
  std::string describe_slot(int32_t slot) const;
};

// Bytes a plan moves, a static property of its transfer tasks (Note [Task signatures]): per
// resource queue and, within it, per kind of state moved.
struct PlanTraffic {
  // [resource][state]: indexed by Resource and StateKind.
  std::array<std::array<int64_t, kStateKindCount>, kResourceCount> bytes{};
  int64_t on(Resource r) const;               // every state
  int64_t of(StateKind s, Resource r) const;  // one state on one queue
};
PlanTraffic plan_traffic(const Plan& plan);

// For debugging and for the simulator: {"slots": [{name, tier, bytes, initialized}],
// "tasks": [{index, kind, resource, label, block, micro_batch, deps, reads, writes,
// uses: [{slot, write, role}], bytes, flops, src_offset, dst_offset, part, fused}]}. Slot
// references are indices into "slots".
nlohmann::json plan_to_json(const Plan& plan);

}  // namespace strata
