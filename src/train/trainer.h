// The one interface `strata train` (and the tests, checkpoints and export) train through
// (docs/design.md §1): the in-memory trainer (the numerical reference) and the offloaded trainer
// (horizontal and vertical plans) implement it, and create_trainer picks one from the config.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/config.h"
#include "core/status.h"
#include "dist/communicator.h"
#include "dist/peer_transport.h"
#include "model/layout.h"
#include "model/slab_piece.h"
#include "model/state_snapshot.h"

namespace strata {

// Note [Precision modes]
// train.precision chooses the element type of the *working weights*, the copy forward and backward
// read; masters, m, v, gradients, activations and all arithmetic are f32 in both modes.
//  - f32 (default): the working weights are the master, bit for bit (in-memory: one buffer).
//  - bf16: the working weights, initial ones included, are the master rounded to nearest even
//    (f32_to_bf16); AdamW steps the f32 master and writes the bf16 copy in the same sweep
//    (adamw_step's param_bf16). The offloaded trainer stores and moves blocks' working weights
//    as bf16, widened into an f32 scratch of its workspace for compute; the embed group and the
//    in-memory trainer keep f32 holding the rounded values. Compute sees
//    bf16_to_f32(f32_to_bf16(master)) in every trainer.
// train.matmul bf16 (needs precision bf16): Note [bf16 GEMMs] in model/block.h. read_params gives
// the working weights; slab pieces, and so checkpoints, carry the f32 master, and writing a slab
// re-derives its working weights from the master.

struct StepStats {
  int64_t step = 0;            // 0-based index of the optimizer step just taken
  double loss = 0;             // mean over the counted targets of all micro-batches of all ranks
  int64_t trained_tokens = 0;  // those targets (Note [Ignored targets] in core/targets.h)
  double grad_norm = 0;        // global L2 norm before clipping
  float lr = 0;
  bool skipped = false;  // non-finite gradient: no update was applied
  double seconds = 0;    // wall time of the whole step
  // Bytes the step read from and wrote to storage (0 when nothing is on storage).
  int64_t storage_read_bytes = 0, storage_write_bytes = 0;
};

class Trainer {
 public:
  virtual ~Trainer() = default;

  // ---- training -----------------------------------------------------------------------------
  // inputs, targets: (grad_accum, B, T) host int32. One optimizer step (a schedule may leave
  // part of it pending until the next call or finish()). A failure stops the run: the Status
  // names what failed (task, tensor, file).
  virtual Result<StepStats> train_step(const int32_t* inputs, const int32_t* targets) = 0;
  // Applies whatever the last step left pending. Idempotent.
  virtual Status finish() = 0;
  // Validation: the mean loss over `batches` (B, T) batches (inputs, targets: (batches, B, T)
  // host int32) under the working weights after the last step, by a forward pass alone. Pending
  // steps are applied first (finish); no optimizer state, gradient or step counter changes, so
  // a run that evaluates trains bit for bit as one that does not. A batch's loss is the mean
  // over its positions, in order, and the result the mean of the batches', in order: the same
  // bits whatever the schedule or placement (the same kernels on the same shapes).
  virtual Result<double> evaluate(const int32_t* inputs, const int32_t* targets,
                                  int64_t batches) = 0;

  // ---- state ----------------------------------------------------------------------------------
  // All working parameters, laid out as layout() (layout().total_elems floats), as f32 (bf16
  // mode: the rounded values, Note [Precision modes]); finish()es first.
  virtual Status read_params(float* host) = 0;
  // Checkpoints (formats/checkpoint.h): one slab's master weights and AdamW moments, in pieces of
  // the trainer's memory (Note [Slab pieces] in model/slab_piece.h). Reading finish()es first, so
  // the state is the one at the step boundary, and hands each piece to `take`. Writing has `fill`
  // fill each piece, keeps it as the master and moments, and derives the slab's working weights
  // from the master.
  // With state_sharded(), reading is a collective: every rank calls it for the same slabs in the
  // same order, and each is handed every rank's pieces.
  virtual Status read_slab_pieces(int64_t slab, const SlabPieceFn& take) = 0;
  virtual Status write_slab_pieces(int64_t slab, const SlabPieceFn& fill) = 0;
  // Whether each rank holds a shard of the optimizer state (Note [Sharded optimizer state] in
  // sched/schedule_spec.h): then read_slab_pieces is a collective.
  virtual bool state_sharded() const { return false; }
  // A sharded checkpoint's share of slab `slab` for rank `rank` of `ranks` (Note [Sharded
  // checkpoints] in formats/checkpoint_shards.h): pieces in increasing order that, with the other
  // ranks' shares, cover the slab exactly once. Never a collective. A rank's shard of a sharded
  // state is its share (then rank and ranks must be this trainer's: internal otherwise); of a
  // replicated slab, its ranks-th part (shard_range), cut from read_slab_pieces' pieces.
  virtual Status read_shard_pieces(int64_t slab, int rank, int ranks, const SlabPieceFn& take);
  // `take` handed only the part of each piece inside `share` (slab elements), and nothing of a
  // piece outside it: a share cut from pieces that may cross its ends. Refers to `take`.
  static SlabPieceFn clipped_to(Range share, const SlabPieceFn& take);
  // The same through whole-slab buffers, (slab numel) floats each: for tests and tools with
  // small models; a checkpoint of a large one goes piece by piece.
  Status read_slab_state(int64_t slab, float* master, float* m, float* v);
  Status write_slab_state(int64_t slab, const float* master, const float* m, const float* v);

  // ---- asynchronous checkpoints (optional) -----------------------------------------------------
  // The state at this step boundary for a checkpoint written by another thread while training
  // goes on (Note [Asynchronous checkpoints] in model/state_snapshot.h): pending steps stay
  // pending, and until the snapshot's gate is finished the trainer holds back each write of a
  // slab's state until the slab is captured. One snapshot at a time (internal while one is being
  // captured). The trainer must outlive the snapshot's reads. unavailable when this trainer
  // cannot: the caller then saves at a standstill (read_slab_pieces).
  virtual Result<StateSnapshot> begin_snapshot();

  // ---- progress and shape ---------------------------------------------------------------------
  virtual int64_t steps_done() const = 0;
  virtual int64_t adam_steps() const = 0;  // updates applied (skipped steps do not count)
  // After a resume: the step counters of the checkpoint (no step is left pending).
  virtual void set_progress(int64_t steps_done, int64_t adam_steps) = 0;
  virtual const ParamLayout& layout() const = 0;
  virtual int64_t tokens_per_step() const = 0;

  // ---- reporting (optional: the in-memory trainer has nothing to add) -------------------------
  // Lines for the run's log before step 1 (the plan's memory per tier, the store).
  virtual std::vector<std::string> describe() const { return {}; }
  // What a simulation predicts a step costs (seconds): speculating with a norm that does not clip,
  // waiting for the norm, and repairing a step that clips (Note [Choosing to speculate] in
  // train/speculation_policy.h); ignored by a trainer that never speculates.
  virtual void set_speculation_costs(double spec_s, double wait_s, double repair_s,
                                     const std::string& source) {}
  // Adds the last step's schedule-specific figures to its metrics line (docs/design.md §10).
  virtual void add_step_metrics(nlohmann::json& line, double iter_s) const {}
  // With tracing on, the next steps record timings and last_step_trace() is the last one as
  // Chrome-trace JSON; a trainer that records none answers unavailable.
  virtual void set_record_trace(bool on) {}
  virtual Result<nlohmann::json> last_step_trace() const;
};

// The trainer for cfg.schedule on `dev`, one rank of `world` (cfg.ranks of them; Note [Data
// parallel ranks] in dist/communicator.h), which must outlive it: errors name the budget or
// setting at fault.
// device_transport: the ranks' collectives run in device memory (create_configured_transport;
// the in-memory schedule all-reduces its gradient there, the offloaded ones move only each rank's
// shards between host and device, Note [ZeRO-3 on the device] in schedule_spec.h); null: in host
// memory.
Result<std::unique_ptr<Trainer>> create_trainer(
    Device& dev, const TrainConfig& cfg, Communicator& world = single_process_world(),
    std::unique_ptr<PeerTransport> device_transport = nullptr);

// OK when cfg.ranks is world's size; else invalid_argument naming both. Both trainers ask it.
Status check_world(const TrainConfig& cfg, const Communicator& world);

// Note [Ignored targets] (core/targets.h): the counted targets of a step, this rank's `n`
// (micro-batches x B x T) summed over every rank. Both trainers ask it.
Result<int64_t> step_counted_targets(Communicator& world, const int32_t* targets, int64_t n);

// Whether dev can run cfg's GEMMs (Note [bf16 GEMMs] in model/block.h): bf16 ones need bf16
// working weights (check_matmul_needs_bf16_weights) and the device's bf16_matmul. Both trainers
// ask it.
Status check_matmul_precision(const Device& dev, const TrainConfig& cfg);

// The device cfg.device names ("cpu", "cuda"), with memory.device_bytes as its budget, for the
// rank that is `local_rank` among its machine's (Communicator::local_rank): on a machine of
// several GPUs each rank takes its own (local_rank modulo the GPUs present). unavailable with one
// line naming why when it cannot run here (no GPU, built without CUDA).
Result<std::unique_ptr<Device>> create_configured_device(const TrainConfig& cfg,
                                                         int local_rank = 0);

// What moves the ranks' gradients between their device memories (Note [Collectives on device
// memory] in dist/device_collectives.h), for create_trainer: NCCL on CUDA, MPI on the CPU
// devices; null where the sum is taken on the host: one rank, where wants_device_collectives
// says no, or where some rank cannot (built without NCCL, fewer GPUs than ranks on a machine;
// logged with the reason). Every rank takes the same choice (they agree on it), and every rank
// calls this at the same point. invalid_argument naming `collectives` when "device" is asked
// for and cannot be had.
Result<std::unique_ptr<PeerTransport>> create_configured_transport(const TrainConfig& cfg,
                                                                   Device& dev,
                                                                   Communicator& world);

}  // namespace strata
