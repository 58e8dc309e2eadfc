// The shape of an offloaded run: the sizes every part of the offloaded trainer (its state, its
// actions, its step loop) cuts memory by, fixed when the run starts, and the shard arithmetic of
// data-parallel ranks (Note [Sharded optimizer state] in sched/schedule_spec.h). A value, read by
// all and written by none after make_offload_shape.
#pragma once

#include <cstdint>
#include <utility>

#include "backend/backend.h"
#include "core/config.h"
#include "model/block.h"
#include "model/layout.h"
#include "sched/schedule_spec.h"

namespace strata {

struct OffloadShape {
  TrainConfig cfg;
  ParamLayout layout;
  BlockDims dims{};  // one block, one micro-batch (rope: the trainer's table, once uploaded)
  bool vertical = false;
  bool bf16 = false;  // train.precision bf16: params slots hold bf16 (Note [Precision modes])
  bool speculative = false;       // vertical, clipping on, alpha < 1 (Note [Speculative steps])
  int64_t block_elems = 0;        // one block's parameters (every block alike)
  int64_t split_elems = 0;        // part 0 of a block's step (Note [Optimizer split]) ends here
  int64_t frozen_elems = 0;       // a block's leading elements that never step (Note [Frozen base])
  int64_t embed_elems = 0;        // the embed group: embedding slab, then final-norm slab
  int64_t embed_slab_elems = 0;   // the embedding slab's part of it
  int64_t embed_chunk_elems = 0;  // the embed step's chunk on storage (Note [Optimizer stage size])
  // The plan shapes shard ranges are cut by, this rank's (Note [Shard ranges in a store]).
  ScheduleSpec shard_spec{};
  int rank = 0, ranks = 1;

  int64_t tokens_per_micro_batch() const { return cfg.batch_size * cfg.seq_len; }
  // Note [Sharded optimizer state]: with several ranks, each holds a shard of the blocks' state,
  // and the horizontal schedule keeps only this rank's shard of each block's gradient.
  bool sharded() const { return ranks > 1; }
  bool grads_sharded() const { return sharded() && !vertical; }
  // An optimizer part of a block (-1: all of it) and rank r's shard of it (one rank: the part).
  PartShard rank_shard(int32_t part, int r) const {
    return part_shard(block_elems, split_elems, part, ranks, r, frozen_elems);
  }
  PartShard owned_part(int32_t part) const { return rank_shard(part, rank); }
  // Block element `at` of a kept block gradient `g`: (block elems - frozen elems) from the first
  // trained element (Note [Frozen base]), or when sharded this rank's shard only, starting at the
  // shard's first element.
  const float* kept_grad_at(const float* g, int64_t at) const {
    return g + (at - (grads_sharded() ? owned_part(-1).begin : frozen_elems));
  }
  // Elements of a block's gradient (Note [Frozen base]).
  int64_t grad_elems() const { return block_elems - frozen_elems; }
  // A block has a part 0 that steps in backward (Note [Optimizer split]).
  bool has_part0() const { return split_elems > frozen_elems; }
  // Element range [first, second) of the embed group an embed step covers (-1: all of it).
  std::pair<int64_t, int64_t> embed_chunk_range(int32_t chunk) const;
  // Part `part` of a block's working params as its all-gathers see it: its first byte in the
  // block's layout, its elements, their width (Note [Precision modes]).
  struct ParamsPart {
    int64_t at = 0, count = 0, width = 0;
  };
  ParamsPart params_part(int32_t part) const;
};

// The shape of cfg's run on `dev` as rank `rank` of `ranks`.
OffloadShape make_offload_shape(const Device& dev, const TrainConfig& cfg, int rank, int ranks);

}  // namespace strata
