// The vertical (GreedySnake) plan generator; see schedule_vertical.h for the shape of the plan.
// VerticalPlan reads top to bottom: slots, then the phases of one iteration (forward_block,
// last_block, backward_block), with the optimizer split (pending_step, finish_block) and the
// activation policy (store_acts, load_acts) each in one place.
#include "sched/schedule_vertical.h"

#include <array>
#include <string>
#include <vector>

#include "sched/schedule_common.h"
#include "sched/slot_names.h"

namespace strata {

int32_t vertical_micro_batch(int32_t block, int32_t position, int32_t micro_batches) {
  return block % 2 == 0 ? position : micro_batches - 1 - position;
}

bool vertical_checkpoint_pinned(int32_t position, int32_t micro_batches) {
  return position < 2 || position >= micro_batches - 2;
}

bool vertical_acts_forwarded(int32_t block, int32_t position, int32_t blocks) {
  return block == blocks - 2 && position < 2;
}

namespace {

namespace names = slot_names;

class VerticalPlan {
 public:
  explicit VerticalPlan(const ScheduleSpec& s)
      : s_(s),
        L_(s.blocks),
        M_(s.micro_batches),
        tiers_(block_tiers(s)),
        has_part0_(s.split_elems > s.frozen_elems),
        has_part1_(s.block_elems <= 0 || s.split_elems < s.block_elems),
        early_part0_(has_part0_ && !s.defer_part0),
        keep_whole_grad_(s.defer_part0 || s.speculative),
        c_(add_common_slots(b_, s)) {
    add_block_slots();
    add_acts_slots();
    add_buffers();
    pending_.assign(static_cast<size_t>(L_), s.pending_steps && has_part1_);
    pending0_.assign(static_cast<size_t>(L_), s.pending_steps && s.pending_part0 && has_part0_);
    params_slot_.assign(static_cast<size_t>(L_), -1);
  }

  Plan build() {
    if (!s_.iteration) {  // the flush: only the pending steps; or the repair
      for (int l = 0; l < L_; ++l) {
        if (s_.repair) {
          repair_part0(l);
        } else {
          pending_step(l, /*fetch=*/false);
        }
      }
      return b_.take();
    }
    add_iteration_start(b_, c_, s_);
    fetch_params(0);
    emit_queued_fetch();
    for (int l = 0; l + 1 < L_; ++l) forward_block(l);
    last_block();
    // Backward of blocks L-2..0, each in its forward order (continuing the snake).
    if (L_ >= 2) fetch_params(L_ - 2);
    emit_queued_fetch();
    for (int l = L_ - 2; l >= 0; --l) backward_block(l);
    for (int m = 0; m < M_; ++m) {
      b_.task(TaskKind::embed_backward, {.micro_batch = m},
              {slot_read(dact_[m], Role::dact), slot_read(c_.tokens_device, Role::tokens),
               slot_read(c_.embed_grad, Role::grad), slot_write(c_.embed_grad, Role::grad)});
    }
    // Block steps: part 0 ran in backward, part 1 runs in the next plan (pending_step).
    add_iteration_end(b_, c_, s_, optim_stage_, [] {});
    return b_.take();
  }

 private:
  // ---- Slots ----------------------------------------------------------------------------------
  void add_block_slots() {
    for (int l = 0; l < L_; ++l) {
      params_store_.push_back(
          b_.slot(names::params_store(l), tiers_.params[l], params_store_bytes(s_), true));
      std::array<int32_t, 2> parts{-1, -1};
      for (int part = 0; part < 2; ++part) {
        if (part == 0 ? has_part0_ : has_part1_) {
          parts[part] = b_.slot(names::optim_store(l, part), tiers_.optim[l],
                                optim_part_bytes(s_, part), true);
        }
      }
      optim_store_.push_back(parts);
      optim_spec_.push_back(
          s_.speculative || s_.repair
              ? b_.slot(names::optim_spec(l), tiers_.optim[l], optim_part_bytes(s_, 0))
              : -1);
      // Read by the pending steps (and the repair) before this iteration's backward writes it
      // again. On storage only the ranges they need are written and read (an early part 0
      // steps from the stage).
      grad_store_.push_back(b_.slot(
          names::grad_store(l), tiers_.grads[l],
          tiers_.grads[l] == Tier::storage ? vertical_kept_grad_bytes(s_) : s_.block_grad_bytes,
          s_.pending_steps || s_.repair));
      ckpt_.emplace_back(static_cast<size_t>(M_), -1);
      for (int i = 0; s_.iteration && i < M_; ++i) {
        const int m = vertical_micro_batch(l, i, M_);
        const Tier t = vertical_checkpoint_pinned(i, M_) ? Tier::host : tiers_.checkpoints[l];
        ckpt_[l][m] = b_.slot(names::ckpt(l, m), t, s_.checkpoint_bytes);
      }
    }
  }

  // Saved activations (docs/design.md §6): per block the policy, per (block, micro-batch) where
  // its saved set lives between forward and backward.
  ActPolicy acts_policy(int l) const {
    return s_.acts_at.empty() || l == L_ - 1 ? ActPolicy::recompute
                                             : s_.acts_at[static_cast<size_t>(l)];
  }
  static bool offloaded(ActPolicy p) { return p == ActPolicy::host || p == ActPolicy::storage; }

  void add_acts_slots() {
    acts_.assign(static_cast<size_t>(L_), std::vector<int32_t>(static_cast<size_t>(M_), -1));
    for (int l = 0; s_.iteration && l < L_; ++l) {
      const ActPolicy p = acts_policy(l);
      if (p == ActPolicy::recompute) continue;
      any_acts_offloaded_ |= offloaded(p);
      for (int i = 0; i < M_; ++i) {
        const int m = vertical_micro_batch(l, i, M_);
        const bool forwarded = p == ActPolicy::storage && vertical_acts_forwarded(l, i, L_);
        const Tier t = p == ActPolicy::keep                ? Tier::device
                       : p == ActPolicy::host || forwarded ? Tier::host
                                                           : Tier::storage;
        any_acts_on_storage_ |= t == Tier::storage;
        acts_[l][m] = b_.slot(names::acts(l, m), t, s_.acts_bytes);
      }
    }
  }

  void add_buffers() {
    const int64_t A = s_.acts_bytes, C = s_.checkpoint_bytes, P = s_.block_param_bytes;
    // Saved sets leave the device through double buffers (unless compute reaches host memory),
    // and storage through host stages.
    const bool device_acts = any_acts_offloaded_ && !s_.compute_reads_host;
    acts_out_ = add_ring(b_, names::kActsOutBuf, Tier::device, A, device_acts).slots;
    acts_in_ = add_ring(b_, names::kActsInBuf, Tier::device, A, device_acts).slots;
    const bool acts_stage = any_acts_offloaded_ && any_acts_on_storage_;
    acts_wstage_ = add_ring(b_, names::kActsWstage, Tier::host, A, acts_stage);
    acts_rstage_ = add_ring(b_, names::kActsRstage, Tier::host, A, acts_stage);
    for (int m = 0; s_.iteration && m < M_; ++m) {
      dact_.push_back(b_.slot(names::dact(m), Tier::device, C));
    }
    last_out_ = b_.slot(names::kLastOut, Tier::device, C);  // the last block's output
    params_buf_ = add_ring(b_, names::kParamsBuf, Tier::device, P).slots;
    act_buf_ = add_ring(b_, names::kActBuf, Tier::device, C).slots;
    bwd_in_ = add_ring(b_, names::kBwdInBuf, Tier::device, C).slots;
    grad_acc_ = add_ring(b_, names::kGradAccBuf, Tier::device, s_.block_grad_bytes).slots;
    // A fetch gathers a sharded block there (Note [Sharded working params]), unless on the device.
    params_stage_ = add_ring(b_, names::kParamsStage, Tier::host, P,
                             tiers_.params_on_storage || params_gather(s_) == ParamsGather::host);
    // Only part 0 (in backward, or its repair) steps into it: at alpha 1 it is not needed.
    params_wstage_ =
        add_ring(b_, names::kParamsWstage, Tier::host, P, tiers_.params_on_storage && has_part0_);
    ckpt_wstage_ = add_ring(b_, names::kCkptWstage, Tier::host, C, tiers_.checkpoints_on_storage);
    ckpt_rstage_ = add_ring(b_, names::kCkptRstage, Tier::host, C, tiers_.checkpoints_on_storage);
    optim_stage_ = add_ring(b_, names::kOptimStage, Tier::host, optim_stage_bytes(s_),
                            tiers_.optim_on_storage || s_.embed_optim == Placement::storage);
    grad_wstage_ = add_ring(b_, names::kGradWstage, Tier::host, s_.block_grad_bytes,
                            tiers_.grads_on_storage && s_.iteration);
    grad_rstage_ =
        add_ring(b_, names::kGradRstage, Tier::host, s_.block_grad_bytes,
                 tiers_.grads_on_storage && (has_part1_ || s_.pending_part0 || s_.repair));
  }

  // ---- Parameters and the optimizer split (Note [Optimizer split]) ----------------------------
  // `speculative`: part 0 stepped before the norm is known, or its repair, into the block's
  // optim.spec slot (Note [Speculative steps]).
  // `gather`: this plan fetches params_out (Note [Sharded working params]).
  void step(int l, int part, int32_t grad, int32_t params_out, bool needs_norm,
            bool speculative = false, bool gather = false) {
    add_optimizer_step(b_, c_, s_,
                       {.block = l,
                        .part = part,
                        .grad = grad,
                        .state_store = optim_store_[l][part],
                        .params_out = params_out,
                        .params_store = params_store_[l],
                        .needs_norm = needs_norm,
                        .state_out = speculative ? optim_spec_[l] : -1,
                        .gather = gather},
                       optim_stage_);
  }

  // The pending steps of block l (the previous iteration's gradient: part 1, and part 0 when
  // that iteration deferred it), then, when `fetch`, the block's params read toward the device.
  // On storage, the new params land in the fetch's stage and only the range no pending step
  // writes (part 0's, when it ran in backward) is read from storage. In host memory the steps
  // write the store, and with several ranks the fetch gathers the block from every rank's store
  // into its stage (Note [Sharded working params]), or copies this rank's ranges from the store
  // to be gathered on the device (Note [ZeRO-3 on the device]). Returns the host slot the device
  // copy reads from.
  int32_t pending_step(int l, bool fetch) {
    const int k = fetch_count_++ % 2;
    const bool on_storage = tiers_.params[l] == Tier::storage;
    const int32_t stage = params_stage_.slots.empty() ? -1 : params_stage_.slots[k];
    const bool pending = pending_[l] || pending0_[l];
    if (pending) {
      const bool part0 = pending0_[l], part1 = pending_[l];
      pending_[l] = pending0_[l] = false;
      if (on_storage && fetch) add_frozen_params_read(b_, s_, l, params_store_[l], stage);
      if (on_storage && fetch && !part0 && has_part0_) {
        add_params_read(b_, s_, l, 0, params_store_[l], stage);
      }
      const int32_t grad = grad_for_steps(l, part0 ? -1 : 1);
      const int32_t out = on_storage ? stage : params_store_[l];
      const bool gather = fetch && on_storage;  // the stage goes to the device
      if (part0) step(l, 0, grad, out, true, false, gather);
      if (part1) step(l, 1, grad, out, true, false, gather);
    }
    if (!fetch) return -1;
    if (on_storage && pending) return stage;
    if (params_fetch_staged(s_, tiers_.params[l])) {
      add_params_read(b_, s_, l, -1, params_store_[l], stage);
      return stage;
    }
    return params_store_[l];
  }

  // Block l's params onto the device, into the double buffer the fetch count says. The h2d copy
  // is queued apart from the storage read (emit_queued_fetch): the h2d queue runs in order, and
  // a params copy that waits on storage must not hold up the checkpoint loads the current block
  // needs first.
  void fetch_params(int l) {
    const int k = fetch_count_ % 2;  // pending_step takes this index
    const int32_t src = pending_step(l, /*fetch=*/true);
    emit_queued_fetch();  // at most one copy waits at a time
    queued_ = {l, src, params_buf_[k]};
    params_slot_[l] = params_buf_[k];
  }
  void emit_queued_fetch() {
    if (queued_.block < 0) return;
    add_params_fetch(b_, s_, queued_.block, queued_.src, params_store_[queued_.block], queued_.dst);
    queued_ = {};
  }

  // ---- Checkpoints and saved activations ------------------------------------------------------
  void write_ckpt(int l, int m, int32_t from) {
    b_.move_out(TaskKind::ckpt_write, TaskKind::ckpt_flush, {.block = l, .micro_batch = m}, from,
                ckpt_[l][m], ckpt_wstage_, s_.checkpoint_bytes);
  }
  void load_ckpt(int l, int m, int32_t to) {
    const TaskTag tag{.block = l, .micro_batch = m};
    const int32_t src =
        b_.to_host(TaskKind::ckpt_read, tag, ckpt_[l][m], ckpt_rstage_, s_.checkpoint_bytes);
    b_.transfer(TaskKind::ckpt_load, tag, src, to, s_.checkpoint_bytes);
  }

  // Where block l's forward writes the saved set of micro-batch position i: its kept device
  // slot, a device buffer it is offloaded from, or (compute reaches host memory) straight into
  // its host slot or a storage stage. -1: recomputed, nothing saved.
  int32_t saved_slot(int l, int i, int m) {
    const ActPolicy p = acts_policy(l);
    if (p == ActPolicy::keep) return acts_[l][m];
    if (!offloaded(p)) return -1;
    if (!s_.compute_reads_host) return acts_out_[static_cast<size_t>(i % 2)];
    return b_.tier(acts_[l][m]) == Tier::host ? acts_[l][m] : acts_wstage_.take();
  }
  // The saved set of (l, m), just written by the forward into `from`, to its place (host, or
  // storage through a host stage), while the forward goes on.
  void store_acts(int l, int m, int32_t from) {
    const TaskTag tag{.block = l, .micro_batch = m};
    const int32_t dst = acts_[l][m];
    if (s_.compute_reads_host) {  // produced in place: `from` is the host slot or the stage
      if (from != dst) b_.transfer(TaskKind::acts_flush, tag, from, dst, s_.acts_bytes);
      return;
    }
    b_.move_out(TaskKind::acts_write, TaskKind::acts_flush, tag, from, dst, acts_wstage_,
                s_.acts_bytes);
  }
  // The saved set of (l, m) back for its backward; returns the slot the backward reads.
  int32_t load_acts(int l, int m, int j) {
    const TaskTag tag{.block = l, .micro_batch = m};
    if (b_.tier(acts_[l][m]) == Tier::device) return acts_[l][m];  // kept
    const int32_t src =
        b_.to_host(TaskKind::acts_read, tag, acts_[l][m], acts_rstage_, s_.acts_bytes);
    if (s_.compute_reads_host) return src;  // consumed in place
    const int32_t to = acts_in_[static_cast<size_t>(j)];
    b_.transfer(TaskKind::acts_load, tag, src, to, s_.acts_bytes);
    return to;
  }

  // ---- Gradients ------------------------------------------------------------------------------
  // Part `part` of block l's gradient (Note [Optimizer split]; -1: both) between a host stage
  // and its store on storage: what the steps of a later plan read of it (Note [Sharded kept
  // gradient]), at its place in the block's layout in the stage.
  void keep_grad(int l, int32_t stage, int32_t part) {
    for (const StoreRange& r : vertical_kept_grad_ranges(s_, part)) {
      b_.transfer_range(TaskKind::grad_write, {.block = l, .part = part}, stage, r.stage_at,
                        grad_store_[l], r.store_at, r.bytes);
    }
  }
  // The host slot holding the range `part` of block l's gradient that its pending steps (or
  // repair) read: its store on host, or that range read back into a stage.
  int32_t grad_for_steps(int l, int32_t part) {
    if (b_.tier(grad_store_[l]) != Tier::storage) return grad_store_[l];
    const int32_t stage = grad_rstage_.take();
    for (const StoreRange& r : vertical_kept_grad_ranges(s_, part)) {
      b_.transfer_range(TaskKind::grad_read, {.block = l, .part = part}, grad_store_[l], r.store_at,
                        stage, r.stage_at, r.bytes);
    }
    return stage;
  }

  // The repair of block l's speculative part 0 (Note [Speculative steps]): its kept gradient,
  // the state before the step, and the true clip factor (or a skip), into optim.spec and the
  // working params.
  void repair_part0(int l) {
    const int32_t grad = grad_for_steps(l, 0);
    const bool on_storage = tiers_.params[l] == Tier::storage;
    step(l, 0, grad, on_storage ? params_wstage_.slots[l % 2] : params_store_[l], true, true);
  }

  void zero_grad(int l) {
    b_.task(TaskKind::grad_zero, {.block = l}, {slot_write(grad_acc_[l % 2], Role::grad)});
  }
  // The gradient leaves the device once; its sum of squares, then part 0's step (unless
  // deferred; speculative with clipping on), run on cpu_optim while compute goes on with
  // earlier blocks. A gradient kept on storage passes through a host stage, where those read it,
  // and only what a later plan needs is written out: part 1's range, or the whole gradient when
  // part 0 waits or may be repaired.
  void finish_block(int l) {
    const bool grad_on_storage = b_.tier(grad_store_[l]) == Tier::storage;
    const int32_t grad = grad_on_storage ? grad_wstage_.take() : grad_store_[l];
    add_block_grad_out(b_, {.block = l}, grad_acc_[l % 2], grad, s_);
    add_grad_done(b_, c_, s_, l, grad, s_.block_grad_bytes);
    if (early_part0_) {
      const bool on_storage = tiers_.params[l] == Tier::storage;
      step(l, 0, grad, on_storage ? params_wstage_.slots[l % 2] : params_store_[l], false,
           s_.speculative);
    }
    if (grad_on_storage && (has_part1_ || keep_whole_grad_)) {
      keep_grad(l, grad, keep_whole_grad_ ? -1 : 1);
    }
  }

  // ---- Forward --------------------------------------------------------------------------------
  // Brings the input of block l's micro-batch at position i into act.buf[k]: the embedding for
  // block 0 (its output is block 0's checkpoint), else the checkpoint.
  void prepare_input(int l, int i, int k) {
    const int m = vertical_micro_batch(l, i, M_);
    if (l == 0) {
      b_.task(TaskKind::embed_forward, {.micro_batch = m},
              {slot_read(c_.embed, Role::params), slot_read(c_.tokens_device, Role::tokens),
               slot_write(act_buf_[k], Role::output)});
      write_ckpt(0, m, act_buf_[k]);
    } else {
      load_ckpt(l, m, act_buf_[k]);
    }
  }

  // Runs `body(i, m, input slot)` for block l's micro-batches in snake order, each input
  // prefetched into the other act buffer while the previous one computes. Position 0 of block
  // l > 0 is the micro-batch that ended block l-1: already on the device.
  template <typename Body>
  void over_micro_batches(int l, Body body) {
    if (l + 1 < L_) fetch_params(l + 1);  // storage fetches block l+1 while block l computes
    if (M_ == 1) emit_queued_fetch();
    if (l == 0) prepare_input(l, 0, act_k_);
    for (int i = 0; i < M_; ++i) {
      if (i + 1 < M_) prepare_input(l, i + 1, 1 - act_k_);
      if (i + 2 == M_) emit_queued_fetch();  // after this block's last checkpoint load
      body(i, vertical_micro_batch(l, i, M_), act_buf_[act_k_]);
      if (i + 1 < M_) act_k_ = 1 - act_k_;
    }
  }

  // Block l < L-1: forward in place, its output checkpointed as block l+1's input, the saved
  // set (if any) kept or offloaded.
  void forward_block(int l) {
    over_micro_batches(l, [this, l](int i, int m, int32_t in) {
      const int32_t saved = saved_slot(l, i, m);
      std::vector<SlotUse> uses = {slot_read(params_slot_[l], Role::params),
                                   slot_read(in, Role::input), slot_write(in, Role::output)};
      if (saved >= 0) uses.push_back(slot_write(saved, Role::saved));
      b_.task(TaskKind::block_forward, {.block = l, .micro_batch = m}, std::move(uses), 0,
              s_.block_fwd_flops);
      write_ckpt(l + 1, m, in);  // the output is the next block's input
      if (offloaded(acts_policy(l))) store_acts(l, m, saved);
    });
  }

  // The last block: forward, loss and backward together per micro-batch (its params serve both
  // passes), then its gradient leaves the device.
  void last_block() {
    const int l = L_ - 1;
    zero_grad(l);
    over_micro_batches(l, [this, l](int, int m, int32_t in) {
      const TaskTag tag{.block = l, .micro_batch = m};
      b_.task(TaskKind::block_forward, tag,
              {slot_read(params_slot_[l], Role::params), slot_read(in, Role::input),
               slot_write(last_out_, Role::output)},
              0, s_.block_fwd_flops);
      b_.task(TaskKind::head_loss, {.micro_batch = m},
              {slot_read(last_out_, Role::input), slot_read(c_.embed, Role::params),
               slot_read(c_.tokens_device, Role::tokens), slot_write(dact_[m], Role::dact),
               slot_read(c_.embed_grad, Role::grad), slot_write(c_.embed_grad, Role::grad),
               slot_write(c_.losses, Role::losses)},
              0, s_.head_flops);
      Task bwd{.kind = TaskKind::block_backward};
      bwd.block = l;
      bwd.micro_batch = m;
      bwd.uses = {
          slot_read(params_slot_[l], Role::params), slot_read(in, Role::input),
          slot_read(dact_[m], Role::dact),          slot_write(dact_[m], Role::dact),
          slot_read(grad_acc_[l % 2], Role::grad),  slot_write(grad_acc_[l % 2], Role::grad)};
      bwd.flops = s_.block_bwd_flops;
      bwd.fused = true;  // the forward just ran on this queue: nothing to recompute
      b_.task(std::move(bwd));
    });
    finish_block(l);
  }

  // ---- Backward -------------------------------------------------------------------------------
  // Block l < L-1 in its forward order: per micro-batch the checkpoint (and the saved set) loaded
  // into a double buffer ahead of use, the backward accumulating into the block's gradient.
  void backward_block(int l) {
    if (l >= 1) fetch_params(l - 1);
    zero_grad(l);
    const bool saved = acts_policy(l) != ActPolicy::recompute;
    std::array<int32_t, 2> acts_in{-1, -1};  // slot of the saved set, per double buffer
    auto load = [&](int i, int j) {
      const int m = vertical_micro_batch(l, i, M_);
      load_ckpt(l, m, bwd_in_[j]);
      if (saved) acts_in[j] = load_acts(l, m, j);
    };
    load(0, bwd_j_);
    if (M_ == 1) emit_queued_fetch();
    for (int i = 0; i < M_; ++i) {
      const int m = vertical_micro_batch(l, i, M_);
      if (i + 1 < M_) load(i + 1, 1 - bwd_j_);
      if (i + 2 == M_) emit_queued_fetch();
      std::vector<SlotUse> uses = {
          slot_read(params_slot_[l], Role::params), slot_read(bwd_in_[bwd_j_], Role::input),
          slot_read(dact_[m], Role::dact),          slot_write(dact_[m], Role::dact),
          slot_read(grad_acc_[l % 2], Role::grad),  slot_write(grad_acc_[l % 2], Role::grad)};
      // With the saved set there is nothing to recompute.
      if (saved) uses.push_back(slot_read(acts_in[bwd_j_], Role::saved));
      b_.task(TaskKind::block_backward, {.block = l, .micro_batch = m}, std::move(uses), 0,
              saved ? s_.block_bwd_flops : s_.block_fwd_flops + s_.block_bwd_flops);
      bwd_j_ = 1 - bwd_j_;
    }
    finish_block(l);
  }

  const ScheduleSpec& s_;
  const int L_, M_;
  const BlockTiers tiers_;
  const bool has_part0_, has_part1_;
  const bool early_part0_;      // part 0 steps in backward (Note [Optimizer split])
  const bool keep_whole_grad_;  // the whole gradient waits for a later plan, not part 1's range
  PlanBuilder b_;
  const CommonSlots c_;

  // Per block: state between plans, checkpoints and saved sets ([block][micro-batch]).
  std::vector<int32_t> params_store_, grad_store_;
  std::vector<std::array<int32_t, 2>> optim_store_;  // [block][part]
  std::vector<int32_t> optim_spec_;  // [block]: part 0 after a speculative step, or -1
  std::vector<std::vector<int32_t>> ckpt_, acts_;
  bool any_acts_offloaded_ = false, any_acts_on_storage_ = false;
  // Device double buffers and per-micro-batch gradients of activations.
  std::vector<int32_t> params_buf_, act_buf_, bwd_in_, grad_acc_, acts_out_, acts_in_, dact_;
  int32_t last_out_ = -1;
  // Host staging rings for what lives on storage.
  SlotRing params_stage_, params_wstage_, ckpt_wstage_, ckpt_rstage_, optim_stage_, acts_wstage_,
      acts_rstage_, grad_wstage_, grad_rstage_;

  // Progress through the iteration.
  int fetch_count_ = 0;         // params fetches so far: picks params.buf / params.stage
  int act_k_ = 0;               // act.buf holding the current micro-batch's input
  int bwd_j_ = 0;               // bwd.in.buf (and acts.in.buf) of the current backward micro-batch
  std::vector<bool> pending_;   // part-1 steps not yet emitted, per block
  std::vector<bool> pending0_;  // part-0 steps deferred by the previous iteration, not emitted
  std::vector<int32_t> params_slot_;  // device buffer holding each block's params
  struct QueuedFetch {
    int block = -1;
    int32_t src = -1, dst = -1;
  } queued_;
};

}  // namespace

Plan make_vertical_plan(const ScheduleSpec& s) {
  return VerticalPlan(s).build();
}

}  // namespace strata
