#include "io/rate_limited_engine.h"

#include <algorithm>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/log.h"
#include "core/sync.h"

namespace strata {

namespace {

// The interface's own refusals (null buffer, zero length, misaligned O_DIRECT), checked here so
// that a malformed request gets no ticket, as with the inner engine.
Status check_request(const IoRequest& r) {
  if (r.file == nullptr) return invalid_argument("I/O request has no file");
  std::string where = std::string(io_op_name(r.op)) + " of " + r.file->path + " at offset " +
                      std::to_string(r.offset);
  if (r.buffer == nullptr) return invalid_argument(where + ": buffer is null");
  if (r.length == 0) return invalid_argument(where + ": length is 0");
  if (r.file->direct) {
    auto misaligned = [](uint64_t x) { return x % kDirectIoAlignment != 0; };
    const char* field = misaligned(reinterpret_cast<uintptr_t>(r.buffer)) ? "buffer address"
                        : misaligned(r.offset)                            ? "offset"
                        : misaligned(r.length)                            ? "length"
                                                                          : nullptr;
    if (field != nullptr) {
      return invalid_argument(where + ": " + field + " is not a multiple of " +
                              std::to_string(kDirectIoAlignment) + " (O_DIRECT file)");
    }
  }
  return Status();
}

}  // namespace

RateLimitedEngine::RateLimitedEngine(std::unique_ptr<IoEngine> inner, const RateLimits& limits)
    : inner_(std::move(inner)), limits_(limits) {
  STRATA_CHECK(inner_ != nullptr);
  Clock::time_point now = Clock::now();
  for (Lane* l : {&read_, &write_}) {
    l->rate = l == &read_ ? limits.read_bytes_per_s : limits.write_bytes_per_s;
    uint64_t burst =
        limits.burst_bytes > 0 ? limits.burst_bytes : std::max<uint64_t>(64 * 1024, l->rate / 64);
    l->burst = static_cast<double>(burst);
    l->tokens = l->burst;
    l->last = now;
  }
  dispatcher_ = std::thread([this] { dispatch_loop(); });
}

RateLimitedEngine::~RateLimitedEngine() {
  set_flag_and_notify_all(mu_, stop_, queued_cv_);
  dispatcher_.join();
  // Whatever the caller never waited for must still finish before the buffers can go away.
  Status s = inner_->wait_all();
  if (!s.ok()) log_debug("rate-limited engine closing: unwaited request failed: " + s.message());
}

void RateLimitedEngine::refill(Lane& l, Clock::time_point now, bool capped) {
  double dt = std::chrono::duration<double>(now - l.last).count();
  if (dt > 0) l.tokens += static_cast<double>(l.rate) * dt;
  if (capped) l.tokens = std::min(l.tokens, l.burst);
  l.last = now;
}

Result<Ticket> RateLimitedEngine::submit(const IoRequest& request) {
  STRATA_RETURN_IF_ERROR(check_request(request));
  Ticket ticket;
  bool unlimited;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ticket = next_ticket_++;
    Entry& e = entries_[ticket];
    e.request = request;
    e.sequence = ticket;
    queued_++;
    Lane& l = lane(request.op);
    unlimited = l.rate == 0;
    if (!unlimited) {
      // The lane was idle up to now if nothing waited: the burst cap applies to that stretch.
      if (l.queue.empty()) refill(l, Clock::now(), /*capped=*/true);
      l.queue.push_back(ticket);
    }
  }
  if (unlimited) {
    forward(ticket, request);
  } else {
    queued_cv_.notify_one();
  }
  return ticket;
}

void RateLimitedEngine::forward(Ticket ticket, const IoRequest& request) {
  Result<Ticket> inner = inner_->submit(request);
  {
    std::lock_guard<std::mutex> lock(mu_);
    Entry& e = entries_.at(ticket);  // a queued entry is never consumed, so it is still here
    if (inner.ok()) {
      e.state = State::forwarded;
      e.inner = inner.value();
    } else {
      e.state = State::refused;
      e.refusal = inner.status();
    }
    queued_--;
  }
  forwarded_cv_.notify_all();
}

void RateLimitedEngine::dispatch_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  std::vector<std::pair<Ticket, IoRequest>> ready;
  while (true) {
    Clock::time_point now = Clock::now();
    std::optional<Clock::time_point> due;
    for (Lane* l : {&read_, &write_}) {
      if (l->queue.empty()) continue;
      refill(*l, now, /*capped=*/false);  // a head is waiting: Note [Token bucket ...]
      while (!l->queue.empty()) {
        Ticket t = l->queue.front();
        const IoRequest& r = entries_.at(t).request;
        double need = static_cast<double>(r.length);
        // Half a byte of slack so rounding in the clock arithmetic cannot wake us in a loop.
        if (!stop_ && l->tokens < need - 0.5) {
          auto wait = std::chrono::duration<double>((need - l->tokens) / l->rate);
          Clock::time_point at = now + std::chrono::ceil<Clock::duration>(wait);
          due = due ? std::min(*due, at) : at;
          break;
        }
        l->tokens -= need;
        ready.emplace_back(t, r);
        l->queue.pop_front();
      }
    }
    if (!ready.empty()) {
      lock.unlock();
      for (const auto& [t, r] : ready) forward(t, r);
      ready.clear();
      lock.lock();
      continue;
    }
    if (stop_) return;  // both queues are empty: with stop_ nothing waits for tokens
    if (due) {
      queued_cv_.wait_until(lock, *due);
    } else {
      queued_cv_.wait(lock);
    }
  }
}

// Consumes a claimed entry: waits until it has left the queue, then for the inner ticket.
Status RateLimitedEngine::consume(Ticket ticket, bool unknown_ok) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = entries_.find(ticket);
  if (it == entries_.end() || it->second.claimed) {
    if (unknown_ok) return Status();
    return invalid_argument("unknown or already consumed I/O ticket " + std::to_string(ticket));
  }
  Entry& e = it->second;  // unordered_map references survive rehashing
  e.claimed = true;
  forwarded_cv_.wait(lock, [&e] { return e.state != State::queued; });
  if (e.state == State::refused) {
    Status s = e.refusal;
    entries_.erase(ticket);
    return s;
  }
  Ticket inner = e.inner;
  lock.unlock();
  Status s = inner_->wait(inner);
  lock.lock();
  entries_.erase(ticket);
  return s;
}

Status RateLimitedEngine::wait(Ticket ticket) {
  return consume(ticket, /*unknown_ok=*/false);
}

std::optional<Status> RateLimitedEngine::poll(Ticket ticket) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = entries_.find(ticket);
  if (it == entries_.end() || it->second.claimed) {
    return invalid_argument("unknown or already consumed I/O ticket " + std::to_string(ticket));
  }
  Entry& e = it->second;
  if (e.state == State::queued) return std::nullopt;
  if (e.state == State::refused) {
    Status s = e.refusal;
    entries_.erase(it);
    return s;
  }
  e.claimed = true;  // keeps other consumers off while we ask the inner engine unlocked
  Ticket inner = e.inner;
  lock.unlock();
  std::optional<Status> s = inner_->poll(inner);
  lock.lock();
  if (s.has_value()) {
    entries_.erase(ticket);
  } else {
    entries_.at(ticket).claimed = false;
  }
  return s;
}

Status RateLimitedEngine::wait_all() {
  std::vector<std::pair<uint64_t, Ticket>> mine;  // (sequence, ticket)
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [t, e] : entries_) {
      if (!e.claimed) mine.emplace_back(e.sequence, t);
    }
  }
  std::sort(mine.begin(), mine.end());
  Status first;
  for (const auto& [seq, t] : mine) {
    // A ticket another caller claimed in between is theirs to report.
    Status s = consume(t, /*unknown_ok=*/true);
    if (first.ok() && !s.ok()) first = s;
  }
  return first;
}

int64_t RateLimitedEngine::in_flight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queued_ + inner_->in_flight();
}

Status RateLimitedEngine::register_buffers(const std::vector<std::pair<void*, uint64_t>>& buffers) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (queued_ > 0) {
      return invalid_argument("register_buffers called with " + std::to_string(queued_) +
                              " requests still queued by the rate limiter");
    }
  }
  return inner_->register_buffers(buffers);
}

}  // namespace strata
