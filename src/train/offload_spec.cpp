#include "train/offload_spec.h"

#include <algorithm>
#include <cmath>

#include "io/io_engine.h"
#include "model/block.h"
#include "model/gpt.h"
#include "sched/schedule_horizontal.h"
#include "sched/schedule_vertical.h"
#include "train/offload_workspace.h"

namespace strata {

namespace {

// Bytes a storage transfer of block state may start at and cut at: a direct-I/O block, or a
// whole checksum chunk when checksums are on (Note [Extent checksums] in io/tensor_store.h).
int64_t io_unit_bytes(const TrainConfig& cfg) {
  const auto direct = static_cast<int64_t>(kDirectIoAlignment);
  return cfg.io.checksums ? std::max<int64_t>(cfg.io.stripe_unit, direct) : direct;
}

}  // namespace

int64_t embed_group_elems(const ParamLayout& layout) {
  return layout.slabs[static_cast<size_t>(layout.embed_slab())].numel +
         layout.slabs[static_cast<size_t>(layout.final_slab())].numel;
}

int64_t block_trained_elems(const ParamLayout& layout) {
  const Slab& s = layout.slabs[static_cast<size_t>(layout.block_slab(0))];
  int64_t n = 0;
  for (int64_t i = s.first_tensor; i < s.first_tensor + s.tensor_count; ++i) {
    const ParamTensor& t = layout.tensors[static_cast<size_t>(i)];
    if (!t.frozen) n += t.numel();
  }
  return n;
}

bool embed_group_frozen(const ParamLayout& layout) {
  for (int64_t slab : {layout.embed_slab(), layout.final_slab()}) {
    const Slab& s = layout.slabs[static_cast<size_t>(slab)];
    for (int64_t i = s.first_tensor; i < s.first_tensor + s.tensor_count; ++i) {
      if (!layout.tensors[static_cast<size_t>(i)].frozen) return false;
    }
  }
  return true;
}

int64_t frozen_elems_for(const TrainConfig& cfg, const ParamLayout& layout) {
  if (cfg.lora.rank <= 0 || cfg.ranks > 1) return 0;
  const Slab& s = layout.slabs[static_cast<size_t>(layout.block_slab(0))];
  int64_t first = s.numel;  // the first trained element of the slab
  for (int64_t i = s.first_tensor; i < s.first_tensor + s.tensor_count; ++i) {
    const ParamTensor& t = layout.tensors[static_cast<size_t>(i)];
    if (!t.frozen) first = std::min(first, t.offset - s.offset);
  }
  const int64_t unit = io_unit_bytes(cfg) / 2;  // whole I/O units of bf16 params, so of f32 too
  return first / unit * unit;
}

// Part 0 of each block's step (run in backward) holds (1 - alpha) of its trained elements,
// rounded to whole I/O blocks of the working params (whole checksum chunks when checksums are
// on, since parts are written separately): 1024 elements in f32, 2048 in bf16. Note [Optimizer
// split]. `frozen` is a multiple of both (frozen_elems_for), so the split is too.
int64_t split_elems_for(const TrainConfig& cfg, int64_t n, int64_t frozen) {
  const double alpha = cfg.optim.alpha_or_default();
  if (cfg.schedule != Schedule::vertical || alpha >= 1.0) return frozen;
  if (alpha <= 0.0) return n;
  const int64_t width = cfg.precision == Precision::bf16 ? 2 : 4;  // bytes per working param
  const int64_t align = io_unit_bytes(cfg) / width;
  const auto a = static_cast<int64_t>(std::llround((1.0 - alpha) * (n - frozen) / align)) * align;
  return std::clamp<int64_t>(frozen + a, frozen, n);
}

ScheduleSpec offload_schedule_spec(const DeviceTraits& dev, const TrainConfig& cfg,
                                   bool pending_steps, bool iteration) {
  const ParamLayout layout = make_param_layout(cfg.model, cfg.lora);
  const int64_t B = cfg.batch_size, T = cfg.seq_len, C = cfg.model.n_embd, V = cfg.model.vocab_size,
                M = cfg.grad_accum, BT = B * T;
  const int64_t n = layout.slabs[static_cast<size_t>(layout.block_slab(0))].numel;
  const int64_t E = embed_group_elems(layout);
  ScheduleSpec s;
  s.blocks = static_cast<int32_t>(cfg.model.n_layer);
  s.micro_batches = static_cast<int32_t>(M);
  s.ranks = cfg.ranks;
  s.shard_grads = cfg.ranks > 1 && cfg.schedule == Schedule::horizontal;
  const bool bf16 = cfg.precision == Precision::bf16;  // Note [Precision modes]
  s.block_param_bytes = n * (bf16 ? 2 : 4);
  s.frozen_elems = frozen_elems_for(cfg, layout);  // Note [Frozen base]
  s.embed_frozen = embed_group_frozen(layout);
  s.block_grad_bytes = (n - s.frozen_elems) * 4;
  s.block_optim_bytes = (n - s.frozen_elems) * 12;
  s.checkpoint_bytes = BT * C * 4;
  s.embed_param_bytes = E * 4;
  s.embed_optim_bytes = E * 12;
  s.embed_elems = E;
  s.embed_optim = cfg.offload.embed_optim_on_host ? Placement::host : Placement::storage;
  s.tokens_bytes = M * 2 * BT * 4;
  s.losses_bytes = M * BT * 4;
  const BlockDims d = block_dims(dev, cfg.model, B, T, nullptr, cfg.lora);
  FloatCarver counter(nullptr);
  carve_offload_workspace(counter, d, cfg, n);
  s.workspace_bytes = counter.used() * 4;
  // Matmul FLOPs (2 per multiply-add) and the causal half of attention's two T x T products.
  const double bt = static_cast<double>(BT), c = static_cast<double>(C);
  // LoRA (Note [LoRA]): the adapters' matmuls beside the base's, and a frozen weight's backward
  // computes dX only, half of a trained one's.
  const double matmul = 2.0 * bt * static_cast<double>(block_matmul_params(cfg.model));
  const double attention = 2.0 * bt * static_cast<double>(T) * c;
  const double adapters = 2.0 * bt * static_cast<double>(block_trained_elems(layout));
  s.block_fwd_flops = matmul + attention + (cfg.lora.enabled() ? adapters : 0.0);
  s.block_bwd_flops =
      cfg.lora.enabled() ? matmul + 2.0 * (attention + adapters) : 2.0 * s.block_fwd_flops;
  // A frozen head (Note [Frozen base]) computes no dW in backward: 4 of full training's 6.
  s.head_flops = (s.embed_frozen ? 4.0 : 6.0) * bt * static_cast<double>(V) * c;
  s.params_at = placement_by_fraction(s.blocks, cfg.offload.params_on_host);
  s.optim_at = placement_by_fraction(s.blocks, cfg.offload.optim_on_host);
  s.checkpoints_at = placement_by_fraction(s.blocks, cfg.offload.checkpoints_on_host);
  s.grads_at = placement_by_fraction(s.blocks, cfg.offload.grads_on_host);
  s.block_elems = n;
  s.split_elems = split_elems_for(cfg, n, s.frozen_elems);
  s.grad_io_elems = io_unit_bytes(cfg) / 4;
  s.acts_bytes = block_saved_floats(d) * 4;
  s.compute_reads_host = dev.shares_host_memory;
  if (cfg.schedule == Schedule::vertical && cfg.activations.policy != ActsMode::recompute) {
    // "auto" starts from offloading everything; OffloadTrainer decides per block.
    const ActPolicy offload =
        cfg.activations.tier == ActsTier::host ? ActPolicy::host : ActPolicy::storage;
    s.acts_at.assign(static_cast<size_t>(s.blocks),
                     cfg.activations.policy == ActsMode::keep ? ActPolicy::keep : offload);
  }
  s.pending_steps = pending_steps;
  s.iteration = iteration;
  // With clipping on, part 0 speculates, or waits with speculation off (Note [Speculative
  // steps]): the plans of a step whose norm does not clip.
  if (s.split_elems > s.frozen_elems && cfg.optim.grad_clip > 0) {
    const bool wait = cfg.optim.speculation == Speculation::off;
    s.defer_part0 = wait;
    s.pending_part0 = wait && pending_steps;
    s.speculative = !wait && iteration;
  }
  return s;
}

Plan make_offload_plan(const ScheduleSpec& spec, Schedule schedule) {
  return schedule == Schedule::vertical ? make_vertical_plan(spec) : make_horizontal_plan(spec);
}

bool wants_device_collectives(const TrainConfig& cfg, bool gpu) {
  switch (cfg.collectives) {
    case CollectivesPlace::device:
      return true;
    case CollectivesPlace::host:
      return false;
    case CollectivesPlace::automatic:
      // Offloaded on the CPU devices: the host. There device memory is host memory, so nothing
      // is saved, while a block's gradient holds its device slot until every rank has scattered
      // its own (the backward that reuses the slot may wait); bench/collectives.sh measured no
      // gain (docs/design.md §12).
      return gpu || !is_offloaded(cfg.schedule);
  }
  return false;
}

}  // namespace strata
