// Checkpoints: the complete training state at one step boundary, published atomically, verified
// on load. docs/design.md §8.
//
// Note [Checkpoint format]
// A checkpoint is a directory ROOT/step-%08d (the number of optimizer steps done) holding:
//   model.safetensors, exp_avg.safetensors, exp_avg_sq.safetensors: the f32 masters, AdamW's m
//     and v, under HF names (Note [Checkpoint tensor streams] in formats/checkpoint_tensors.h);
//     model.safetensors's metadata is {"format": "strata-checkpoint", "version": "1"}
//   config.json: the run's config (config_to_json); trainer_state.json: CheckpointMeta
//     {"step", "adam_steps", "data_position", "seed", "schedule", "run_id", "lineage",
//     "base_model"} (base_model: Note [Base model])
//   the run's tokenizer files, when it has them (Note [Checkpoint tokenizer])
//   manifest.json, written last: {"format": "strata-checkpoint", "version": 2, "step",
//     "files": [{"name", "bytes", "crc32c"}]} (crc32c: 8 hex digits)
// Version 1 (both moments in optimizer.safetensors) still loads; several ranks write version 3
// (Note [Sharded checkpoints] in formats/checkpoint_shards.h). Any step-* directory is complete;
// a load uses only bytes verified against the manifest; host memory is O(one tensor), never
// O(slab). Publishing, the two read passes and the memory bound: docs/design.md §8.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/config.h"
#include "core/file_util.h"
#include "core/status.h"
#include "formats/checkpoint_tensors.h"
#include "formats/safetensors.h"
#include "io/io_engine.h"
#include "model/layout.h"
#include "model/slab_piece.h"
#include "model/state_snapshot.h"

namespace strata {

struct CheckpointMeta {
  int64_t step = 0;        // optimizer steps done
  int64_t adam_steps = 0;  // updates applied
  int64_t data_position = 0;
  int64_t seed = 0;
  std::string schedule;
  // Note [Checkpoint lineage] (formats/checkpoint_lineage.h): the run that wrote it, and the runs
  // it continues, oldest first, its own id last. Empty in checkpoints written before run ids.
  std::string run_id;
  std::vector<std::string> lineage;
  // Note [Base model]: a run started with --init-from DIR (and every run resuming it) records
  // {"path": DIR, "config": DIR/config.json, "generation_config": DIR/generation_config.json
  // (when there was one)}, so an export can give Hugging Face back every field it came with and
  // a PEFT adapter can name its base. null for a run trained from scratch.
  nlohmann::json base_model;
  // Note [Checkpoint tokenizer]: the tokenizer files a save copies into the checkpoint (source
  // paths; not in trainer_state.json): the base's at --init-from, the resumed checkpoint's after.
  std::vector<std::string> tokenizer_files;
};

// Note [Checkpoint tokenizer]
// A run's tokenizer travels with its checkpoints: every save copies the files of
// kTokenizerFileNames it has (the base model's at --init-from, then each checkpoint's own) into
// the step directory, listed in the manifest with their CRCs. `strata sample` and `strata export`
// read the checkpoint's copy first, so a base that moved or changed does not change how a
// checkpoint tokenizes; one without a copy (trained from scratch, or older) falls back to its base.
inline constexpr std::array<const char*, 4> kTokenizerFileNames = {
    "tokenizer.json", "tokenizer.model", "tokenizer_config.json", "special_tokens_map.json"};
// The files of kTokenizerFileNames in `dir` (a checkpoint or a model directory), as paths.
std::vector<std::string> tokenizer_files_in(const std::string& dir);

// A save's source: hands slab `slab`'s state to `take`, piece by piece (Note [Slab pieces]).
using SlabReader = std::function<Status(int64_t slab, const SlabPieceFn& take)>;
// A load's sink: has `fill` fill slab `slab`'s state, piece by piece, then keeps it.
using SlabWriter = std::function<Status(int64_t slab, const SlabPieceFn& fill)>;

struct CheckpointSaveStats {
  std::string dir;           // the published checkpoint
  int64_t bytes = 0;         // all files
  double seconds = 0;        // wall time of the save
  int64_t buffer_bytes = 0;  // the most bytes of conversion buffers the save held at once
};

// Writes ROOT/step-%08d (Note [Checkpoint format]) through `engine` (so io.faults and the rate
// limiter apply), then keeps the newest `keep` step directories (0: all). A step directory that
// already exists is left as it is (the state at a step is deterministic). Errors name the file;
// on error nothing but the temporary directory was touched, and it is removed.
Result<CheckpointSaveStats> save_checkpoint(IoEngine& engine, const std::string& root,
                                            const TrainConfig& cfg, const CheckpointMeta& meta,
                                            const SlabReader& read, int64_t keep);
// The same from a snapshot that training goes on behind (Note [Asynchronous checkpoints] in
// model/state_snapshot.h): slabs are written as the gate makes them ready, in its order, and the
// files come out bit-identical to a save at a standstill. Run it on a thread of its own. On
// return the gate is finished either way (on failure cancelled), so training never waits on it.
Result<CheckpointSaveStats> save_checkpoint(IoEngine& engine, const std::string& root,
                                            const TrainConfig& cfg, const CheckpointMeta& meta,
                                            const StateSnapshot& snapshot, int64_t keep);

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

// The step-* directories of a checkpoint root with their step numbers, oldest first.
std::vector<std::pair<int64_t, std::string>> checkpoint_step_dirs(const std::string& root);

// trainer_state.json of a checkpoint directory, its fields checked (bad_format naming the file
// and the field).
Result<CheckpointMeta> read_trainer_state(const std::string& dir);

// A checkpoint directory itself (it has manifest.json), or a root: its newest complete step-*.
// not_found when there is none.
Result<std::string> resolve_checkpoint(const std::string& path);

// The format version its manifest declares (3: sharded, Note [Sharded checkpoints]).
Result<int> checkpoint_version(const std::string& dir);

// config.json of a checkpoint directory (bad_format naming the file).
Result<TrainConfig> read_checkpoint_config(const std::string& dir);

// What a resume checks before it sets anything up: config.json and trainer_state.json verified
// against the manifest (not the tensors) and read, the model shape checked against cfg.model as
// load_checkpoint does, and the step the directory's name, the manifest and trainer_state.json
// give checked to be one (bad_format naming them otherwise).
struct CheckpointHead {
  TrainConfig config;  // the config the checkpoint's run had
  CheckpointMeta meta;
  int64_t ranks = 1;  // the ranks that wrote it (Note [Sharded checkpoints])
};
Result<CheckpointHead> read_checkpoint_head(const std::string& dir, const TrainConfig& cfg);

// Everything load_checkpoint does before the state moves: verifies `dir`, checks its model shape
// against cfg.model and reads trainer_state.json into *meta; then the state's source, either
// version (Note [Sharded checkpoints] in formats/checkpoint_shards.h for version 3).
Result<std::unique_ptr<StateSource>> open_checkpoint_state(
    const std::string& dir, const TrainConfig& cfg, CheckpointMeta* meta,
    const CheckpointReadOptions& options = {});

// Verifies `dir`, checks its model shape against cfg.model (invalid_argument naming the field and
// both values), then hands every slab's master, m, v to `write`, and returns the metadata. Two
// passes, host memory O(one tensor): Note [Checkpoint format].
Result<CheckpointMeta> load_checkpoint(const std::string& dir, const TrainConfig& cfg,
                                       const SlabWriter& write,
                                       const CheckpointReadOptions& options = {});

}  // namespace strata
