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
// model whose state lives on storage never needs it all in memory, writing or reading.
//
// Reading is two passes over the files (docs/design.md §8):
//   1. verify: every file the manifest lists is read front to back in chunks of
//      CheckpointReadOptions::chunk_bytes through one reused buffer, its size and CRC32C compared
//      with the manifest. Nothing is used before all of them match.
//   2. load: the two safetensors headers are read (a few KB: names, shapes, offsets), then per
//      slab exactly the bytes of its tensors (master from model.safetensors, exp_avg and
//      exp_avg_sq from optimizer.safetensors) are read with pread into buffers sized once for
//      the largest slab, converted from HF layout and handed to the SlabWriter.
// So the writer only ever sees bytes that were verified, a corrupt file changes no trainer state,
// and host memory is O(largest slab) (master, m, v, f32: 12 bytes per parameter of the slab, and
// one staging buffer for the largest Conv1D weight, the only tensors HF transposes; the others are
// read straight into place) plus one chunk, never O(model). Saving holds the same. The price is reading the files twice;
// a published checkpoint is immutable, so the second pass reads what the first one checked. `strata
// export` reads model.safetensors the same way (io/hf_export.h).
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/file_util.h"
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

// Data buffers held at once while reading a checkpoint, and every read of its files' data (not
// the few KB of JSON and safetensors headers): what tests bound to prove the memory bound.
struct CheckpointReadStats {
  ReadStats reads;
  int64_t buffer_bytes = 0;  // the most bytes of data buffers held at once

  // A reader now holds `bytes` of data buffers.
  void note_buffers(int64_t bytes) { buffer_bytes = std::max(buffer_bytes, bytes); }
};

struct CheckpointReadOptions {
  // Verifying (and the export's copy) reads files in chunks of this many bytes through one
  // buffer.
  int64_t chunk_bytes = int64_t{16} << 20;
  CheckpointReadStats* stats = nullptr;  // filled when set
};

// The manifest, and every file's size and CRC32C, read in chunks. bad_format naming the file on a
// mismatch, not_found naming it when missing.
Status verify_checkpoint(const std::string& dir, const CheckpointReadOptions& options = {});

// The manifest, and the size and CRC32C of the named files only (not_found naming one the
// manifest does not list).
Status verify_checkpoint_files(const std::string& dir, const std::vector<std::string>& files,
                               const CheckpointReadOptions& options = {});

// A checkpoint directory itself (it has manifest.json), or a root: its newest complete step-*.
// not_found when there is none.
Result<std::string> resolve_checkpoint(const std::string& path);

// Verifies `dir`, checks its model shape against cfg.model (invalid_argument naming the field and
// both values), then hands every slab's master, m, v to `write`, and returns the metadata. Two
// passes, host memory O(largest slab): Note [Checkpoint format].
Result<CheckpointMeta> load_checkpoint(const std::string& dir, const TrainConfig& cfg,
                                       const SlabWriter& write,
                                       const CheckpointReadOptions& options = {});

}  // namespace strata
