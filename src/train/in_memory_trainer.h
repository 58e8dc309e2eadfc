// The in-memory schedule: parameters, gradients, optimizer state and every activation on the
// device. The numerical reference every offloaded schedule is compared with. A flat, readable
// training step (llm.c style): zero grads; per micro-batch forward + backward; global norm;
// clip; AdamW; all in a fixed order, so two runs give the same bits. With train.precision bf16
// the f32 master weights are a buffer of their own and the working params hold their bf16
// rounding (Note [Precision modes] in train/trainer.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/config.h"
#include "dist/device_collectives.h"
#include "io/io_engine.h"
#include "model/gpt.h"
#include "model/layout.h"
#include "optim/lr_schedule.h"
#include "train/trainer.h"

namespace strata {

class InMemoryTrainer final : public Trainer {
 public:
  // Allocates everything on `dev` (errors name the budget) and initialises the parameters from
  // cfg.seed. `world` has cfg.ranks ranks (Note [Data parallel ranks] in dist/communicator.h) and
  // must outlive the trainer. With device_transport the ranks' gradients are summed in device
  // memory (Note [Collectives on device memory] in dist/device_collectives.h), else on the host.
  static Result<std::unique_ptr<InMemoryTrainer>> create(
      Device& dev, const TrainConfig& cfg, Communicator& world = single_process_world(),
      std::unique_ptr<PeerTransport> device_transport = nullptr);
  ~InMemoryTrainer() override;

  // Trainer. One whole optimizer step per call; nothing is ever left pending.
  Result<StepStats> train_step(const int32_t* inputs, const int32_t* targets) override;
  Status finish() override { return Status::ok_status(); }
  // gpt_forward per batch through the step's activations, which the next step overwrites.
  Result<double> evaluate(const int32_t* inputs, const int32_t* targets, int64_t batches) override;
  Status read_params(float* host) override;
  // Pieces of at most kPieceElems through host buffers, since the state is the device's.
  Status read_slab_pieces(int64_t slab, const SlabPieceFn& take) override;
  Status write_slab_pieces(int64_t slab, const SlabPieceFn& fill) override;
  int64_t steps_done() const override { return steps_done_; }
  int64_t adam_steps() const override { return adam_steps_; }
  void set_progress(int64_t steps_done, int64_t adam_steps) override {
    steps_done_ = steps_done;
    adam_steps_ = adam_steps;
  }
  const ParamLayout& layout() const override { return layout_; }
  // With several ranks: where their gradients are summed.
  std::vector<std::string> describe() const override;
  // With several ranks: grad_sum_s, the last step's seconds in all_reduce_grads (moving and
  // adding, and waiting for the other ranks to arrive).
  void add_step_metrics(nlohmann::json& line, double iter_s) const override;
  int64_t tokens_per_step() const override {
    return cfg_.batch_size * cfg_.seq_len * cfg_.grad_accum;
  }

  // Pieces of a step, for tests: zero grads, then forward+backward of one (B, T) micro-batch
  // accumulating gradients scaled by dloss; returns the micro-batch's mean loss.
  void zero_grads();
  // micro_batch: this step's k-th of this rank (Note [Adapter dropout] counts over all ranks).
  double forward_backward(const int32_t* inputs, const int32_t* targets, float dloss,
                          int64_t micro_batch = 0);
  // The forward alone: the micro-batch's mean loss, activations left for a backward.
  double forward_loss(const int32_t* inputs, const int32_t* targets,
                      const LoraDropoutAt* drop = nullptr);

  // Host copies of device state, (layout.total_elems) floats each; logits (B, T, V).
  // write_params sets the master weights and derives the working params from them (bf16 mode:
  // rounded); read_params (above) gives the working params.
  void write_params(const float* host);
  void read_grads(float* host) const;
  void read_logits(float* host) const;

 private:
  Status slab_pieces(int64_t slab, IoOp op, const SlabPieceFn& fn);
  InMemoryTrainer(Device& dev, const TrainConfig& cfg, Communicator& world);
  // With several ranks, the gradients summed over them: on the device with device_sum_, else
  // through a host copy (Note [Collectives on device memory]; the same bits).
  Status all_reduce_grads();
  double global_grad_sum_squares();
  Status apply_adamw(float lr, float grad_scale);
  // The f32 master weights: params_ itself in f32 mode, master_ in bf16 mode.
  float* master() const { return bf16_ ? master_.f32() : params_.f32(); }
  // bf16 mode: params = bf16_round(master) over elements [lo, hi) of the layout.
  void round_working_params(int64_t lo, int64_t hi);

  Device& dev_;
  Communicator& world_;
  TrainConfig cfg_;
  ParamLayout layout_;
  LrSchedule schedule_;
  std::unique_ptr<Stream> stream_;
  bool bf16_ = false;  // train.precision bf16
  // AdamW and the bf16 rounding run on the device's stream (Capability::device_adamw: a device
  // whose memory the host cannot address, Note [The discrete CPU device]) rather than on the
  // host over the device's memory (the CPU device). The same bits either way.
  bool on_device_ = false;
  Buffer params_;       // (total_elems) f32 working params (bf16 mode: bf16-rounded values)
  Buffer master_;       // (total_elems) f32 master weights, bf16 mode only (f32: params_)
  Buffer grads_;        // (total_elems) f32
  Buffer adam_m_;       // (total_elems) f32
  Buffer adam_v_;       // (total_elems) f32
  Buffer acts_buf_;     // gpt_acts_floats
  Buffer tokens_;       // (2, B, T) int32: inputs then targets
  Buffer slab_sumsq_;   // (n_slabs) f64
  Buffer losses_host_;  // (B, T) f32
  std::vector<float> grads_host_;  // (total_elems) f32, several ranks summing on the host only
  std::unique_ptr<DeviceCollectives> device_sum_;  // several ranks summing on the device only
  Buffer rope_;  // (seq_len, hs/2, 2) Llama's cos/sin table; empty for GPT-2
  // (total_elems) bf16: the working params as bf16 (bf16 mode, on_device_ or with bf16 GEMMs),
  // the rounding's scratch and the GEMMs' weights.
  Buffer bf16_buf_;
  // train.matmul bf16 (Note [bf16 GEMMs] in model/block.h): the blocks' GEMM operands, and the
  // BlockGemm over bf16_buf_ and params_ that gpt_forward/gpt_backward take; null gemm_ in f32.
  Buffer gemm_scratch_;  // (block_gemm_scratch_elems) bf16
  BlockGemm gemm_storage_{};
  const BlockGemm* gemm_ = nullptr;
  GptActs acts_;
  double last_grad_sum_s_ = 0;  // all_reduce_grads' time in the last step
  int64_t steps_done_ = 0;
  int64_t adam_steps_ = 0;  // updates applied; skipped steps do not advance bias correction
};

}  // namespace strata
