// Note [Asynchronous checkpoints] in state_snapshot.h.
#include "model/state_snapshot.h"

#include <algorithm>
#include <chrono>

namespace strata {

SnapshotGate::SnapshotGate(std::vector<int64_t> preference) : preference_(std::move(preference)) {
  int64_t slabs = 0;
  for (int64_t s : preference_) slabs = std::max(slabs, s + 1);
  slabs_.resize(static_cast<size_t>(slabs));
}

void SnapshotGate::hold(int64_t slab) {
  std::lock_guard<std::mutex> lock(mu_);
  slabs_.at(static_cast<size_t>(slab)).writes_due = -1;
}

void SnapshotGate::expect_writes(int64_t slab, int64_t writes) {
  std::lock_guard<std::mutex> lock(mu_);
  slabs_.at(static_cast<size_t>(slab)).writes_due = writes;
  changed_.notify_all();
}

void SnapshotGate::wrote(int64_t slab) {
  std::lock_guard<std::mutex> lock(mu_);
  SlabState& s = slabs_.at(static_cast<size_t>(slab));
  if (s.writes_due > 0 && --s.writes_due == 0) changed_.notify_all();
}

void SnapshotGate::wait_captured(int64_t slab) {
  std::unique_lock<std::mutex> lock(mu_);
  const SlabState& s = slabs_.at(static_cast<size_t>(slab));
  if (s.captured || cancelled_ || !abandoned_.ok()) return;
  const auto t0 = std::chrono::steady_clock::now();
  changed_.wait(lock, [&] { return s.captured || cancelled_ || !abandoned_.ok(); });
  stalled_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void SnapshotGate::abandon(const Status& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (abandoned_.ok()) abandoned_ = why.ok() ? internal_error("snapshot abandoned") : why;
  changed_.notify_all();
}

bool SnapshotGate::finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cancelled_ || !abandoned_.ok() ||
         captured_count_ == static_cast<int64_t>(preference_.size());
}

Result<int64_t> SnapshotGate::next_ready() {
  std::unique_lock<std::mutex> lock(mu_);
  int64_t found = -1;
  changed_.wait(lock, [&] {
    if (!abandoned_.ok()) return true;
    if (captured_count_ == static_cast<int64_t>(preference_.size())) return true;
    for (int64_t slab : preference_) {
      const SlabState& s = slabs_[static_cast<size_t>(slab)];
      if (!s.captured && s.writes_due == 0) {
        found = slab;
        return true;
      }
    }
    return false;
  });
  if (!abandoned_.ok()) {
    return Status(abandoned_.code(),
                  "training stopped before the checkpoint was captured: " + abandoned_.message());
  }
  return found;
}

void SnapshotGate::captured(int64_t slab) {
  std::lock_guard<std::mutex> lock(mu_);
  SlabState& s = slabs_.at(static_cast<size_t>(slab));
  if (!s.captured) {
    s.captured = true;
    captured_count_++;
  }
  changed_.notify_all();
}

void SnapshotGate::cancel() {
  std::lock_guard<std::mutex> lock(mu_);
  cancelled_ = true;
  changed_.notify_all();
}

double SnapshotGate::stalled_seconds() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stalled_s_;
}

}  // namespace strata
