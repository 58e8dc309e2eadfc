// The horizontal schedule (ZeRO-Infinity's order, the baseline of docs/design.md §5) as a plan.
#pragma once

#include "sched/plan.h"
#include "sched/schedule_spec.h"

namespace strata {

// One training iteration: for each micro-batch, forward through all blocks, loss, then backward
// through all blocks (each block recomputed from its checkpointed input). Each block's params
// are fetched per micro-batch and again for backward (storage -> host stage -> device double
// buffer), so 2*M fetches per block. Each micro-batch's block gradient goes device -> host and
// is accumulated on host ("acc blk.l mb.m" on cpu_optim). After the last backward the optimizer
// step runs per block, last block first, pipelined: state read (storage) -> AdamW (cpu_optim)
// -> state and new working params written back where they live.
// Placement::device for params or optim is treated as host (device-resident state is the
// in-memory schedule's job); checkpoints live in one slot per block, on host or storage.
// The embedding group stays on the device; its AdamW runs on host after the norm, at the end of
// the plan (schedule_common.h).
// Requires blocks >= 1, micro_batches >= 1. Every dep is derived from slot uses
// (PlanBuilder), so the plan passes check_plan with unlimited budgets.
Plan make_horizontal_plan(const ScheduleSpec& spec);

}  // namespace strata
