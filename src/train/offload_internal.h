// Pieces of the offloaded trainer shared by its source files (offload_trainer.cpp: plans, memory,
// the step loop; offload_actions.cpp: what each task does; offload_state.cpp: state outside
// plans; offload_report.cpp: log, metrics, trace). Not a public header.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/math_util.h"
#include "sched/happens_before.h"
#include "train/offload_trainer.h"

namespace strata {

// Host slot buffers are whole direct-I/O blocks, and a transfer that ends an extent moves whole
// blocks (Note [Direct ranges] in io/tensor_store.h).
inline constexpr auto kIoAlign = static_cast<int64_t>(kDirectIoAlignment);

// The memory behind one slot name, shared by every plan that names it.
struct OffloadTrainer::SlotMemory {
  std::string name;
  Tier tier = Tier::host;
  int64_t bytes = 0;
  Buffer buf;         // device or host tier
  size_t extent = 0;  // storage tier: the store's extent
  // Training state the slot holds (Note [Asynchronous checkpoints]): the slabs whose master and
  // moments live in it (a block's optimizer part or its speculative part 0, or the embed group's
  // state for the embedding and final slabs; none for other slots), and which part of a block's
  // state it is (0, 1; -1: none, or the whole), which the vertical schedule's pending steps may
  // write.
  std::vector<int64_t> state_slabs;
  int32_t part = -1;
};

struct OffloadTrainer::BoundPlan {
  Plan plan;
  std::vector<TaskAction> actions;  // one per task
  std::vector<SlotMemory*> slots;   // one per plan slot
  PlanKey key;
  // Note [Ordering by events]: the plan's direct happens-before edges and one event per task
  // (filled only on a device that orders by events).
  HappensBefore edges;
  std::vector<std::unique_ptr<Event>> done;
  PlanTraffic traffic;         // bytes one run of the plan moves (static: plan_traffic)
  int64_t acts_forwarded = 0;  // saved sets per step served from host instead of storage
};

}  // namespace strata
