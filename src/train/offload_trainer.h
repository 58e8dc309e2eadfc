// The offloaded schedules (horizontal: ZeRO-Infinity's order; vertical: GreedySnake) trained for
// real: plans from train/offload_spec.h, checked against the tier budgets before step 1, their
// slots given memory (OffloadState), each task bound to its action (OffloadActions), and the
// executor running them. This class is the step loop around them: which plan runs, speculation
// and its repair, snapshots for checkpoints, validation, metrics. docs/design.md §2-§5, §8, §10.
//
// What lives where
//  - each block's working params (train.precision f32: the master weights themselves; bf16: the
//    master rounded to bf16, widened to f32 in the compute workspace before the block computes;
//    Note [Precision modes] in trainer.h), and its AdamW state (master, m, v per optimizer part,
//    Note [Optimizer split]) on host or storage, by the offload.* fractions;
//  - block-input checkpoints on host or storage (vertical: first and last two micro-batches of a
//    block always on host);
//  - the embedding group (wte, wpe, final norm) on the device as f32 (bf16 mode: holding the
//    master's bf16 rounding), its AdamW state on host or storage (offload.embed_optim_on_host);
//  - gradients: accumulated on the device per block (vertical) or on host per micro-batch
//    (horizontal), then kept per block until stepped, on host or storage (offload.grads_on_host).
//
// Exactness: every step sees the global gradient norm (clipping and skipping exactly as the
// in-memory trainer). With optim.alpha < 1 the backward part of a step runs before the norm is
// known: with clipping on it is speculative, validated and repaired when the norm clips (Note
// [Speculative steps] in schedule_spec.h); with clipping off a non-finite gradient stops
// training with an error instead of being skipped inexactly. Placement never changes a bit: the
// same plan shape runs the same kernels in the same order whatever tier a slot is on.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/config.h"
#include "dist/communicator.h"
#include "sched/executor.h"
#include "sched/plan.h"
#include "train/offload_actions.h"
#include "train/offload_shape.h"
#include "train/offload_spec.h"
#include "train/offload_state.h"
#include "train/speculation_policy.h"
#include "train/trainer.h"

namespace strata {

class OffloadTrainer final : public Trainer {
 public:
  // Builds and checks the plans (a plan that does not fit the memory.* budgets is refused here,
  // invalid_argument with the numbers and what to change), allocates every slot, creates the
  // store in io.dirs (no_space naming the directory when it cannot hold the state) and writes
  // the initial parameters and zeroed optimizer state.
  // `world` has cfg.ranks ranks (Note [Data parallel ranks] in dist/communicator.h) and must
  // outlive the trainer. With device_transport (and several ranks) the plans' collectives run in
  // device memory (ScheduleSpec::device_collectives, Note [ZeRO-3 on the device]).
  static Result<std::unique_ptr<OffloadTrainer>> create(
      Device& dev, const TrainConfig& cfg, Communicator& world = single_process_world(),
      std::unique_ptr<PeerTransport> device_transport = nullptr);
  ~OffloadTrainer() override;
  OffloadTrainer(const OffloadTrainer&) = delete;
  OffloadTrainer& operator=(const OffloadTrainer&) = delete;

  // Trainer. A storage error or a failed task stops the run: the Status names the task, the
  // tensor and the file. The vertical schedule leaves part-1 steps pending (finish applies them).
  Result<StepStats> train_step(const int32_t* inputs, const int32_t* targets) override;
  Status finish() override;
  // Block by block over every batch, each block's working weights read once (offload_eval.cpp).
  Result<double> evaluate(const int32_t* inputs, const int32_t* targets, int64_t batches) override;
  Status read_params(float* host) override;
  // Pieces (Note [Slab pieces]): a block's optimizer parts, each in its host slot or read into
  // optimizer stage 0; the embed group's slabs straight from its state on host, or on storage
  // chunk by chunk through optimizer stage 0 (the chunks of Note [Embed step in chunks]).
  Status read_slab_pieces(int64_t slab, const SlabPieceFn& take) override;
  Status write_slab_pieces(int64_t slab, const SlabPieceFn& fill) override;
  // A block's sharded state: this rank's shard of each part, read here (no collective).
  Status read_shard_pieces(int64_t slab, int rank, int ranks, const SlabPieceFn& take) override;
  // Note [Asynchronous checkpoints]: the checkpoint thread reads state on host in place and
  // state on storage through a stage of its own (one optimizer stage's bytes, kept for the run);
  // unavailable when any optimizer state is on the device.
  Result<StateSnapshot> begin_snapshot() override;
  // Note [Host memory beside the plan]: counts the host buffers outside the plan's slots and
  // reserves the snapshot stage where memory.host_bytes holds it.
  // host_before: the device's host bytes in use before this trainer allocated any.
  Status reserve_host_beside_plan(int64_t host_before);
  int64_t steps_done() const override { return progress_.steps_done; }
  int64_t adam_steps() const override { return progress_.adam_steps; }
  void set_progress(int64_t steps_done, int64_t adam_steps) override {
    progress_.steps_done = steps_done;
    progress_.adam_steps = adam_steps;
    pending_ = Pending::none;
  }
  const ParamLayout& layout() const override { return shape_.layout; }
  bool state_sharded() const override { return shape_.sharded(); }
  int64_t tokens_per_step() const override {
    return shape_.tokens_per_micro_batch() * shape_.cfg.grad_accum;
  }
  std::vector<std::string> describe() const override;
  // Per-step bytes per direction, busy seconds per resource, and the roofline (docs/design.md
  // §10).
  void add_step_metrics(nlohmann::json& line, double iter_s) const override;
  void set_record_trace(bool on) override { record_trace_ = on; }
  Result<nlohmann::json> last_step_trace() const override;

  // The memory the plans hold (planned_bytes: the fit the budgets were checked against; the
  // store's description), and the actions (set_time_device_tasks for the profiler, the
  // gradient poisoning of tests of skipping).
  const OffloadState& state() const { return *state_; }
  OffloadActions& actions() { return *actions_; }

  // The plan of the last step, and its execution report (timings when tracing is on).
  const Plan& last_plan() const;
  const ExecutionReport& last_report() const { return last_report_; }
  // Vertical with clipping on and alpha < 1 (Note [Speculative steps]): the policy choosing per
  // step, and what the last step did. Costs for the policy from a simulation (planner).
  void set_speculation_costs(double spec_s, double wait_s, double repair_s,
                             const std::string& source) override {
    policy_.set_costs(spec_s, wait_s, repair_s, source);
  }
  enum class StepMode : uint8_t { plain, speculated, repaired, waited };
  StepMode last_step_mode() const { return last_mode_; }

 private:
  OffloadTrainer(Device& dev, const TrainConfig& cfg, Communicator& world);
  // The plan built for `key` (offload_plans.h: plans_ holds one per offload_plan_keys).
  BoundPlan& plan_for(const PlanKey& key) const;
  // Runs a plan; an iteration's report (and trace) becomes last_report, a plan that finishes
  // or repairs a step (`iteration` false: the flush, the repair) leaves the step's in place.
  Status run(BoundPlan& bp, bool iteration = true);
  // Note [Speculative steps]: validates the speculative part 0 of the step just run (repairing it
  // when the norm clipped or was not finite), then makes optim.spec the state.
  Status settle_speculation(double& repair_s);
  // After a run: what is pending, the speculation policy's record, the step's statistics.
  void record_speculation(bool defer, Pending pending_before, double run_s, double repair_s);
  Result<StepStats> step_stats(const BoundPlan& bp);
  // A step's bytes on `r`: its iteration plan's, and the repair plan's when it ran.
  int64_t step_bytes_on(const BoundPlan& bp, Resource r) const;
  // Note [Asynchronous checkpoints]: the actions of `bp` with the snapshot's gate around the
  // tasks that write a slab's state (bp.actions when no snapshot is being captured).
  std::vector<TaskAction> gated_actions(const BoundPlan& bp);

  Device& dev_;
  Communicator& world_;  // the ranks gradients and losses are summed over
  int64_t counted_ = 0;  // the step's counted targets, every rank's (Note [Ignored targets])
  OffloadShape shape_;
  OffloadStreams streams_;
  StepProgress progress_;
  std::unique_ptr<OffloadState> state_;
  std::unique_ptr<OffloadActions> actions_;
  std::vector<std::unique_ptr<BoundPlan>> plans_;  // one per offload_plan_keys(shape_)
  BoundPlan* last_ = nullptr;
  // (seq_len, hs/2, 2) Llama's rotary cos/sin table on the device, outside the plan's
  // slots (a constant of the model, a few KiB to MiB); empty for GPT-2.
  Buffer rope_;
  // Note [Asynchronous checkpoints]: the snapshot being captured (null or finished: none);
  // whether the next run's writes of part-1 state finish the previous step's pending updates
  // (they make slabs ready rather than wait for them); the checkpoint thread's stage.
  std::shared_ptr<SnapshotGate> snapshot_;
  bool snapshot_pending_writes_ = false;
  Buffer snapshot_stage_;
  bool snapshot_fits_ = true;        // false: memory.host_bytes has no room for snapshot_stage_
  Pending pending_ = Pending::none;  // vertical: steps of the last iteration not applied yet
  SpeculationPolicy policy_{Speculation::automatic};
  StepMode last_mode_ = StepMode::plain;
  bool record_trace_ = false;
  ExecutionReport last_report_;
};

}  // namespace strata
