// OffloadActions (train/offload_actions.h): the host's actions: gradients on host and the
// global norm (the CPU optimizer workers), the optimizer steps, and the net queue's collectives.
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/kernels.h"
#include "optim/adamw_layout.h"
#include "optim/grad_clip.h"
#include "sched/slot_names.h"
#include "train/offload_actions.h"

namespace strata {

namespace names = slot_names;

// ---- Gradients on host and the norm ------------------------------------------------------------

STRATA_ACTION(grad_accumulate) {
  const float* src = f32_of(bp, t, Role::src);
  const int32_t acc_slot = slot_of(t, Role::grad);
  float* acc = static_cast<float*>(slot_ptr(bp, acc_slot));
  int64_t n = bp.slots[static_cast<size_t>(acc_slot)]->bytes / 4;
  if (sh_.grads_sharded() && t.block >= 0) {  // Note [Sharded optimizer state]: this rank's shard
    const PartShard sh = sh_.owned_part(-1);
    src += sh.begin;
    n = sh.end - sh.begin;
  }
  if (reads_role(t, Role::grad)) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) acc[i] += src[i];
  } else {
    std::memcpy(acc, src, static_cast<size_t>(n * 4));
  }
  return Status::ok_status();
}

STRATA_ACTION(grad_sumsq) {
  float* g = f32_of(bp, t, Role::grad);
  if (t.block >= 0 && t.block == poison_block_ && progress_.steps_done == poison_step_) {
    g[0] = std::numeric_limits<float>::quiet_NaN();  // poison_gradient_for_test
  }
  if (t.block >= 0) {
    double& sum = slab_sumsq_[static_cast<size_t>(sh_.layout.block_slab(t.block))];
    if (!sh_.sharded()) {
      cpu::sum_squares(&sum, g, sh_.grad_elems());  // Note [Frozen base]
      return Status::ok_status();
    }
    // Note [Sharded optimizer state]: this rank's shard of each part, in part order.
    sum = 0;
    for (const auto& [name, part] : state_.optim_parts(t.block)) {
      const PartShard sh = sh_.owned_part(part);
      double s = 0;
      cpu::sum_squares(&s, sh_.kept_grad_at(g, sh.begin), sh.end - sh.begin);
      sum += s;
    }
    return Status::ok_status();
  }
  const int64_t ne = sh_.layout.slabs[static_cast<size_t>(sh_.layout.embed_slab())].numel;
  cpu::sum_squares(&slab_sumsq_[static_cast<size_t>(sh_.layout.embed_slab())], g, ne);
  cpu::sum_squares(&slab_sumsq_[static_cast<size_t>(sh_.layout.final_slab())], g + ne,
                   sh_.embed_elems - ne);
  return Status::ok_status();
}

STRATA_ACTION(grad_norm) {
  // Note [Exact optimizer semantics] (in_memory_trainer.cpp): slabs summed in layout order.
  double total = 0;
  for (double p : slab_sumsq_) total += p;
  progress_.norm_sumsq = total;
  progress_.norm.lr = lr_at(schedule_, progress_.steps_done);
  progress_.norm.skip = !is_finite_norm(total);
  if (progress_.norm.skip) {
    if (sh_.has_part0() && !sh_.speculative) {
      return invalid_argument(
          "non-finite gradient norm with optim.alpha < 1 and clipping off: the backward part of "
          "the step already ran, so it cannot be skipped exactly; use optim.alpha = 1, or "
          "clipping on (optim.grad_clip > 0), whose speculative steps are repaired");
    }
    return Status::ok_status();
  }
  progress_.norm.grad_scale = clip_scale(total, sh_.cfg.optim.grad_clip);
  progress_.adam_steps++;
  progress_.norm.adam_step = progress_.adam_steps;
  return Status::ok_status();
}

// ---- Optimizer steps --------------------------------------------------------------------------

StepState OffloadActions::early_step_state() const {
  // Part 0 runs in backward, before this iteration's norm: clipping is off (config.h), and the
  // step number and learning rate are this iteration's.
  StepState st;
  st.lr = lr_at(schedule_, progress_.steps_done);
  st.adam_step = progress_.adam_steps + 1;
  st.grad_scale = 1.0f;
  st.skip = false;
  return st;
}

STRATA_ACTION(block_step) {
  // A step that reads the clip slot runs after the norm: the norm's state. Otherwise it is an
  // early part 0 (Note [Optimizer split]), which assumes a finite gradient that does not clip:
  // speculatively with clipping on (Note [Speculative steps]: validated after the norm), or as
  // the step itself with clipping off.
  if (reads_role(t, Role::clip)) return step_block_part(bp, t, progress_.norm);
  if (sh_.speculative) return step_block_part(bp, t, early_step_state());
  const double sumsq = slab_sumsq_[static_cast<size_t>(sh_.layout.block_slab(t.block))];
  if (!is_finite_norm(sumsq)) {
    return invalid_argument(
        "non-finite gradient in blk." + std::to_string(t.block) +
        " with optim.alpha < 1: the backward part of the step cannot be skipped exactly; "
        "use optim.alpha = 1 to skip such steps");
  }
  return step_block_part(bp, t, early_step_state());
}

Status OffloadActions::step_block_part(const BoundPlan& bp, const Task& t, const StepState& st) {
  // This rank's shard of the part (Note [Sharded optimizer state]; one rank: all of it).
  const PartShard sh = sh_.owned_part(t.part);
  const int64_t lo = sh.begin, hi = sh.end, pe = hi - lo, S = sh.stride;
  const float* grad =
      sh_.kept_grad_at(f32_of(bp, t, Role::grad), lo);  // at element lo, as the state
  float* master = f32_of(bp, t, Role::state);           // (3, S): master, m, v of the shard
  // Element lo of the working params (f32 or bf16): in the block's layout, or in this rank's
  // packed ranges (Note [Sharded working params]).
  char* params_lo = params_at(bp, t, lo);
  if (params_lo == nullptr && pe > 0) {
    return internal_error("blk." + std::to_string(t.block) + " part " + std::to_string(t.part) +
                          ": element " + std::to_string(lo) +
                          " is outside this rank's ranges of its params store");
  }
  // Note [Speculative steps]: the state before the step stays where it is; the step works on
  // its copy in state_out.
  if (float* out = f32_of(bp, t, Role::state_out); out != nullptr) {
    std::memcpy(out, master, static_cast<size_t>(3 * S * 4));
    master = out;
  }
  // bf16 mode (Note [Precision modes]): the part's range of the bf16 working params, written by
  // AdamW in the same sweep as the master.
  bf16_t* out_bf16 = sh_.bf16 ? reinterpret_cast<bf16_t*>(params_lo) : nullptr;
  if (!st.skip) {
    const AdamWHyper h = adamw_hyper(sh_.cfg.optim, st.lr, st.adam_step, st.grad_scale);
    adamw_slab_range(sh_.layout, sh_.layout.block_slab(t.block), lo, hi, master, master + S,
                     master + 2 * S, out_bf16, grad, h, sh_.cfg.optim.weight_decay);
  }
  // Skipped or not, the task's reader expects the current params in params_out.
  // An empty shard has no params to write (and params_at no address for them).
  if (pe > 0 && !sh_.bf16) {
    // The working copy is f32, so it is the master range itself.
    std::memcpy(params_lo, master, static_cast<size_t>(pe * 4));
  } else if (pe > 0 && st.skip) {
    cpu::convert_f32_to_bf16(out_bf16, master, pe);
  }
  // (bf16 and stepped: AdamW wrote every tensor element; the padding between tensors is zero in
  // every params buffer, from the initial state on, and AdamW never touches it.)
  return Status::ok_status();
}

char* OffloadActions::params_at(const BoundPlan& bp, const Task& t, int64_t lo) const {
  const int32_t slot = slot_of(t, Role::params);
  char* base = static_cast<char*>(slot_ptr(bp, slot));
  const int64_t width = sh_.bf16 ? 2 : 4, at = lo * width;
  const bool packed = sh_.sharded() && bp.slots[static_cast<size_t>(slot)] ==
                                           &state_.slot(names::params_store(t.block));
  if (!packed) return base + at;
  for (const StoreRange& r : shard_store_ranges(sh_.shard_spec, sh_.block_elems * width, t.part)) {
    if (at >= r.stage_at && at < r.stage_at + r.bytes) return base + r.store_at + (at - r.stage_at);
  }
  return nullptr;
}

STRATA_ACTION(embed_step) {
  const auto [lo, hi] = sh_.embed_chunk_range(t.part);
  const int64_t n = hi - lo;
  const int64_t ne = sh_.layout.slabs[static_cast<size_t>(sh_.layout.embed_slab())].numel;
  const float* grad = f32_of(bp, t, Role::grad);     // (E), the whole group's
  float* master = f32_of(bp, t, Role::state);        // (3, n): master, m, v of [lo, hi)
  float* params = f32_of(bp, t, Role::params) + lo;  // (n) working params of [lo, hi)
  if (!progress_.norm.skip) {
    const AdamWHyper h = adamw_hyper(sh_.cfg.optim, progress_.norm.lr, progress_.norm.adam_step,
                                     progress_.norm.grad_scale);
    float *m = master + n, *v = master + 2 * n;
    // The range's part in each slab: the embedding [0, ne), the final norm [ne, E).
    if (lo < ne) {
      adamw_slab_range(sh_.layout, sh_.layout.embed_slab(), lo, std::min(hi, ne), master, m, v,
                       nullptr, grad + lo, h, sh_.cfg.optim.weight_decay);
    }
    if (hi > ne) {
      const int64_t at = std::max(lo, ne) - lo;  // where the final slab starts in the range
      adamw_slab_range(sh_.layout, sh_.layout.final_slab(), lo + at - ne, hi - ne, master + at,
                       m + at, v + at, nullptr, grad + lo + at, h, sh_.cfg.optim.weight_decay);
    }
  }
  if (sh_.bf16) {
    // Note [Precision modes]: the embed group is small and lives on the device, so it stays f32
    // there, holding the master's bf16 rounding.
    round_to_bf16(params, master, n);
  } else {
    std::memcpy(params, master, static_cast<size_t>(n * 4));
  }
  return Status::ok_status();
}

// ---- The net queue ----------------------------------------------------------------------------

STRATA_ACTION(grad_allreduce) {
  // Note [Deterministic all-reduce]: every rank gets the same bits, so the norm, the clip factor
  // and the step that follow agree on every rank without another word between them.
  return world_.all_reduce_sum(f32_of(bp, t, Role::grad),
                               t.block >= 0 ? sh_.grad_elems() : sh_.embed_elems);
}

STRATA_ACTION(grad_reduce_scatter) {
  // Note [Sharded optimizer state]: each part's shards land on their owners.
  float* g = f32_of(bp, t, Role::grad);  // (block elems)
  for (const auto& [name, part] : state_.optim_parts(t.block)) {
    const PartShard sh = sh_.owned_part(part);
    STRATA_RETURN_IF_ERROR(
        world_.reduce_scatter_sum(g + sh.part_begin, sh.part_end - sh.part_begin));
  }
  return Status::ok_status();
}

STRATA_ACTION(norm_allreduce) {
  // The blocks' sums of squares are this rank's shards'; the embed group's are whole already.
  std::vector<double> blocks(static_cast<size_t>(sh_.cfg.model.n_layer));  // (L)
  for (int64_t l = 0; l < sh_.cfg.model.n_layer; ++l) {
    blocks[static_cast<size_t>(l)] = slab_sumsq_[static_cast<size_t>(sh_.layout.block_slab(l))];
  }
  STRATA_RETURN_IF_ERROR(world_.all_reduce_sum(blocks.data(), sh_.cfg.model.n_layer));
  for (int64_t l = 0; l < sh_.cfg.model.n_layer; ++l) {
    slab_sumsq_[static_cast<size_t>(sh_.layout.block_slab(l))] = blocks[static_cast<size_t>(l)];
  }
  return Status::ok_status();
}

STRATA_ACTION(param_allgather) {
  return state_.gather_params(slot_ptr(bp, slot_of(t, Role::params)), t.part);
}

STRATA_ACTION(param_gather) {
  // Note [Sharded working params]: the task's src is the block's store (params.store.blkL), so
  // this is the same read-and-gather as outside plans, into the task's stage.
  return state_.params_store_io(IoOp::read, t.block, slot_ptr(bp, slot_of(t, Role::dst)), t.part);
}

// The collectives on device memory (Note [ZeRO-3 on the device]) are host tasks of the net queue
// whose moves and adds run on the net stream: each is done when its action returns.

Status OffloadActions::device_collective(const Task& t,
                                         const std::function<Status(DeviceCollectives&)>& body) {
  if (!device_sum_) {
    return Status(ErrorCode::internal, "task " + t.label + " without collectives on the device");
  }
  STRATA_RETURN_IF_ERROR(body(*device_sum_));
  streams_.net->synchronize();
  return Status::ok_status();
}

STRATA_ACTION(grad_reduce_scatter_device) {
  // The same shards as act<grad_reduce_scatter>.
  float* g = f32_of(bp, t, Role::grad);  // (block elems) device memory
  return device_collective(t, [&](DeviceCollectives& dc) {
    for (const auto& [name, part] : state_.optim_parts(t.block)) {
      const PartShard sh = sh_.owned_part(part);
      STRATA_RETURN_IF_ERROR(
          dc.reduce_scatter_sum(*streams_.net, g + sh.part_begin, sh.part_end - sh.part_begin));
    }
    return Status::ok_status();
  });
}

STRATA_ACTION(param_allgather_device) {
  // gather_params on the device copy of the block.
  const OffloadShape::ParamsPart p = sh_.params_part(t.part);
  char* block = static_cast<char*>(slot_ptr(bp, slot_of(t, Role::params)));  // (block elems)
  return device_collective(t, [&](DeviceCollectives& dc) {
    return dc.all_gather(*streams_.net, block + p.at, p.count, p.width);
  });
}

STRATA_ACTION(grad_allreduce_device) {
  float* g = f32_of(bp, t, Role::grad);  // (embed elems) device memory
  return device_collective(t, [&](DeviceCollectives& dc) {
    return dc.all_reduce_sum(*streams_.net, g, sh_.embed_elems);
  });
}

}  // namespace strata
