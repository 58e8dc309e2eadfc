#include "io/host_buffer.h"

#include <sys/mman.h>
#include <sys/resource.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>

#include "core/check.h"
#include "core/log.h"
#include "core/math_util.h"

namespace strata {

namespace {

// One line per process: a small RLIMIT_MEMLOCK is the normal case in containers and CI, and
// unlocked buffers still work (they may be paged out under memory pressure, costing speed).
void note_lock_refused(uint64_t bytes, int err) {
  static std::atomic<bool> logged{false};
  if (logged.exchange(true)) return;
  struct rlimit lim {};
  std::string limit = "unknown";
  if (getrlimit(RLIMIT_MEMLOCK, &lim) == 0) {
    limit = lim.rlim_cur == RLIM_INFINITY ? "unlimited" : std::to_string(lim.rlim_cur) + " bytes";
  }
  log_debug("host buffers are not locked in memory: mlock of " + std::to_string(bytes) +
            " bytes failed (" + std::strerror(err) + "; RLIMIT_MEMLOCK " + limit +
            "); transfers still work");
}

}  // namespace

Result<HostBuffer> HostBuffer::allocate(uint64_t bytes, bool lock) {
  if (bytes == 0) return invalid_argument("host buffer size is 0");
  uint64_t size = round_up(bytes, kHostBufferAlignment);
  // mmap rather than aligned_alloc: page-aligned, zero-filled, and returned to the system on
  // free whatever its size.
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return out_of_memory("host buffer of " + std::to_string(size) +
                         " bytes: mmap failed: " + std::strerror(errno));
  }
  bool locked = false;
  if (lock) {
    if (mlock(p, size) == 0) {
      locked = true;
    } else {
      note_lock_refused(size, errno);
    }
  }
  return HostBuffer(p, size, locked);
}

HostBuffer& HostBuffer::operator=(HostBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    locked_ = std::exchange(o.locked_, false);
  }
  return *this;
}

void HostBuffer::reset() {
  if (data_ == nullptr) return;
  // munmap drops the lock with the mapping; munlock first keeps the accounting explicit.
  if (locked_) STRATA_CHECK(munlock(data_, size_) == 0);
  STRATA_CHECK_MSG(munmap(data_, size_) == 0, "munmap of a host buffer failed");
  data_ = nullptr;
  size_ = 0;
  locked_ = false;
}

Result<std::unique_ptr<HostBufferPool>> HostBufferPool::create(uint64_t buffer_bytes, int count,
                                                               bool lock) {
  if (count <= 0) {
    return invalid_argument("host buffer pool count must be positive, got " +
                            std::to_string(count));
  }
  if (buffer_bytes == 0) return invalid_argument("host buffer pool buffer size is 0");
  std::unique_ptr<HostBufferPool> pool(new HostBufferPool());
  pool->buffer_bytes_ = round_up(buffer_bytes, kHostBufferAlignment);
  for (int i = 0; i < count; i++) {
    auto b = HostBuffer::allocate(pool->buffer_bytes_, lock);
    if (!b.ok()) {
      return out_of_memory("host buffer pool of " + std::to_string(count) + " x " +
                           std::to_string(pool->buffer_bytes_) + " bytes: " + b.status().message());
    }
    if (b->locked()) pool->bytes_locked_ += b->size();
    pool->regions_.emplace_back(b->data(), b->size());
    pool->members_.insert(b->data());
    pool->free_.push_back(std::move(b).value());
  }
  return pool;
}

HostBuffer HostBufferPool::acquire() {
  std::unique_lock<std::mutex> lock(mu_);
  freed_.wait(lock, [this] { return !free_.empty(); });
  HostBuffer b = std::move(free_.back());
  free_.pop_back();
  return b;
}

std::optional<HostBuffer> HostBufferPool::try_acquire() {
  std::lock_guard<std::mutex> lock(mu_);
  if (free_.empty()) return std::nullopt;
  HostBuffer b = std::move(free_.back());
  free_.pop_back();
  return b;
}

void HostBufferPool::release(HostBuffer buffer) {
  STRATA_CHECK_MSG(buffer && members_.count(buffer.data()) == 1,
                   "released a host buffer that does not belong to this pool");
  {
    std::lock_guard<std::mutex> lock(mu_);
    STRATA_CHECK_MSG(free_.size() < regions_.size(), "host buffer released twice");
    free_.push_back(std::move(buffer));
  }
  freed_.notify_one();
}

int HostBufferPool::available() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(free_.size());
}

uint64_t HostBufferPool::bytes_in_use() const {
  std::lock_guard<std::mutex> lock(mu_);
  return buffer_bytes_ * (regions_.size() - free_.size());
}

}  // namespace strata
