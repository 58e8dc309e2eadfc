// The parts of writing a checkpoint that both layouts share (Note [Checkpoint format] in
// formats/checkpoint.h; Note [Sharded checkpoints] in formats/checkpoint_shards.h): the JSON files,
// the manifest, and publishing a temporary directory atomically. Internal to src/io.
#pragma once

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/scratch_files.h"
#include "core/status.h"
#include "formats/checkpoint.h"
#include "io/io_engine.h"

namespace strata {

inline constexpr const char* kCheckpointFormat = "strata-checkpoint";

// One file of a checkpoint as its manifest lists it.
struct ManifestEntry {
  std::string name;
  int64_t bytes = 0;
  uint32_t crc = 0;
};

std::string checkpoint_step_name(int64_t step);  // "step-%08d"
// ROOT/step-%08d, and the temporary directory process `pid` writes it in before publishing:
// ROOT/.tmp-step-%08d-<pid> (is_stale_save_dir reads the pid back).
std::string checkpoint_step_dir(const std::string& root, int64_t step);
std::string checkpoint_tmp_dir(const std::string& root, int64_t step, long pid);
std::string crc32c_hex(uint32_t crc);  // 8 lowercase hex digits

// config.json and trainer_state.json, then manifest.json (last) listing `files` and those two,
// with `extra` fields added to it (version 3's "shards"). Adds every byte to stats->bytes.
Status write_checkpoint_meta(IoEngine& engine, const std::string& dir, const TrainConfig& cfg,
                             const CheckpointMeta& meta, int version,
                             std::vector<ManifestEntry> files, const nlohmann::json& extra,
                             CheckpointSaveStats* stats);

// A save under way: its temporary directory, or the step directory that already holds it.
struct PendingSave {
  std::string tmp;      // ROOT/.tmp-step-%08d-<pid>, created empty
  ScratchFile scratch;  // tmp, for a signal that ends the process mid-save (Note [Scratch files])
  bool done = false;    // the step directory exists already (the state at a step is deterministic)
  CheckpointSaveStats stats;
  std::chrono::steady_clock::time_point t0;
};
// Creates ROOT, removes the leftovers of interrupted saves, and makes the temporary directory,
// named after process `pid` (the one that publishes it).
Result<PendingSave> begin_checkpoint_save(const std::string& root, int64_t step, long pid);
// `written`: whether every file is in the temporary directory. Fsyncs and renames it to the step
// directory, fsyncs ROOT and keeps the newest `keep` step directories (0: all); on any failure
// (`written`'s too) removes the temporary directory and names the checkpoint in the error.
Result<CheckpointSaveStats> publish_checkpoint_save(PendingSave pending, const std::string& root,
                                                    int64_t keep, Status written);

}  // namespace strata
