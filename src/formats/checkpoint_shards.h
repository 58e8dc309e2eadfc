// Checkpoints of a sharded state, written by every rank at once (docs/design.md §8, §12).
//
// Note [Sharded checkpoints]
// With N > 1 ranks each rank writes its own share at once (Trainer::read_shard_pieces: its shard of
// each block part, Note [Sharded optimizer state]; of a replicated slab, its N-th), so no state
// crosses the network. The shares tile every slab exactly once; the reader checks that first.
// A version 3 step directory: config.json, trainer_state.json (Note [Checkpoint format]); per rank
// rank-RRRRR.state, extents back to back (an extent: `count` elements of slab `slab` from element
// `begin`, padding included, as count f32 masters, count m, count v from byte `offset`); and
// manifest.json: version 2's "files" and "shards" = {"ranks": N, "files": [{"rank", "name",
// "extents": [[slab, begin, count, offset], ...]}]}. Publishing (save_sharded_checkpoint's steps):
// one temporary directory for all ranks; rank 0 publishes, and one failed rank fails every rank.
// Any number of ranks resumes it (a piece is filled from the extents covering it); every rank
// reads the files, so all must see the directory. `strata gather` writes it as version 2.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/file_util.h"
#include "core/status.h"
#include "dist/communicator.h"
#include "formats/checkpoint.h"
#include "formats/checkpoint_tensors.h"
#include "io/io_engine.h"
#include "model/layout.h"

namespace strata {

inline constexpr int kShardedCheckpointVersion = 3;

struct ShardExtent {
  int64_t slab = 0, begin = 0, count = 0;  // elements [begin, begin + count) of the slab
  int64_t offset = 0;                      // its master's first byte in the rank's file
};

// What a rank wrote: its file in the checkpoint directory and the extents in it.
struct RankShardFile {
  std::string name;  // rank_shard_file_name(rank)
  int64_t bytes = 0;
  uint32_t crc = 0;
  std::vector<ShardExtent> extents;
};

std::string rank_shard_file_name(int rank);  // "rank-%05d.state"

// Rank `rank`'s file in `dir`: every slab's share, handed over by `read_share`, slab by slab.
Result<RankShardFile> write_rank_shard(IoEngine& engine, const std::string& dir, int rank,
                                       int64_t slabs, const SlabReader& read_share);

// ROOT/step-%08d as Note [Sharded checkpoints]: every rank of `world` calls it at the same step
// boundary, `read_share` handing over its share of each slab. The stats' bytes are this rank's
// file (rank 0: every file). Errors name the checkpoint, and the rank that failed.
Result<CheckpointSaveStats> save_sharded_checkpoint(IoEngine& engine, const std::string& root,
                                                    const TrainConfig& cfg,
                                                    const CheckpointMeta& meta,
                                                    const SlabReader& read_share, int64_t keep,
                                                    Communicator& world);

// A version 3 checkpoint's state, any piece of any slab, in any order.
class ShardedStateReader : public StateSource {
 public:
  // `shards`: the manifest's "shards", checked against the layout and the files' sizes
  // (bad_format naming the manifest and the field, or the slab a gap or an overlap is in).
  // `verified`: the files the manifest lists (and pass 1 checked); a rank's file must be one.
  static Result<std::unique_ptr<ShardedStateReader>> open(const std::string& dir,
                                                          const ParamLayout& layout,
                                                          const nlohmann::json& shards,
                                                          const std::vector<std::string>& verified,
                                                          ReadStats* stats);
  // p's master, and m and v where not null, from the extents covering it.
  Status fill(int64_t slab, const SlabPiece& p) override;
  int64_t buffer_bytes() const override { return 0; }  // reads go straight into the piece

 private:
  struct Extent {
    ShardExtent at;
    size_t file = 0;
  };
  ShardedStateReader() = default;

  std::vector<ReadOnlyFile> files_;           // per rank
  std::vector<std::vector<Extent>> extents_;  // per slab, by begin
};

// The version 2 checkpoint (Note [Checkpoint format]) of the state in checkpoint `dir` (either
// version), written to OUT_ROOT/step-%08d through `engine`: what tools that read Hugging Face
// files need of a sharded one. Host memory: pieces of `piece_elems` elements.
Result<CheckpointSaveStats> gather_checkpoint(IoEngine& engine, const std::string& dir,
                                              const std::string& out_root,
                                              int64_t piece_elems = int64_t{1} << 20);

}  // namespace strata
