// The builder the schedule generators write plans with (docs/design.md §5): slots and typed
// tasks, deps derived from slot uses, labels derived from what a task does, and the one helper
// that moves a buffer through a host staging ring when the far side is storage.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sched/plan.h"

namespace strata {

// Which block, micro-batch and optimizer part a task is about (-1: none). A task of the embed
// group has block -1.
struct TaskTag {
  int32_t block = -1, micro_batch = -1, part = -1;
};

// "fwd blk.3 mb.2", "adamw blk.1 p0", "grad.out embed": what traces and errors show. Labels are
// for people only; nothing interprets them (Note [Task signatures]).
std::string task_label(TaskKind kind, const TaskTag& tag);

// Slots taken in turn (double buffering): the host stages of one kind of state on its way to or
// from storage (empty when nothing of that kind is on storage), or a device double buffer.
struct SlotRing {
  std::vector<int32_t> slots;
  int64_t taken = 0;
  int32_t take() {
    return slots[static_cast<size_t>(taken++ % static_cast<int64_t>(slots.size()))];
  }
};

// Builds a plan whose deps are derived from slot uses, so that check_plan's rules 2 and 3 hold
// by construction: a read depends on the slot's last writer; a write on the last writer and on
// every read since (write-after-read). Deps that queue order already gives (same resource) are
// left out. Tasks must be added in an order where each read's writer comes first; the order of
// additions is also each resource's queue order, so generators emit prefetches early on purpose.
// A task's resource is its kind's (kind_resource) and its label is task_label's.
class PlanBuilder {
 public:
  int32_t slot(std::string name, Tier tier, int64_t bytes, bool initialized = false);

  // Adds t with its resource and (when empty) label filled in from its kind and tag.
  int32_t task(Task t);
  int32_t task(TaskKind kind, const TaskTag& tag, std::vector<SlotUse> uses, int64_t bytes = 0,
               double flops = 0);
  // A transfer of `bytes` from slot src to slot dst (offsets 0).
  int32_t transfer(TaskKind kind, const TaskTag& tag, int32_t src, int32_t dst, int64_t bytes);
  // The same for `bytes` from src_offset of src to dst_offset of dst (one optimizer part's range
  // of a block's params or gradient, one array of an embed chunk's state).
  int32_t transfer_range(TaskKind kind, const TaskTag& tag, int32_t src, int64_t src_offset,
                         int32_t dst, int64_t dst_offset, int64_t bytes);

  // Moves `bytes` from device slot `from` out to `to`: one copy of kind `copy` when `to` is on
  // host; through the next stage of `ring` and a flush of kind `flush` when it is on storage.
  void move_out(TaskKind copy, TaskKind flush, const TaskTag& tag, int32_t from, int32_t to,
                SlotRing& ring, int64_t bytes);
  // Brings `from` into host memory: `from` itself when it is not on storage, else a read of kind
  // `read` into the next stage of `ring`. Returns the host slot that holds the data.
  int32_t to_host(TaskKind read, const TaskTag& tag, int32_t from, SlotRing& ring, int64_t bytes);

  Tier tier(int32_t slot) const { return plan_.slots[static_cast<size_t>(slot)].tier; }

  Plan take() { return std::move(plan_); }

 private:
  Plan plan_;
  std::vector<int32_t> last_write_;
  std::vector<std::vector<int32_t>> readers_;
};

}  // namespace strata
