// The pread/pwrite storage engine, for where io_uring or O_DIRECT is unavailable (tmpfs on old
// kernels, kernels without io_uring, sandboxes that forbid it). docs/design.md §4; shared rules are
// in block_engine.h.
//
// Contract:
//   CONCURRENCY CONTROL. A fixed pool of min(workers x queue_depth, 64) threads, the same number
//   of blocks in flight as the io_uring engine allows, each thread running one block at a time
//   with blocking pread/pwrite. One FIFO of work items (one per request) under one mutex; a
//   thread takes the next block of the front request, so a big request's blocks run on many
//   threads at once.
//   ACCOUNTING. Every syscall result goes through BlockEngine::finish_attempt (Note [Every
//   completion is checked]); the thread loops on the same block until it is finished.
//   WAKING. Idle threads sleep on a condition variable; submit wakes as many as the request has
//   blocks.
//   THREAD SAFETY. All public methods may be called from any thread.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "io/block_engine.h"

namespace strata {

class PosixEngine final : public io_detail::BlockEngine {
 public:
  static Result<std::unique_ptr<PosixEngine>> create(const IoEngineOptions& options);
  // Finishes every request already submitted, then stops the threads.
  ~PosixEngine() override;

  const char* name() const override { return "posix"; }
  int threads() const { return static_cast<int>(threads_.size()); }

 private:
  struct WorkItem {
    io_detail::RequestSlot* slot;
    uint64_t next;  // next block to hand out
  };

  explicit PosixEngine(const IoEngineOptions& options) : BlockEngine(options) {}
  void enqueue(io_detail::RequestSlot* slot) override;
  void run();
  void stop();

  std::mutex mu_;
  std::condition_variable work_;
  std::vector<WorkItem> queue_;  // guarded by mu_; FIFO from queue_head_
  size_t queue_head_ = 0;        // guarded by mu_
  bool stop_ = false;            // guarded by mu_
  std::vector<std::thread> threads_;
};

}  // namespace strata
