// Checkpoints of a sharded state, written by every rank at once (docs/design.md §8, §12).
//
// Note [Sharded checkpoints]
// With N > 1 ranks the optimizer state is sharded (Note [Sharded optimizer state] in
// sched/schedule_spec.h), and a checkpoint is written by every rank at once, each its own share,
// so no state crosses the network and the write scales with the ranks. A version 3 checkpoint
// directory holds:
//   rank-RRRRR.state   one per rank: its share as extents back to back. An extent is `count`
//                      elements of slab `slab` from element `begin` (Strata's slab layout,
//                      padding included): count f32 master weights, then count of AdamW's m,
//                      then count of v, from byte `offset`.
//   config.json, trainer_state.json   as in Note [Checkpoint format] (formats/checkpoint.h)
//   manifest.json      version 3: "files" lists every file above with its size and CRC32C, as
//                      in version 2, and "shards" = {"ranks": N, "files": [{"rank": r, "name":
//                      "rank-RRRRR.state", "extents": [[slab, begin, count, offset], ...]}]}.
// A rank's share (Trainer::read_shard_pieces) is its shard of each block part's state, and of a
// replicated slab (the embed group; every slab of the in-memory trainer) its N-th: the shares of
// the ranks tile every slab exactly once, which the reader checks before it uses a byte.
// Publishing is Note [Checkpoint format]'s, with one temporary directory for all ranks: rank 0
// removes stale ones and makes it (named after its pid), broadcasts that (or that the step is
// saved already); every rank writes and fsyncs its file there; each rank's description (file,
// size, CRC32C, extents; or its error) goes to rank 0, which writes the JSON files and publishes;
// its verdict goes back, so every rank returns the same outcome. A rank that failed fails the
// save on every rank; nothing is published and the temporary directory is removed.
// Reading: any number of ranks resumes it (resharded by construction: a piece is filled from
// whichever extents cover it), after pass 1 verified every file. Every rank reads the files, so
// the checkpoint directory must be one all ranks see (one machine, or a shared file system).
// Tools that read Hugging Face files take the gathered form: `strata gather` writes the version
// 2 checkpoint of the same state (gather_checkpoint).
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
