// Note [Asynchronous checkpoints] in model/state_snapshot.h.
#include "cli/background_save.h"

#include <pthread.h>
#include <sched.h>

#include <chrono>

#include "core/log.h"

namespace strata::cli {

namespace {

// The save's own CPU work (layout conversion, checksums, copies into the page cache) runs on
// cores training leaves idle: with training on the CPU every core computes, and a save at
// normal priority slowed the steps it ran behind by as much as it saved. SCHED_IDLE gives the
// thread only idle time; it cannot starve training, and training cannot starve it for long,
// since a step that needs a slab not yet captured waits, and its core goes idle.
void run_when_idle() {
  sched_param p{};
  p.sched_priority = 0;
  if (pthread_setschedparam(pthread_self(), SCHED_IDLE, &p) != 0) {
    log_warn("the checkpoint thread runs at normal priority (SCHED_IDLE refused)");
  }
}

}  // namespace

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
    run_when_idle();
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
