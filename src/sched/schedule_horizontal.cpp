// The horizontal (ZeRO-Infinity order) plan generator; see schedule_horizontal.h.
#include "sched/schedule_horizontal.h"

#include <string>
#include <vector>

#include "sched/schedule_common.h"
#include "sched/slot_names.h"

namespace strata {

namespace {

namespace names = slot_names;

class HorizontalPlan {
 public:
  explicit HorizontalPlan(const ScheduleSpec& s)
      : s_(s),
        L_(s.blocks),
        M_(s.micro_batches),
        tiers_(block_tiers(s)),
        c_(add_common_slots(b_, s)) {
    add_slots();
  }

  Plan build() {
    add_iteration_start(b_, c_, s_);
    for (int m = 0; m < M_; ++m) {
      forward(m);
      backward(m);
    }
    // The norm, then the optimizer step after the last backward, pipelined over blocks.
    add_iteration_end(b_, c_, s_, optim_stage_, [this] {
      for (int l = L_ - 1; l >= 0; --l) {
        const bool on_storage = tiers_.params[l] == Tier::storage;
        const int32_t grad = b_.to_host(TaskKind::grad_read, {.block = l}, grad_store_[l],
                                        grad_rstage_, kept_grad_bytes(s_));
        add_optimizer_step(b_, c_, s_,
                           {.block = l,
                            .grad = grad,
                            .state_store = optim_store_[l],
                            .params_out = on_storage ? params_wstage_.take() : params_store_[l],
                            .params_store = params_store_[l]},
                           optim_stage_);
      }
    });
    return b_.take();
  }

 private:
  void add_slots() {
    const int64_t P = s_.block_param_bytes, G = s_.block_grad_bytes, C = s_.checkpoint_bytes;
    for (int l = 0; l < L_; ++l) {
      params_store_.push_back(
          b_.slot(names::params_store(l), tiers_.params[l], params_store_bytes(s_), true));
      optim_store_.push_back(
          b_.slot(names::optim_store(l), tiers_.optim[l], optim_part_bytes(s_, -1), true));
      grad_store_.push_back(b_.slot(names::grad_store(l), tiers_.grads[l], kept_grad_bytes(s_)));
      ckpt_.push_back(b_.slot(names::ckpt(l), tiers_.checkpoints[l], C));  // every micro-batch's
    }
    act_ = b_.slot(names::kAct, Tier::device, C);    // forward activation, updated in place
    dact_ = b_.slot(names::kDact, Tier::device, C);  // gradient w.r.t. the current activation
    params_buf_ = add_ring(b_, names::kParamsBuf, Tier::device, P).slots;
    grad_buf_ = add_ring(b_, names::kGradBuf, Tier::device, G).slots;
    grad_stage_ = add_ring(b_, names::kGradStage, Tier::host, G).slots;
    bwd_in_ = add_ring(b_, names::kBwdInBuf, Tier::device, C).slots;
    // A fetch gathers a sharded block there (Note [Sharded working params]), unless on the device.
    params_stage_ = add_ring(b_, names::kParamsStage, Tier::host, P,
                             tiers_.params_on_storage || params_gather(s_) == ParamsGather::host);
    params_wstage_ = add_ring(b_, names::kParamsWstage, Tier::host, P, tiers_.params_on_storage);
    // One ring for both directions: a checkpoint is read back only after every write.
    ckpt_stage_ = add_ring(b_, names::kCkptStage, Tier::host, C, tiers_.checkpoints_on_storage);
    optim_stage_ = add_ring(b_, names::kOptimStage, Tier::host, optim_stage_bytes(s_),
                            tiers_.optim_on_storage || s_.embed_optim == Placement::storage);
    grad_wstage_ =
        add_ring(b_, names::kGradWstage, Tier::host, kept_grad_bytes(s_), tiers_.grads_on_storage);
    grad_rstage_ =
        add_ring(b_, names::kGradRstage, Tier::host, kept_grad_bytes(s_), tiers_.grads_on_storage);
  }

  // The store (storage, or host memory) -> a host stage (on storage, or each rank's shard
  // gathered on the host, Note [Sharded working params]) -> device double buffer, where it may be
  // gathered instead (Note [ZeRO-3 on the device]); returns the device slot.
  int32_t fetch_params(int l) {
    const int k = fetch_count_++ % 2;
    int32_t src = params_store_[l];
    if (params_fetch_staged(s_, tiers_.params[l])) {
      src = params_stage_.take();
      add_params_read(b_, s_, l, -1, params_store_[l], src);
    }
    add_params_fetch(b_, s_, l, src, params_store_[l], params_buf_[k]);
    return params_buf_[k];
  }

  // Block l's params on the device: the ones prefetched for it, or fetched now.
  int32_t params_for(int l) {
    if (prefetched_block_ != l) return fetch_params(l);
    prefetched_block_ = -1;
    return prefetched_;
  }
  void prefetch(int l) {
    prefetched_ = fetch_params(l);
    prefetched_block_ = l;
  }

  // Micro-batch m through every block, then the loss. Each block's input leaves the device (its
  // checkpoint) before the forward overwrites it in place.
  void forward(int m) {
    b_.task(TaskKind::embed_forward, {.micro_batch = m},
            {slot_read(c_.embed, Role::params), slot_read(c_.tokens_device, Role::tokens),
             slot_write(act_, Role::output)});
    for (int l = 0; l < L_; ++l) {
      const int32_t params = params_for(l);
      b_.move_out(TaskKind::ckpt_write, TaskKind::ckpt_flush, {.block = l, .micro_batch = m}, act_,
                  ckpt_[l], ckpt_stage_, s_.checkpoint_bytes);
      b_.task(TaskKind::block_forward, {.block = l, .micro_batch = m},
              {slot_read(params, Role::params), slot_read(act_, Role::input),
               slot_write(act_, Role::output)},
              0, s_.block_fwd_flops);
    }
    b_.task(TaskKind::head_loss, {.micro_batch = m},
            {slot_read(act_, Role::input), slot_read(c_.embed, Role::params),
             slot_read(c_.tokens_device, Role::tokens), slot_write(dact_, Role::dact),
             slot_read(c_.embed_grad, Role::grad), slot_write(c_.embed_grad, Role::grad),
             slot_write(c_.losses, Role::losses)},
            0, s_.head_flops);
  }

  // Micro-batch m back through every block (each recomputed from its checkpoint); each block's
  // partial gradient leaves the device and is summed on host.
  void backward(int m) {
    for (int l = L_ - 1; l >= 0; --l) {
      const TaskTag tag{.block = l, .micro_batch = m};
      const int32_t params = params_for(l);
      const int32_t in = bwd_in_[load_count_++ % 2];
      const int32_t src =
          b_.to_host(TaskKind::ckpt_read, tag, ckpt_[l], ckpt_stage_, s_.checkpoint_bytes);
      b_.transfer(TaskKind::ckpt_load, tag, src, in, s_.checkpoint_bytes);
      const int j = grad_count_++ % 2;
      b_.task(TaskKind::block_backward, tag,
              {slot_read(params, Role::params), slot_read(in, Role::input),
               slot_read(dact_, Role::dact), slot_write(dact_, Role::dact),
               slot_write(grad_buf_[j], Role::grad)},
              0, s_.block_fwd_flops + s_.block_bwd_flops);
      // The next block's params (the next micro-batch's first) are fetched before this block's
      // gradient leaves, and the previous block's gradient is reduce-scattered and summed only
      // then: on the net queue a gather behind a reduce-scatter waits for that block's backward
      // and copy out (Note [Sharded working params]), so it waits for the one before.
      if (l > 0) prefetch(l - 1);
      if (l == 0 && m + 1 < M_) prefetch(0);
      // A reduce-scatter on the device copy (block_grad_scatter, in add_block_grad_out) comes
      // after the prefetch's gather on the net queue for the same reason.
      add_block_grad_out(b_, tag, grad_buf_[j], grad_stage_[j], s_);
      sum_grad();
      out_grad_ = {l, m, grad_stage_[j]};
    }
    sum_grad();
    b_.task(TaskKind::embed_backward, {.micro_batch = m},
            {slot_read(dact_, Role::dact), slot_read(c_.tokens_device, Role::tokens),
             slot_read(c_.embed_grad, Role::grad), slot_write(c_.embed_grad, Role::grad)});
  }

  // The gradient that left the device last (out_grad_), summed: over the ranks as it comes where
  // block_grad_scatter says so (Note [Sharded optimizer state]), then into its block's sum.
  void sum_grad() {
    const auto [l, m, stage] = out_grad_;
    if (l < 0) return;
    if (block_grad_scatter(s_) == BlockGradScatter::host_per_micro_batch) {
      b_.task(TaskKind::grad_reduce_scatter, {.block = l, .micro_batch = m},
              {slot_read(stage, Role::grad), slot_write(stage, Role::grad)}, s_.block_grad_bytes);
    }
    accumulate(l, m, stage);
    out_grad_ = {};
  }

  // Micro-batch m's gradient of block l (in host slot `part`) added into the block's sum (with
  // shard_grads: the rank's shard of it). On storage the sum is read into a stage (after the
  // first micro-batch), added to there and written back: the traffic ZeRO-Infinity avoids by
  // keeping gradients in host memory, paid here only where the placement asks for it.
  void accumulate(int l, int m, int32_t part) {
    const TaskTag tag{.block = l, .micro_batch = m};
    const int64_t G = kept_grad_bytes(s_);
    const bool on_storage = b_.tier(grad_store_[l]) == Tier::storage;
    int32_t sum = grad_store_[l];
    if (on_storage) {
      sum = grad_wstage_.take();
      if (m > 0) b_.transfer(TaskKind::grad_read, tag, grad_store_[l], sum, G);
    }
    std::vector<SlotUse> acc = {slot_read(part, Role::src), slot_write(sum, Role::grad)};
    if (m > 0) acc.push_back(slot_read(sum, Role::grad));
    b_.task(TaskKind::grad_accumulate, tag, std::move(acc), G);
    if (m == M_ - 1) add_grad_done(b_, c_, s_, l, sum, G);
    if (on_storage) b_.transfer(TaskKind::grad_write, tag, sum, grad_store_[l], G);
  }

  const ScheduleSpec& s_;
  const int L_, M_;
  const BlockTiers tiers_;
  PlanBuilder b_;
  const CommonSlots c_;

  std::vector<int32_t> params_store_, optim_store_, grad_store_, ckpt_;  // per block
  int32_t act_ = -1, dact_ = -1;
  std::vector<int32_t> params_buf_, grad_buf_, grad_stage_, bwd_in_;  // double buffers
  SlotRing params_stage_, params_wstage_, ckpt_stage_, optim_stage_, grad_wstage_, grad_rstage_;
  int fetch_count_ = 0, load_count_ = 0, grad_count_ = 0;
  int32_t prefetched_ = -1, prefetched_block_ = -1;  // a device params buffer, and whose
  struct OutGrad {
    int block = -1, micro_batch = -1;
    int32_t stage = -1;  // the host slot it left the device into
  } out_grad_;
};

}  // namespace

Plan make_horizontal_plan(const ScheduleSpec& s) {
  return HorizontalPlan(s).build();
}

}  // namespace strata
