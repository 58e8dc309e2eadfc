// The offloaded schedules (horizontal: ZeRO-Infinity's order; vertical: GreedySnake) trained for
// real: a plan from schedule_horizontal.h / schedule_vertical.h, checked against the tier budgets
// before step 1, its slots given memory (device buffers, pinned host buffers, extents of one
// striped store over io.dirs), each task bound to an action, and the executor running it.
// docs/design.md §2-§5, §8, §10.
//
// What lives where
//  - each block's working params (train.precision f32: the master weights themselves; bf16: the
//    master rounded to bf16, 2 bytes per element, widened to f32 in the compute workspace before
//    the block computes; Note [Precision modes] in trainer.h), and its AdamW state (master, m, v
//    per optimizer part, Note [Optimizer split]) on host or storage, by the offload.* fractions;
//  - block-input checkpoints on host or storage (vertical: first and last two micro-batches of a
//    block always on host);
//  - the embedding group (wte, wpe, final LayerNorm) on the device as f32 (bf16 mode: holding
//    the master's bf16 rounding), its AdamW state on host or storage (offload.embed_optim_on_host);
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
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "core/config.h"
#include "dist/device_collectives.h"
#include "io/host_buffer.h"
#include "io/io_engine.h"
#include "io/tensor_store.h"
#include "model/block.h"
#include "model/layout.h"
#include "optim/lr_schedule.h"
#include "sched/executor.h"
#include "train/offload_workspace.h"
#include "sched/plan.h"
#include "sched/schedule_spec.h"
#include "train/speculation_policy.h"
#include "train/trainer.h"

namespace strata {

// The plan inputs for a config (exposed for tests, the planner and the fit check).
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

ScheduleSpec offload_schedule_spec(const Device& dev, const TrainConfig& cfg, bool pending_steps,
                                   bool iteration);
// Makes the plan of an offloaded schedule (horizontal or vertical).
Plan make_offload_plan(const ScheduleSpec& spec, Schedule schedule);

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
  std::vector<std::string> scratch_files() const override { return store_files(); }
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
  int64_t steps_done() const override { return steps_done_; }
  int64_t adam_steps() const override { return adam_steps_; }
  void set_progress(int64_t steps_done, int64_t adam_steps) override {
    steps_done_ = steps_done;
    adam_steps_ = adam_steps;
    pending_ = Pending::none;
  }
  const ParamLayout& layout() const override { return layout_; }
  bool state_sharded() const override { return sharded(); }
  int64_t tokens_per_step() const override {
    return cfg_.batch_size * cfg_.seq_len * cfg_.grad_accum;
  }
  std::vector<std::string> describe() const override;
  // Per-step bytes per direction, busy seconds per resource, and the roofline (docs/design.md
  // §10).
  void add_step_metrics(nlohmann::json& line, double iter_s) const override;
  void set_record_trace(bool on) override { record_trace_ = on; }
  // Note [Ordering by events]: on a discrete device a device task's span in the trace is its
  // issue, not its work. With this on, every device task also synchronises its stream before it
  // ends (still ordered by events), so its span is its work, as on the CPU device: what `strata
  // profile` measures a GPU with. Slower (no queueing ahead on a stream); off by default.
  void set_time_device_tasks(bool on) { time_device_tasks_ = on; }
  Result<nlohmann::json> last_step_trace() const override;

  // The plan of the last step, and its execution report (timings when tracing is on).
  const Plan& last_plan() const;
  const ExecutionReport& last_report() const { return last_report_; }
  // Bytes of each tier the plans hold (device, host, storage): the fit the budgets were checked
  // against.
  std::array<int64_t, kTierCount> planned_bytes() const { return planned_bytes_; }
  // Where the store lives ("" when nothing is on storage).
  std::string store_description() const;
  // Vertical with clipping on and alpha < 1 (Note [Speculative steps]): the policy choosing per
  // step, and what the last step did. Costs for the policy from a simulation (planner).
  void set_speculation_costs(double spec_s, double wait_s, double repair_s,
                             const std::string& source) override {
    policy_.set_costs(spec_s, wait_s, repair_s, source);
  }
  bool speculates() const { return speculative_; }
  enum class StepMode : uint8_t { plain, speculated, repaired, waited };
  StepMode last_step_mode() const { return last_mode_; }
  // For tests of skipping: the gradient of block `block` gets a NaN on step `step` (0-based),
  // just before its sum of squares, so every step that reads it sees it.
  void poison_gradient_for_test(int64_t step, int32_t block) {
    poison_step_ = step;
    poison_block_ = block;
  }

 private:
  struct SlotMemory;
  struct BoundPlan;
  struct StepState {
    float lr = 0;
    int64_t adam_step = 0;  // 1-based AdamW step count of the update being applied
    float grad_scale = 1;   // clip factor
    bool skip = false;      // non-finite norm: no update
  };

  OffloadTrainer(Device& dev, const TrainConfig& cfg, Communicator& world);
  // Note [Sharded optimizer state]: with several ranks, each holds a shard of the blocks' state.
  bool sharded() const { return world_.size() > 1; }
  // And the horizontal schedule keeps only this rank's shard of each block's gradient.
  bool grads_sharded() const { return sharded() && !vertical_; }
  // Block element `at` of a kept block gradient `g`: (block elems), or when sharded this rank's
  // shard only, starting at the shard's first element.
  const float* kept_grad_at(const float* g, int64_t at) const {
    return grads_sharded() ? g + (at - owned_part(-1).begin) : g + at;
  }
  // The plans this run may use (PlanKey), built and checked.
  std::vector<PlanKey> plan_keys() const;
  Status build(const PlanKey& key, BoundPlan& out);
  BoundPlan& plan_for(const PlanKey& key) const;
  // The next iteration's plan, given what is pending and whether it defers part 0.
  PlanKey iteration_key(bool defer_part0) const;
  // Note [Speculative steps]: validates the speculative part 0 of the step just run (repairing it
  // when the norm clipped or was not finite), then makes optim.spec the state.
  Status settle_speculation(double& repair_s);
  void adopt_speculative_state();
  // Whether the next run's writes of slot m finish the last step's pending updates.
  bool pending_write(const SlotMemory& m) const;
  // activations.policy "auto": per block keep / offload / recompute, logged with the reasons.
  Status decide_activation_policy();
  double measure_block_forward_s();
  Status allocate_slots();
  Status initialize_state();
  // Runs a plan; an iteration's report (and trace) becomes last_report, a plan that finishes
  // or repairs a step (`iteration` false: the flush, the repair) leaves the step's in place.
  Status run(BoundPlan& bp, bool iteration = true);
  // A step's bytes on `r`: its iteration plan's, and the repair plan's when it ran
  // (Note [Speculative steps]).
  int64_t step_bytes_on(const BoundPlan& bp, Resource r) const;
  // Task `task`'s action: its kind's action (bind_kind), wrapped in run_ordered on a device
  // that orders by events (Note [Ordering by events]).
  TaskAction bind(const BoundPlan& bp, int32_t task);
  TaskAction bind_kind(const BoundPlan& bp, int32_t task);
  // Note [Ordering by events]: before the action, the events of the task's direct predecessors
  // on other device streams are waited by its stream (a device task) or by the host (a host
  // task); after it, the task's own event is recorded on its stream.
  Status run_ordered(const BoundPlan& bp, int32_t task, const TaskAction& action);
  // bp's edges and one event per task, after its slots are bound.
  Status prepare_events(BoundPlan& bp);
  // The end of a device task's action on stream s: synchronise s, unless the device orders by
  // events (then run_ordered records the task's event instead).
  void end_task(Stream& s);
  // The stream a resource's tasks enqueue on; null for the host resources (storage, cpu_optim,
  // net).
  Stream* stream_of(Resource r) const;
  // Actions, one per task kind (offload_actions.cpp).
  Status do_transfer(const BoundPlan& bp, const Task& t);
  Status do_grad_zero(const BoundPlan& bp, const Task& t);
  Status do_embed_forward(const BoundPlan& bp, const Task& t);
  Status do_block_forward(const BoundPlan& bp, const Task& t);
  Status do_head_loss(const BoundPlan& bp, const Task& t);
  // The head's forward on the compute stream: final LayerNorm of x ((B, T, C), device), logits
  // through the tied wte of `embed` (the embed group's params), per-position losses against
  // `targets` ((B, T) device int32) into ws_.losses. Training's head and validation share it.
  void head_forward(const float* x, float* embed, const int32_t* targets);
  Status do_block_backward(const BoundPlan& bp, const Task& t);
  Status do_embed_backward(const BoundPlan& bp, const Task& t);
  Status do_grad_accumulate(const BoundPlan& bp, const Task& t);
  Status do_grad_sumsq(const BoundPlan& bp, const Task& t);
  Status do_grad_norm(const BoundPlan& bp, const Task& t);
  Status do_block_step(const BoundPlan& bp, const Task& t);
  Status do_embed_step(const BoundPlan& bp, const Task& t);
  Status do_grad_allreduce(const BoundPlan& bp, const Task& t);
  Status do_grad_reduce_scatter(const BoundPlan& bp, const Task& t);
  Status do_grad_reduce_scatter_device(const BoundPlan& bp, const Task& t);
  Status do_param_allgather_device(const BoundPlan& bp, const Task& t);
  Status do_grad_allreduce_device(const BoundPlan& bp, const Task& t);
  Status device_collective(const Task& t, const std::function<Status(DeviceCollectives&)>& body);
  Status do_param_allgather(const BoundPlan& bp, const Task& t);
  Status do_param_gather(const BoundPlan& bp, const Task& t);
  Status do_norm_allreduce(const BoundPlan& bp, const Task& t);
  Status step_block_part(const BoundPlan& bp, const Task& t, const StepState& st);
  // The memory of the task's slot in `role` (null when it has none), and its micro-batch's
  // tokens (inputs, then targets at + B*T).
  float* f32_of(const BoundPlan& bp, const Task& t, Role role) const;
  // The f32 weights a block task computes with: its params slot (f32 mode), or that slot's bf16
  // widened into the workspace on the compute stream (bf16 mode).
  float* block_weights(const BoundPlan& bp, const Task& t);
  // With train.matmul bf16, the BlockGemm over a block's bf16 working weights (its params slot)
  // and block_weights' widening of them (Note [bf16 GEMMs] in model/block.h); else nullopt.
  std::optional<BlockGemm> block_gemm(const void* bf16_weights) const;
  // A block's working params (params.store.blkL) from its f32 master, and back as f32: the
  // master itself (staged through idle_block_stage), or in bf16 mode its rounding (through
  // bf16_stage_; Note [Precision modes]).
  Status write_block_params(int64_t block, const float* master);
  Status read_block_params(int64_t block, float* out);
  // write_block_params in pieces: elements [lo, lo + count) of a block's master into the stage,
  // then the whole staged block out.
  void stage_block_params(int64_t lo, const float* master, int64_t count);
  Status flush_block_params(int64_t block);
  // Part `part` (-1: all) of a block's params store from or to `stage` (the block's f32 or bf16
  // params, in its layout): with one rank the part's range; with several this rank's ranges,
  // and a read then gathers every rank's shard (Note [Sharded working params]: a collective).
  Status params_store_io(IoOp op, int64_t block, void* stage, int32_t part = -1);
  // Where element `lo` of task t's part lands in its params slot: at lo in the block's layout,
  // or in a sharded host store's packed ranges (Note [Shard ranges in a store]); null when this
  // rank's ranges do not hold it.
  char* params_at(const BoundPlan& bp, const Task& t, int64_t lo) const;
  // Part `part` of a block's working params as its all-gathers see it (on host or device): its
  // first byte in the block's layout, its elements, their width (Note [Precision modes]).
  struct ParamsPart {
    int64_t at = 0, count = 0, width = 0;
  };
  ParamsPart params_part(int32_t part) const;
  // Every rank's shard of part `part` of a block's working params at `params` (the block's).
  Status gather_params(void* params, int32_t part);
  const int32_t* tokens_of(const BoundPlan& bp, const Task& t) const;
  void* slot_ptr(const BoundPlan& bp, int32_t slot) const;
  StepState early_step_state() const;
  // BlockActs whose saved set lives at `saved` (a plan slot), forward-only tensors in the
  // workspace.
  BlockActs saved_view(float* saved) const;
  // An optimizer part of a block (-1: all of it) and this rank's shard of it (Note [Sharded
  // optimizer state] in schedule_spec.h; one rank: the whole part).
  PartShard owned_part(int32_t part) const { return rank_shard(part, world_.rank()); }
  PartShard rank_shard(int32_t part, int rank) const {
    return part_shard(block_elems_, split_elems_, part, world_.size(), rank);
  }
  // Element range [first, second) of the embed group an embed step covers (-1: all of it).
  std::pair<int64_t, int64_t> embed_chunk_range(int32_t chunk) const;
  // Whole-slot access by name outside plans (initial state, read_params).
  Status write_slot(const std::string& name, int64_t offset, const void* src, int64_t bytes);
  Status read_slot(const std::string& name, int64_t offset, void* dst, int64_t bytes);
  // Block state parts: the slot names of a block's optimizer state ("optim.store.blkL" or its
  // ".p0"/".p1"), with their part numbers.
  std::vector<std::pair<std::string, int32_t>> optim_parts(int64_t block) const;
  // One block's f32 worth of host memory that no plan uses between steps (a gradient slot or
  // stage), for the state moved outside plans; never an optimizer stage, which the same moves
  // use beside it.
  float* idle_block_stage();
  // The plan's slot idle_block_stage uses (null when none holds a block), and the spare it
  // uses otherwise, allocated by initialize_state before any use.
  float* plan_block_stage();
  Status ensure_idle_block_stage();
  // Elements [at, at + elems) of the embed group's (3, E) optimizer state to or from `data`,
  // wherever the state lives (through idle_block_stage on storage).
  Status embed_state_io(IoOp op, int64_t at, float* data, int64_t elems);
  // The embed group's elements [lo, lo + len) of master, m and v to or from `stage`, laid out
  // (3, len), with the state on storage.
  Status embed_chunk_io(IoOp op, int64_t lo, int64_t len, float* stage);
  // read_slab_pieces / write_slab_pieces of the embedding or the final norm slab; state on
  // storage goes through `stage` ((3, chunk) f32). A read hands over at least the slab elements
  // in `within`: on storage, only the chunks that hold some of them are read.
  Status embed_slab_pieces(IoOp op, int64_t slab, float* stage, const SlabPieceFn& fn,
                           Range within = {0, INT64_MAX});
  // A slab's state as it is now, in pieces, state on storage read through `stage` (an optimizer
  // stage's bytes): read_slab_pieces after finish(), and the snapshot's reads. Of a sharded
  // block, every rank's shard (a collective: each broadcast by its owner), or with
  // Shards::own_only this rank's alone.
  enum class Shards { every_rank, own_only };
  Status state_pieces(int64_t slab, float* stage, const SlabPieceFn& take,
                      Shards shards = Shards::every_rank);
  // Optimizer stage 0, which stages the trainer's own state I/O between steps (null when no
  // state is on storage).
  float* optim_stage0();
  // The actions of `bp` with the snapshot's gate around the tasks that write a slab's state
  // (Note [Asynchronous checkpoints]); bp.actions when no snapshot is being captured.
  std::vector<TaskAction> gated_actions(const BoundPlan& bp);
  // The store's files, "dir/strata.store" (or a later instance's name) per directory; none
  // without a store.
  std::vector<std::string> store_files() const;
  // One storage transfer, waited; errors name the tensor and the file.
  Status store_io(const SlotMemory& m, IoOp op, int64_t offset, void* host, int64_t bytes);

  Device& dev_;
  Communicator& world_;  // the ranks gradients and losses are summed over
  TrainConfig cfg_;
  ParamLayout layout_;
  LrSchedule schedule_;
  BlockDims dims_{};
  bool vertical_ = false;
  bool bf16_ = false;  // train.precision bf16: params slots hold bf16 (Note [Precision modes])
  int64_t block_elems_ = 0, split_elems_ = 0, embed_elems_ = 0;
  int64_t embed_chunk_elems_ =
      0;  // the embed step's chunk on storage (Note [Optimizer stage size])
  // The shapes shard ranges are cut by, this rank's (Note [Shard ranges in a store]).
  ScheduleSpec shard_spec_{};

  std::unique_ptr<Stream> compute_, h2d_, d2h_;
  // device_collectives: the collectives on device memory, and the stream their moves and adds run
  // on (a net task is a host task: it waits for its stream before it returns).
  std::unique_ptr<DeviceCollectives> device_sum_;
  std::unique_ptr<Stream> net_stream_;
  // Note [Ordering by events]
  // On the CPU device every device task synchronises its stream before its action returns, so a
  // task's span in the trace is its work and the profile times real work (strata profile). A
  // discrete device (cpu-discrete, a GPU) orders work as a GPU wants it: a device task enqueues
  // its work and records its event (one per task of each plan, BoundPlan::done) without waiting;
  // before enqueueing, its stream waits the events of its direct predecessors on other device
  // streams (queue order on its own stream is the stream's order). A host task (storage I/O, the
  // CPU optimizer) synchronises the events of its direct device predecessors before it runs. That
  // is exactly the plan's happens-before (Note [Happens-before in plans]): a path through a host
  // task is waited on the host, a path between streams by the stream, and the direct edges carry
  // the closure. The executor's completion contract then reads "issued, with its completion
  // event recorded" for device tasks; run() synchronises the three streams when the executor
  // returns, on success and failure, before anything on the host reads what they wrote. The cost
  // on this device: a trace's device spans are issue times, not work.
  bool order_by_events_ = false;
  bool time_device_tasks_ = false;  // set_time_device_tasks
  std::unique_ptr<IoEngine> engine_;
  std::unique_ptr<TensorStore> store_;
  std::unordered_map<std::string, std::unique_ptr<SlotMemory>> memory_;  // by slot name
  std::vector<std::unique_ptr<BoundPlan>> plans_;                        // one per plan_keys()
  BoundPlan* last_ = nullptr;
  std::array<int64_t, kTierCount> planned_bytes_{};
  std::vector<ActPolicy> acts_policy_;  // per block (vertical with saved activations)

  // Compute workspace (device): activations of one block for one micro-batch, backward scratch,
  // the head's buffers; laid out in the "compute.workspace" slot.
  OffloadWorkspace ws_{};

  HostBuffer spare_stage_;  // idle_block_stage when no plan slot serves
  // Sharded state read or written outside plans: (3, stride) of another rank's shard of a part.
  std::vector<float> shard_stage_;
  // bf16 mode: (block elems) bf16 on host, whole direct-I/O blocks; stages a block's working
  // params between the caller and params.store.blkL outside plans (initial state, read_params,
  // write_slab_pieces). Owned here rather than borrowed from an idle plan slot, so it does not
  // depend on which slots a plan has; 2 bytes per element of one block beyond the plan's peak.
  Buffer bf16_stage_;

  // Note [Asynchronous checkpoints]: the snapshot being captured (null or finished: none);
  // whether the next run's writes of part-1 state finish the previous step's pending updates
  // (they make slabs ready rather than wait for them); the checkpoint thread's stage.
  std::shared_ptr<SnapshotGate> snapshot_;
  bool snapshot_pending_writes_ = false;
  Buffer snapshot_stage_;
  // (context_length, hs/2, 2) Llama's rotary cos/sin table on the device, outside the plan's
  // slots (a constant of the model, a few KiB to MiB); empty for GPT-2.
  Buffer rope_;

  std::vector<double> slab_sumsq_;  // per slab (embed, blocks, final), written by sumsq tasks
  StepState state_;                 // of the last norm: what pending and post-norm steps apply
  int64_t steps_done_ = 0;
  int64_t adam_steps_ = 0;  // updates applied
  double last_norm_sumsq_ = 0;
  Pending pending_ = Pending::none;  // vertical: steps of the last iteration not applied yet
  // Vertical, clipping on, alpha < 1: part 0 may speculate (Note [Speculative steps]).
  bool speculative_ = false;
  SpeculationPolicy policy_{Speculation::automatic};
  StepMode last_mode_ = StepMode::plain;
  int64_t poison_step_ = -1;
  int32_t poison_block_ = -1;
  bool record_trace_ = false;
  float dloss_ = 0;
  ExecutionReport last_report_;
};

}  // namespace strata
