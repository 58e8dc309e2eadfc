// What each task of an offloaded plan does (the binding of plan tasks to work). A task's slot
// uses are read by position, in the order the generators write them (schedule_horizontal.cpp,
// schedule_vertical.cpp, schedule_spec.cpp):
//   transfers     {read src, write dst}
//   embed.fwd     {read embed params, read tokens, write out}
//   fwd           {read params, read in, write out, [write saved set]}
//   loss          {read x, read embed params, read tokens, write dact, rw embed grad,
//                  write losses}
//   bwd           {read params, read in, read dact, write dact, [read grad,] write grad,
//                  [read saved set]}
//   embed.bwd     {read dact, read tokens, rw embed grad}
//   adamw blk     {read grad, read state, write state, write params_out, [read clip]}
//   adamw embed   {read grad, read clip, read state, write state, write params}
//   acc           {read stage, write acc, [read acc]}
//   sumsq         {read grad, write sums};   grad.norm {read sums, write clip}
// Each action synchronises its own stream before it returns (executor.h: completion).
#include <cmath>
#include <cstring>
#include <filesystem>

#include "backend/cpu/kernels.h"
#include "optim/adamw_layout.h"
#include "optim/grad_clip.h"
#include "sched/offload_internal.h"

namespace strata {

namespace {

constexpr auto kIoAlign = static_cast<int64_t>(kDirectIoAlignment);

bool starts_with(const std::string& s, const char* p) {
  return s.rfind(p, 0) == 0;
}

// The slot of the use at `pos`, and whether any use of that slot in the task reads it.
int32_t use_slot(const Task& t, size_t pos) {
  return t.uses.at(pos).slot;
}
bool task_reads(const Task& t, int32_t slot) {
  for (const SlotUse& u : t.uses) {
    if (u.slot == slot && !u.write) return true;
  }
  return false;
}
int32_t first_use(const Task& t, bool write) {
  for (const SlotUse& u : t.uses) {
    if (u.write == write) return u.slot;
  }
  return -1;
}

}  // namespace

void* OffloadTrainer::slot_ptr(const BoundPlan& bp, int32_t slot) const {
  return bp.slots[static_cast<size_t>(slot)]->buf.data();
}

TaskAction OffloadTrainer::bind(const BoundPlan& bp, int32_t index) {
  const Task& t = bp.plan.tasks[static_cast<size_t>(index)];
  switch (t.kind) {
    case TaskKind::fetch:
    case TaskKind::store:
      return [this, &bp, &t] { return do_transfer(bp, t); };
    case TaskKind::forward:
    case TaskKind::backward:
    case TaskKind::loss:
    case TaskKind::zero:
      return [this, &bp, &t] { return do_compute(bp, t); };
    case TaskKind::optimizer:
      return [this, &bp, &t] { return do_optimizer(bp, t); };
    case TaskKind::other:
      break;
  }
  return [this, &bp, &t] { return do_host_other(bp, t); };
}

Status OffloadTrainer::store_io(const SlotMemory& m, IoOp op, int64_t offset, void* host,
                                int64_t bytes) {
  // Under O_DIRECT a range that ends the extent moves whole 4 KiB blocks (host buffers are
  // rounded to match): Note [Direct ranges].
  int64_t n = bytes;
  if (store_->options().direct && offset + bytes == m.bytes) {
    n = (bytes + kIoAlign - 1) / kIoAlign * kIoAlign;
  }
  const auto off = static_cast<uint64_t>(offset), len = static_cast<uint64_t>(n);
  auto batch = op == IoOp::read ? store_->read(m.extent, off, host, len)
                                : store_->write(m.extent, off, host, len);
  Status st = batch.ok() ? store_->wait(*batch) : batch.status();
  if (st.ok()) return st;
  std::string files;
  for (const std::string& f : store_files()) files += (files.empty() ? "" : ", ") + f;
  return Status(st.code(), std::string(op == IoOp::read ? "reading" : "writing") + " tensor '" +
                               m.name + "' (bytes " + std::to_string(offset) + ".." +
                               std::to_string(offset + bytes) + ") in " + files + ": " +
                               st.message());
}

Status OffloadTrainer::do_transfer(const BoundPlan& bp, const Task& t) {
  const int32_t src = first_use(t, false), dst = first_use(t, true);
  const SlotMemory& s = *bp.slots[static_cast<size_t>(src)];
  const SlotMemory& d = *bp.slots[static_cast<size_t>(dst)];
  bytes_[static_cast<int>(t.resource)] += t.bytes;
  if (starts_with(t.label, "acts.")) {
    if (t.resource == Resource::storage_read) acts_read_bytes_ += t.bytes;
    if (t.resource == Resource::storage_write) acts_write_bytes_ += t.bytes;
  }
  if (s.tier == Tier::storage) {
    return store_io(s, IoOp::read, t.src_offset, static_cast<char*>(d.buf.data()) + t.dst_offset,
                    t.bytes);
  }
  if (d.tier == Tier::storage) {
    return store_io(d, IoOp::write, t.dst_offset, static_cast<char*>(s.buf.data()) + t.src_offset,
                    t.bytes);
  }
  Stream& stream = t.resource == Resource::h2d ? *h2d_ : *d2h_;
  dev_.copy(stream, static_cast<char*>(d.buf.data()) + t.dst_offset,
            static_cast<const char*>(s.buf.data()) + t.src_offset, t.bytes);
  stream.synchronize();
  return Status::ok_status();
}

Status OffloadTrainer::do_compute(const BoundPlan& bp, const Task& t) {
  Stream& s = *compute_;
  const int64_t B = cfg_.batch_size, T = cfg_.seq_len, BT = B * T, C = cfg_.model.n_embd,
                V = cfg_.model.vocab_size, f = 4;
  const int64_t ne = layout_.slabs[static_cast<size_t>(layout_.embed_slab())].numel;
  auto f32 = [&](size_t pos) { return static_cast<float*>(slot_ptr(bp, use_slot(t, pos))); };
  auto tokens = [&](size_t pos) {
    return static_cast<const int32_t*>(slot_ptr(bp, use_slot(t, pos))) + t.micro_batch * 2 * BT;
  };
  switch (t.kind) {
    case TaskKind::zero: {
      const int32_t slot = use_slot(t, 0);
      dev_.fill_zero(s, slot_ptr(bp, slot), bp.slots[static_cast<size_t>(slot)]->bytes);
      break;
    }
    case TaskKind::forward:
      if (t.block < 0) {  // embed.fwd {embed params, tokens, out}
        const EmbedView e = embed_slab_view(layout_, f32(0));
        dev_.embedding_forward(s, f32(2), tokens(1), e.wte, e.wpe, B, T, C);
      } else {  // fwd {params, in, out, [saved set]}
        const BlockActs a = t.uses.size() > 3 ? saved_view(f32(3)) : ws_.acts;
        block_forward(dev_, s, f32(2), a, f32(1), block_slab_view(layout_, f32(0), t.block), dims_);
      }
      break;
    case TaskKind::loss: {  // {x, embed params, tokens, dact, embed grad, embed grad, losses}
      const float* x = f32(0);
      float* embed = f32(1);
      float* dact = f32(3);
      float* gembed = f32(4);
      const int32_t* tgt = tokens(2) + BT;
      const EmbedView e = embed_slab_view(layout_, embed), ge = embed_slab_view(layout_, gembed);
      const FinalView fin = final_slab_view(layout_, embed + ne),
                      gfin = final_slab_view(layout_, gembed + ne);
      // As gpt_forward's head, then gpt_backward's (the same ops in the same order).
      dev_.layernorm_forward(s, ws_.lnf, ws_.lnf_mean, ws_.lnf_rstd, x, fin.lnf_w, fin.lnf_b, BT,
                             C);
      dev_.matmul(s, ws_.logits, ws_.lnf, e.wte, nullptr, BT, V, C, false, true, false);
      dev_.softmax_cross_entropy_forward(s, ws_.losses, ws_.probs, ws_.logits, tgt, BT, V);
      dev_.copy(s, f32(6) + t.micro_batch * BT, ws_.losses, BT * f);
      dev_.fill_zero(s, ws_.dlogits, BT * V * f);
      dev_.softmax_cross_entropy_backward(s, ws_.dlogits, ws_.probs, tgt, dloss_, BT, V);
      dev_.matmul(s, ge.wte, ws_.dlogits, ws_.lnf, nullptr, V, C, BT, true, false, true);
      dev_.matmul(s, ws_.dlnf, ws_.dlogits, e.wte, nullptr, BT, C, V, false, false, false);
      dev_.fill_zero(s, dact, BT * C * f);
      dev_.layernorm_backward(s, dact, gfin.lnf_w, gfin.lnf_b, ws_.dlnf, x, fin.lnf_w, ws_.lnf_mean,
                              ws_.lnf_rstd, BT, C);
      break;
    }
    case TaskKind::backward:
      if (t.block < 0) {  // embed.bwd {dact, tokens, embed grad}
        const EmbedView ge = embed_slab_view(layout_, f32(2));
        dev_.embedding_backward(s, ge.wte, ge.wpe, f32(0), tokens(1), B, T, C);
      } else {  // bwd {params, in, dact, dact, [grad,] grad, [saved set]}
        const BlockView w = block_slab_view(layout_, f32(0), t.block);
        const float* in = f32(1);
        float* dact = f32(2);
        int32_t gslot = -1;  // the last slot written: the gradient
        for (const SlotUse& u : t.uses) {
          if (u.write) gslot = u.slot;
        }
        const bool saved = t.uses.size() == 7;
        float* grad = static_cast<float*>(slot_ptr(bp, gslot));
        if (!task_reads(t, gslot)) {  // a fresh per-micro-batch gradient (horizontal)
          dev_.fill_zero(s, grad, bp.slots[static_cast<size_t>(gslot)]->bytes);
        }
        if (!t.fused && !saved) block_forward(dev_, s, ws_.recompute_out, ws_.acts, in, w, dims_);
        const BlockActs a = saved ? saved_view(f32(6)) : ws_.acts;
        dev_.fill_zero(s, ws_.dinp, BT * C * f);
        block_backward(dev_, s, ws_.dinp, block_slab_view(layout_, grad, t.block), ws_.scratch,
                       dact, in, a, w, dims_);
        dev_.copy(s, dact, ws_.dinp, BT * C * f);
      }
      break;
    default:
      return Status(ErrorCode::internal, "not a compute task");
  }
  s.synchronize();
  return Status::ok_status();
}

BlockActs OffloadTrainer::saved_view(float* saved) const {
  // Note [Saved activations]: the saved set is the prefix of a BlockActs carve; the forward-only
  // tensors stay in the workspace.
  FloatCarver c(saved);
  BlockActs a = block_acts_carve(c, dims_);
  a.attproj = ws_.acts.attproj;
  a.fcproj = ws_.acts.fcproj;
  return a;
}

OffloadTrainer::StepState OffloadTrainer::early_step_state() const {
  // Part 0 runs in backward, before this iteration's norm: clipping is off (config.h), and the
  // step number and learning rate are this iteration's.
  StepState st;
  st.lr = lr_at(schedule_, steps_done_);
  st.adam_step = adam_steps_ + 1;
  st.grad_scale = 1.0f;
  st.skip = false;
  return st;
}

Status OffloadTrainer::do_optimizer(const BoundPlan& bp, const Task& t) {
  if (t.block < 0) return step_embed(bp, t);
  if (t.part == 0) {
    const double sumsq = slab_sumsq_[static_cast<size_t>(layout_.block_slab(t.block))];
    if (!is_finite_norm(sumsq)) {
      return invalid_argument(
          "non-finite gradient in blk." + std::to_string(t.block) +
          " with optim.alpha < 1: the backward part of the step cannot be skipped exactly; "
          "use optim.alpha = 1 to skip such steps");
    }
    return step_block_part(bp, t, early_step_state());
  }
  return step_block_part(bp, t, state_);
}

Status OffloadTrainer::step_block_part(const BoundPlan& bp, const Task& t, const StepState& st) {
  const auto [lo, hi] = part_range(t.part);
  const int64_t pe = hi - lo;
  const float* grad = static_cast<const float*>(slot_ptr(bp, use_slot(t, 0)));
  float* master = static_cast<float*>(slot_ptr(bp, use_slot(t, 1)));
  float* params_out = static_cast<float*>(slot_ptr(bp, use_slot(t, 3)));
  if (!st.skip) {
    const AdamWHyper h = adamw_hyper(cfg_.optim, st.lr, st.adam_step, st.grad_scale);
    adamw_slab_range(layout_, layout_.block_slab(t.block), lo, hi, master, master + pe,
                     master + 2 * pe, grad, h, cfg_.optim.weight_decay);
  }
  // The working copy is f32 here, so it is the master range itself (skipped or not: the task's
  // reader expects the current params in params_out).
  std::memcpy(params_out + lo, master, static_cast<size_t>(pe * 4));
  return Status::ok_status();
}

Status OffloadTrainer::step_embed(const BoundPlan& bp, const Task& t) {
  const int64_t E = embed_elems_;
  const int64_t ne = layout_.slabs[static_cast<size_t>(layout_.embed_slab())].numel;
  const float* grad = static_cast<const float*>(slot_ptr(bp, use_slot(t, 0)));
  float* master = static_cast<float*>(slot_ptr(bp, use_slot(t, 2)));
  float* params = static_cast<float*>(slot_ptr(bp, use_slot(t, 4)));
  if (!state_.skip) {
    const AdamWHyper h = adamw_hyper(cfg_.optim, state_.lr, state_.adam_step, state_.grad_scale);
    float *m = master + E, *v = master + 2 * E;
    const int64_t nf = E - ne;
    adamw_slab_range(layout_, layout_.embed_slab(), 0, ne, master, m, v, grad, h,
                     cfg_.optim.weight_decay);
    adamw_slab_range(layout_, layout_.final_slab(), 0, nf, master + ne, m + ne, v + ne, grad + ne,
                     h, cfg_.optim.weight_decay);
  }
  std::memcpy(params, master, static_cast<size_t>(E * 4));
  return Status::ok_status();
}

Status OffloadTrainer::do_host_other(const BoundPlan& bp, const Task& t) {
  if (starts_with(t.label, "acc ")) {  // {stage, acc, [acc]}
    const float* stage = static_cast<const float*>(slot_ptr(bp, use_slot(t, 0)));
    const int32_t acc_slot = use_slot(t, 1);
    float* acc = static_cast<float*>(slot_ptr(bp, acc_slot));
    const int64_t n = bp.slots[static_cast<size_t>(acc_slot)]->bytes / 4;
    if (task_reads(t, acc_slot)) {
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < n; ++i) acc[i] += stage[i];
    } else {
      std::memcpy(acc, stage, static_cast<size_t>(n * 4));
    }
    return Status::ok_status();
  }
  if (starts_with(t.label, "sumsq ")) {  // {grad, sums}
    const float* g = static_cast<const float*>(slot_ptr(bp, use_slot(t, 0)));
    if (t.block >= 0) {
      cpu::sum_squares(&slab_sumsq_[static_cast<size_t>(layout_.block_slab(t.block))], g,
                       block_elems_);
    } else {
      const int64_t ne = layout_.slabs[static_cast<size_t>(layout_.embed_slab())].numel;
      cpu::sum_squares(&slab_sumsq_[static_cast<size_t>(layout_.embed_slab())], g, ne);
      cpu::sum_squares(&slab_sumsq_[static_cast<size_t>(layout_.final_slab())], g + ne,
                       embed_elems_ - ne);
    }
    return Status::ok_status();
  }
  if (t.label == "grad.norm") {
    // Note [Exact optimizer semantics] (in_memory_trainer.cpp): slabs summed in layout order.
    double total = 0;
    for (double p : slab_sumsq_) total += p;
    last_norm_sumsq_ = total;
    state_.lr = lr_at(schedule_, steps_done_);
    state_.skip = !is_finite_norm(total);
    if (state_.skip) {
      if (split_elems_ > 0) {
        return invalid_argument(
            "non-finite gradient norm with optim.alpha < 1: the backward part of the step "
            "already ran, so it cannot be skipped exactly; use optim.alpha = 1");
      }
      return Status::ok_status();
    }
    state_.grad_scale = clip_scale(total, cfg_.optim.grad_clip);
    adam_steps_++;
    state_.adam_step = adam_steps_;
    return Status::ok_status();
  }
  return Status(ErrorCode::internal, "no action for task '" + t.label + "'");
}

}  // namespace strata
