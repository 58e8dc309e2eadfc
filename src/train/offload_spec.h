// The plan inputs of an offloaded run: what a config and a device make of the ScheduleSpec the
// generators (sched/schedule_horizontal.h, sched/schedule_vertical.h) build plans from. The
// trainer and the planner both start here, so a predicted plan is the plan that runs.
#pragma once

#include <cstdint>

#include "backend/backend.h"
#include "core/config.h"
#include "model/layout.h"
#include "sched/plan.h"
#include "sched/schedule_spec.h"

namespace strata {

// The spec of an offloaded run's plan on `dev` (its workspace sized by the device's attention:
// DeviceTraits), with steps pending from the last iteration or not, an iteration or not (the
// flush). Speculation, repair and per-block activation policy are the trainer's to set.
ScheduleSpec offload_schedule_spec(const DeviceTraits& dev, const TrainConfig& cfg,
                                   bool pending_steps, bool iteration);
inline ScheduleSpec offload_schedule_spec(const Device& dev, const TrainConfig& cfg,
                                          bool pending_steps, bool iteration) {
  return offload_schedule_spec(device_traits(dev), cfg, pending_steps, iteration);
}
// The plan of an offloaded schedule (horizontal or vertical).
Plan make_offload_plan(const ScheduleSpec& spec, Schedule schedule);

// Whether cfg.collectives asks for the collectives in device memory on a GPU (`gpu`) or a CPU
// device, before what the build and the machine allow: "device"; "auto" on a GPU, or for the
// in-memory schedule (on a CPU device the offloaded schedules gain nothing there, measured).
// create_configured_transport (train/trainer.h) and the planner ask it.
bool wants_device_collectives(const TrainConfig& cfg, bool gpu);

// Elements of the embed group: the embedding slab then the final-norm slab.
int64_t embed_group_elems(const ParamLayout& layout);
// Parameters of a block that train (all of them without LoRA; its adapters with).
int64_t block_trained_elems(const ParamLayout& layout);
// Whether nothing of the embed group (embedding and final slabs) trains (Note [Frozen base]).
bool embed_group_frozen(const ParamLayout& layout);
// Elements of a block that never step, as the offloaded plans see them (Note [Frozen base] in
// sched/schedule_spec.h): LoRA's frozen prefix in whole I/O units, with one rank; else 0.
int64_t frozen_elems_for(const TrainConfig& cfg, const ParamLayout& layout);
// The end of part 0 of a block's step (Note [Optimizer split] in sched/schedule_spec.h), which
// begins at `frozen_elems`.
int64_t split_elems_for(const TrainConfig& cfg, int64_t block_elems, int64_t frozen_elems);

}  // namespace strata
