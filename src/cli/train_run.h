// `strata train`, split by concern: train_setup.cpp checks the flags and sets a run up (config,
// data, output files, the checkpoint directory, the trainer); train_checkpoints.cpp is where a
// run's state comes from (--resume, --init-from) and goes to (checkpoints); cmd_train.cpp runs
// the steps. This header is what they share: the run, and the pieces one calls in another.
#pragma once

#include <cstdint>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "cli/args.h"
#include "cli/background_save.h"
#include "cli/commands.h"
#include "cli/progress.h"
#include "core/config.h"
#include "core/scratch_files.h"
#include "core/status.h"
#include "data/dataloader.h"
#include "data/token_file.h"
#include "dist/communicator.h"
#include "formats/checkpoint_lineage.h"
#include "formats/hf_import.h"
#include "io/io_engine.h"
#include "train/trainer.h"

namespace strata {
struct AlphaChoice;  // planner/planner.h
}

namespace strata::cli {

// The training tokens: either the generated corpus or token files (Note [Token file lists] in
// data/token_paths.h), kept alive here.
struct TrainData {
  std::vector<uint16_t> owned;                  // embedded corpus
  std::vector<TokenFile> files;                 // open token files, read with pread
  std::vector<std::optional<TokenFile>> masks;  // each file's mask (Note [Loss masks]), if any
  std::vector<TokenShard> shards;               // of either, in the list's order
  int64_t size = 0;                             // tokens of all shards
  int64_t trained = 0;  // of them, those a mask keeps in the loss (all without one)
  std::string name;     // "embedded corpus", "x.bin" or "3 files (a.bin ... c.bin)"
};

// The checkpoint flags: --save-every N --checkpoint-dir DIR [--keep K] [--resume DIR].
struct CheckpointOptions {
  int64_t save_every = 0;  // 0: no checkpoints
  std::string dir;
  int64_t keep = 3;
  std::string resume;
  std::string resume_dir;  // --resume's checkpoint, resolved and checked (check_resume)
  // Note [Asynchronous checkpoints]: checkpoints before the last step are written behind
  // training; --save-sync writes every one at a standstill.
  bool behind = true;
};

// A checkpoint finished at a step boundary, for the step's metrics line.
struct CheckpointReport {
  int64_t step = 0;     // the boundary it holds
  double stall_s = 0;   // how long training stood still for it
  double write_s = 0;   // the save's wall time
  bool behind = false;  // written behind training (Note [Asynchronous checkpoints])
};

// Everything a run needs before step 1; a failure is a one-line message and an exit code.
struct TrainRun {
  // The ranks (Note [Data parallel ranks]); declared first, so it goes last, after the trainer.
  std::unique_ptr<Communicator> world;
  TrainConfig cfg;
  TrainData data;
  std::unique_ptr<DataLoader> loader;
  TrainData val_data;                      // data.val, when set
  std::unique_ptr<DataLoader> val_loader;  // its batches, from the start at every evaluation
  std::optional<double> last_val_loss;     // for the summary line
  std::ofstream metrics;
  std::string metrics_path, trace_path, report_path;
  // A metrics file this run made, removed by a signal during set-up (Note [Stopping on a
  // signal]); released once training starts.
  ScratchFile metrics_scratch;
  CheckpointOptions ckpt;
  std::optional<HfImportPlan> import;  // --init-from: the model's weights, checked
  nlohmann::json base_model;           // Note [Base model]: --init-from's, or the resumed run's
  std::vector<std::string> tokenizer_files;  // Note [Checkpoint tokenizer]: copied into saves
  std::unique_ptr<IoEngine> ckpt_engine;
  std::optional<CheckpointDirLock> ckpt_lock;  // held while training (Note [Checkpoint lineage])
  std::vector<std::string> lineage;            // this run's: the runs it continues, then its id
  std::unique_ptr<Device> device;
  std::unique_ptr<Trainer> trainer;
  // A checkpoint being written behind training; declared after the trainer so that it is joined
  // (abandoned if still running) before the trainer it reads from goes.
  BackgroundSave background;
  bool quiet = false;
};

// Exit code and message of a set-up failure.
struct SetupError {
  std::string message;
  int code = 2;
};

// ---- train_setup.cpp ----------------------------------------------------------------------------

// The run of the flags, ready for step 1. Every flag is checked before the run creates a file or
// takes a lock, so bad input leaves nothing behind.
std::optional<SetupError> set_up(const ParsedArgs& a, TrainRun& run);
// The model, data, ranks, device and trainer, logged.
void log_run(const TrainRun& run);
// Rank 0 alone writes metrics, traces and reports and publishes checkpoints.
bool writes_outputs(const TrainRun& run);
// The pieces of set_up that `strata eval` shares. The tokens of `source` (data.train or data.val:
// "embedded" generates `embedded_bytes` of text from `seed`, else token files); `field` names it.
Result<TrainData> load_token_data(const TrainConfig& cfg, const std::string& source,
                                  const std::string& field, int64_t embedded_bytes, uint64_t seed);
// data.val's tokens ("embedded": the generated held-out text).
Result<TrainData> load_val_data(const TrainConfig& cfg);
// --init-from's config: the embedded default with plan's model, then --config, --set, --device;
// a model field set against plan's is one line naming it.
Result<TrainConfig> config_over_import(const ParsedArgs& a, const HfImportPlan& plan);
// The device, the ranks' transport and the trainer for run.cfg (with alpha "auto"'s simulated
// costs, when there are some).
std::optional<SetupError> set_up_trainer(TrainRun& run, const AlphaChoice& predicted);

// ---- train_checkpoints.cpp ----------------------------------------------------------------------

// --resume DIR, before the run creates anything: the checkpoint found and its small files read;
// refused when it is at or past train.steps, or when the config changes a field of Note
// [Resuming with changed fields] that --allow-changes does not name; each changed field logged.
std::optional<SetupError> check_resume(const ParsedArgs& a, TrainRun& run);
// --resume DIR: the trainer's state, the data position and the step counters from the
// checkpoint. Returns the step to start from.
Result<int64_t> resume(TrainRun& run);
// --init-from DIR: the trainer's weights from the plan's files, AdamW's moments zero and the step
// counters at 0, so training starts fresh from them (Note [Hugging Face import]).
Status init_from(TrainRun& run);
// A checkpoint is due after `done` steps: every --save-every steps, and after the last.
bool checkpoint_due(const TrainRun& run, int64_t done);
// The checkpoint after `steps_done` steps, at a standstill. With ranks, every rank writes its
// share (Note [Sharded checkpoints]).
Result<CheckpointReport> save_at_standstill(TrainRun& run, int64_t steps_done, Progress& progress);
// The checkpoint after `steps_done` steps begun behind training; false when the trainer takes
// no snapshots (the caller saves at a standstill).
Result<bool> start_save_behind(TrainRun& run, int64_t steps_done);
// The checkpoint being written behind training, waited for.
Result<CheckpointReport> collect_save(TrainRun& run, Progress& progress);

}  // namespace strata::cli
