// An IoEngine wrapper that holds each direction (read, write) to a byte rate, to emulate a slower
// SSD: on a 2-core CPU box the compute:I/O ratio of a GPU server is only reproduced if storage is
// slowed by the same factor as compute (docs/design.md §4).
//
// Contract:
//   - OWNERSHIP. Owns the inner engine. Requests keep the interface's rules: the buffer and file
//     must stay valid until the ticket is consumed.
//   - ORDER. Requests of one direction are forwarded to the inner engine in submission order;
//     the two directions are paced and forwarded independently (a throttled write never holds
//     back a read). As with any engine, requests in flight together complete in any order.
//   - TICKETS. submit() returns this engine's own ticket at once; wait/poll/wait_all map it to
//     the inner ticket once forwarded. A request the inner engine refuses when forwarded gets
//     that refusal as its ticket's Status (submit() already refuses malformed requests itself).
//   - THREADS. One dispatcher thread forwards throttled requests and sleeps on a condition
//     variable until the head's tokens are due or a request arrives (no busy-spinning); requests
//     of an unlimited direction (rate 0) are forwarded by submit() directly. All methods may be
//     called from any number of threads.
//   - SHUTDOWN. The destructor forwards whatever is still queued without pacing and waits for
//     everything in flight, so no transfer outlives the engine.
//
// Note [Token bucket with a waiting head]
// Each direction has a bucket that fills at `rate` bytes/s. While no request of that direction is
// waiting, the bucket holds at most `burst` bytes (a small burst, so an idle period does not buy
// a long stretch of full speed). The oldest waiting request (the head) is forwarded once the
// bucket holds its whole length, and the bucket is drained by that length; while a head waits the
// bucket may exceed `burst`, so requests larger than the burst are delayed by their own size
// (4 MiB at 16 MiB/s waits ~0.25 s) instead of never fitting. Over any long stretch a direction
// moves at most rate x time + burst bytes.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "io/io_engine.h"

namespace strata {

struct RateLimits {
  uint64_t read_bytes_per_s = 0;   // 0: unlimited
  uint64_t write_bytes_per_s = 0;  // 0: unlimited
  // Bucket size while idle, per direction; 0 picks max(64 KiB, rate / 64), about 16 ms of
  // transfer. Note [Token bucket with a waiting head].
  uint64_t burst_bytes = 0;
};

class RateLimitedEngine final : public IoEngine {
 public:
  RateLimitedEngine(std::unique_ptr<IoEngine> inner, const RateLimits& limits);
  ~RateLimitedEngine() override;
  RateLimitedEngine(const RateLimitedEngine&) = delete;
  RateLimitedEngine& operator=(const RateLimitedEngine&) = delete;

  const char* name() const override { return inner_->name(); }
  Result<Ticket> submit(const IoRequest& request) override;
  Status wait(Ticket ticket) override;
  std::optional<Status> poll(Ticket ticket) override;
  Status wait_all() override;
  int64_t in_flight() const override;
  Status register_buffers(const std::vector<std::pair<void*, uint64_t>>& buffers) override;

  IoEngine& inner() { return *inner_; }
  const RateLimits& limits() const { return limits_; }

 private:
  using Clock = std::chrono::steady_clock;

  enum class State : uint8_t { queued, forwarded, refused };
  struct Entry {
    IoRequest request;
    State state = State::queued;
    Ticket inner = 0;       // state == forwarded
    Status refusal;         // state == refused
    uint64_t sequence = 0;  // submission order, for wait_all's earliest error
    bool claimed = false;   // a wait, poll or wait_all is consuming it
  };
  struct Lane {
    uint64_t rate = 0;  // bytes/s; 0 unlimited
    double burst = 0;
    double tokens = 0;
    Clock::time_point last;
    std::deque<Ticket> queue;  // our tickets not yet forwarded, oldest first
  };

  Lane& lane(IoOp op) { return op == IoOp::read ? read_ : write_; }
  void refill(Lane& lane, Clock::time_point now, bool capped);
  void dispatch_loop();
  // Forwards one request to the inner engine (no lock held) and records the outcome.
  void forward(Ticket ticket, const IoRequest& request);
  // Claims and consumes one ticket; unknown_ok: a missing or claimed ticket is no error.
  Status consume(Ticket ticket, bool unknown_ok);

  const std::unique_ptr<IoEngine> inner_;
  const RateLimits limits_;

  mutable std::mutex mu_;
  std::condition_variable queued_cv_;          // dispatcher: a request arrived, or stop
  std::condition_variable forwarded_cv_;       // waiters: an entry left the queued state
  std::unordered_map<Ticket, Entry> entries_;  // guarded by mu_
  Lane read_, write_;                          // guarded by mu_
  Ticket next_ticket_ = 1;                     // guarded by mu_
  int64_t queued_ = 0;                         // guarded by mu_: entries in State::queued
  bool stop_ = false;                          // guarded by mu_
  std::thread dispatcher_;
};

}  // namespace strata
