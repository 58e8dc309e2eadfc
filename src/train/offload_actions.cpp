// OffloadActions (train/offload_actions.h): binding a plan's tasks to their actions, the
// transfers, and the compute stream's actions. A device task ends with end_task: its stream
// synchronised, or on a device that orders by events its event recorded by run_ordered.
#include "train/offload_actions.h"

#include <algorithm>
#include <array>
#include <utility>

#include "model/lm_head.h"
#include "sched/slot_names.h"

namespace strata {

OffloadActions::OffloadActions(Device& dev, Communicator& world, const OffloadShape& shape,
                               OffloadState& state, OffloadStreams& streams, StepProgress& progress,
                               std::unique_ptr<DeviceCollectives> device_sum)
    : dev_(dev),
      world_(world),
      sh_(shape),
      state_(state),
      streams_(streams),
      progress_(progress),
      device_sum_(std::move(device_sum)) {
  const TrainConfig& cfg = shape.cfg;
  schedule_ = LrSchedule{cfg.optim.lr, cfg.optim.warmup_steps, cfg.steps, cfg.optim.min_lr_ratio};
  set_counted_targets(cfg.batch_size * cfg.seq_len * cfg.grad_accum * cfg.ranks);
  order_by_events_ = !shares_host_memory(dev);  // Note [Ordering by events]
  slab_sumsq_.assign(shape.layout.slabs.size(), 0.0);
}

Status OffloadActions::prepare() {
  // The compute workspace is a slot too, so the device budget covers it.
  FloatCarver carver(state_.slot(slot_names::kWorkspace).buf.f32());
  ws_ = carve_offload_workspace(carver, sh_.dims, sh_.cfg, sh_.block_elems);
  // The collectives' scratch, now rather than at the first block (embed: all-reduced).
  if (device_sum_) {
    STRATA_RETURN_IF_ERROR(device_sum_->reserve(std::max(sh_.block_elems, sh_.embed_elems)));
  }
  return Status::ok_status();
}

std::optional<BlockGemm> OffloadActions::block_gemm(const void* bf16_weights) const {
  if (ws_.gemm_scratch == nullptr) return std::nullopt;  // f32 GEMMs
  // Note [bf16 GEMMs]: the bf16 weights are laid out as their widening in the workspace.
  return BlockGemm{static_cast<const bf16_t*>(bf16_weights), ws_.params_f32, ws_.gemm_scratch};
}

Status OffloadActions::bind(BoundPlan& bp) {
  bp.slots.clear();
  for (const Slot& s : bp.plan.slots) bp.slots.push_back(&state_.slot(s.name));
  if (order_by_events_) STRATA_RETURN_IF_ERROR(prepare_events(bp));
  bp.actions.clear();
  for (int32_t i = 0; i < static_cast<int32_t>(bp.plan.tasks.size()); ++i) {
    bp.actions.push_back(action_of(bp, i));
  }
  return Status::ok_status();
}

namespace {

// Note [One action per kind]: act<K> for every TaskKind K, indexed by kind.
using Action = Status (OffloadActions::*)(const BoundPlan&, const Task&);
template <size_t... K>
constexpr std::array<Action, sizeof...(K)> action_table(std::index_sequence<K...>) {
  return {&OffloadActions::act<static_cast<TaskKind>(K)>...};
}
constexpr std::array<Action, kTaskKindCount> kActions =
    action_table(std::make_index_sequence<kTaskKindCount>());

}  // namespace

TaskAction OffloadActions::action_of(const BoundPlan& bp, int32_t index) {
  const Task& t = bp.plan.tasks[static_cast<size_t>(index)];
  const Action action = kActions[static_cast<size_t>(t.kind)];
  TaskAction run = [this, &bp, &t, action] { return (this->*action)(bp, t); };
  if (!order_by_events_) return run;
  return [this, &bp, index, run = std::move(run)] { return run_ordered(bp, index, run); };
}

Stream* OffloadActions::stream_of(Resource r) const {
  switch (r) {
    case Resource::compute:
      return streams_.compute.get();
    case Resource::h2d:
      return streams_.h2d.get();
    case Resource::d2h:
      return streams_.d2h.get();
    case Resource::storage_read:
    case Resource::storage_write:
    case Resource::cpu_optim:
    case Resource::net:
      return nullptr;
  }
  return nullptr;
}

Status OffloadActions::run_ordered(const BoundPlan& bp, int32_t index, const TaskAction& action) {
  // Note [Ordering by events]
  Stream* own = stream_of(bp.plan.tasks[static_cast<size_t>(index)].resource());
  for (int32_t p : bp.edges.predecessors(index)) {
    Stream* theirs = stream_of(bp.plan.tasks[static_cast<size_t>(p)].resource());
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

Status OffloadActions::prepare_events(BoundPlan& bp) {
  STRATA_ASSIGN_OR_RETURN(bp.edges, happens_before_edges(bp.plan));
  bp.done.clear();
  for (const Task& t : bp.plan.tasks) {
    bp.done.push_back(dev_.create_event());
    // A snapshot's gate (gated_actions) counts a state slot as written when the action returns,
    // which is when the work is done only for host tasks; training state is stepped on the host
    // (the CPU optimizer, storage writes), so no device task may write it.
    if (stream_of(t.resource()) == nullptr) continue;
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

void OffloadActions::end_task(Stream& s) {
  if (!order_by_events_ || time_device_tasks_) s.synchronize();
}

// ---- Slots and weights -----------------------------------------------------------------------

void* OffloadActions::slot_ptr(const BoundPlan& bp, int32_t slot) const {
  return bp.slots[static_cast<size_t>(slot)]->buf.data();
}

float* OffloadActions::f32_of(const BoundPlan& bp, const Task& t, Role role) const {
  const int32_t slot = slot_of(t, role);
  return slot < 0 ? nullptr : static_cast<float*>(slot_ptr(bp, slot));
}

const int32_t* OffloadActions::tokens_of(const BoundPlan& bp, const Task& t) const {
  const int64_t BT = sh_.cfg.batch_size * sh_.cfg.seq_len;
  return static_cast<const int32_t*>(slot_ptr(bp, slot_of(t, Role::tokens))) +
         t.micro_batch * 2 * BT;
}

float* OffloadActions::block_weights(const BoundPlan& bp, const Task& t) {
  float* params = f32_of(bp, t, Role::params);  // (block elems) f32, or bf16 in bf16 mode
  if (!sh_.bf16) return params;
  // Note [Precision modes]: widened per task into the workspace, on the compute stream ahead of
  // the task's own work, so the block computes in f32 from exactly the bf16 values.
  dev_.convert_bf16_to_f32(*streams_.compute, ws_.params_f32,
                           reinterpret_cast<const bf16_t*>(params), sh_.block_elems);
  return ws_.params_f32;
}

BlockActs OffloadActions::saved_view(float* saved) const {
  // Note [Saved activations]: the saved set is the prefix of a BlockActs carve; the forward-only
  // tensors stay in the workspace.
  FloatCarver c(saved);
  BlockActs a = block_acts_carve(c, sh_.dims);
  a.attproj = ws_.acts.attproj;
  a.fcproj = ws_.acts.fcproj;
  a.qkv_pre = ws_.acts.qkv_pre;
  a.qkv_rep = ws_.acts.qkv_rep;
  return a;
}

// ---- Transfers -------------------------------------------------------------------------------

Status OffloadActions::transfer(const BoundPlan& bp, const Task& t) {
  const SlotMemory& s = *bp.slots[static_cast<size_t>(slot_of(t, Role::src))];
  const SlotMemory& d = *bp.slots[static_cast<size_t>(slot_of(t, Role::dst))];
  if (s.tier == Tier::storage) {
    return state_.store_io(s, IoOp::read, t.src_offset,
                           static_cast<char*>(d.buf.data()) + t.dst_offset, t.bytes);
  }
  if (d.tier == Tier::storage) {
    return state_.store_io(d, IoOp::write, t.dst_offset,
                           static_cast<char*>(s.buf.data()) + t.src_offset, t.bytes);
  }
  Stream& stream = t.resource() == Resource::h2d ? *streams_.h2d : *streams_.d2h;
  dev_.copy(stream, static_cast<char*>(d.buf.data()) + t.dst_offset,
            static_cast<const char*>(s.buf.data()) + t.src_offset, t.bytes);
  end_task(stream);
  return Status::ok_status();
}

// ---- Compute ---------------------------------------------------------------------------------

BlockActs OffloadActions::training_acts(const BlockActs& a, const Task& t) const {
  if (sh_.cfg.lora.dropout <= 0) return a;
  const LoraDropoutAt at{static_cast<uint64_t>(sh_.cfg.seed), progress_.steps_done,
                         sh_.rank * sh_.cfg.grad_accum + t.micro_batch};
  return with_dropout(a, &at, t.block);
}

STRATA_ACTION(grad_zero) {
  const int32_t slot = slot_of(t, Role::grad);
  dev_.fill_zero(*streams_.compute, slot_ptr(bp, slot), bp.slots[static_cast<size_t>(slot)]->bytes);
  end_task(*streams_.compute);
  return Status::ok_status();
}

STRATA_ACTION(embed_forward) {
  const EmbedView e = embed_slab_view(sh_.layout, f32_of(bp, t, Role::params));
  dev_.embedding_forward(*streams_.compute, f32_of(bp, t, Role::output), tokens_of(bp, t), e.wte,
                         e.wpe, sh_.cfg.batch_size, sh_.cfg.seq_len, sh_.cfg.model.n_embd);
  end_task(*streams_.compute);
  return Status::ok_status();
}

STRATA_ACTION(block_forward) {
  float* saved = f32_of(bp, t, Role::saved);
  const BlockActs a = training_acts(saved != nullptr ? saved_view(saved) : ws_.acts, t);
  const std::optional<BlockGemm> gemm = block_gemm(f32_of(bp, t, Role::params));
  block_forward(dev_, *streams_.compute, f32_of(bp, t, Role::output), a, f32_of(bp, t, Role::input),
                block_slab_view(sh_.layout, block_weights(bp, t), t.block), sh_.dims,
                gemm ? &*gemm : nullptr);
  end_task(*streams_.compute);
  return Status::ok_status();
}

STRATA_ACTION(head_loss) {
  Stream& s = *streams_.compute;
  const int64_t BT = sh_.tokens_per_micro_batch(), ne = sh_.embed_slab_elems, f = 4;
  const float* x = f32_of(bp, t, Role::input);  // (B, T, C) the last block's output
  float* embed = f32_of(bp, t, Role::params);   // the embed group's params
  float* gembed = f32_of(bp, t, Role::grad);    // and their gradient (null: all frozen)
  float* dact = f32_of(bp, t, Role::dact);      // (B, T, C)
  float* losses = f32_of(bp, t, Role::losses);  // (M, B, T)
  const int32_t* tgt = tokens_of(bp, t) + BT;   // (B, T)
  const EmbedView e = embed_slab_view(sh_.layout, embed),
                  ge = embed_slab_view(sh_.layout, gembed, ViewOf::grads);
  const FinalView fin = final_slab_view(sh_.layout, embed + ne),
                  gfin = final_slab_view(sh_.layout, gembed != nullptr ? gembed + ne : nullptr,
                                         ViewOf::grads);
  lm_head_forward(dev_, s, ws_.head, x, e, fin, tgt, sh_.cfg.model, BT);
  dev_.copy(s, losses + t.micro_batch * BT, ws_.head.losses, BT * f);
  lm_head_backward(dev_, s, dact, ge, gfin, ws_.head, x, e, fin, tgt, dloss_, sh_.cfg.model, BT);
  end_task(s);
  return Status::ok_status();
}

STRATA_ACTION(block_backward) {
  Stream& s = *streams_.compute;
  const int64_t BT = sh_.cfg.batch_size * sh_.cfg.seq_len, C = sh_.cfg.model.n_embd, f = 4;
  const BlockView w = block_slab_view(sh_.layout, block_weights(bp, t), t.block);
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
    block_forward(dev_, s, ws_.recompute_out, training_acts(ws_.acts, t), in, w, sh_.dims, g);
  }
  const BlockActs a = training_acts(saved != nullptr ? saved_view(saved) : ws_.acts, t);
  dev_.fill_zero(s, ws_.dinp, BT * C * f);
  // The gradient covers the block's trained elements (Note [Frozen base]).
  const BlockView gw = block_slab_grad_view(sh_.layout, grad, t.block, sh_.frozen_elems);
  block_backward(dev_, s, ws_.dinp, gw, ws_.scratch, dact, in, a, w, sh_.dims, g);
  dev_.copy(s, dact, ws_.dinp, BT * C * f);
  end_task(s);
  return Status::ok_status();
}

STRATA_ACTION(embed_backward) {
  const EmbedView ge = embed_slab_view(sh_.layout, f32_of(bp, t, Role::grad), ViewOf::grads);
  if (ge.wte == nullptr) {  // a frozen embedding (Note [LoRA])
    end_task(*streams_.compute);
    return Status::ok_status();
  }
  dev_.embedding_backward(*streams_.compute, ge.wte, ge.wpe, f32_of(bp, t, Role::dact),
                          tokens_of(bp, t), sh_.cfg.batch_size, sh_.cfg.seq_len,
                          sh_.cfg.model.n_embd);
  end_task(*streams_.compute);
  return Status::ok_status();
}

}  // namespace strata
