#include "io/block_engine.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>

#include "core/check.h"

namespace strata::io_detail {

namespace {

// Consecutive EINTR/EAGAIN results of one block before it is given up as failed. The kernel does
// not return these for regular-file I/O we issue (no RWF_NOWAIT), so a long run means something
// is wrong; an endless retry loop would hide it.
constexpr int kMaxStalls = 100;

uint32_t ticket_index(Ticket t) {
  return static_cast<uint32_t>(t & 0xffffffffu);
}
uint32_t ticket_generation(Ticket t) {
  return static_cast<uint32_t>(t >> 32);
}
Ticket make_ticket(uint32_t index, uint32_t generation) {
  // index + 1 keeps every ticket non-zero (0 is never valid).
  return (static_cast<uint64_t>(generation) << 32) | (static_cast<uint64_t>(index) + 1);
}

}  // namespace

Status validate_engine_options(const IoEngineOptions& o) {
  if (o.queue_depth < 1 || o.queue_depth > 4096) {
    return invalid_argument("io engine: queue_depth " + std::to_string(o.queue_depth) +
                            " must be in [1, 4096]");
  }
  if (o.workers < 1 || o.workers > 64) {
    return invalid_argument("io engine: workers " + std::to_string(o.workers) +
                            " must be in [1, 64]");
  }
  // Blocks of an aligned O_DIRECT request must stay aligned, and one block must fit the 32-bit
  // length of an io_uring read/write.
  if (o.block_size < kDirectIoAlignment || o.block_size % kDirectIoAlignment != 0 ||
      o.block_size > (1ull << 30)) {
    return invalid_argument("io engine: block_size " + std::to_string(o.block_size) +
                            " must be a multiple of 4096 in [4 KiB, 1 GiB]");
  }
  return Status();
}

Result<Ticket> BlockEngine::submit(const IoRequest& r) {
  // Note [Direct I/O alignment]: refuse here, naming the field, rather than get EINVAL later.
  if (r.file == nullptr || r.file->fd < 0) {
    return invalid_argument(std::string(name()) + " submit: request has no open file");
  }
  const std::string& path = r.file->path;
  if (r.buffer == nullptr) return invalid_argument("submit " + path + ": buffer is null");
  if (r.length == 0) return invalid_argument("submit " + path + ": length is 0");
  constexpr auto kMaxOffset = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  if (r.length > kMaxOffset || r.offset > kMaxOffset - r.length) {
    return invalid_argument("submit " + path + ": offset " + std::to_string(r.offset) +
                            " + length " + std::to_string(r.length) + " overflows off_t");
  }
  if (r.file->direct) {
    const auto address = reinterpret_cast<uintptr_t>(r.buffer);
    std::string field;
    if (address % kDirectIoAlignment != 0) {
      char hex[32];
      std::snprintf(hex, sizeof hex, "%#llx", static_cast<unsigned long long>(address));
      field = std::string("buffer address ") + hex;
    } else if (r.offset % kDirectIoAlignment != 0) {
      field = "offset " + std::to_string(r.offset);
    } else if (r.length % kDirectIoAlignment != 0) {
      field = "length " + std::to_string(r.length);
    }
    if (!field.empty()) {
      return invalid_argument("submit " + path + ": " + field + " is not a multiple of " +
                              std::to_string(kDirectIoAlignment) +
                              " (the file is opened with O_DIRECT)");
    }
  }

  // A request that races with the engine breaking gets a ticket and fails in enqueue instead.
  if (broken()) return broken_error("submit " + path);

  const uint64_t blocks = (r.length + options_.block_size - 1) / options_.block_size;
  RequestSlot* slot = nullptr;
  Ticket ticket = 0;
  {
    std::lock_guard lock(table_mu_);
    if (free_slots_.empty()) {
      STRATA_CHECK(slots_.size() < std::numeric_limits<uint32_t>::max());
      slots_.push_back(std::make_unique<RequestSlot>());
      slots_.back()->index = static_cast<uint32_t>(slots_.size() - 1);
      free_slots_.push_back(slots_.back()->index);
    }
    slot = slots_[free_slots_.back()].get();
    free_slots_.pop_back();
    // Reset under the lock: a wait() on this slot's new ticket can only find it after this.
    slot->request = r;
    slot->blocks = blocks;
    slot->sequence = next_sequence_++;
    slot->blocks_left.store(blocks, std::memory_order_relaxed);
    slot->failed.store(false, std::memory_order_relaxed);
    slot->status = Status();
    slot->done.store(0, std::memory_order_relaxed);
    slot->in_use = true;
    slot->claimed = false;
    ticket = make_ticket(slot->index, slot->generation);
  }
  in_flight_.fetch_add(1, std::memory_order_acq_rel);
  enqueue(slot);
  return ticket;
}

Result<RequestSlot*> BlockEngine::claim(Ticket ticket, bool allow_unfinished) {
  std::lock_guard lock(table_mu_);
  const uint64_t index = static_cast<uint64_t>(ticket_index(ticket)) - 1;
  if (ticket_index(ticket) == 0 || index >= slots_.size() || !slots_[index]->in_use ||
      slots_[index]->generation != ticket_generation(ticket)) {
    return invalid_argument("ticket " + std::to_string(ticket) +
                            " is not outstanding (never issued, or already waited)");
  }
  RequestSlot* slot = slots_[index].get();
  if (slot->claimed) {
    return invalid_argument("ticket " + std::to_string(ticket) +
                            " is already being waited by another caller");
  }
  if (!allow_unfinished && slot->done.load(std::memory_order_acquire) == 0) return nullptr;
  slot->claimed = true;
  return slot;
}

void BlockEngine::release(RequestSlot* slot) {
  std::lock_guard lock(table_mu_);
  slot->in_use = false;
  slot->claimed = false;
  slot->status = Status();
  if (++slot->generation == 0) slot->generation = 1;  // generation 0 is never handed out
  free_slots_.push_back(slot->index);
}

namespace {
Status wait_done(RequestSlot* slot) {
  while (slot->done.load(std::memory_order_acquire) == 0) {
    slot->done.wait(0, std::memory_order_acquire);
  }
  return std::move(slot->status);
}
}  // namespace

Status BlockEngine::wait(Ticket ticket) {
  STRATA_ASSIGN_OR_RETURN(RequestSlot * slot, claim(ticket, /*allow_unfinished=*/true));
  Status status = wait_done(slot);
  release(slot);
  return status;
}

std::optional<Status> BlockEngine::poll(Ticket ticket) {
  auto claimed = claim(ticket, /*allow_unfinished=*/false);
  if (!claimed.ok()) return claimed.status();
  if (claimed.value() == nullptr) return std::nullopt;
  Status status = wait_done(claimed.value());  // already done: returns at once
  release(claimed.value());
  return status;
}

Status BlockEngine::wait_all() {
  std::vector<RequestSlot*> mine;
  {
    std::lock_guard lock(table_mu_);
    for (auto& s : slots_) {
      if (s->in_use && !s->claimed) {
        s->claimed = true;
        mine.push_back(s.get());
      }
    }
  }
  // Report the failure of the earliest submitted request, whatever order they finish in.
  std::sort(mine.begin(), mine.end(),
            [](const RequestSlot* a, const RequestSlot* b) { return a->sequence < b->sequence; });
  Status first;
  for (RequestSlot* slot : mine) {
    Status status = wait_done(slot);
    if (first.ok() && !status.ok()) first = std::move(status);
    release(slot);
  }
  return first;
}

Block BlockEngine::make_block(RequestSlot* slot, uint64_t index) const {
  STRATA_CHECK(index < slot->blocks);
  const uint64_t start = index * options_.block_size;
  Block b;
  b.slot = slot;
  b.io = slot->request;
  b.io.offset += start;
  b.io.buffer = static_cast<char*>(b.io.buffer) + start;
  b.io.length = std::min(options_.block_size, slot->request.length - start);
  return b;
}

Status BlockEngine::block_error(const Block& b, int err, const char* what) const {
  const IoRequest& whole = b.slot->request;
  std::string message = std::string(io_op_name(b.io.op)) + " " + b.io.file->path + " at offset " +
                        std::to_string(b.io.offset + b.done) + " length " +
                        std::to_string(b.io.length - b.done);
  if (whole.offset != b.io.offset + b.done || whole.length != b.io.length - b.done) {
    message += " (in request at offset " + std::to_string(whole.offset) + " length " +
               std::to_string(whole.length) + ")";
  }
  message += " [" + std::string(name()) + "]";
  if (what == nullptr) return errno_error(message, err);
  return io_error(message + ": " + what);
}

Next BlockEngine::finish_attempt(Block& b, int64_t raw) {
  if (options_.fault_hook) raw = options_.fault_hook->on_result(b.io, b.done, b.attempt, raw);
  const uint64_t wanted = b.io.length - b.done;
  Status error;
  if (raw == -EINTR || raw == -EAGAIN) {
    // Nothing was transferred; ask again for the same bytes.
    if (++b.stalls <= kMaxStalls) {
      b.attempt++;
      return Next::resubmit;
    }
    error = block_error(b, static_cast<int>(-raw),
                        ("still " + errno_text(static_cast<int>(-raw)) + " after " +
                         std::to_string(kMaxStalls) + " resubmissions")
                            .c_str());
  } else if (raw < 0) {
    error = block_error(b, static_cast<int>(-raw), nullptr);
  } else if (raw == 0) {
    // A read that returns 0 is at end of file; retrying would loop forever.
    error = block_error(
        b, 0, b.io.op == IoOp::read ? "unexpected end of file" : "write transferred 0 bytes");
  } else if (static_cast<uint64_t>(raw) > wanted) {
    error = block_error(b, 0,
                        ("transferred " + std::to_string(raw) + " bytes, more than the " +
                         std::to_string(wanted) + " asked")
                            .c_str());
  } else {
    b.done += static_cast<uint64_t>(raw);
    b.stalls = 0;
    if (b.done == b.io.length) {
      finish_block(b, nullptr);
      return Next::finished;
    }
    if (!b.io.file->direct || b.done % kDirectIoAlignment == 0) {
      b.attempt++;
      return Next::resubmit;  // a short transfer: ask for the remainder
    }
    // O_DIRECT stops at an unaligned point only at end of file; the misaligned remainder could
    // only fail with EINVAL, so say what happened instead.
    error = block_error(b, 0,
                        b.io.op == IoOp::read
                            ? "unexpected end of file"
                            : ("short write of " + std::to_string(raw) +
                               " bytes left an unaligned remainder on an O_DIRECT file")
                                  .c_str());
  }
  finish_block(b, &error);
  return Next::finished;
}

void BlockEngine::finish_block(const Block& b, Status* error) {
  RequestSlot* slot = b.slot;
  if (error != nullptr && !slot->failed.exchange(true, std::memory_order_acq_rel)) {
    slot->status = std::move(*error);  // first error wins
  }
  // acq_rel: the last block sees every other block's writes (including the status) before it
  // publishes `done`.
  if (slot->blocks_left.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  // in_flight drops before `done` so a waiter that returns sees the engine idle.
  in_flight_.fetch_sub(1, std::memory_order_acq_rel);
  slot->done.store(1, std::memory_order_release);
  // The slot may already be consumed and reused by now; a spurious wake is harmless, and slots
  // are never freed while the engine lives.
  slot->done.notify_all();
}

void BlockEngine::fail_block(const Block& b, const std::string& why) {
  Status error = block_error(b, 0, why.c_str());
  finish_block(b, &error);
}

void BlockEngine::fail_blocks(RequestSlot* slot, uint64_t first, uint64_t step,
                              const std::string& why) {
  for (uint64_t i = first; i < slot->blocks; i += step) fail_block(make_block(slot, i), why);
}

void BlockEngine::mark_broken(const std::string& why) {
  std::lock_guard lock(table_mu_);
  if (broken_.load(std::memory_order_relaxed)) return;  // the first failure is the cause
  broken_reason_ = why;
  broken_.store(true, std::memory_order_release);
}

std::string BlockEngine::broken_message() const {
  STRATA_CHECK(broken());  // broken_reason_ is only safe to read once broken_ is set
  return std::string(name()) + " engine is broken, no new requests are accepted: " + broken_reason_;
}

Status BlockEngine::broken_error(const std::string& context) const {
  if (!broken()) return Status();
  return io_error(context + ": " + broken_message());
}

}  // namespace strata::io_detail
