// Inputs of the offloaded schedule generators (schedule_horizontal.h, schedule_vertical.h), and
// the small plan builder they share. DESIGN.md §2 (layout of state), §3 (tiers), §5 (schedules).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "sched/plan.h"

namespace strata {

// Where one kind of state lives between its uses.
enum class Placement : uint8_t { device, host, storage };

// Note [Optimizer split]
// A block's optimizer step may run in two parts over disjoint element ranges of its slab:
// part 0 is [0, split_elems), part 1 is [split_elems, block_elems). AdamW is elementwise, so the
// two parts give the same bits as one step over the whole slab. The vertical schedule steps
// part 0 in backward, as soon as the block's gradient is on host, and part 1 in the next
// iteration's forward, just before the block's parameters are fetched (GreedySnake's alpha
// split; alpha = split_elems / block_elems). Part 0 cannot see the global gradient norm, so it
// is only allowed with clipping off (config.h, optim.alpha); with clipping on every step is
// part 1 (split_elems = 0): exact, and deferred until the norm is known. Optimizer state is
// stored per part ("optim.store.blkL.p0/.p1": master, m, v of that range) so each part is one
// contiguous extent; working parameters stay one slab and parts write their range of it.

// What a block's backward reads (DESIGN §6): its forward recomputed from the block checkpoint,
// or the saved set (Note [Saved activations] in model/block.h) kept on the device or offloaded.
enum class ActPolicy : uint8_t { recompute, keep, host, storage };
const char* act_policy_name(ActPolicy p);  // "recompute", "keep", "host", "storage"

struct ScheduleSpec {
  int32_t blocks = 1;
  int32_t micro_batches = 1;
  int64_t block_param_bytes = 0;  // working params per block (bf16, or f32 in exactness mode)
  int64_t block_grad_bytes = 0;   // f32 gradient accumulator per block
  int64_t block_optim_bytes = 0;  // master + m + v per block
  int64_t checkpoint_bytes = 0;   // one block input, one micro-batch
  int64_t embed_param_bytes = 0;  // embedding + final norm, kept on the device (f32)
  int64_t embed_optim_bytes = 0;  // their master + m + v, kept on host
  int64_t tokens_bytes = 0;       // inputs and targets of every micro-batch (host, uploaded once)
  int64_t losses_bytes = 0;       // per-position losses of every micro-batch (host)
  int64_t workspace_bytes = 0;    // device scratch of the compute tasks (activations, head)
  double block_fwd_flops = 0;     // per micro-batch
  double block_bwd_flops = 0;     // per micro-batch, recompute not included
  double head_flops = 0;          // per micro-batch: final norm, LM head, loss and their backward
  // Placement per kind of state, for every block; the per-block vectors, when not empty (size
  // `blocks`), override the single value. Checkpoints: host or storage (device is treated as
  // host). For the vertical schedule the first and last two micro-batches of each block stay on
  // host whatever this says.
  Placement params = Placement::storage, optim = Placement::storage, checkpoints = Placement::host;
  std::vector<Placement> params_at{}, optim_at{}, checkpoints_at{};
  // Note [Optimizer split] (vertical only): part 0 has split_elems of block_elems elements.
  int64_t block_elems = 0;
  int64_t split_elems = 0;
  // Vertical only: the previous iteration left its part-1 steps for this plan to run, before
  // each block's first fetch; `iteration` false makes a plan that runs only those (the flush
  // after the last step).
  bool pending_steps = false;
  bool iteration = true;
  // Vertical only: per block (size `blocks`, or empty: recompute everywhere), and the bytes of one
  // block's saved set for one micro-batch. The last block runs forward and backward together and
  // needs none of this.
  std::vector<ActPolicy> acts_at{};
  int64_t acts_bytes = 0;
  // The compute stream can read and write host memory directly (the CPU device: one memory).
  // Offloaded saved sets are then produced into, and consumed from, their host slot or stage
  // in place, with no device buffer and no copy between them.
  bool compute_reads_host = false;
};

// Block l's placement of one kind of state.
inline Placement placement_of(const std::vector<Placement>& at, Placement all, int l) {
  return at.empty() ? all : at[static_cast<size_t>(l)];
}

// Blocks 0 .. round(fraction * blocks) - 1 on host, the rest on storage (config's offload.*).
std::vector<Placement> placement_by_fraction(int32_t blocks, double fraction_on_host);

// Bytes of a part of a per-block quantity of `bytes` (Note [Optimizer split]): part 0 is
// bytes * split / elems, part 1 the rest; part -1 is all of it. Exact for bytes = elems * width.
int64_t part_bytes(int64_t bytes, int64_t elems, int64_t split, int32_t part);

inline Tier placement_tier(Placement p) {
  switch (p) {
    case Placement::device:
      return Tier::device;
    case Placement::host:
      return Tier::host;
    case Placement::storage:
      return Tier::storage;
  }
  return Tier::host;
}

// Builds a plan whose deps are derived from slot uses, so that check_plan's rules 2 and 3 hold
// by construction: a read depends on the slot's last writer; a write on the last writer and on
// every read since (write-after-read). Deps that queue order already gives (same resource) are
// left out. Tasks must be added in an order where each read's writer comes first; the order of
// additions is also each resource's queue order, so generators emit prefetches early on purpose.
class SlotDepBuilder {
 public:
  int32_t slot(std::string name, Tier tier, int64_t bytes, bool initialized = false) {
    last_write_.push_back(-1);
    readers_.emplace_back();
    return plan_.add_slot(std::move(name), tier, bytes, initialized);
  }

  int32_t task(Task t) {
    auto dep = [&](int32_t d) {
      if (d >= 0 && plan_.tasks[d].resource != t.resource &&
          std::find(t.deps.begin(), t.deps.end(), d) == t.deps.end()) {
        t.deps.push_back(d);
      }
    };
    for (const SlotUse& u : t.uses) {
      dep(last_write_[u.slot]);
      if (u.write) {
        for (int32_t r : readers_[u.slot]) dep(r);
      }
    }
    const int32_t id = static_cast<int32_t>(plan_.tasks.size());
    for (const SlotUse& u : t.uses) {
      if (u.write) {
        last_write_[u.slot] = id;
        readers_[u.slot].clear();
      }
    }
    for (const SlotUse& u : t.uses) {
      if (!u.write) readers_[u.slot].push_back(id);
    }
    return plan_.add_task(std::move(t));
  }

  // Shorthand for the common case.
  int32_t task(TaskKind kind, Resource r, std::string label, int32_t block, int32_t mb,
               std::vector<SlotUse> uses, int64_t bytes = 0, double flops = 0) {
    Task t{.kind = kind, .resource = r, .label = std::move(label)};
    t.block = block;
    t.micro_batch = mb;
    t.uses = std::move(uses);
    t.bytes = bytes;
    t.flops = flops;
    return task(std::move(t));
  }

  Tier peek_tier(int32_t slot) const { return plan_.slots[slot].tier; }

  Plan take() { return std::move(plan_); }

 private:
  Plan plan_;
  std::vector<int32_t> last_write_;
  std::vector<std::vector<int32_t>> readers_;
};

// Where offloaded state lives between uses. Placement::device is modelled as host: the CPU
// optimizer works on host buffers, and device-resident state is the in-memory schedule's job.
inline Tier offload_tier(Placement p) {
  return p == Placement::storage ? Tier::storage : Tier::host;
}

// One block's CPU optimizer step (or one part of it, Note [Optimizer split]) once its gradient
// is in host slot `grad` and the clip factor in slot `clip` (-1: the step does not need it):
// the optimizer state of the part is read from `state_store` through `state_stage` when it lives
// on storage (-1 otherwise); AdamW runs on cpu_optim and writes the part's range of the new
// working params into `params_out`, at the part's offset; when `params_store` is not
// params_out (params on storage) that range is then written to the store. Shared by both
// schedules.
struct OptimizerStepSlots {
  int32_t grad, clip, state_store, state_stage, params_out, params_store;
};
void add_optimizer_step(SlotDepBuilder& b, const ScheduleSpec& s, int32_t block, int32_t part,
                        const OptimizerStepSlots& slots);

// The embedding and final-norm parameters (the "embed" group: both slabs, contiguous) live on
// the device; their master copy and AdamW state on host.
struct EmbedStepSlots {
  int32_t grad_device, grad_host, clip, state, params_host, params_device;
};
// Before the norm: their gradient leaves the device and its sums of squares are taken.
void add_embed_grad_out(SlotDepBuilder& b, const ScheduleSpec& s, const EmbedStepSlots& slots,
                        int32_t sums);
// After the norm: AdamW on host, and the new parameters go back to the device.
void add_embed_step(SlotDepBuilder& b, const ScheduleSpec& s, const EmbedStepSlots& slots);

// The sums of squares of one block's host gradient (block -1: the embed group) into its entries
// of slot `sums` (one double per slab), as soon as the gradient is complete on host.
int32_t add_grad_sumsq(SlotDepBuilder& b, int32_t block, int32_t grad_host, int64_t grad_bytes,
                       int32_t sums);
// Once every sum is in: the global norm, and from it slot `clip` (the clip factor, or "skip"
// for a non-finite norm), which every step that must see the norm reads.
void add_grad_norm(SlotDepBuilder& b, int32_t sums, int32_t clip);

// Slots every offloaded plan has, beside the per-block ones.
struct CommonSlots {
  int32_t tokens_host;        // host (M, 2, B, T) int32, initialized: inputs then targets
  int32_t tokens_device;      // device copy, uploaded by the first task
  int32_t workspace;          // device scratch of compute tasks (no uses: only its bytes count)
  int32_t embed;              // device embed group params, initialized
  int32_t embed_grad;         // device, accumulated by the loss and embed.bwd tasks
  int32_t embed_grad_host;    // host
  int32_t embed_state;        // host master + m + v, initialized
  int32_t embed_params_host;  // host, the new working params on their way to the device
  int32_t sums;               // host, one double per slab
  int32_t clip;               // host, the clip factor; initialized when steps are pending
  int32_t losses;             // host (M, B, T) f32, per-position losses written by the loss tasks
};
CommonSlots add_common_slots(SlotDepBuilder& b, const ScheduleSpec& s);
// First tasks of an iteration: upload the tokens, zero the embed gradient.
void add_iteration_start(SlotDepBuilder& b, const CommonSlots& c, const ScheduleSpec& s);
// Last tasks of an iteration: embed gradient out, the norm, then `steps` (the block steps that
// must see the norm), then the embed step.
template <typename Steps>
void add_iteration_end(SlotDepBuilder& b, const CommonSlots& c, const ScheduleSpec& s,
                       Steps&& steps) {
  const EmbedStepSlots e{c.embed_grad,  c.embed_grad_host,   c.clip,
                         c.embed_state, c.embed_params_host, c.embed};
  add_embed_grad_out(b, s, e, c.sums);
  add_grad_norm(b, c.sums, c.clip);
  steps();
  add_embed_step(b, s, e);
}

// Per block, the tier each kind of state lives on between uses (offload_tier of its placement),
// and whether any block's is on storage (the generators then add staging buffers for it).
struct BlockTiers {
  std::vector<Tier> params, optim, checkpoints;
  bool params_on_storage = false, optim_on_storage = false, checkpoints_on_storage = false;
};
BlockTiers block_tiers(const ScheduleSpec& s);

// "blk.3", "blk.3 mb.2"
inline std::string blk_tag(int l, int m = -1) {
  return "blk." + std::to_string(l) + (m >= 0 ? " mb." + std::to_string(m) : "");
}

}  // namespace strata
