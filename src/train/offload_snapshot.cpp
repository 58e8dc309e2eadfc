// The offloaded trainer's state for checkpoints: snapshots written behind training (Note
// [Asynchronous checkpoints] in model/state_snapshot.h), and slab pieces read and written at a
// standstill (Note [Slab pieces]).
#include <algorithm>
#include <cstring>

#include "core/format.h"
#include "core/log.h"
#include "core/math_util.h"
#include "sched/slot_names.h"
#include "train/offload_plans.h"
#include "train/offload_trainer.h"

namespace strata {

namespace names = slot_names;

namespace {

// Whether a run's write of slot m finishes the last step's pending updates (part 1 pending, or
// part 0 too when it waited).
bool pending_write(const SlotMemory& m, Pending pending) {
  return (m.part == 1 && pending != Pending::none) || (m.part == 0 && pending == Pending::both);
}

}  // namespace

// Note [Host memory beside the plan]: besides the plan's host slots (each rounded up to 4 KiB
// for direct I/O), the offloaded trainer holds a bf16 block stage (bf16 mode), a spare block
// stage (no host slot holds a whole block) and, to write checkpoints behind training with
// optimizer state on storage, a snapshot stage of one optimizer part. All are allocated here or
// before, through the device, so the device's host count at this point is every host byte a run
// holds, checkpoints included; planned_host_bytes says that figure, and peak_host_bytes never
// exceeds it. memory.host_bytes is checked against it: a budget that cannot hold the buffers a
// step needs is refused naming it; one that cannot also hold the snapshot stage writes
// checkpoints at a standstill through the plan's own idle stage, and says so once.
Status OffloadTrainer::reserve_host_beside_plan(int64_t host_before) {
  const int64_t budget = shape_.cfg.memory.host_bytes;
  const int64_t slots = state_->planned_bytes()[static_cast<size_t>(Tier::host)];
  int64_t held = dev_.memory_stats().host_in_use - host_before;
  if (budget > 0 && held > budget) {
    return invalid_argument(
        "memory.host_bytes " + std::to_string(budget) + " is below the " + std::to_string(held) +
        " bytes of host memory a step needs: the plan's " + format_bytes(slots) + " and " +
        format_bytes(held - slots) + " of staging beside it (raise memory.host_bytes)");
  }
  if (!state_->state_slot_on(Tier::storage).empty() &&
      state_->state_slot_on(Tier::device).empty() && !shape_.sharded()) {
    const int64_t bytes = round_up(state_->slot(names::kOptimStage.at(0)).bytes, kIoAlign);
    snapshot_fits_ = budget <= 0 || held + bytes <= budget;
    if (snapshot_fits_) {
      STRATA_ASSIGN_OR_RETURN(snapshot_stage_, dev_.alloc_host(bytes));
      held += bytes;
    } else {
      log_info("checkpoints are written at a standstill: memory.host_bytes " +
               std::to_string(budget) + " is below the " + std::to_string(held + bytes) +
               " that writing them during training needs");
    }
  }
  state_->count_host_beside_plan(held - slots);
  return Status::ok_status();
}

Result<StateSnapshot> OffloadTrainer::begin_snapshot() {
  if (snapshot_ && !snapshot_->finished()) {
    return internal_error("a snapshot was begun while the last one is still being captured");
  }
  if (shape_.sharded()) {
    return unavailable(
        "the optimizer state is sharded over the ranks: every rank writes its shard of a "
        "checkpoint at a standstill (Note [Sharded checkpoints])");
  }
  if (const std::string on_device = state_->state_slot_on(Tier::device); !on_device.empty()) {
    return unavailable("optimizer state '" + on_device +
                       "' is on the device: its checkpoints are saved at a standstill");
  }
  if (!state_->state_slot_on(Tier::storage).empty() && !snapshot_fits_) {
    return unavailable(
        "memory.host_bytes has no room for the snapshot stage (Note [Host memory "
        "beside the plan]): checkpoints are saved at a standstill");
  }
  // Preference: the order in which the next run first writes each slab's state (pending
  // part-1 writes excepted: they make slabs ready), then the slabs it does not write.
  const BoundPlan& next =
      plan_for(iteration_key(shape_, pending_, shape_.speculative && !policy_.speculate()));
  std::vector<int64_t> order;
  for (const Task& t : next.plan.tasks) {
    for (const SlotUse& u : t.uses) {
      if (!u.write) continue;
      const SlotMemory& m = *next.slots[static_cast<size_t>(u.slot)];
      if (pending_write(m, pending_)) continue;
      for (int64_t slab : m.state_slabs) {
        if (std::find(order.begin(), order.end(), slab) == order.end()) order.push_back(slab);
      }
    }
  }
  for (int64_t slab = 0; slab < static_cast<int64_t>(shape_.layout.slabs.size()); ++slab) {
    if (std::find(order.begin(), order.end(), slab) == order.end()) order.push_back(slab);
  }
  snapshot_ = std::make_shared<SnapshotGate>(std::move(order));
  // The vertical schedule's part-1 updates of the step just done are still pending: those slabs
  // are ready once the next run has written them (gated_actions counts the writes).
  snapshot_pending_writes_ = pending_ != Pending::none;
  if (snapshot_pending_writes_) {
    for (int64_t l = 0; l < shape_.cfg.model.n_layer; ++l)
      snapshot_->hold(shape_.layout.block_slab(l));
  }
  float* stage = snapshot_stage_.bytes() > 0 ? snapshot_stage_.f32() : nullptr;
  return StateSnapshot{snapshot_, [this, stage](int64_t slab, const SlabPieceFn& take) {
                         return state_->state_pieces(slab, stage, take);
                       }};
}

std::vector<TaskAction> OffloadTrainer::gated_actions(const BoundPlan& bp) {
  if (!snapshot_ || snapshot_->finished()) return bp.actions;
  std::shared_ptr<SnapshotGate> gate = snapshot_;
  std::vector<TaskAction> actions = bp.actions;
  std::vector<int64_t> pending_writes(shape_.layout.slabs.size(), 0);
  for (size_t i = 0; i < bp.plan.tasks.size(); ++i) {
    std::vector<int64_t> finishes, waits;  // slabs this task makes ready / must wait for
    for (const SlotUse& u : bp.plan.tasks[i].uses) {
      if (!u.write) continue;
      const SlotMemory& m = *bp.slots[static_cast<size_t>(u.slot)];
      const bool finishes_step = snapshot_pending_writes_ && pending_write(m, pending_);
      for (int64_t slab : m.state_slabs) {
        (finishes_step ? finishes : waits).push_back(slab);
        if (finishes_step) pending_writes[static_cast<size_t>(slab)]++;
      }
    }
    if (finishes.empty() && waits.empty()) continue;
    actions[i] = [gate, action = bp.actions[i], finishes, waits] {
      for (int64_t slab : waits) gate->wait_captured(slab);
      Status st = action();
      if (st.ok()) {
        for (int64_t slab : finishes) gate->wrote(slab);
      }
      return st;
    };
  }
  if (snapshot_pending_writes_) {
    for (int64_t l = 0; l < shape_.cfg.model.n_layer; ++l) {
      const int64_t slab = shape_.layout.block_slab(l);
      snapshot_->expect_writes(slab, pending_writes[static_cast<size_t>(slab)]);
    }
    snapshot_pending_writes_ = false;  // only this run finishes the last step's updates
  }
  return actions;
}

Status OffloadTrainer::read_params(float* host) {
  STRATA_RETURN_IF_ERROR(finish());
  return state_->read_params(host);
}

Status OffloadTrainer::read_slab_pieces(int64_t slab, const SlabPieceFn& take) {
  STRATA_RETURN_IF_ERROR(finish());
  return state_->state_pieces(slab, state_->optim_stage0(), take);
}

Status OffloadTrainer::write_slab_pieces(int64_t slab, const SlabPieceFn& fill) {
  pending_ = Pending::none;
  return state_->write_slab_pieces(slab, fill);
}

Status OffloadTrainer::read_shard_pieces(int64_t slab, int rank, int ranks,
                                         const SlabPieceFn& take) {
  const ParamLayout& layout = shape_.layout;
  const bool block = slab != layout.embed_slab() && slab != layout.final_slab();
  if (!block) {  // replicated: this rank's ranks-th part, reading only the chunks that hold it
    const Slab& s = layout.slabs.at(static_cast<size_t>(slab));
    const Range share = shard_range(s.numel, ranks, rank);
    STRATA_RETURN_IF_ERROR(finish());
    return state_->state_pieces(slab, state_->optim_stage0(), clipped_to(share, take),
                                OffloadState::Shards::every_rank, share);
  }
  if (!shape_.sharded()) return Trainer::read_shard_pieces(slab, rank, ranks, take);
  if (rank != world_.rank() || ranks != world_.size()) {
    return internal_error("the share of rank " + std::to_string(rank) + " of " +
                          std::to_string(ranks) + " asked of rank " +
                          std::to_string(world_.rank()) + " of " + std::to_string(world_.size()) +
                          ": a rank reads only its own shard");
  }
  STRATA_RETURN_IF_ERROR(finish());
  return state_->state_pieces(slab, state_->optim_stage0(), take, OffloadState::Shards::own_only);
}

}  // namespace strata
