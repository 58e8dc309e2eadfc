// Inputs of the offloaded schedule generators (schedule_horizontal.h, schedule_vertical.h): sizes,
// placement per block, the optimizer split and the activation policy. docs/design.md §2 (layout of
// state), §3 (tiers), §5 (schedules).
#pragma once

#include <cstdint>
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
// split; alpha = 1 - split_elems / block_elems). Part 0 runs before the global norm is known:
// with clipping off it is the step itself (a non-finite gradient then stops the run), with
// clipping on it is speculative (Note [Speculative steps]). An iteration may also defer part 0
// (`defer_part0`): both parts then run in the next forward, which is alpha = 1's schedule over
// the same state layout. Optimizer state is stored per part ("optim.store.blkL.p0/.p1": master,
// m, v of that range) so each part is one contiguous extent; working parameters stay one slab
// and parts write their range of it.

// Note [Sharded optimizer state]
// With N > 1 ranks (Note [Data parallel ranks]) the offloaded schedules shard every block's
// optimizer state: of each optimizer part [p0, p1) (Note [Optimizer split]; the whole block when
// it steps in one part) rank r owns shard_range(p1 - p0, N, r), and the part's state slot holds
// master, m and v of that shard only, laid out (3, S), S the largest shard's length (rank 0's),
// so every rank runs the same plans (part_shard). Per block the gradient is reduce-scattered to
// the owners (each shard summed in rank order, Note [Deterministic all-reduce]; where:
// block_grad_scatter); the sum of squares covers the rank's shards and one norm_allreduce sums
// them, so every rank clips and skips alike; a part's AdamW steps the shard and writes that range
// of the working params (Note [Sharded working params]; the kept gradient: Note [Sharded kept
// gradient]). Replicated: vertical's host gradient buffers, the embed group (its gradient
// all-reduced, its step run by every rank). Reading a slab's state outside plans is a collective
// (OffloadTrainer::read_slab_pieces: shards broadcast in rank order); resumes take any N.
struct PartShard {
  int64_t part_begin = 0, part_end = 0;  // the part, within the block
  int64_t begin = 0, end = 0;            // this rank's shard of it, within the block
  int64_t stride = 0;                    // elements per array of the part's (3, stride) state
};
// Part `part` (-1: all of the block's trained elements; 0: [frozen, split); 1: [split,
// block_elems)) of a block, and rank `rank`'s shard of it over `ranks` ranks (one rank: the whole
// part). `frozen_elems`: the block's leading elements that never step (Note [Frozen base]).
PartShard part_shard(int64_t block_elems, int64_t split_elems, int32_t part, int ranks, int rank,
                     int64_t frozen_elems = 0);

// Note [Frozen base]
// With LoRA (Note [LoRA] in model/lora.h) a block's slab ends with its adapters; everything before
// them is frozen. The offloaded plans then treat the block's first `frozen_elems` elements (the
// frozen prefix rounded down to whole I/O units of both widths, so every transfer stays aligned)
// as read-only working params: a block's gradient (its device buffer, host slots and kept store)
// covers only [frozen_elems, block_elems) and is laid out from there; the optimizer parts cover
// [frozen, split) and [split, n), so the base has no master, moments or step; steps write only
// their parts' params; fetches read the whole block. A step moves the base once per read of its
// params and writes nothing of it. The few frozen elements past the rounded prefix ride in part
// 0 or 1, where AdamW skips them (adamw_slab_range). One rank only: with several the base is
// planned as trainable (frozen_elems 0), whose bits are the same. In a checkpoint the base's
// master is its working copy (in bf16 the rounding: docs/design.md §2) and its moments zero.
// An embed group with nothing to train (`embed_frozen`, any number of ranks) has no gradient out,
// no sums and no step: its state stays where it is, read only by checkpoints.

// Note [Speculative steps]
// With clipping on and alpha < 1 (`speculative`), part 0 of each block steps in backward as if the
// clip factor were 1 and the gradient finite: the exact step whenever the norm does not clip
// (clip_scale is then exactly 1, and g * 1 is g). Until the norm is known it can be undone:
//  - it reads "optim.store.blkL.p0" and writes "optim.spec.blkL.p0" (on host, or through the
//    optimizer stage to its own extent); the block's whole gradient is kept (on host, or written
//    whole to storage) until the next backward replaces it;
//  - valid (finite, not clipped): the trainer swaps the memory behind the two names, copying none;
//  - else the repair plan (`repair`) runs at once: part 0 again from the kept state and gradient
//    with the true factor (non-finite: skipped, state copied, params rewritten from the master),
//    into "optim.spec" and the params; then the same swap.
// So every step boundary holds the exact step's state, bit-identical to alpha = 1's; a name is one
// piece of memory while a plan runs. Its cost, and waiting instead: docs/design.md §5.7.

// What a block's backward reads (docs/design.md §6): its forward, recomputed from its checkpoint,
// or the saved set (Note [Saved activations] in model/block.h) kept on the device or offloaded.
enum class ActPolicy : uint8_t { recompute, keep, host, storage };
const char* act_policy_name(ActPolicy p);  // "recompute", "keep", "host", "storage"

struct ScheduleSpec {
  int32_t blocks = 1;
  int32_t micro_batches = 1;  // per rank
  // Ranks of the run (Note [Data parallel ranks]): above 1, every gradient complete on this rank
  // is summed over them by a grad_allreduce task on the net queue before anything reads it.
  int32_t ranks = 1;
  // This rank (0 .. ranks - 1). Plans of every rank have the same tasks; only the ranges and
  // store size of a vertical gradient kept on storage depend on it (Note [Sharded kept
  // gradient]).
  int32_t rank = 0;
  // Elements of f32 gradient whose bytes a storage transfer may start at and cut at: direct I/O
  // alignment, and whole checksum chunks (Note [Extent checksums] in io/tensor_store.h). The
  // optimizer split and the blocks' sizes are multiples of it.
  int64_t grad_io_elems = 1;
  // Horizontal with several ranks (Note [Sharded optimizer state]): each micro-batch's block
  // gradient is reduce-scattered as it reaches the host, and only the rank's shard is summed
  // and kept (ZeRO-Infinity's way).
  bool shard_grads = false;
  // Several ranks whose trainer runs the collectives in device memory (Note [Collectives on
  // device memory] in dist/device_collectives.h): the blocks' gradients are reduce-scattered and
  // their params gathered there, and only this rank's shards cross between host and device
  // (Note [ZeRO-3 on the device]).
  bool device_collectives = false;
  int64_t block_param_bytes = 0;  // working params per block (bf16, or f32 in exactness mode)
  // Of the trained elements [frozen_elems, block_elems) only (Note [Frozen base]):
  int64_t block_grad_bytes = 0;   // f32 gradient accumulator per block
  int64_t block_optim_bytes = 0;  // master + m + v per block
  int64_t checkpoint_bytes = 0;   // one block input, one micro-batch
  int64_t embed_param_bytes = 0;  // embedding + final norm, kept on the device (f32)
  int64_t embed_optim_bytes = 0;  // their master + m + v, laid out (3, embed_elems)
  int64_t embed_elems = 0;        // elements of the embed group (both slabs, padding included)
  // Where the embed group's optimizer state lives (Note [Embed step in chunks]); on storage its
  // step runs in chunks of embed_chunk_elems_for(spec) elements, one optimizer stage each.
  Placement embed_optim = Placement::host;
  int64_t tokens_bytes = 0;     // inputs and targets of every micro-batch (host, uploaded once)
  int64_t losses_bytes = 0;     // per-position losses of every micro-batch (host)
  int64_t workspace_bytes = 0;  // device scratch of the compute tasks (activations, head)
  double block_fwd_flops = 0;   // per micro-batch
  double block_bwd_flops = 0;   // per micro-batch, recompute not included
  double head_flops = 0;        // per micro-batch: final norm, LM head, loss and their backward
  // Placement per kind of state, for every block; the per-block vectors, when not empty (size
  // `blocks`), override the single value. Checkpoints: host or storage (device is treated as
  // host). For the vertical schedule the first and last two micro-batches of each block stay on
  // host whatever this says.
  // Gradients: where a block's gradient waits, once it has left the device, until its step.
  Placement params = Placement::storage, optim = Placement::storage, checkpoints = Placement::host,
            grads = Placement::host;
  std::vector<Placement> params_at{}, optim_at{}, checkpoints_at{}, grads_at{};
  // Note [Optimizer split] (vertical only): part 0 has split_elems of block_elems elements.
  int64_t block_elems = 0;
  int64_t split_elems = 0;  // in [frozen_elems, block_elems]
  // Note [Frozen base]: the block's leading elements that never step (0: all train), and whether
  // nothing of the embed group trains (no gradient leaves the device for it, no step).
  int64_t frozen_elems = 0;
  bool embed_frozen = false;
  // Vertical only: the previous iteration left its part-1 steps (and its part-0 steps too, with
  // `pending_part0`) for this plan to run, before each block's first fetch; `iteration` false
  // makes a plan that runs only those (the flush after the last step), or with `repair` the
  // repair of a speculative part 0 (Note [Speculative steps]).
  bool pending_steps = false;
  bool pending_part0 = false;
  bool iteration = true;
  // Vertical only (Note [Speculative steps]): part 0 waits for the next forward instead of
  // stepping in backward; part 0's step in backward is speculative; the repair plan.
  bool defer_part0 = false;
  bool speculative = false;
  bool repair = false;
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

// Note [Embed step in chunks]
// The embed group's optimizer state is one (3, E) array: master, then m, then v, on host or in
// the store alike. On host its step is one task over all E elements. On storage the step runs
// chunk by chunk (chunk k: elements [k S, min(E, (k + 1) S)), S = embed_chunk_elems_for): the
// chunk's three ranges are read into an optimizer stage laid out (3, len), stepped there, and
// written back, so host memory holds one stage of optimizer state, not the group's. AdamW is
// elementwise, so the chunks give the bits of the whole step. A step task's `part` is its chunk
// (-1: the whole group).

// Block l's placement of one kind of state.
inline Placement placement_of(const std::vector<Placement>& at, Placement all, int l) {
  return at.empty() ? all : at[static_cast<size_t>(l)];
}

// Blocks 0 .. round(fraction * blocks) - 1 on host, the rest on storage (config's offload.*).
std::vector<Placement> placement_by_fraction(int32_t blocks, double fraction_on_host);

// Bytes of a part of a per-block quantity of `bytes` (Note [Optimizer split]): part 0 is
// bytes * split / elems, part 1 the rest; part -1 is all of it. Exact for bytes = elems * width.
int64_t part_bytes(int64_t bytes, int64_t elems, int64_t split, int32_t part);
// Bytes of the gradient a block keeps between micro-batches and until its step: the whole
// block's, or with shard_grads the rank's shard of it (the longest shard's bytes).
int64_t kept_grad_bytes(const ScheduleSpec& s);
// Where a block's gradient is summed over the ranks (Note [Sharded optimizer state]), the one
// rule both schedules' plans follow: nowhere (one rank); on the host, once when it is complete
// there (vertical), or per micro-batch as it comes (horizontal: shard_grads); or in its device
// slot before each copy out (device_collectives; Note [ZeRO-3 on the device]). The embed group's
// is all-reduced with several ranks: in its device slot where the blocks' are scattered there,
// else on the host.
enum class BlockGradScatter : uint8_t { none, host_whole, host_per_micro_batch, device };
inline BlockGradScatter block_grad_scatter(const ScheduleSpec& s) {
  if (s.ranks <= 1) return BlockGradScatter::none;
  if (s.device_collectives) return BlockGradScatter::device;
  return s.shard_grads ? BlockGradScatter::host_per_micro_batch : BlockGradScatter::host_whole;
}

// Note [Sharded kept gradient]
// The vertical schedule moves a block's gradient off the device whole, once per step, into a
// host slot where it is reduce-scattered (Note [Sharded optimizer state]), summed and part 0
// stepped. What a later plan still needs of it (part 1's range, or both parts when part 0
// waits or may be repaired: Note [Speculative steps]) is kept until then; on storage, with
// several ranks, only what this rank's steps read: its shard ranges (Note [Shard ranges in a
// store]). A rank so writes, reads and stores 1/N of the kept gradient (plus at most two I/O
// units per part). A kept gradient in host memory stays whole: it is the reduce-scatter's own
// buffer.

// Note [Shard ranges in a store]
// A block quantity sharded like its optimizer state (its gradient, its working params) is kept
// in a rank's store as that rank's shard of each part (Note [Optimizer split]: part 0, then part
// 1; horizontal plans have only one part, the whole block), each widened to whole I/O units
// (grad_io_elems f32 elements' bytes, so every transfer is aligned and covers whole checksum
// chunks) and clipped to its part, packed as (part 0's range | part 1's range). Host stages keep
// the block's layout, so element e is at e in any of them. The widening takes a few of the
// neighbours' elements along: what a rank stores of those is never read as theirs (a read is
// followed by the gather that overwrites them, Note [Sharded working params]).
struct StoreRange {
  int64_t stage_at = 0, store_at = 0,
          bytes = 0;  // bytes at stage_at in a stage, store_at in the store
};
// The ranges of part `part` (-1: both) of a block quantity of `block_bytes` (block_elems
// elements) that rank s.rank keeps in its store, and the bytes of that store (Note [Shard
// ranges in a store]). One rank: the part's range at its own offset, in a store of the block.
std::vector<StoreRange> shard_store_ranges(const ScheduleSpec& s, int64_t block_bytes,
                                           int32_t part);
int64_t shard_store_bytes(const ScheduleSpec& s, int64_t block_bytes);
// The elements of a block that train (Note [Frozen base]).
inline int64_t trained_elems(const ScheduleSpec& s) {
  return s.block_elems - s.frozen_elems;
}
// The ranges of part `part` (-1: the whole block) of a block's working params that its store
// holds: the whole block's, or like shard_store_ranges its trained part's.
std::vector<StoreRange> params_store_ranges(const ScheduleSpec& s, int32_t part);
// The frozen prefix of a block's working params (Note [Frozen base]): none, or one range.
std::vector<StoreRange> frozen_params_ranges(const ScheduleSpec& s);
// The vertical schedule's kept gradient on storage (Note [Sharded kept gradient]); a gradient is
// laid out from its first trained element (Note [Frozen base]).
std::vector<StoreRange> vertical_kept_grad_ranges(const ScheduleSpec& s, int32_t part);
inline int64_t vertical_kept_grad_bytes(const ScheduleSpec& s) {
  return s.frozen_elems > 0 ? s.block_grad_bytes : shard_store_bytes(s, s.block_grad_bytes);
}

// Note [Sharded working params]
// With N > 1 ranks each rank's params store of a block (storage or host memory) holds only its
// shard of each optimizer part (Note [Shard ranges in a store]): ZeRO-3's sharded weights.
//  - On storage, a step writes the rank's shard of the new params into a host stage and only its
//    ranges go to the store; the stage is gathered (param_allgather) only when the same plan
//    fetches it (a vertical pending step). A fetch reads the rank's ranges into a host stage and a
//    param_allgather per part brings the other ranks' shards.
//  - In host memory, a step writes its shard straight into the store's packed ranges
//    (OffloadTrainer::params_at); a fetch gathers the block from every rank's store (param_gather).
//  - The stage then goes to the device, gathered once per pass (vertical) or per use (horizontal);
//    with device collectives the gathers run there instead (Note [ZeRO-3 on the device]).
// Outside plans (initial state, resume, evaluation, read_params) the same ranges are written, and
// reads gather: collectives all ranks run together. The embed group stays whole on every device.
inline bool params_sharded(const ScheduleSpec& s) {
  return s.ranks > 1;
}
// The parts whose shards part `part` of a block's params is gathered by (Note [Optimizer split]):
// the part itself; for the whole block (-1) 0 and 1 with a split, else the whole block.
std::vector<int32_t> block_param_parts(const ScheduleSpec& s, int32_t part = -1);

// Note [ZeRO-3 on the device]
// Where the collectives run in device memory (ScheduleSpec::device_collectives) with N > 1 ranks,
// a block's state crosses between host and device as this rank's shards only, as in ZeRO-3:
//  - its gradient is reduce-scattered in its device slot (grad_reduce_scatter_device) and only
//    this rank's ranges leave the device (host_device_ranges), each to its place in the host slot;
//    the rest of that slot is never written or read (the sums of squares, the steps and the kept
//    gradient read this rank's shards: Note [Sharded kept gradient]);
//  - its working params reach the device as this rank's ranges (from a host stage in the block's
//    layout, or a host store's packed ranges); a param_allgather_device per part adds the rest;
//  - the embed group's gradient is all-reduced in its device slot (grad_allreduce_device).
// A rank so moves 1/N of each block's gradient and params over PCIe (plus at most two I/O units
// per part, Note [Shard ranges in a store]) and its cores do no collective work but the norm's.
// The bits are the host path's: the same rank-order sums, and gathers copy.

// Where a block's working params are gathered from the ranks' shards (Note [Sharded working
// params]): nowhere (one rank), on the host into a stage before the copy to the device, or on
// the device after this rank's ranges are copied there.
enum class ParamsGather : uint8_t { none, host, device };
inline ParamsGather params_gather(const ScheduleSpec& s) {
  if (s.ranks <= 1) return ParamsGather::none;
  return s.device_collectives ? ParamsGather::device : ParamsGather::host;
}
// Whether a fetch of a block's params whose store is on `store_tier` goes through a host stage:
// from storage, or gathered on the host; else it copies from the store itself.
inline bool params_fetch_staged(const ScheduleSpec& s, Tier store_tier) {
  return store_tier == Tier::storage || params_gather(s) == ParamsGather::host;
}
// The ranges of a block quantity of `block_bytes` (its gradient, its working params) that cross
// between host and device: the whole block, or where the collectives run on the device this
// rank's (Note [ZeRO-3 on the device]; stage_at: in the block's layout, on the device and in a
// host stage; store_at: in this rank's host store).
std::vector<StoreRange> host_device_ranges(const ScheduleSpec& s, int64_t block_bytes);

// Note [Optimizer stage size]
// An optimizer stage (the ring a step's state passes through when it lives on storage, and the
// embed step's chunks: Note [Embed step in chunks]) holds the largest state one step task
// reads: with one rank a block's (3, block_elems), or its trained elements' with a frozen base
// (Note [Frozen base]); with several the longest shard of a part (Note [Sharded optimizer
// state]), so a rank's host memory shrinks with its state. The embed
// group, replicated, then steps in chunks that fit it, whole I/O units (grad_io_elems) long.
// Elements per array of one embed chunk, and bytes of one optimizer stage.
int64_t embed_chunk_elems_for(const ScheduleSpec& s);
int64_t optim_stage_bytes(const ScheduleSpec& s);
// Bytes of a block's optimizer state slot for part `part`: the whole part's with one rank, one
// shard's (3, stride) with several (Note [Sharded optimizer state]).
int64_t optim_part_bytes(const ScheduleSpec& s, int32_t part);

// Where offloaded state lives between uses. Placement::device is modelled as host: the CPU
// optimizer works on host buffers, and device-resident state is the in-memory schedule's job.
inline Tier offload_tier(Placement p) {
  return p == Placement::storage ? Tier::storage : Tier::host;
}

// Per block, the tier each kind of state lives on between uses (offload_tier of its placement),
// and whether any block's is on storage (the generators then add staging buffers for it).
struct BlockTiers {
  std::vector<Tier> params, optim, checkpoints, grads;
  bool params_on_storage = false, optim_on_storage = false, checkpoints_on_storage = false,
       grads_on_storage = false;
};
BlockTiers block_tiers(const ScheduleSpec& s);

}  // namespace strata
