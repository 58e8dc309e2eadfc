// What a task of a plan does (its kind), what each slot it uses is for (its role), and the
// signature that ties the two together (docs/design.md §5).
//
// Note [Task signatures]
// A task's kind says what it does; every slot use carries a role. The kind's signature (the
// table in task_kind.cpp) lists the roles the task may use, whether each is read, written or
// both, and which are optional; it also names the one resource queue the kind runs on and, for
// transfers, which kind of state they move. Generators write tasks that fit their signature
// (check_task_signatures proves it for a whole plan; tests run it on every generated plan), and
// everything that interprets a task — the trainer's actions, the simulator, the profiler, the
// traffic statistics — asks for `slot_of(task, Role::saved)`, never for a position in `uses` or
// a label. Labels are for people and traces only.
#pragma once

#include <cstdint>

#include "core/status.h"

namespace strata {

enum class Resource : uint8_t;
struct Task;
struct Plan;

enum class TaskKind : uint8_t {
  // Transfers: {src read, dst write}; `bytes` from src_offset of src to dst_offset of dst.
  tokens_upload,  // the step's tokens, host -> device
  params_read,    // a block's working params, storage -> host stage
  params_fetch,   // working params (a block's, or the embed group's), host -> device
  params_write,   // a block's new working params (the part a step wrote), host -> storage
  optim_read,     // a block's optimizer state (one part), storage -> host stage
  optim_write,    // the same, host stage -> storage
  grad_out,       // a gradient (per micro-batch, per block, or the embed group's), device -> host
  grad_write,     // a block's gradient (or the part a pending step needs), host stage -> storage
  grad_read,      // the same, storage -> host stage
  ckpt_write,     // a block-input checkpoint, device -> host slot or stage
  ckpt_flush,     // the same, host stage -> storage
  ckpt_read,      // the same, storage -> host stage
  ckpt_load,      // the same, host -> device
  acts_write,     // a saved activation set (Note [Saved activations]), device -> host slot or stage
  acts_flush,     // the same, host stage -> storage
  acts_read,      // the same, storage -> host stage
  acts_load,      // the same, host -> device
  // The device's compute stream.
  grad_zero,       // {grad write}
  embed_forward,   // {params read, tokens read, output write}
  block_forward,   // {params read, input read, output write, [saved write]}
  head_loss,       // {input read, params read, tokens read, dact write, grad read+write,
                   //  losses write}: final norm, LM head, loss and their backward
  block_backward,  // {params read, input read, dact read+write, grad [read+]write, [saved read]}
  embed_backward,  // {dact read, tokens read, grad read+write}
  // The CPU optimizer workers.
  grad_accumulate,  // {src read, grad [read+]write}: grad = [grad +] src
  grad_sumsq,       // {grad read, sums write}: the slabs' sums of squares
  grad_norm,        // {sums read, clip write}: global norm -> clip factor (or skip)
  block_step,  // {grad read, state read[+write], params write, [clip read], [state_out write]}:
               // AdamW, one part; into state_out when it has one (Note [Speculative steps])
  embed_step,  // {grad read, clip read, state read+write, params write}
  // The net queue (Note [Data parallel ranks] in dist/communicator.h).
  grad_allreduce,  // {grad read+write}: a host gradient summed over the ranks in place; `bytes`
                   // is the gradient's, what each rank sends is 2 (N-1)/N of it
  // Note [Sharded optimizer state] (sched/schedule_spec.h):
  grad_reduce_scatter,  // {grad read+write}: a block's gradient summed over the ranks, each rank
                        // keeping its shard of every optimizer part; sends (N-1)/N of `bytes`
  param_allgather,  // {params read+write}: the working params of one optimizer part, each rank's
                    // shard (just stepped, or read from its store: Note [Sharded working
                    // params]) copied to every rank; sends (N-1)/N of `bytes`
  norm_allreduce,   // {sums read+write}: the blocks' sums of squares, per shard, summed
  param_gather,     // {src read, dst written}: a block's working params (or one part's) from this
                    // rank's shard in its host store (src, Note [Sharded working params]) into
                    // a host stage (dst), every rank's shard gathered; sends (N-1)/N of `bytes`
  // {grad read+write}: grad_reduce_scatter on the device's copy of a block's gradient, before it
  // leaves the device (ScheduleSpec::device_collectives; Note [Collectives on device memory] in
  // dist/device_collectives.h); a net task that reaches device memory
  grad_reduce_scatter_device,
  // Note [ZeRO-3 on the device] (schedule_spec.h), both net tasks on device slots:
  param_allgather_device,  // {params read+write}: param_allgather on a block's device copy, whose
                           // part `part` holds this rank's ranges; sends (N-1)/N of `bytes`
  grad_allreduce_device,   // {grad read+write}: the embed group's gradient, all-reduced in its
                           // device slot before it leaves the device
};
inline constexpr int kTaskKindCount = 36;
const char* task_kind_name(TaskKind k);  // "params_fetch", ...

// What a slot is to the task that uses it.
enum class Role : uint8_t {
  unspecified,  // abstract plans in checker tests only; check_task_signatures rejects it
  src,          // transfers: the slot read
  dst,          // transfers: the slot written
  params,       // weights (a block's, or the embed group's)
  input,        // the activation a compute task starts from
  output,       // the activation it produces
  saved,        // a block's saved activation set
  grad,         // a gradient or gradient accumulator
  dact,         // the gradient w.r.t. the current activation
  tokens,       // inputs then targets, every micro-batch
  losses,       // per-position losses
  state,        // optimizer state (master, m, v)
  clip,         // the clip factor (or "skip") from the global norm
  sums,         // per-slab sums of squares of the gradient
  state_out,    // where a step writes optimizer state it read from `state` (Note [Speculative
                // steps] in schedule_spec.h)
};
inline constexpr int kRoleCount = 15;
const char* role_name(Role r);  // "params", ...

// Which kind of state a transfer moves (Plan statistics count bytes per state and resource).
enum class StateKind : uint8_t { none, tokens, params, optim, grads, checkpoints, acts };
inline constexpr int kStateKindCount = 7;

// The short name labels start with ("fwd", "read.params"), and whether a task of this kind with no
// block is the embed group's (its label then says "embed"). See task_label in plan_builder.h.
const char* kind_label(TaskKind k);
bool kind_label_names_group(TaskKind k);
// The resource queue tasks of this kind run on (Task::resource); kResourceCount, no queue, for a
// value past the last kind.
Resource kind_resource(TaskKind k);
// Whether the kind is a transfer ({src, dst}, moving `bytes`): the kinds up to acts_load (a
// constant, so the trainer's actions are checked complete at compile time: Note [One action per
// kind] in train/offload_actions.h). And what it moves (none if not).
constexpr bool is_transfer(TaskKind k) {
  return k <= TaskKind::acts_load;
}
StateKind moved_state(TaskKind k);

// The slot of the task's first use with `role`, or -1 when the task has none.
int32_t slot_of(const Task& t, Role role);
// Whether the task reads the slot it uses in `role` (grad accumulators: read+write vs write).
bool reads_role(const Task& t, Role role);

// OK, or invalid_argument naming the first task whose roles or access do not fit its kind's
// signature (Note [Task signatures]).
Status check_task_signatures(const Plan& plan);

// Note [Where a task's slots live]
// On a discrete device (cpu-discrete, a GPU: shares_host_memory false) the device's ops reach
// only device memory and the host's code only host memory, so every slot a task uses must live
// where its resource reaches: compute tasks use device slots (but for the losses the head copies
// out), the CPU optimizer and the net queue host slots (but the collectives on device memory,
// grad_reduce_scatter_device, param_allgather_device and grad_allreduce_device: device slots), and
// each transfer moves between the two tiers its queue connects (h2d: host -> device, d2h: device ->
// host, storage_read: storage -> host, storage_write: host -> storage). A plan for such a device
// proves with this that no action hands host memory to a kernel or has the host touch device
// memory, the failure a GPU shows as a fault and the CPU device hides. (On the CPU device compute
// may read host slots in place: ScheduleSpec::compute_reads_host.)
// OK, or invalid_argument naming the first task and slot in the wrong tier.
Status check_task_tiers(const Plan& plan);

}  // namespace strata
