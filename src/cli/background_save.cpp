// Note [Asynchronous checkpoints] in model/state_snapshot.h.
#include "cli/background_save.h"

#include <chrono>

namespace strata::cli {

BackgroundSave::~BackgroundSave() {
  if (!thread_.joinable()) return;
  gate_->abandon(unavailable("the run ended"));
  thread_.join();
}

void BackgroundSave::start(std::shared_ptr<SnapshotGate> gate, int64_t step, double boundary_s,
                           std::function<Result<CheckpointSaveStats>()> save) {
  gate_ = std::move(gate);
  step_ = step;
  boundary_s_ = boundary_s;
  done_ = false;
  result_.reset();
  thread_ = std::thread([this, save = std::move(save)] {
    result_.emplace(save());
    done_ = true;
  });
}

Result<CollectedSave> BackgroundSave::collect() {
  const auto t0 = std::chrono::steady_clock::now();
  thread_.join();
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  Result<CheckpointSaveStats> saved = std::move(*result_);
  result_.reset();
  if (!saved.ok()) return saved.status();
  CollectedSave c;
  c.stats = std::move(*saved);
  c.step = step_;
  c.boundary_s = boundary_s_;
  c.stall_s = boundary_s_ + gate_->stalled_seconds() + waited;
  return c;
}

}  // namespace strata::cli
