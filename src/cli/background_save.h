// A checkpoint written on a thread of its own while training goes on (Note [Asynchronous
// checkpoints] in model/state_snapshot.h): `strata train` starts one at a checkpoint's step
// boundary and collects it at a later boundary, waiting for it only when the next checkpoint is
// due (back-pressure) or the run ends.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <thread>

#include "core/status.h"
#include "formats/checkpoint.h"
#include "model/state_snapshot.h"

namespace strata::cli {

// A collected save: what it wrote, and how long training stood still for it.
struct CollectedSave {
  CheckpointSaveStats stats;
  int64_t step = 0;       // the step boundary it holds
  double stall_s = 0;     // the boundary, the trainer's waits on the gate, and the collect's wait
  double boundary_s = 0;  // of which at the boundary (the snapshot begun)
};

class BackgroundSave {
 public:
  BackgroundSave() = default;
  // Abandons a save still running (its snapshot stops at the next slab; nothing is published)
  // and joins its thread: a save never outlives the run, nor the trainer it reads from.
  ~BackgroundSave();
  BackgroundSave(const BackgroundSave&) = delete;
  BackgroundSave& operator=(const BackgroundSave&) = delete;

  // Runs `save` on a thread of its own. `boundary_s`: how long the step boundary took to begin
  // the snapshot. Only when nothing is running.
  void start(std::shared_ptr<SnapshotGate> gate, int64_t step, double boundary_s,
             std::function<Result<CheckpointSaveStats>()> save);
  bool running() const { return thread_.joinable(); }
  bool done() const { return done_.load(); }  // the save has returned (collect will not wait)
  // Waits for the save and returns it; its error when it failed.
  Result<CollectedSave> collect();

 private:
  std::thread thread_;
  std::atomic<bool> done_{false};
  std::shared_ptr<SnapshotGate> gate_;
  std::optional<Result<CheckpointSaveStats>> result_;
  int64_t step_ = 0;
  double boundary_s_ = 0;
};

}  // namespace strata::cli
