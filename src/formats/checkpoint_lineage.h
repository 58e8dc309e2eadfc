// Which run a checkpoint directory belongs to.
//
// Note [Checkpoint lineage]
// Every run draws a run id (16 hex digits) and writes it, with its lineage (the ids of the runs it
// continues, oldest first, its own last), into each checkpoint's trainer_state.json. A checkpoint
// root holds one line of training at a time:
//  - a training run holds ROOT/.lock (flock): a second run on ROOT is refused, naming the holder;
//  - a fresh run (no --resume) refuses a ROOT that holds another run's step directories;
//  - a run resumed from step s keeps the steps <= s of its lineage (or without a run id, older
//    checkpoints) and moves every other one to ROOT/superseded-<its run id>/; nothing is deleted.
// So every ROOT/step-* is on the line now training: a save never meets another run's directory,
// --keep prunes only this line, and --resume ROOT continues the newest line. A .tmp-step-N-<pid>
// is removed only when <pid> is gone or a zombie (a crash's leftovers), never under a live save.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace strata {

// A fresh run id: 16 hex digits from the system's random device.
std::string new_run_id();

// An exclusive lock on ROOT/.lock for the life of the object (created with the directory if
// missing). invalid_argument naming the directory and the holder's pid when another run has it.
class CheckpointDirLock {
 public:
  static Result<CheckpointDirLock> acquire(const std::string& root);
  CheckpointDirLock(CheckpointDirLock&& other) noexcept;
  CheckpointDirLock& operator=(CheckpointDirLock&&) = delete;
  CheckpointDirLock(const CheckpointDirLock&) = delete;
  CheckpointDirLock& operator=(const CheckpointDirLock&) = delete;
  ~CheckpointDirLock();

 private:
  explicit CheckpointDirLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

// Makes ROOT hold only the line of `lineage` (this run's, its own id last) before the run saves
// into it: `resumed_step` < 0 for a fresh run (refused, invalid_argument naming ROOT and the
// steps found, when ROOT holds step directories), else the step the run resumed from (other
// lines' directories moved to ROOT/superseded-<id>/). Returns the directories moved.
Result<std::vector<std::string>> claim_checkpoint_root(const std::string& root,
                                                       const std::vector<std::string>& lineage,
                                                       int64_t resumed_step);

// A leftover temporary directory name of a save (".tmp-step-N-<pid>") whose process is gone.
bool is_stale_save_dir(const std::string& name);

// Process `pid` no longer runs: it does not exist, is exiting, or is a zombie (killed, not yet
// reaped).
bool process_is_gone(long pid);

}  // namespace strata
