// The storage engine interface: asynchronous reads and writes of (file, offset, length, buffer),
// each answered by its own ticket and its own typed status. docs/design.md §4.
//
// Note [Every completion is checked]
// DeepSpeed's libaio engine never reads a completion's result, so a short or failed transfer
// passes silently. Here every completion's byte count is compared with what was asked: EINTR
// and EAGAIN are resubmitted, a short transfer is resubmitted for the remainder, and anything else
// becomes the ticket's Status (errno, path, offset, length). A failed request never poisons the
// engine: the next request on it runs normally. (A failed io_uring submission is another matter:
// Note [A failed submission breaks the io_uring engine], uring_engine.h.)
//
// Note [Direct I/O alignment]
// For files opened with O_DIRECT the buffer address, the file offset and the length must all be
// multiples of kDirectIoAlignment. submit() checks this and refuses with invalid_argument naming
// the field, instead of letting the kernel answer EINVAL later.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/config_enums.h"
#include "core/status.h"

namespace strata {

inline constexpr uint64_t kDirectIoAlignment = 4096;

enum class IoOp : uint8_t { read, write };
const char* io_op_name(IoOp op);

// An open file the engine may use. Owned by whoever opened it (e.g. the store); it must outlive
// every request on it. Move-only: it owns `fd` and closes it when destroyed (or at
// close_io_file), so a file is closed exactly once.
struct IoFile {
  int fd = -1;
  std::string path;     // for error messages
  bool direct = false;  // opened with O_DIRECT: Note [Direct I/O alignment] applies

  IoFile() = default;
  IoFile(int fd, std::string path, bool direct) : fd(fd), path(std::move(path)), direct(direct) {}
  IoFile(IoFile&& other) noexcept;
  IoFile& operator=(IoFile&& other) noexcept;
  IoFile(const IoFile&) = delete;
  IoFile& operator=(const IoFile&) = delete;
  ~IoFile();
};

struct IoRequest {
  IoOp op = IoOp::read;
  const IoFile* file = nullptr;
  uint64_t offset = 0;     // bytes into the file
  void* buffer = nullptr;  // read: filled; write: read from. Valid until the ticket completes.
  uint64_t length = 0;     // bytes
};

using Ticket = uint64_t;  // 0 is never a valid ticket

// Test and config hook: sees every raw result (bytes transferred, or -errno) before the engine
// interprets it, and may replace it. Lets tests exercise the real resubmission and error paths.
// Note [Every completion is checked].
class IoFaultHook {
 public:
  virtual ~IoFaultHook() = default;
  // `request` is the block being transferred (a request no larger than block_size is its own
  // block); `done` bytes of it are already transferred, and `result` answers the attempt to
  // transfer the rest. `attempt` counts resubmissions of the same block (0 first). Return `result`
  // unchanged to pass it through; a smaller count for a short transfer; -EIO, -ENOSPC, -EINTR,
  // -EAGAIN to fail it. May sleep to add latency. Called from engine threads: must be thread safe.
  virtual int64_t on_result(const IoRequest& request, uint64_t done, int attempt,
                            int64_t result) = 0;
  // Test only, io_uring engine only: called on a ring's thread before each io_uring_enter that
  // offers the kernel `blocks` (> 0) block transfers; calls that carry only the engine's own
  // wake-up read are not shown. Return 0 to enter the kernel as usual, or an errno to fail that
  // submission with it without entering, as a failing io_uring_enter would (Note [A failed
  // submission breaks the io_uring engine], uring_engine.h). Must be thread safe.
  virtual int on_uring_submit(uint64_t blocks) { return 0; }
};

// Both engines keep at most workers x queue_depth blocks in flight: io_uring as `workers` rings
// of queue_depth entries, each ring owned by one thread; posix as workers x queue_depth threads
// (at most 64), each running one block at a time.
struct IoEngineOptions {
  IoEngineKind kind = IoEngineKind::automatic;  // io.engine
  int queue_depth = 32;              // blocks in flight per ring (uring) / per worker (posix)
  uint64_t block_size = 1ull << 20;  // requests are split into blocks of this size (4 KiB multiple)
  int workers = 1;                   // uring: rings, one thread each; posix: multiplies threads
  std::shared_ptr<IoFaultHook> fault_hook;  // optional
};

class IoEngine {
 public:
  virtual ~IoEngine() = default;
  virtual const char* name() const = 0;  // "io_uring" or "posix"

  // Queues a request. Bad requests (null buffer, misaligned O_DIRECT, zero length) are refused
  // here with invalid_argument and get no ticket.
  virtual Result<Ticket> submit(const IoRequest& request) = 0;
  // Blocks until the ticket's request has finished; its Status. Each ticket is waited (or
  // polled to completion) exactly once; an unknown ticket is invalid_argument.
  virtual Status wait(Ticket ticket) = 0;
  // Non-blocking: nullopt while in flight, else the Status (consuming the ticket).
  virtual std::optional<Status> poll(Ticket ticket) = 0;
  // Waits for every ticket outstanding at the call (not those another caller is already
  // waiting) and consumes them; the error of the earliest submitted failed request, if any.
  virtual Status wait_all() = 0;
  // Requests submitted and not yet finished (finished but unconsumed tickets do not count).
  virtual int64_t in_flight() const = 0;

  // (optional) Registers host buffers with the kernel (io_uring fixed buffers) so requests that
  // fall inside them skip per-request page pinning. Replaces any earlier registration. Call it
  // with nothing in flight (invalid_argument otherwise). The kernel refusing (e.g. over
  // RLIMIT_MEMLOCK) is not an error: one warning is logged and I/O runs unregistered. The
  // buffers must stay mapped while registered (until the next call or the engine's end).
  // Default: no-op.
  virtual Status register_buffers(const std::vector<std::pair<void*, uint64_t>>& buffers) {
    return Status();
  }
};

// Opens the engine of options.kind. "auto" tries io_uring with O_DIRECT on a probe file in
// probe_dir and falls back to posix, logging one line that says why (e.g. "tmpfs does not support
// O_DIRECT", "io_uring_setup: Operation not permitted").
Result<std::unique_ptr<IoEngine>> create_io_engine(const IoEngineOptions& options,
                                                   const std::string& probe_dir);

// Opens (creating if asked) a file for the engine, read-write; direct requests O_DIRECT and fails
// with unavailable when the file system refuses it. not_found when it does not exist and
// create is false.
Result<std::unique_ptr<IoFile>> open_io_file(const std::string& path, bool create, bool direct);
// Closes now (the destructor would otherwise); idempotent. A close error is logged.
void close_io_file(IoFile& file);

}  // namespace strata
