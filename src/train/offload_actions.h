// What each task of an offloaded plan does: one action per task kind, each finding its slots by
// role (Note [Task signatures] in sched/task_kind.h), over the memory of OffloadState; the compute
// workspace and the streams they enqueue on; and binding a plan's tasks to their actions, ordered
// by events on a discrete device (Note [Ordering by events] below).
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "backend/backend.h"
#include "dist/communicator.h"
#include "dist/device_collectives.h"
#include "model/block.h"
#include "optim/lr_schedule.h"
#include "sched/executor.h"
#include "sched/happens_before.h"
#include "sched/plan.h"
#include "train/offload_shape.h"
#include "train/offload_state.h"
#include "train/offload_workspace.h"

namespace strata {

// Which plan of a vertical run (Note [Speculative steps] in schedule_spec.h): what the previous
// iteration left pending, whether this is an iteration (else the flush of what is pending, or
// the repair), and whether it defers part 0. Horizontal runs use the default key.
enum class Pending : uint8_t { none, part1, both };
struct PlanKey {
  Pending pending = Pending::none;
  bool iteration = true;
  bool defer_part0 = false;
  bool repair = false;
  bool operator==(const PlanKey&) const = default;
};

// A plan bound to memory and actions.
struct BoundPlan {
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

// The streams device work is enqueued on; net only with the collectives on the device.
struct OffloadStreams {
  std::unique_ptr<Stream> compute, h2d, d2h, net;
};

// What a step's optimizer updates apply.
struct StepState {
  float lr = 0;
  int64_t adam_step = 0;  // 1-based AdamW step count of the update being applied
  float grad_scale = 1;   // clip factor
  bool skip = false;      // non-finite norm: no update
};
// The counts the actions read and advance, and what the last norm decided; the trainer's step
// loop reads them.
struct StepProgress {
  int64_t steps_done = 0;
  int64_t adam_steps = 0;  // updates applied
  StepState norm;          // of the last norm: what pending and post-norm steps apply
  double norm_sumsq = 0;   // the last norm's sum of squares
};

// Note [Ordering by events]
// On the CPU device every device task synchronises its stream before its action returns, so a
// task's span in the trace is its work and the profile times real work. A discrete device
// (cpu-discrete, a GPU) enqueues a device task's work and records its event (BoundPlan::done)
// without waiting; before enqueueing, its stream waits the events of its direct predecessors on
// other device streams, and a host task synchronises those of its direct device predecessors.
// That is the plan's happens-before (Note [Happens-before in plans]), the direct edges carrying
// the closure. The trainer synchronises the three streams when the executor returns, before the
// host reads what they wrote. Cost: a trace's device spans are issue times, not work.

// Note [One action per kind]
// A task of kind K runs act<K>. The transfers share one body (the primary template); every other
// kind has a specialization, declared below the class. The table of actions is built over every
// TaskKind (offload_actions.cpp), so a kind without its action, or an action for no kind, does
// not compile.
class OffloadActions {
 public:
  OffloadActions(Device& dev, Communicator& world, const OffloadShape& shape, OffloadState& state,
                 OffloadStreams& streams, StepProgress& progress,
                 std::unique_ptr<DeviceCollectives> device_sum);

  // After the state's allocate: the compute workspace inside its slot, and the collectives'
  // scratch (at most kAllReduceChunkElems floats whatever the block) beside the plan's slots.
  Status prepare();
  // Note [Data parallel ranks], Note [Ignored targets]: the step's targets that count, over every
  // rank's micro-batches; the loss is their mean.
  void set_counted_targets(int64_t counted) {
    dloss_ = 1.0f / static_cast<float>(std::max<int64_t>(counted, 1));
  }
  // Binds bp's slots to the state's memory and each task to its action.
  Status bind(BoundPlan& bp);
  bool orders_by_events() const { return order_by_events_; }
  // Every device task also synchronises its stream, so its span in a trace is its work (what
  // `strata profile` measures a GPU with); slower, off by default.
  void set_time_device_tasks(bool on) { time_device_tasks_ = on; }
  // For tests of skipping: block `block`'s gradient gets a NaN on step `step` (0-based).
  void poison_gradient_for_test(int64_t step, int32_t block) {
    poison_step_ = step;
    poison_block_ = block;
  }
  const OffloadWorkspace& workspace() const { return ws_; }
  const DeviceCollectives* device_sum() const { return device_sum_.get(); }
  // With train.matmul bf16, the BlockGemm over a block's bf16 working weights and their widening
  // in the workspace (Note [bf16 GEMMs] in model/block.h); else nullopt.
  std::optional<BlockGemm> block_gemm(const void* bf16_weights) const;

  // Note [One action per kind]
  template <TaskKind K>
  Status act(const BoundPlan& bp, const Task& t) {
    static_assert(is_transfer(K), "a task kind without an action: specialize act<K>");
    return transfer(bp, t);
  }

 private:
  // Task `task`'s action, wrapped in run_ordered on a device that orders by events.
  TaskAction action_of(const BoundPlan& bp, int32_t task);
  Status run_ordered(const BoundPlan& bp, int32_t task, const TaskAction& action);
  Status prepare_events(BoundPlan& bp);
  // The end of a device task's action on stream s: synchronise s, unless the device orders by
  // events (then run_ordered records the task's event instead).
  void end_task(Stream& s);
  // The stream a resource's tasks enqueue on; null for the host resources.
  Stream* stream_of(Resource r) const;
  Status transfer(const BoundPlan& bp, const Task& t);
  // The memory of the task's slot in `role` (null when it has none), and its micro-batch's
  // tokens (inputs, then targets at + B*T).
  float* f32_of(const BoundPlan& bp, const Task& t, Role role) const;
  void* slot_ptr(const BoundPlan& bp, int32_t slot) const;
  const int32_t* tokens_of(const BoundPlan& bp, const Task& t) const;
  // The f32 weights a block task computes with: its params slot (f32 mode), or that slot's bf16
  // widened into the workspace on the compute stream (bf16 mode).
  float* block_weights(const BoundPlan& bp, const Task& t);
  // BlockActs whose saved set lives at `saved` (a plan slot), forward-only tensors in the
  // workspace.
  BlockActs saved_view(float* saved) const;
  // Part 0 run in backward, before this iteration's norm (Note [Optimizer split]).
  // a with task t's adapter dropout (Note [Adapter dropout] in model/lora.h): the step, the
  // micro-batch over all ranks, the block.
  BlockActs training_acts(const BlockActs& a, const Task& t) const;
  StepState early_step_state() const;
  Status step_block_part(const BoundPlan& bp, const Task& t, const StepState& st);
  // Where element `lo` of task t's part lands in its params slot: at lo in the block's layout,
  // or in a sharded host store's packed ranges (Note [Shard ranges in a store]); null when this
  // rank's ranges do not hold it.
  char* params_at(const BoundPlan& bp, const Task& t, int64_t lo) const;
  // A collective on device memory (Note [ZeRO-3 on the device]): a host task of the net queue
  // whose moves and adds run on the net stream, done when its action returns.
  Status device_collective(const Task& t, const std::function<Status(DeviceCollectives&)>& body);

  Device& dev_;
  Communicator& world_;  // the ranks gradients and losses are summed over
  const OffloadShape& sh_;
  OffloadState& state_;
  OffloadStreams& streams_;
  StepProgress& progress_;
  std::unique_ptr<DeviceCollectives> device_sum_;
  LrSchedule schedule_;
  float dloss_ = 0;  // d loss / d a position's loss: 1 / the step's counted targets
  bool order_by_events_ = false;
  bool time_device_tasks_ = false;
  // The compute workspace (device): one block's activations for one micro-batch, backward
  // scratch, the head's buffers; laid out in the "compute.workspace" slot.
  OffloadWorkspace ws_{};
  std::vector<double> slab_sumsq_;  // per slab (embed, blocks, final), written by sumsq tasks
  int64_t poison_step_ = -1;
  int32_t poison_block_ = -1;
};

// The actions that are not transfers (Note [One action per kind]): offload_actions.cpp (compute)
// and offload_actions_host.cpp (gradients, the norm, the optimizer, the net queue).
#define STRATA_ACTION(kind) \
  template <>               \
  Status OffloadActions::act<TaskKind::kind>(const BoundPlan& bp, const Task& t)
STRATA_ACTION(grad_zero);
STRATA_ACTION(embed_forward);
STRATA_ACTION(block_forward);
STRATA_ACTION(head_loss);
STRATA_ACTION(block_backward);
STRATA_ACTION(embed_backward);
STRATA_ACTION(grad_accumulate);
STRATA_ACTION(grad_sumsq);
STRATA_ACTION(grad_norm);
STRATA_ACTION(block_step);
STRATA_ACTION(embed_step);
STRATA_ACTION(grad_allreduce);
STRATA_ACTION(grad_reduce_scatter);
STRATA_ACTION(param_allgather);
STRATA_ACTION(norm_allreduce);
STRATA_ACTION(param_gather);
STRATA_ACTION(grad_reduce_scatter_device);
STRATA_ACTION(param_allgather_device);
STRATA_ACTION(grad_allreduce_device);

}  // namespace strata
