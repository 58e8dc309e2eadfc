// Inputs of the offloaded schedule generators (schedule_horizontal.h, schedule_vertical.h), and
// the small plan builder they share. DESIGN.md §2 (layout of state), §3 (tiers), §5 (schedules).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "sched/plan.h"

namespace strata {

// Where one kind of state lives between its uses.
enum class Placement : uint8_t { device, host, storage };

struct ScheduleSpec {
  int32_t blocks = 1;
  int32_t micro_batches = 1;
  int64_t block_param_bytes = 0;  // working params per block (bf16, or f32 in exactness mode)
  int64_t block_grad_bytes = 0;   // f32 gradient accumulator per block
  int64_t block_optim_bytes = 0;  // master + m + v per block
  int64_t checkpoint_bytes = 0;   // one block input, one micro-batch
  int64_t embed_param_bytes = 0;  // embedding + head, kept on the device (see the generators)
  double block_fwd_flops = 0;     // per micro-batch
  double block_bwd_flops = 0;     // per micro-batch, recompute not included
  // Checkpoints: host or storage (device is treated as host). For the vertical schedule the
  // first and last two micro-batches of each block stay on host whatever this says.
  Placement params = Placement::storage, optim = Placement::storage, checkpoints = Placement::host;
};

inline Tier placement_tier(Placement p) {
  switch (p) {
    case Placement::device:
      return Tier::device;
    case Placement::host:
      return Tier::host;
    case Placement::storage:
      return Tier::storage;
  }
  return Tier::host;
}

// Builds a plan whose deps are derived from slot uses, so that check_plan's rules 2 and 3 hold
// by construction: a read depends on the slot's last writer; a write on the last writer and on
// every read since (write-after-read). Deps that queue order already gives (same resource) are
// left out. Tasks must be added in an order where each read's writer comes first; the order of
// additions is also each resource's queue order, so generators emit prefetches early on purpose.
class SlotDepBuilder {
 public:
  int32_t slot(std::string name, Tier tier, int64_t bytes, bool initialized = false) {
    last_write_.push_back(-1);
    readers_.emplace_back();
    return plan_.add_slot(std::move(name), tier, bytes, initialized);
  }

  int32_t task(Task t) {
    auto dep = [&](int32_t d) {
      if (d >= 0 && plan_.tasks[d].resource != t.resource &&
          std::find(t.deps.begin(), t.deps.end(), d) == t.deps.end()) {
        t.deps.push_back(d);
      }
    };
    for (const SlotUse& u : t.uses) {
      dep(last_write_[u.slot]);
      if (u.write) {
        for (int32_t r : readers_[u.slot]) dep(r);
      }
    }
    const int32_t id = static_cast<int32_t>(plan_.tasks.size());
    for (const SlotUse& u : t.uses) {
      if (u.write) {
        last_write_[u.slot] = id;
        readers_[u.slot].clear();
      }
    }
    for (const SlotUse& u : t.uses) {
      if (!u.write) readers_[u.slot].push_back(id);
    }
    return plan_.add_task(std::move(t));
  }

  // Shorthand for the common case.
  int32_t task(TaskKind kind, Resource r, std::string label, int32_t block, int32_t mb,
               std::vector<SlotUse> uses, int64_t bytes = 0, double flops = 0) {
    Task t{.kind = kind, .resource = r, .label = std::move(label)};
    t.block = block;
    t.micro_batch = mb;
    t.uses = std::move(uses);
    t.bytes = bytes;
    t.flops = flops;
    return task(std::move(t));
  }

  Tier peek_tier(int32_t slot) const { return plan_.slots[slot].tier; }

  Plan take() { return std::move(plan_); }

 private:
  Plan plan_;
  std::vector<int32_t> last_write_;
  std::vector<std::vector<int32_t>> readers_;
};

// Where offloaded state lives between uses. Placement::device is modelled as host: the CPU
// optimizer works on host buffers, and device-resident state is the in-memory schedule's job.
inline Tier offload_tier(Placement p) {
  return p == Placement::storage ? Tier::storage : Tier::host;
}

// One block's CPU optimizer step after its gradient reached host slot `grad`: the optimizer
// state is read through `state_stage` when it lives on storage (-1 otherwise), AdamW runs on
// cpu_optim, then state and the new working params are written back (params through
// `params_stage` when they live on storage, -1 otherwise). Shared by both schedules.
struct OptimizerStepSlots {
  int32_t grad, state_store, state_stage, params_store, params_stage;
};
void add_optimizer_step(SlotDepBuilder& b, int32_t block, const OptimizerStepSlots& s,
                        int64_t optim_bytes, int64_t param_bytes);

// "blk.3", "blk.3 mb.2"
inline std::string blk_tag(int l, int m = -1) {
  return "blk." + std::to_string(l) + (m >= 0 ? " mb." + std::to_string(m) : "");
}

}  // namespace strata
