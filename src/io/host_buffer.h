// Host memory for storage transfers: 4 KiB-aligned, size rounded up to 4 KiB (so any buffer
// can carry O_DIRECT requests, Note [Direct I/O alignment] in io_engine.h), and locked in memory
// with mlock where RLIMIT_MEMLOCK allows, so pages under an in-flight request are never swapped.
//
// Contract:
//   - HostBuffer owns its pages (anonymous mmap, zero-filled) and unmaps them when destroyed.
//     Move-only. Not thread safe itself: one owner at a time, as with any object.
//   - Locking is best effort: when mlock is refused (RLIMIT_MEMLOCK, EPERM) the buffer is still
//     usable, locked() says false, and one debug line is logged for the whole process.
//   - HostBufferPool hands out a fixed number of equal buffers, all allocated at creation.
//     acquire/try_acquire/release and the counters are thread safe. A buffer taken from the pool
//     is owned by the taker; release() gives it back (only buffers of this pool, a bug otherwise).
//     A buffer never released is simply freed by its owner, and the pool counts it as in use.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "core/status.h"

namespace strata {

inline constexpr uint64_t kHostBufferAlignment = 4096;

class HostBuffer {
 public:
  HostBuffer() = default;
  // bytes > 0, rounded up to kHostBufferAlignment. out_of_memory naming the size when mmap fails;
  // invalid_argument for 0. lock=false skips mlock (e.g. for scratch memory).
  static Result<HostBuffer> allocate(uint64_t bytes, bool lock = true);

  ~HostBuffer() { reset(); }
  HostBuffer(HostBuffer&& o) noexcept { *this = std::move(o); }
  HostBuffer& operator=(HostBuffer&& o) noexcept;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;

  void reset();  // frees now (unlocks first); the caller guarantees no request still uses it
  void* data() const { return data_; }
  uint64_t size() const { return size_; }  // rounded-up size
  bool locked() const { return locked_; }
  explicit operator bool() const { return data_ != nullptr; }

 private:
  HostBuffer(void* data, uint64_t size, bool locked) : data_(data), size_(size), locked_(locked) {}

  void* data_ = nullptr;
  uint64_t size_ = 0;
  bool locked_ = false;
};

class HostBufferPool {
 public:
  // `count` buffers of `buffer_bytes` each (rounded up as for HostBuffer).
  static Result<std::unique_ptr<HostBufferPool>> create(uint64_t buffer_bytes, int count,
                                                        bool lock = true);

  HostBufferPool(const HostBufferPool&) = delete;
  HostBufferPool& operator=(const HostBufferPool&) = delete;

  HostBuffer acquire();                     // blocks until a buffer is free
  std::optional<HostBuffer> try_acquire();  // nullopt when none is free
  void release(HostBuffer buffer);          // wakes one waiter

  uint64_t buffer_bytes() const { return buffer_bytes_; }
  int capacity() const { return static_cast<int>(regions_.size()); }
  int available() const;
  uint64_t bytes_total() const { return buffer_bytes_ * regions_.size(); }  // all buffers
  uint64_t bytes_in_use() const;  // buffers handed out and not yet released
  uint64_t bytes_locked() const { return bytes_locked_; }
  // Every buffer's (address, size), e.g. for IoEngine::register_buffers.
  const std::vector<std::pair<void*, uint64_t>>& regions() const { return regions_; }

 private:
  HostBufferPool() = default;

  uint64_t buffer_bytes_ = 0;
  uint64_t bytes_locked_ = 0;
  std::vector<std::pair<void*, uint64_t>> regions_;  // fixed after create
  std::set<void*> members_;                          // addresses of regions_, for release()

  mutable std::mutex mu_;
  std::condition_variable freed_;
  std::vector<HostBuffer> free_;  // guarded by mu_
};

}  // namespace strata
