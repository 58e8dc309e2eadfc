// Checkpoints: the complete training state at one step boundary, published atomically, verified
// on load. docs/design.md §8.
//
// Note [Checkpoint format]
// A checkpoint is a directory ROOT/step-%08d (the number of optimizer steps done) holding:
//   model.safetensors      master weights, f32, under Hugging Face GPT-2 names and layout
//                          (Note [Hugging Face GPT-2 layout]), in layout order; metadata
//                          {"format": "strata-checkpoint", "version": "1"}
//   optimizer.safetensors  AdamW moments: "exp_avg.<name>" and "exp_avg_sq.<name>" per tensor,
//                          interleaved, same names and layout
//   config.json            the run's Strata config (config_to_json)
//   trainer_state.json     {"step", "adam_steps", "data_position", "seed", "schedule"}: steps done,
//                          updates applied (skipped steps excluded: AdamW's bias correction), the
//                          data loader's next token, the init seed. The learning rate schedule is
//                          a function of "step"; nothing random is drawn after initialisation, so
//                          the seed and the data position are the whole RNG state.
//   manifest.json          written last: {"format": "strata-checkpoint", "version": 1, "step",
//                          "files": [{"name", "bytes", "crc32c"}]} (crc32c: 8 hex digits)
// Publishing: every file is written into ROOT/.tmp-step-%08d-<pid>, fsynced, the directory
// fsynced, then renamed to ROOT/step-%08d and ROOT fsynced. A crash leaves either no step
// directory or a complete one, so any step-* directory is complete; leftover .tmp-* directories
// are removed by the next save. A failed save (a full disk) removes its temporary directory and
// touches nothing else.
//
// The state is moved one slab at a time (embedding, each block, final norm), so a checkpoint of a
// model whose state lives on storage never needs it all in memory while writing.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "core/config.h"
#include "core/status.h"
#include "io/io_engine.h"
#include "io/safetensors.h"
#include "model/layout.h"

namespace strata {

struct CheckpointMeta {
  int64_t step = 0;        // optimizer steps done
  int64_t adam_steps = 0;  // updates applied
  int64_t data_position = 0;
  int64_t seed = 0;
  std::string schedule;
};

// master, m, v: (slab numel) f32 each, padding included (zero).
using SlabReader = std::function<Status(int64_t slab, float* master, float* m, float* v)>;
using SlabWriter =
    std::function<Status(int64_t slab, const float* master, const float* m, const float* v)>;

struct CheckpointSaveStats {
  std::string dir;     // the published checkpoint
  int64_t bytes = 0;   // all files
  double seconds = 0;  // wall time of the save (training is stopped meanwhile)
};

// Writes ROOT/step-%08d (Note [Checkpoint format]) through `engine` (so io.faults and the rate
// limiter apply), then keeps the newest `keep` step directories (0: all). A step directory that
// already exists is left as it is (the state at a step is deterministic). Errors name the file;
// on error nothing but the temporary directory was touched, and it is removed.
Result<CheckpointSaveStats> save_checkpoint(IoEngine& engine, const std::string& root,
                                            const TrainConfig& cfg, const CheckpointMeta& meta,
                                            const SlabReader& read, int64_t keep);

// The manifest, and every file's size and CRC32C. bad_format naming the file on a mismatch,
// not_found naming it when missing.
Status verify_checkpoint(const std::string& dir);

// verify_checkpoint, then the named safetensors file of the checkpoint parsed from the very bytes
// that were checked (each file is read once).
Result<SafeTensors> read_checkpoint_safetensors(const std::string& dir, const std::string& file);

// A checkpoint directory itself (it has manifest.json), or a root: its newest complete step-*.
// not_found when there is none.
Result<std::string> resolve_checkpoint(const std::string& path);

// Verifies `dir`, checks its model shape against cfg.model (invalid_argument naming the field and
// both values), then hands every slab's master, m, v to `write`, and returns the metadata.
Result<CheckpointMeta> load_checkpoint(const std::string& dir, const TrainConfig& cfg,
                                       const SlabWriter& write);

}  // namespace strata
