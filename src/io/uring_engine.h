// The io_uring storage engine. docs/design.md §4; the shared rules are in block_engine.h.
//
// Contract:
//   CONCURRENCY CONTROL. `workers` rings, each created, fed and reaped by its own thread, so a
//   ring never needs a lock and can be set up IORING_SETUP_SINGLE_ISSUER (+ DEFER_TASKRUN, where
//   the kernel has them; plain rings otherwise). submit() stripes a request's blocks over the
//   rings (block i to ring (r + i) mod workers, r advancing per request) and appends one work item
//   per ring to that ring's incoming list, the only state shared with the submitter (a short
//   mutex). Each ring keeps up to queue_depth blocks in flight, refilling from its list as
//   completions arrive, so all blocks of a big request run at once up to the depth.
//   ACCOUNTING. Every CQE goes through BlockEngine::finish_attempt (Note [Every completion is
//   checked]); a resubmission reuses the block's in-flight entry, so at most queue_depth entries
//   per ring exist and nothing is allocated per request or per block.
//   WAKING. An idle ring thread sleeps in io_uring_enter on its own CQEs; one read of an eventfd
//   is always armed on the ring, and a submitter writes the eventfd only when the thread has
//   said it is asleep with room for more work (an atomic flag), so a busy ring is never
//   interrupted and an idle one never spins.
//   THREAD SAFETY. All public methods may be called from any thread. register_buffers runs the
//   registration on each ring's own thread (a single-issuer ring accepts it from no other).
//   Registered files are not used: the engine does not see files open and close, and a stale
//   registration of a reused fd number would silently address the old file; for 1 MiB blocks
//   the saved fget/fput is noise.
//   FAILURES. A failed io_uring_enter never aborts the process: Note [A failed submission breaks
//   the io_uring engine].
//
// Note [A failed submission breaks the io_uring engine]
// io_uring_enter can fail on a ring that worked so far (ENOMEM; EBADF/ENXIO when the ring is torn
// down under us); EINTR, EAGAIN and EBUSY are only retried. A failed call took none of the SQEs
// offered and retrying could fail forever, so the ring never submits again:
//   - each block the kernel never took, and each still queued on the ring, fails at once with
//     io_error "<op> <path> at offset ... [io_uring]: io_uring submission failed on ring R: ...";
//   - blocks the kernel holds are not failed early (it may still use their buffers): the ring
//     reaps them without submitting, each with its own result (one needing resubmission fails with
//     the submission error); only if waiting fails too are they failed (closing cancels them);
//   - the engine is broken (BlockEngine::mark_broken): every later submit and register_buffers is
//     refused at once, naming the first failure; other rings finish what they hold.
// Every issued ticket finishes, so no waiter hangs. Tests: IoFaultHook::on_uring_submit.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "io/block_engine.h"

namespace strata {

class UringEngine final : public io_detail::BlockEngine {
 public:
  // unavailable (with the kernel's reason) when io_uring cannot be set up here.
  static Result<std::unique_ptr<UringEngine>> create(const IoEngineOptions& options);
  // Finishes every request already submitted (their buffers are in the kernel's hands), then
  // stops the ring threads.
  ~UringEngine() override;

  const char* name() const override { return "io_uring"; }
  // An empty list unregisters. See IoEngine::register_buffers. io_error once the engine is
  // broken (Note [A failed submission breaks the io_uring engine]).
  Status register_buffers(const std::vector<std::pair<void*, uint64_t>>& buffers) override;

  // "2 rings x depth 32, SINGLE_ISSUER|DEFER_TASKRUN", for the log line.
  std::string describe() const;
  // Block transfers issued as read_fixed/write_fixed so far (tests check registration works).
  int64_t fixed_buffer_transfers() const;

 private:
  class Ring;
  explicit UringEngine(const IoEngineOptions& options);
  void enqueue(io_detail::RequestSlot* slot) override;

  std::vector<std::unique_ptr<Ring>> rings_;
  std::atomic<uint64_t> next_ring_{0};
};

}  // namespace strata
