#include "io/posix_engine.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>

#include "core/sync.h"

namespace strata {

using io_detail::Block;
using io_detail::Next;
using io_detail::RequestSlot;

namespace {
// More threads than this add scheduling cost and no parallelism a device could use.
constexpr int kMaxThreads = 64;
}  // namespace

Result<std::unique_ptr<PosixEngine>> PosixEngine::create(const IoEngineOptions& options) {
  STRATA_RETURN_IF_ERROR(io_detail::validate_engine_options(options));
  std::unique_ptr<PosixEngine> engine(new PosixEngine(options));
  const int threads = std::min(kMaxThreads, options.workers * options.queue_depth);
  try {
    for (int i = 0; i < threads; i++)
      engine->threads_.emplace_back(&PosixEngine::run, engine.get());
  } catch (const std::system_error& e) {
    return unavailable(std::string("posix io engine: cannot start threads: ") + e.what());
  }
  return engine;
}

PosixEngine::~PosixEngine() {
  stop();
}

void PosixEngine::stop() {
  set_flag_and_notify_all(mu_, stop_, work_);
  for (auto& t : threads_) t.join();
  threads_.clear();
}

void PosixEngine::enqueue(RequestSlot* slot) {
  {
    std::lock_guard lock(mu_);
    queue_.push_back({slot, 0});
  }
  if (slot->blocks == 1) {
    work_.notify_one();
  } else {
    work_.notify_all();
  }
}

void PosixEngine::run() {
  while (true) {
    Block block;
    {
      std::unique_lock lock(mu_);
      work_.wait(lock, [this] { return stop_ || queue_head_ < queue_.size(); });
      if (queue_head_ == queue_.size()) return;  // stopping, and everything submitted is done
      WorkItem& item = queue_[queue_head_];
      block = make_block(item.slot, item.next++);
      if (item.next == item.slot->blocks) queue_head_++;
      if (queue_head_ == queue_.size()) {
        queue_.clear();  // keeps its capacity: no allocation in steady state
        queue_head_ = 0;
      } else if (queue_head_ >= 1024 && queue_head_ * 2 >= queue_.size()) {
        // A queue that never drains: drop the consumed front now and then.
        queue_.erase(queue_.begin(), queue_.begin() + static_cast<ptrdiff_t>(queue_head_));
        queue_head_ = 0;
      }
    }
    if (request_failed(block)) {
      finish_block(block, nullptr);  // its request already failed: skip the I/O
      continue;
    }
    const int fd = block.io.file->fd;
    while (true) {
      void* buffer = static_cast<char*>(block.io.buffer) + block.done;
      const size_t length = block.io.length - block.done;
      const auto offset = static_cast<off_t>(block.io.offset + block.done);
      const ssize_t got = block.io.op == IoOp::read ? pread(fd, buffer, length, offset)
                                                    : pwrite(fd, buffer, length, offset);
      const int64_t raw = got >= 0 ? static_cast<int64_t>(got) : -static_cast<int64_t>(errno);
      if (finish_attempt(block, raw) == Next::finished) break;
    }
  }
}

}  // namespace strata
