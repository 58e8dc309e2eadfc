// The training state at a step boundary, handed to a checkpoint that writes it while training
// goes on.
//
// Note [Asynchronous checkpoints]
// A checkpoint holds the state after step s. At that boundary the trainer hands out a StateSnapshot
// and goes on with step s+1 while a checkpoint thread captures the slabs one at a time and writes
// them; no copy of the state is made. A SnapshotGate keeps what is captured exactly step s's:
//  - ready: a slab is captured once step s's updates of it are in place. Vertical's pending part-1
//    slabs (Note [Optimizer split]) are ready when the next run's task writing their state (the
//    step on host, the store write after it on storage) finishes; every other slab at once.
//  - captured: a task of step s+1 that writes a slab's state waits until that slab is captured.
// The thread takes ready slabs in the order step s+1 overwrites them; why it cannot deadlock, and
// what the reported stall counts, is in docs/design.md §8. A failed save cancels the gate and a
// failed step abandons it: nothing is published. Files are written at offsets known in advance,
// CRC32Cs combined in file order: the bytes are a standstill checkpoint's, whatever the order.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "core/status.h"
#include "model/slab_piece.h"

namespace strata {

class SnapshotGate {
 public:
  // `preference`: every slab once, in the order the next step overwrites them. All start ready.
  explicit SnapshotGate(std::vector<int64_t> preference);

  // ---- trainer side ---------------------------------------------------------------------------
  // The slab is not ready until `writes` more writes of its state (wrote) are done; 0: ready.
  void expect_writes(int64_t slab, int64_t writes);
  // Marks a slab as not ready until expect_writes says how many writes to wait for.
  void hold(int64_t slab);
  void wrote(int64_t slab);
  // Before a write of the next step to the slab's state: returns once it is captured, or the
  // snapshot was cancelled or abandoned. The time spent waiting adds to stalled_seconds.
  void wait_captured(int64_t slab);
  // Training failed: the checkpoint side's next_ready returns `why`.
  void abandon(const Status& why);
  // Every slab captured, or the snapshot cancelled or abandoned: nothing more will wait.
  bool finished() const;

  // ---- checkpoint side ------------------------------------------------------------------------
  // Blocks until a slab not yet captured is ready; the first such in preference order, or -1
  // when every slab is captured. The abandon Status when training failed.
  Result<int64_t> next_ready();
  void captured(int64_t slab);
  // The save failed: every slab counts as captured, so training never waits on it.
  void cancel();

  double stalled_seconds() const;  // the trainer's waits in wait_captured, in total

 private:
  struct SlabState {
    int64_t writes_due = 0;  // -1: held, count not known yet
    bool captured = false;
  };
  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::vector<int64_t> preference_;
  std::vector<SlabState> slabs_;  // by slab index
  int64_t captured_count_ = 0;
  bool cancelled_ = false;
  Status abandoned_;
  double stalled_s_ = 0;
};

// What a trainer hands a checkpoint at a step boundary (Note [Asynchronous checkpoints]).
struct StateSnapshot {
  std::shared_ptr<SnapshotGate> gate;
  // Hands a ready slab's state to `take` in pieces (Note [Slab pieces]); called from the
  // checkpoint thread, one slab at a time, each slab once, before `gate->captured(slab)`.
  std::function<Status(int64_t slab, const SlabPieceFn& take)> read;
};

}  // namespace strata
