// What both storage engines share: checking requests, tickets, splitting requests into blocks,
// and deciding what every raw result means. The engines differ only in how a block reaches the
// kernel: io_uring rings (uring_engine) or pread/pwrite threads (posix_engine). docs/design.md §4.
//
// Contract (both engines):
//   CONCURRENCY CONTROL. submit, wait, poll, wait_all and in_flight may be called from any number
//   of threads at once. A request of length L becomes ceil(L / block_size) blocks; the engine's
//   threads run blocks independently (a big request has many blocks in flight at once) and a
//   request finishes when its last block does. Blocks of a request that has already failed are
//   dropped without I/O.
//   ACCOUNTING. Every raw result goes through finish_attempt() (Note [Every completion is
//   checked]): a block is done only when all its bytes are accounted for. A request's Status is
//   the first error any of its blocks met. in_flight() counts requests not yet finished.
//   TICKETS. A ticket names a pooled slot plus the slot's generation, so a consumed ticket, or one
//   never issued, is recognised and refused with invalid_argument; a steady stream of requests
//   reuses slots and allocates nothing.
//   THREAD SAFETY. The slot table is guarded by one mutex, taken once at submit and twice per
//   wait; waiting itself blocks on the slot's atomic (a futex), not on the mutex.
//   BROKEN. An engine that can no longer hand work to the kernel (Note [A failed submission
//   breaks the io_uring engine], uring_engine.h) calls mark_broken: from then on submit() refuses
//   every request at once with io_error naming the first failure. Tickets already issued still
//   finish (with that error if their blocks can no longer run), so no waiter hangs.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "io/io_engine.h"

namespace strata::io_detail {

// A request from submit() until its ticket is consumed.
struct RequestSlot {
  IoRequest request;
  uint64_t blocks = 0;    // how many blocks the request was split into
  uint64_t sequence = 0;  // submission order: wait_all reports the earliest failure
  std::atomic<uint64_t> blocks_left{0};
  std::atomic<bool> failed{false};  // set by the first failing block
  Status status;                    // written only by the block that set `failed`
  std::atomic<uint32_t> done{0};    // 1 when every block has finished; waiters block on it
  // Guarded by BlockEngine::table_mu_.
  uint32_t index = 0;
  uint32_t generation = 1;
  bool in_use = false;
  bool claimed = false;  // a wait, poll or wait_all is consuming it
};

// One block of a request, as the kernel is asked for it. `io` is the block as a request of its
// own (what the fault hook sees); `done` bytes of it are already transferred.
struct Block {
  RequestSlot* slot = nullptr;
  IoRequest io;
  uint64_t done = 0;
  int attempt = 0;  // resubmissions so far (the fault hook's `attempt`)
  int stalls = 0;   // consecutive EINTR/EAGAIN, bounded by kMaxStalls
};

// What to do with a block after one raw result.
enum class Next { resubmit, finished };

class BlockEngine : public IoEngine {
 public:
  ~BlockEngine() override = default;

  Result<Ticket> submit(const IoRequest& request) final;
  Status wait(Ticket ticket) final;
  std::optional<Status> poll(Ticket ticket) final;
  Status wait_all() final;
  int64_t in_flight() const final { return in_flight_.load(std::memory_order_acquire); }

 protected:
  explicit BlockEngine(const IoEngineOptions& options) : options_(options) {}

  // Hands a new request's blocks (slot->blocks of them) to the engine's threads.
  virtual void enqueue(RequestSlot* slot) = 0;

  // Block `index` of the slot's request, ready for its first attempt.
  Block make_block(RequestSlot* slot, uint64_t index) const;
  // True when the block's request has already failed: the caller drops the block with
  // finish_block(block, nullptr) instead of running it.
  static bool request_failed(const Block& block) {
    return block.slot->failed.load(std::memory_order_relaxed);
  }
  // Interprets one raw result (bytes transferred or -errno) of the block's latest attempt,
  // after the fault hook has seen it. On `resubmit` the block describes the remainder to ask
  // for; on `finished` the block has been accounted and must not be touched again.
  Next finish_attempt(Block& block, int64_t raw);
  // Accounts one finished block, with its error if it failed; finishes the request with its last.
  void finish_block(const Block& block, Status* error);
  // Finishes a block that will never be transferred, failing its request with io_error
  // "<op> <path> at offset ... [<engine>]: <why>".
  void fail_block(const Block& block, const std::string& why);
  // fail_block for blocks first, first + step, ... of the slot's request (one ring's stripe).
  void fail_blocks(RequestSlot* slot, uint64_t first, uint64_t step, const std::string& why);

  // See BROKEN above. `why` is one line naming the failed operation and its errno; only the first
  // call's reason is kept.
  void mark_broken(const std::string& why);
  bool broken() const { return broken_.load(std::memory_order_acquire); }
  // "<engine> engine is broken, no new requests are accepted: <why>"; only once broken().
  std::string broken_message() const;
  // ok while the engine works; else io_error "<context>: " + broken_message().
  Status broken_error(const std::string& context) const;

  const IoEngineOptions options_;

 private:
  Status block_error(const Block& block, int err, const char* what) const;
  // Looks the ticket up and marks it claimed; invalid_argument for unknown/consumed/claimed.
  Result<RequestSlot*> claim(Ticket ticket, bool allow_unfinished);
  void release(RequestSlot* slot);  // back to the pool; its ticket becomes invalid

  mutable std::mutex table_mu_;
  std::vector<std::unique_ptr<RequestSlot>> slots_;  // guarded; slots never move or die
  std::vector<uint32_t> free_slots_;                 // guarded
  uint64_t next_sequence_ = 0;                       // guarded
  std::atomic<int64_t> in_flight_{0};
  // Written once, under table_mu_, before broken_ is set; read after seeing broken_ set.
  std::string broken_reason_;
  std::atomic<bool> broken_{false};
};

// Checks options shared by both engines (queue depth, block size, workers).
Status validate_engine_options(const IoEngineOptions& options);

}  // namespace strata::io_detail
