// What each task of an offloaded plan does: one action per task kind, each finding its slots by
// role (Note [Task signatures] in task_kind.h). A device task ends with end_task: its stream
// synchronised, or on a device that orders by events its event recorded by run_ordered (Note
// [Ordering by events] in offload_trainer.h).
#include <cmath>
#include <cstring>
#include <limits>

#include "backend/cpu/kernels.h"
#include "model/gpt.h"
#include "model/norm.h"
#include "optim/adamw_layout.h"
#include "optim/grad_clip.h"
#include "train/offload_internal.h"

namespace strata {

void* OffloadTrainer::slot_ptr(const BoundPlan& bp, int32_t slot) const {
  return bp.slots[static_cast<size_t>(slot)]->buf.data();
}

float* OffloadTrainer::f32_of(const BoundPlan& bp, const Task& t, Role role) const {
  const int32_t slot = slot_of(t, role);
  return slot < 0 ? nullptr : static_cast<float*>(slot_ptr(bp, slot));
}

float* OffloadTrainer::block_weights(const BoundPlan& bp, const Task& t) {
  float* params = f32_of(bp, t, Role::params);  // (block elems) f32, or bf16 in bf16 mode
  if (!bf16_) return params;
  // Note [Precision modes]: widened per task into the workspace, on the compute stream ahead of
  // the task's own work, so the block computes in f32 from exactly the bf16 values.
  dev_.convert_bf16_to_f32(*compute_, ws_.params_f32, reinterpret_cast<const bf16_t*>(params),
                           block_elems_);
  return ws_.params_f32;
}

std::optional<BlockGemm> OffloadTrainer::block_gemm(const void* bf16_weights) const {
  if (ws_.gemm_scratch == nullptr) return std::nullopt;  // f32 GEMMs
  // Note [bf16 GEMMs]: the bf16 weights are laid out as their widening in the workspace.
  return BlockGemm{static_cast<const bf16_t*>(bf16_weights), ws_.params_f32, ws_.gemm_scratch};
}

const int32_t* OffloadTrainer::tokens_of(const BoundPlan& bp, const Task& t) const {
  const int64_t BT = cfg_.batch_size * cfg_.seq_len;
  return static_cast<const int32_t*>(slot_ptr(bp, slot_of(t, Role::tokens))) +
         t.micro_batch * 2 * BT;
}

TaskAction OffloadTrainer::bind(const BoundPlan& bp, int32_t index) {
  TaskAction action = bind_kind(bp, index);
  if (!order_by_events_) return action;
  return [this, &bp, index, action = std::move(action)] { return run_ordered(bp, index, action); };
}

Stream* OffloadTrainer::stream_of(Resource r) const {
  switch (r) {
    case Resource::compute:
      return compute_.get();
    case Resource::h2d:
      return h2d_.get();
    case Resource::d2h:
      return d2h_.get();
    case Resource::storage_read:
    case Resource::storage_write:
    case Resource::cpu_optim:
    case Resource::net:
      return nullptr;
  }
  return nullptr;
}

Status OffloadTrainer::run_ordered(const BoundPlan& bp, int32_t index, const TaskAction& action) {
  // Note [Ordering by events]
  Stream* own = stream_of(bp.plan.tasks[static_cast<size_t>(index)].resource);
  for (int32_t p : bp.edges.predecessors(index)) {
    Stream* theirs = stream_of(bp.plan.tasks[static_cast<size_t>(p)].resource);
    if (theirs == nullptr || theirs == own) continue;  // finished on the host, or stream order
    Event& e = *bp.done[static_cast<size_t>(p)];
    if (own != nullptr) {
      e.wait(*own);
    } else {
      e.synchronize();
    }
  }
  Status st = action();
  if (own != nullptr) bp.done[static_cast<size_t>(index)]->record(*own);
  return st;
}

Status OffloadTrainer::prepare_events(BoundPlan& bp) {
  STRATA_ASSIGN_OR_RETURN(bp.edges, happens_before_edges(bp.plan));
  bp.done.clear();
  for (const Task& t : bp.plan.tasks) {
    bp.done.push_back(dev_.create_event());
    // A snapshot's gate (gated_actions) counts a state slot as written when the action returns,
    // which is when the work is done only for host tasks; training state is stepped on the host
    // (the CPU optimizer, storage writes), so no device task may write it.
    if (stream_of(t.resource) == nullptr) continue;
    for (const SlotUse& u : t.uses) {
      STRATA_CHECK_MSG(!u.write || bp.slots[static_cast<size_t>(u.slot)]->state_slabs.empty(),
                       ("device task " + t.label +
                        " writes training state, which the snapshot's gate would count as "
                        "written before its event completes")
                           .c_str());
    }
  }
  return Status::ok_status();
}

void OffloadTrainer::end_task(Stream& s) {
  if (!order_by_events_ || time_device_tasks_) s.synchronize();
}

TaskAction OffloadTrainer::bind_kind(const BoundPlan& bp, int32_t index) {
  const Task& t = bp.plan.tasks[static_cast<size_t>(index)];
  if (is_transfer(t.kind)) return [this, &bp, &t] { return do_transfer(bp, t); };
  using Action = Status (OffloadTrainer::*)(const BoundPlan&, const Task&);
  Action action = nullptr;
  switch (t.kind) {
    case TaskKind::grad_zero:
      action = &OffloadTrainer::do_grad_zero;
      break;
    case TaskKind::embed_forward:
      action = &OffloadTrainer::do_embed_forward;
      break;
    case TaskKind::block_forward:
      action = &OffloadTrainer::do_block_forward;
      break;
    case TaskKind::head_loss:
      action = &OffloadTrainer::do_head_loss;
      break;
    case TaskKind::block_backward:
      action = &OffloadTrainer::do_block_backward;
      break;
    case TaskKind::embed_backward:
      action = &OffloadTrainer::do_embed_backward;
      break;
    case TaskKind::grad_accumulate:
      action = &OffloadTrainer::do_grad_accumulate;
      break;
    case TaskKind::grad_sumsq:
      action = &OffloadTrainer::do_grad_sumsq;
      break;
    case TaskKind::grad_norm:
      action = &OffloadTrainer::do_grad_norm;
      break;
    case TaskKind::block_step:
      action = &OffloadTrainer::do_block_step;
      break;
    case TaskKind::embed_step:
      action = &OffloadTrainer::do_embed_step;
      break;
    case TaskKind::grad_allreduce:
      action = &OffloadTrainer::do_grad_allreduce;
      break;
    case TaskKind::grad_reduce_scatter:
      action = &OffloadTrainer::do_grad_reduce_scatter;
      break;
    case TaskKind::param_allgather:
      action = &OffloadTrainer::do_param_allgather;
      break;
    case TaskKind::norm_allreduce:
      action = &OffloadTrainer::do_norm_allreduce;
      break;
    case TaskKind::param_gather:
      action = &OffloadTrainer::do_param_gather;
      break;
    case TaskKind::grad_reduce_scatter_device:
      action = &OffloadTrainer::do_grad_reduce_scatter_device;
      break;
    case TaskKind::param_allgather_device:
      action = &OffloadTrainer::do_param_allgather_device;
      break;
    case TaskKind::grad_allreduce_device:
      action = &OffloadTrainer::do_grad_allreduce_device;
      break;
    default:
      break;
  }
  if (action == nullptr) {
    return [&t] {
      return Status(ErrorCode::internal, std::string("no action for task kind ") +
                                             task_kind_name(t.kind) + " ('" + t.label + "')");
    };
  }
  return [this, &bp, &t, action] { return (this->*action)(bp, t); };
}

// ---- Transfers ----------------------------------------------------------------------------------

Status OffloadTrainer::store_io(const SlotMemory& m, IoOp op, int64_t offset, void* host,
                                int64_t bytes) {
  // Under O_DIRECT a range that ends the extent moves whole 4 KiB blocks (host buffers are
  // rounded to match): Note [Direct ranges].
  int64_t n = bytes;
  if (store_->options().direct && offset + bytes == m.bytes) n = round_up(bytes, kIoAlign);
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
  const SlotMemory& s = *bp.slots[static_cast<size_t>(slot_of(t, Role::src))];
  const SlotMemory& d = *bp.slots[static_cast<size_t>(slot_of(t, Role::dst))];
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
  end_task(stream);
  return Status::ok_status();
}

// ---- Compute ------------------------------------------------------------------------------------

Status OffloadTrainer::do_grad_zero(const BoundPlan& bp, const Task& t) {
  const int32_t slot = slot_of(t, Role::grad);
  dev_.fill_zero(*compute_, slot_ptr(bp, slot), bp.slots[static_cast<size_t>(slot)]->bytes);
  end_task(*compute_);
  return Status::ok_status();
}

Status OffloadTrainer::do_embed_forward(const BoundPlan& bp, const Task& t) {
  const EmbedView e = embed_slab_view(layout_, f32_of(bp, t, Role::params));
  dev_.embedding_forward(*compute_, f32_of(bp, t, Role::output), tokens_of(bp, t), e.wte, e.wpe,
                         cfg_.batch_size, cfg_.seq_len, cfg_.model.n_embd);
  end_task(*compute_);
  return Status::ok_status();
}

Status OffloadTrainer::do_block_forward(const BoundPlan& bp, const Task& t) {
  float* saved = f32_of(bp, t, Role::saved);
  const BlockActs a = saved != nullptr ? saved_view(saved) : ws_.acts;
  const std::optional<BlockGemm> gemm = block_gemm(f32_of(bp, t, Role::params));
  block_forward(dev_, *compute_, f32_of(bp, t, Role::output), a, f32_of(bp, t, Role::input),
                block_slab_view(layout_, block_weights(bp, t), t.block), dims_,
                gemm ? &*gemm : nullptr);
  end_task(*compute_);
  return Status::ok_status();
}

void OffloadTrainer::head_forward(const float* x, float* embed, const int32_t* targets) {
  Stream& s = *compute_;
  const int64_t BT = cfg_.batch_size * cfg_.seq_len, C = cfg_.model.n_embd,
                V = cfg_.model.vocab_size;
  const int64_t ne = layout_.slabs[static_cast<size_t>(layout_.embed_slab())].numel;
  const EmbedView e = embed_slab_view(layout_, embed);
  const FinalView fin = final_slab_view(layout_, embed + ne);
  // As gpt_forward's head (the same ops in the same order).
  norm_forward(dev_, s, final_norm_spec(cfg_.model), ws_.lnf, ws_.lnf_mean, ws_.lnf_rstd, x,
               fin.lnf_w, fin.lnf_b, BT, C);
  dev_.matmul(s, ws_.logits, ws_.lnf, lm_head_of(e, fin), nullptr, BT, V, C, false, true, false);
  dev_.softmax_cross_entropy_forward(s, ws_.losses, ws_.probs, ws_.logits, targets, BT, V);
}

Status OffloadTrainer::do_head_loss(const BoundPlan& bp, const Task& t) {
  Stream& s = *compute_;
  const int64_t BT = cfg_.batch_size * cfg_.seq_len, C = cfg_.model.n_embd,
                V = cfg_.model.vocab_size, f = 4;
  const int64_t ne = layout_.slabs[static_cast<size_t>(layout_.embed_slab())].numel;
  const float* x = f32_of(bp, t, Role::input);  // (B, T, C) the last block's output
  float* embed = f32_of(bp, t, Role::params);   // the embed group's params
  float* gembed = f32_of(bp, t, Role::grad);    // and their gradient
  float* dact = f32_of(bp, t, Role::dact);      // (B, T, C)
  float* losses = f32_of(bp, t, Role::losses);  // (M, B, T)
  const int32_t* tgt = tokens_of(bp, t) + BT;   // (B, T)
  const EmbedView e = embed_slab_view(layout_, embed), ge = embed_slab_view(layout_, gembed);
  const FinalView fin = final_slab_view(layout_, embed + ne),
                  gfin = final_slab_view(layout_, gembed + ne);
  // The forward head, then gpt_backward's (the same ops in the same order).
  head_forward(x, embed, tgt);
  dev_.copy(s, losses + t.micro_batch * BT, ws_.losses, BT * f);
  dev_.fill_zero(s, ws_.dlogits, BT * V * f);
  dev_.softmax_cross_entropy_backward(s, ws_.dlogits, ws_.probs, tgt, dloss_, BT, V);
  dev_.matmul(s, lm_head_of(ge, gfin), ws_.dlogits, ws_.lnf, nullptr, V, C, BT, true, false, true);
  dev_.matmul(s, ws_.dlnf, ws_.dlogits, lm_head_of(e, fin), nullptr, BT, C, V, false, false, false);
  dev_.fill_zero(s, dact, BT * C * f);
  norm_backward(dev_, s, final_norm_spec(cfg_.model), dact, gfin.lnf_w, gfin.lnf_b, ws_.dlnf, x,
                fin.lnf_w, ws_.lnf_mean, ws_.lnf_rstd, BT, C);
  end_task(s);
  return Status::ok_status();
}

Status OffloadTrainer::do_block_backward(const BoundPlan& bp, const Task& t) {
  Stream& s = *compute_;
  const int64_t BT = cfg_.batch_size * cfg_.seq_len, C = cfg_.model.n_embd, f = 4;
  const BlockView w = block_slab_view(layout_, block_weights(bp, t), t.block);
  const std::optional<BlockGemm> gemm = block_gemm(f32_of(bp, t, Role::params));
  const BlockGemm* g = gemm ? &*gemm : nullptr;
  const float* in = f32_of(bp, t, Role::input);  // (B, T, C) the block's input
  float* dact = f32_of(bp, t, Role::dact);       // (B, T, C) in: d output; out: d input
  float* saved = f32_of(bp, t, Role::saved);     // the saved set, or null: recompute
  const int32_t gslot = slot_of(t, Role::grad);
  float* grad = static_cast<float*>(slot_ptr(bp, gslot));
  if (!reads_role(t, Role::grad)) {  // a fresh per-micro-batch gradient (horizontal)
    dev_.fill_zero(s, grad, bp.slots[static_cast<size_t>(gslot)]->bytes);
  }
  if (!t.fused && saved == nullptr) {
    block_forward(dev_, s, ws_.recompute_out, ws_.acts, in, w, dims_, g);
  }
  const BlockActs a = saved != nullptr ? saved_view(saved) : ws_.acts;
  dev_.fill_zero(s, ws_.dinp, BT * C * f);
  block_backward(dev_, s, ws_.dinp, block_slab_view(layout_, grad, t.block), ws_.scratch, dact, in,
                 a, w, dims_, g);
  dev_.copy(s, dact, ws_.dinp, BT * C * f);
  end_task(s);
  return Status::ok_status();
}

Status OffloadTrainer::do_embed_backward(const BoundPlan& bp, const Task& t) {
  const EmbedView ge = embed_slab_view(layout_, f32_of(bp, t, Role::grad));
  dev_.embedding_backward(*compute_, ge.wte, ge.wpe, f32_of(bp, t, Role::dact), tokens_of(bp, t),
                          cfg_.batch_size, cfg_.seq_len, cfg_.model.n_embd);
  end_task(*compute_);
  return Status::ok_status();
}

BlockActs OffloadTrainer::saved_view(float* saved) const {
  // Note [Saved activations]: the saved set is the prefix of a BlockActs carve; the forward-only
  // tensors stay in the workspace.
  FloatCarver c(saved);
  BlockActs a = block_acts_carve(c, dims_);
  a.attproj = ws_.acts.attproj;
  a.fcproj = ws_.acts.fcproj;
  a.qkv_pre = ws_.acts.qkv_pre;
  a.qkv_rep = ws_.acts.qkv_rep;
  return a;
}

// ---- Gradients on host and the norm -------------------------------------------------------------

Status OffloadTrainer::do_grad_accumulate(const BoundPlan& bp, const Task& t) {
  const float* src = f32_of(bp, t, Role::src);
  const int32_t acc_slot = slot_of(t, Role::grad);
  float* acc = static_cast<float*>(slot_ptr(bp, acc_slot));
  int64_t n = bp.slots[static_cast<size_t>(acc_slot)]->bytes / 4;
  if (grads_sharded() && t.block >= 0) {  // Note [Sharded optimizer state]: this rank's shard
    const PartShard sh = owned_part(-1);
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

Status OffloadTrainer::do_grad_sumsq(const BoundPlan& bp, const Task& t) {
  float* g = f32_of(bp, t, Role::grad);
  if (t.block >= 0 && t.block == poison_block_ && steps_done_ == poison_step_) {
    g[0] = std::numeric_limits<float>::quiet_NaN();  // poison_gradient_for_test
  }
  if (t.block >= 0) {
    double& sum = slab_sumsq_[static_cast<size_t>(layout_.block_slab(t.block))];
    if (!sharded()) {
      cpu::sum_squares(&sum, g, block_elems_);
      return Status::ok_status();
    }
    // Note [Sharded optimizer state]: this rank's shard of each part, in part order.
    sum = 0;
    for (const auto& [name, part] : optim_parts(t.block)) {
      const PartShard sh = owned_part(part);
      double s = 0;
      cpu::sum_squares(&s, kept_grad_at(g, sh.begin), sh.end - sh.begin);
      sum += s;
    }
    return Status::ok_status();
  }
  const int64_t ne = layout_.slabs[static_cast<size_t>(layout_.embed_slab())].numel;
  cpu::sum_squares(&slab_sumsq_[static_cast<size_t>(layout_.embed_slab())], g, ne);
  cpu::sum_squares(&slab_sumsq_[static_cast<size_t>(layout_.final_slab())], g + ne,
                   embed_elems_ - ne);
  return Status::ok_status();
}

Status OffloadTrainer::do_grad_allreduce(const BoundPlan& bp, const Task& t) {
  // Note [Deterministic all-reduce]: every rank gets the same bits, so the norm, the clip factor
  // and the step that follow agree on every rank without another word between them.
  return world_.all_reduce_sum(f32_of(bp, t, Role::grad),
                               t.block >= 0 ? block_elems_ : embed_elems_);
}

Status OffloadTrainer::do_grad_reduce_scatter(const BoundPlan& bp, const Task& t) {
  // Note [Sharded optimizer state]: each part's shards land on their owners.
  float* g = f32_of(bp, t, Role::grad);  // (block elems)
  for (const auto& [name, part] : optim_parts(t.block)) {
    const PartShard sh = owned_part(part);
    STRATA_RETURN_IF_ERROR(
        world_.reduce_scatter_sum(g + sh.part_begin, sh.part_end - sh.part_begin));
  }
  return Status::ok_status();
}

// The collectives on device memory (Note [ZeRO-3 on the device]) are host tasks of the net queue
// whose moves and adds run on net_stream_: each is done when its action returns.
Status OffloadTrainer::device_collective(const Task& t,
                                         const std::function<Status(DeviceCollectives&)>& body) {
  if (!device_sum_) {
    return Status(ErrorCode::internal, "task " + t.label + " without collectives on the device");
  }
  STRATA_RETURN_IF_ERROR(body(*device_sum_));
  net_stream_->synchronize();
  return Status::ok_status();
}

Status OffloadTrainer::do_grad_reduce_scatter_device(const BoundPlan& bp, const Task& t) {
  // The same shards as do_grad_reduce_scatter.
  float* g = f32_of(bp, t, Role::grad);  // (block elems) device memory
  return device_collective(t, [&](DeviceCollectives& dc) {
    for (const auto& [name, part] : optim_parts(t.block)) {
      const PartShard sh = owned_part(part);
      STRATA_RETURN_IF_ERROR(
          dc.reduce_scatter_sum(*net_stream_, g + sh.part_begin, sh.part_end - sh.part_begin));
    }
    return Status::ok_status();
  });
}

Status OffloadTrainer::do_param_allgather_device(const BoundPlan& bp, const Task& t) {
  // gather_params on the device copy of the block.
  const ParamsPart p = params_part(t.part);
  char* block = static_cast<char*>(slot_ptr(bp, slot_of(t, Role::params)));  // (block elems)
  return device_collective(t, [&](DeviceCollectives& dc) {
    return dc.all_gather(*net_stream_, block + p.at, p.count, p.width);
  });
}

Status OffloadTrainer::do_grad_allreduce_device(const BoundPlan& bp, const Task& t) {
  float* g = f32_of(bp, t, Role::grad);  // (embed elems) device memory
  return device_collective(
      t, [&](DeviceCollectives& dc) { return dc.all_reduce_sum(*net_stream_, g, embed_elems_); });
}

Status OffloadTrainer::do_param_allgather(const BoundPlan& bp, const Task& t) {
  return gather_params(slot_ptr(bp, slot_of(t, Role::params)), t.part);
}

Status OffloadTrainer::do_param_gather(const BoundPlan& bp, const Task& t) {
  // Note [Sharded working params]: the task's src is the block's store (params.store.blkL), so
  // this is the same read-and-gather as outside plans, into the task's stage.
  return params_store_io(IoOp::read, t.block, slot_ptr(bp, slot_of(t, Role::dst)), t.part);
}

OffloadTrainer::ParamsPart OffloadTrainer::params_part(int32_t part) const {
  const PartShard sh = owned_part(part);
  const int64_t width = bf16_ ? 2 : 4;  // Note [Precision modes]
  return {sh.part_begin * width, sh.part_end - sh.part_begin, width};
}

Status OffloadTrainer::gather_params(void* params, int32_t part) {
  const ParamsPart p = params_part(part);
  char* block = static_cast<char*>(params);  // (block elems) f32 or bf16
  return world_.all_gather(block + p.at, p.count, p.width);
}

Status OffloadTrainer::do_norm_allreduce(const BoundPlan&, const Task&) {
  // The blocks' sums of squares are this rank's shards'; the embed group's are whole already.
  std::vector<double> blocks(static_cast<size_t>(cfg_.model.n_layer));  // (L)
  for (int64_t l = 0; l < cfg_.model.n_layer; ++l) {
    blocks[static_cast<size_t>(l)] = slab_sumsq_[static_cast<size_t>(layout_.block_slab(l))];
  }
  STRATA_RETURN_IF_ERROR(world_.all_reduce_sum(blocks.data(), cfg_.model.n_layer));
  for (int64_t l = 0; l < cfg_.model.n_layer; ++l) {
    slab_sumsq_[static_cast<size_t>(layout_.block_slab(l))] = blocks[static_cast<size_t>(l)];
  }
  return Status::ok_status();
}

Status OffloadTrainer::do_grad_norm(const BoundPlan&, const Task&) {
  // Note [Exact optimizer semantics] (in_memory_trainer.cpp): slabs summed in layout order.
  double total = 0;
  for (double p : slab_sumsq_) total += p;
  last_norm_sumsq_ = total;
  state_.lr = lr_at(schedule_, steps_done_);
  state_.skip = !is_finite_norm(total);
  if (state_.skip) {
    if (split_elems_ > 0 && !speculative_) {
      return invalid_argument(
          "non-finite gradient norm with optim.alpha < 1 and clipping off: the backward part of "
          "the step already ran, so it cannot be skipped exactly; use optim.alpha = 1, or "
          "clipping on (optim.grad_clip > 0), whose speculative steps are repaired");
    }
    return Status::ok_status();
  }
  state_.grad_scale = clip_scale(total, cfg_.optim.grad_clip);
  adam_steps_++;
  state_.adam_step = adam_steps_;
  return Status::ok_status();
}

// ---- Optimizer steps ----------------------------------------------------------------------------

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

Status OffloadTrainer::do_block_step(const BoundPlan& bp, const Task& t) {
  // A step that reads the clip slot runs after the norm: the norm's state. Otherwise it is an
  // early part 0 (Note [Optimizer split]), which assumes a finite gradient that does not clip:
  // speculatively with clipping on (Note [Speculative steps]: validated after the norm), or as
  // the step itself with clipping off.
  if (reads_role(t, Role::clip)) return step_block_part(bp, t, state_);
  if (speculative_) return step_block_part(bp, t, early_step_state());
  const double sumsq = slab_sumsq_[static_cast<size_t>(layout_.block_slab(t.block))];
  if (!is_finite_norm(sumsq)) {
    return invalid_argument(
        "non-finite gradient in blk." + std::to_string(t.block) +
        " with optim.alpha < 1: the backward part of the step cannot be skipped exactly; "
        "use optim.alpha = 1 to skip such steps");
  }
  return step_block_part(bp, t, early_step_state());
}

Status OffloadTrainer::step_block_part(const BoundPlan& bp, const Task& t, const StepState& st) {
  // This rank's shard of the part (Note [Sharded optimizer state]; one rank: all of it).
  const PartShard sh = owned_part(t.part);
  const int64_t lo = sh.begin, hi = sh.end, pe = hi - lo, S = sh.stride;
  const float* grad = kept_grad_at(f32_of(bp, t, Role::grad), lo);  // at element lo, as the state
  float* master = f32_of(bp, t, Role::state);  // (3, S): master, m, v of the shard
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
  bf16_t* out_bf16 = bf16_ ? reinterpret_cast<bf16_t*>(params_lo) : nullptr;
  if (!st.skip) {
    const AdamWHyper h = adamw_hyper(cfg_.optim, st.lr, st.adam_step, st.grad_scale);
    adamw_slab_range(layout_, layout_.block_slab(t.block), lo, hi, master, master + S,
                     master + 2 * S, out_bf16, grad, h, cfg_.optim.weight_decay);
  }
  // Skipped or not, the task's reader expects the current params in params_out.
  // An empty shard has no params to write (and params_at no address for them).
  if (pe > 0 && !bf16_) {
    // The working copy is f32, so it is the master range itself.
    std::memcpy(params_lo, master, static_cast<size_t>(pe * 4));
  } else if (pe > 0 && st.skip) {
    cpu::convert_f32_to_bf16(out_bf16, master, pe);
  }
  // (bf16 and stepped: AdamW wrote every tensor element; the padding between tensors is zero in
  // every params buffer, from the initial state on, and AdamW never touches it.)
  return Status::ok_status();
}

// The embed group's elements [lo, hi) a step covers (Note [Embed step in chunks]).
std::pair<int64_t, int64_t> OffloadTrainer::embed_chunk_range(int32_t chunk) const {
  if (chunk < 0) return {0, embed_elems_};
  const int64_t lo = chunk * embed_chunk_elems_;
  return {lo, std::min(embed_elems_, lo + embed_chunk_elems_)};
}

Status OffloadTrainer::do_embed_step(const BoundPlan& bp, const Task& t) {
  const auto [lo, hi] = embed_chunk_range(t.part);
  const int64_t n = hi - lo;
  const int64_t ne = layout_.slabs[static_cast<size_t>(layout_.embed_slab())].numel;
  const float* grad = f32_of(bp, t, Role::grad);     // (E), the whole group's
  float* master = f32_of(bp, t, Role::state);        // (3, n): master, m, v of [lo, hi)
  float* params = f32_of(bp, t, Role::params) + lo;  // (n) working params of [lo, hi)
  if (!state_.skip) {
    const AdamWHyper h = adamw_hyper(cfg_.optim, state_.lr, state_.adam_step, state_.grad_scale);
    float *m = master + n, *v = master + 2 * n;
    // The range's part in each slab: the embedding [0, ne), the final norm [ne, E).
    if (lo < ne) {
      adamw_slab_range(layout_, layout_.embed_slab(), lo, std::min(hi, ne), master, m, v, nullptr,
                       grad + lo, h, cfg_.optim.weight_decay);
    }
    if (hi > ne) {
      const int64_t at = std::max(lo, ne) - lo;  // where the final slab starts in the range
      adamw_slab_range(layout_, layout_.final_slab(), lo + at - ne, hi - ne, master + at, m + at,
                       v + at, nullptr, grad + lo + at, h, cfg_.optim.weight_decay);
    }
  }
  if (bf16_) {
    // Note [Precision modes]: the embed group is small and lives on the device, so it stays f32
    // there, holding the master's bf16 rounding.
    round_to_bf16(params, master, n);
  } else {
    std::memcpy(params, master, static_cast<size_t>(n * 4));
  }
  return Status::ok_status();
}

}  // namespace strata
