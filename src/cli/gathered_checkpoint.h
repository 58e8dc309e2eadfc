// A checkpoint as the tools that read Hugging Face files need it (export, sample): a version 2
// checkpoint is used as it is; a sharded one (Note [Sharded checkpoints] in
// formats/checkpoint_shards.h) is gathered first into a temporary directory, removed afterwards.
#pragma once

#include <string>

#include "core/scratch_files.h"
#include "core/status.h"
#include "formats/checkpoint.h"

namespace strata::cli {

// The version 2 checkpoint of checkpoint `dir` in OUT_ROOT/step-N (gather_checkpoint), OUT_ROOT
// made when missing: `strata gather`, and the gathering below.
Result<CheckpointSaveStats> gather_into(const std::string& dir, const std::string& out_root);

class HfReadableCheckpoint {
 public:
  // `dir`: a resolved step directory. A sharded one is gathered under `scratch_parent` (made
  // when missing), in .tmp-gather-<pid>; a crash leaves it for the user to remove.
  static Result<HfReadableCheckpoint> open(const std::string& dir,
                                           const std::string& scratch_parent);
  HfReadableCheckpoint(HfReadableCheckpoint&& other) noexcept;
  HfReadableCheckpoint& operator=(HfReadableCheckpoint&&) = delete;
  HfReadableCheckpoint(const HfReadableCheckpoint&) = delete;
  ~HfReadableCheckpoint();

  const std::string& dir() const { return dir_; }  // the checkpoint to read

 private:
  HfReadableCheckpoint(std::string dir, std::string scratch)
      : dir_(std::move(dir)), scratch_(std::move(scratch)), registered_(scratch_) {}
  std::string dir_;
  std::string scratch_;     // the temporary root, when gathered
  ScratchFile registered_;  // scratch_, for a signal that ends the process (Note [Scratch files])
};

}  // namespace strata::cli
