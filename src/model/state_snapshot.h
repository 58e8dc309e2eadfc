// The training state at a step boundary, handed to a checkpoint that writes it while training
// goes on.
//
// Note [Asynchronous checkpoints]
// A checkpoint holds the state after step s: every slab's master weights and AdamW moments once
// step s's updates are applied. Writing it (read from the store, convert, write, fsync) takes
// about as long as copying the state, and training need not stand still for it: at the boundary
// the trainer hands out a StateSnapshot and goes on with step s+1, while a checkpoint thread
// captures the slabs one at a time and writes them. No copy of the state is made; two rules,
// enforced by a SnapshotGate, keep what is captured exactly the state after step s:
//  - ready: a slab may be captured once step s's updates of it are all in place. The vertical
//    schedule leaves the part-1 steps of step s pending until the next run's forward (Note
//    [Optimizer split] in sched/schedule_spec.h); those slabs become ready when the next run's
//    task that writes their state (the step when the state is on host, the store write after it
//    when on storage) finishes. Every other slab is ready at once.
//  - captured: a task of step s+1 that writes a slab's state waits until the snapshot has
//    captured that slab. Such waits, the boundary itself, and the wait for a save still running
//    at the next checkpoint's boundary (back-pressure) are the checkpoint's stall, reported per
//    checkpoint; the rest of the save is hidden behind training.
// The checkpoint thread takes the ready slabs in the order the next step overwrites them (the
// gate's preference order), waiting when none is ready. It cannot deadlock: every task that makes
// a slab ready is a pending step of step s, which never waits on the gate and happens before
// every write of step s+1 in the plan (the pending step of a block precedes its forward, the
// block's own step follows its backward).
// A save that fails cancels the gate (nothing waits on it again) and publishes nothing; a step
// that fails abandons it, so the save fails with the step's error and publishes nothing either.
// The files are written at offsets known in advance, slab by slab in capture order, and each
// file's CRC32C is combined from its slabs' in file order (crc32c_combine), so capture order
// never shows in the checkpoint: it is bit-identical to one written at a standstill.
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
