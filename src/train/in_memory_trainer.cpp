#include "train/in_memory_trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/dtype.h"
#include "core/log.h"
#include "core/targets.h"
#include "model/init.h"
#include "model/rope.h"
#include "optim/adamw_layout.h"
#include "optim/grad_clip.h"

namespace strata {

InMemoryTrainer::InMemoryTrainer(Device& dev, const TrainConfig& cfg, Communicator& world)
    : dev_(dev), world_(world), cfg_(cfg), layout_(make_param_layout(cfg.model, cfg.lora)) {
  bf16_ = cfg.precision == Precision::bf16;
  schedule_ = LrSchedule{cfg.optim.lr, cfg.optim.warmup_steps, cfg.steps, cfg.optim.min_lr_ratio};
}

InMemoryTrainer::~InMemoryTrainer() {
  if (stream_) stream_->synchronize();  // no task may outlive the buffers it points into
}

Result<std::unique_ptr<InMemoryTrainer>> InMemoryTrainer::create(
    Device& dev, const TrainConfig& cfg, Communicator& world,
    std::unique_ptr<PeerTransport> device_transport) {
  STRATA_RETURN_IF_ERROR(check_world(cfg, world));
  std::unique_ptr<InMemoryTrainer> t(new InMemoryTrainer(dev, cfg, world));
  // The CPU device's memory is the host's: AdamW runs there directly. Any other device steps on
  // its own stream.
  t->on_device_ = !shares_host_memory(dev);
  if (t->on_device_ && !dev.supports(Capability::device_adamw)) {
    return unavailable("the in-memory schedule needs AdamW on the " + dev.name() +
                       " device, which it lacks (device_adamw)");
  }
  const int64_t n = t->layout_.total_elems, f = sizeof(float);
  const int64_t B = cfg.batch_size, T = cfg.seq_len;
  STRATA_ASSIGN_OR_RETURN(t->params_, dev.alloc(n * f));
  const bool bf16_gemm = cfg.matmul == MatmulPrecision::bf16;
  STRATA_RETURN_IF_ERROR(check_matmul_precision(dev, cfg));
  if (t->bf16_) {
    STRATA_ASSIGN_OR_RETURN(t->master_, dev.alloc(n * f));
    if (t->on_device_ || bf16_gemm) {
      STRATA_ASSIGN_OR_RETURN(t->bf16_buf_, dev.alloc(n * 2));
    }
  }
  STRATA_ASSIGN_OR_RETURN(t->grads_, dev.alloc(n * f));
  STRATA_ASSIGN_OR_RETURN(t->adam_m_, dev.alloc(n * f));
  STRATA_ASSIGN_OR_RETURN(t->adam_v_, dev.alloc(n * f));
  STRATA_ASSIGN_OR_RETURN(t->acts_buf_,
                          dev.alloc(gpt_acts_floats(dev, cfg.model, B, T, cfg.lora) * f));
  STRATA_ASSIGN_OR_RETURN(t->tokens_, dev.alloc(2 * B * T * 4));
  STRATA_ASSIGN_OR_RETURN(t->slab_sumsq_,
                          dev.alloc(static_cast<int64_t>(t->layout_.slabs.size()) * 8));
  STRATA_ASSIGN_OR_RETURN(t->losses_host_, dev.alloc_host(B * T * f));
  STRATA_ASSIGN_OR_RETURN(t->rope_, upload_rope_table(dev, cfg.model, cfg.seq_len));
  t->acts_ = gpt_acts_at(dev, t->acts_buf_.f32(), cfg.model, B, T, t->rope_.f32(), cfg.lora);
  if (bf16_gemm) {
    STRATA_ASSIGN_OR_RETURN(t->gemm_scratch_,
                            dev.alloc(block_gemm_scratch_elems(t->acts_.dims) * 2));
    t->gemm_storage_ = {t->bf16_buf_.bf16(), t->params_.f32(), t->gemm_scratch_.bf16()};
    t->gemm_ = &t->gemm_storage_;
  }
  t->stream_ = dev.create_stream("compute");
  if (device_transport && world.size() > 1) {
    t->device_sum_ = std::make_unique<DeviceCollectives>(dev, world, std::move(device_transport));
    STRATA_RETURN_IF_ERROR(t->device_sum_->reserve(n));
  }

  // Initialise on the host, then copy in, as a GPU run would.
  std::vector<float> host(static_cast<size_t>(n));
  init_params(t->layout_, host.data(), static_cast<uint64_t>(cfg.seed));
  t->write_params(host.data());
  dev.fill_zero(*t->stream_, t->adam_m_.data(), n * f);
  dev.fill_zero(*t->stream_, t->adam_v_.data(), n * f);
  t->stream_->synchronize();
  return t;
}

void InMemoryTrainer::zero_grads() {
  dev_.fill_zero(*stream_, grads_.data(), layout_.total_elems * 4);
}

double InMemoryTrainer::forward_loss(const int32_t* inputs, const int32_t* targets,
                                     const LoraDropoutAt* drop) {
  const int64_t BT = cfg_.batch_size * cfg_.seq_len;
  // The copies read the caller's arrays; the synchronize below, before we return, covers them.
  dev_.copy(*stream_, tokens_.i32(), inputs, BT * 4);
  dev_.copy(*stream_, tokens_.i32() + BT, targets, BT * 4);
  gpt_forward(dev_, *stream_, acts_, layout_, params_.f32(), tokens_.i32(), tokens_.i32() + BT,
              gemm_, drop);
  dev_.copy(*stream_, losses_host_.data(), acts_.head.losses, BT * 4);
  stream_->synchronize();
  double sum = 0;  // fixed order: the same loss bits on every run
  for (int64_t i = 0; i < BT; i++) sum += losses_host_.f32()[i];
  return sum / static_cast<double>(BT);
}

double InMemoryTrainer::forward_backward(const int32_t* inputs, const int32_t* targets, float dloss,
                                         int64_t micro_batch) {
  const int64_t BT = cfg_.batch_size * cfg_.seq_len;
  const LoraDropoutAt at{static_cast<uint64_t>(cfg_.seed), steps_done_,
                         world_.rank() * cfg_.grad_accum + micro_batch};
  const LoraDropoutAt* drop = cfg_.lora.dropout > 0 ? &at : nullptr;
  const double loss = forward_loss(inputs, targets, drop);
  gpt_backward(dev_, *stream_, acts_, layout_, params_.f32(), grads_.f32(), tokens_.i32(),
               tokens_.i32() + BT, dloss, gemm_, drop);
  stream_->synchronize();
  return loss;
}

Result<double> InMemoryTrainer::evaluate(const int32_t* inputs, const int32_t* targets,
                                         int64_t batches) {
  const int64_t BT = cfg_.batch_size * cfg_.seq_len;
  double total = 0;
  for (int64_t b = 0; b < batches; ++b) total += forward_loss(inputs + b * BT, targets + b * BT);
  return counted_mean(total / static_cast<double>(batches), batches * BT,
                      counted_targets(targets, batches * BT));
}

double InMemoryTrainer::global_grad_sum_squares() {
  const auto n_slabs = static_cast<int64_t>(layout_.slabs.size());
  for (int64_t i = 0; i < n_slabs; i++) {
    const Slab& s = layout_.slabs[static_cast<size_t>(i)];
    dev_.sum_squares(*stream_, static_cast<double*>(slab_sumsq_.data()) + i,
                     grads_.f32() + s.offset, s.numel);
  }
  std::vector<double> partial(static_cast<size_t>(n_slabs));
  dev_.copy(*stream_, partial.data(), slab_sumsq_.data(), n_slabs * 8);
  stream_->synchronize();
  double total = 0;
  for (double p : partial) total += p;
  return total;
}

Status InMemoryTrainer::apply_adamw(float lr, float grad_scale) {
  const AdamWHyper h = adamw_hyper(cfg_.optim, lr, adam_steps_ + 1, grad_scale);
  for (int64_t i = 0; i < static_cast<int64_t>(layout_.slabs.size()); ++i) {
    const Slab& s = layout_.slabs[static_cast<size_t>(i)];
    float *master = this->master() + s.offset, *m = adam_m_.f32() + s.offset,
          *v = adam_v_.f32() + s.offset;
    const float* grad = grads_.f32() + s.offset;
    if (!on_device_) {
      adamw_slab_range(layout_, i, 0, s.numel, master, m, v, nullptr, grad, h,
                       cfg_.optim.weight_decay);
      continue;
    }
    // The same tensor ranges and decays as adamw_slab_range, each one device AdamW.
    Status st;
    for_each_tensor_range(layout_, i, 0, s.numel, h, cfg_.optim.weight_decay,
                          [&](int64_t a, int64_t b, const AdamWHyper& th) {
                            if (!st.ok()) return;
                            st = dev_.adamw_step(*stream_, master + a, m + a, v + a, nullptr,
                                                 grad + a, b - a, th);
                          });
    STRATA_RETURN_IF_ERROR(st);
  }
  if (bf16_) round_working_params(0, layout_.total_elems);
  stream_->synchronize();
  return Status::ok_status();
}

void InMemoryTrainer::round_working_params(int64_t lo, int64_t hi) {
  // The same bits adamw_step's bf16 copy has, widened: what the offloaded trainers compute with.
  if (!bf16_buf_) {  // the CPU device with f32 GEMMs: in place on the host
    round_to_bf16(params_.f32() + lo, master_.f32() + lo, hi - lo);
    return;
  }
  // Through bf16_buf_ on the stream: the same rounding (f32_to_bf16, then widened back) as two
  // conversions, whose bf16 half is also the bf16 GEMMs' weights.
  dev_.convert_f32_to_bf16(*stream_, bf16_buf_.bf16() + lo, master_.f32() + lo, hi - lo);
  dev_.convert_bf16_to_f32(*stream_, params_.f32() + lo, bf16_buf_.bf16() + lo, hi - lo);
  stream_->synchronize();
}

Result<StepStats> InMemoryTrainer::train_step(const int32_t* inputs, const int32_t* targets) {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t BT = cfg_.batch_size * cfg_.seq_len;
  // Note [Data parallel ranks], Note [Ignored targets]: the mean over every rank's micro-batches'
  // counted targets.
  STRATA_ASSIGN_OR_RETURN(const int64_t counted,
                          step_counted_targets(world_, targets, BT * cfg_.grad_accum));
  const float dloss = 1.0f / static_cast<float>(std::max<int64_t>(counted, 1));

  StepStats st;
  st.step = steps_done_;
  st.trained_tokens = counted;
  zero_grads();
  double loss_sum = 0;
  for (int64_t k = 0; k < cfg_.grad_accum; k++) {
    loss_sum += forward_backward(inputs + k * BT, targets + k * BT, dloss, k);
  }
  const auto sum_start = std::chrono::steady_clock::now();
  STRATA_RETURN_IF_ERROR(all_reduce_grads());
  last_grad_sum_s_ =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - sum_start).count();
  STRATA_RETURN_IF_ERROR(world_.all_reduce_sum(&loss_sum, 1));
  st.loss = counted_mean(loss_sum / static_cast<double>(cfg_.grad_accum * cfg_.ranks),
                         BT * cfg_.grad_accum * cfg_.ranks, counted);

  // Note [Exact optimizer semantics]: the norm of *every* gradient is known before any
  // parameter changes; a non-finite norm skips the whole step.
  const double sumsq = global_grad_sum_squares();
  st.grad_norm = std::sqrt(sumsq);
  st.lr = lr_at(schedule_, steps_done_);
  if (!is_finite_norm(sumsq)) {
    st.skipped = true;
    log_warn("step " + std::to_string(steps_done_) + ": non-finite gradient norm, update skipped");
  } else {
    STRATA_RETURN_IF_ERROR(apply_adamw(st.lr, clip_scale(sumsq, cfg_.optim.grad_clip)));
    adam_steps_++;
  }
  steps_done_++;
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return st;
}

Status InMemoryTrainer::read_params(float* host) {
  dev_.copy(*stream_, host, params_.data(), layout_.total_elems * 4);
  stream_->synchronize();
  return Status::ok_status();
}

void InMemoryTrainer::write_params(const float* host) {
  dev_.copy(*stream_, master(), host, layout_.total_elems * 4);
  stream_->synchronize();
  if (bf16_) round_working_params(0, layout_.total_elems);
}

Status InMemoryTrainer::all_reduce_grads() {
  if (world_.size() == 1) return Status::ok_status();
  if (device_sum_) {
    STRATA_RETURN_IF_ERROR(
        device_sum_->all_reduce_sum(*stream_, grads_.f32(), layout_.total_elems));
    stream_->synchronize();
    return Status::ok_status();
  }
  grads_host_.resize(static_cast<size_t>(layout_.total_elems));  // once: same size every step
  read_grads(grads_host_.data());
  STRATA_RETURN_IF_ERROR(world_.all_reduce_sum(grads_host_.data(), layout_.total_elems));
  dev_.copy(*stream_, grads_.data(), grads_host_.data(), layout_.total_elems * 4);
  stream_->synchronize();
  return Status::ok_status();
}

std::vector<std::string> InMemoryTrainer::describe() const {
  if (world_.size() == 1) return {};
  return {"gradients summed over " + std::to_string(world_.size()) + " ranks: " +
          (device_sum_ ? device_sum_->describe() : world_.describe() + ", through host memory")};
}

void InMemoryTrainer::add_step_metrics(nlohmann::json& line, double iter_s) const {
  if (world_.size() > 1) line["grad_sum_s"] = last_grad_sum_s_;
}

void InMemoryTrainer::read_grads(float* host) const {
  dev_.copy(*stream_, host, grads_.data(), layout_.total_elems * 4);
  stream_->synchronize();
}

void InMemoryTrainer::read_logits(float* host) const {
  dev_.copy(*stream_, host, acts_.head.logits,
            cfg_.batch_size * cfg_.seq_len * cfg_.model.vocab_size * 4);
  stream_->synchronize();
}

namespace {
constexpr int64_t kPieceElems = int64_t{1} << 20;  // 4 MiB per array
}  // namespace

// A slab's (master, m, v) in pieces of kPieceElems through host staging: copied from the
// device before `fn` reads them, or filled by `fn` and then copied to the device.
Status InMemoryTrainer::slab_pieces(int64_t slab, IoOp op, const SlabPieceFn& fn) {
  const Slab& s = layout_.slabs.at(static_cast<size_t>(slab));
  const auto cap = static_cast<size_t>(std::min(kPieceElems, s.numel));
  std::vector<float> master(cap), m(cap), v(cap);  // (piece) each
  float* const device[3] = {this->master(), adam_m_.f32(), adam_v_.f32()};
  float* const host[3] = {master.data(), m.data(), v.data()};
  for (int64_t at = 0; at < s.numel; at += kPieceElems) {
    const int64_t n = std::min(kPieceElems, s.numel - at), off = s.offset + at;
    if (op == IoOp::read) {
      for (int k = 0; k < 3; ++k) dev_.copy(*stream_, host[k], device[k] + off, n * 4);
      stream_->synchronize();
    }
    STRATA_RETURN_IF_ERROR(fn({at, n, master.data(), m.data(), v.data()}));
    if (op == IoOp::write) {
      for (int k = 0; k < 3; ++k) dev_.copy(*stream_, device[k] + off, host[k], n * 4);
      stream_->synchronize();
    }
  }
  return Status();
}

Status InMemoryTrainer::read_slab_pieces(int64_t slab, const SlabPieceFn& take) {
  return slab_pieces(slab, IoOp::read, take);
}

Status InMemoryTrainer::write_slab_pieces(int64_t slab, const SlabPieceFn& fill) {
  STRATA_RETURN_IF_ERROR(slab_pieces(slab, IoOp::write, fill));
  const Slab& s = layout_.slabs.at(static_cast<size_t>(slab));
  if (bf16_) round_working_params(s.offset, s.offset + s.numel);
  return Status();
}

}  // namespace strata
