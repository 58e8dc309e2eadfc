#include "backend/cpu/cpu_stream.h"

#include <algorithm>

#include "core/check.h"
#include "core/sync.h"

namespace strata::cpu {

CpuStream::CpuStream(std::string name) : name_(std::move(name)) {
  worker_ = std::thread([this] { worker_loop(); });
}

CpuStream::~CpuStream() {
  set_flag_and_notify_all(mutex_, stopping_, work_cv_);
  worker_.join();
}

void CpuStream::enqueue(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    STRATA_CHECK_MSG(!stopping_, "enqueue on a stream being destroyed");
    queue_.push_back(std::move(task));
    enqueued_++;
  }
  work_cv_.notify_one();
}

void CpuStream::synchronize() {
  std::unique_lock<std::mutex> lock(mutex_);
  const int64_t target = enqueued_;
  idle_cv_.wait(lock, [&] { return finished_ >= target; });
}

void CpuStream::worker_loop() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      // Drain everything before honouring a stop, so no enqueued work is ever dropped.
      work_cv_.wait(lock, [&] { return !queue_.empty() || stopping_; });
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      finished_++;
    }
    idle_cv_.notify_all();
  }
}

CpuStream& as_cpu(Stream& s) {
  auto* cs = dynamic_cast<CpuStream*>(&s);
  STRATA_CHECK_MSG(cs != nullptr, "a non-CPU stream was handed to the CPU device");
  return *cs;
}

void CpuEvent::record(Stream& s) {
  int64_t generation;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    generation = ++recorded_;
  }
  as_cpu(s).enqueue([this, generation] {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      completed_ = std::max(completed_, generation);
    }
    cv_.notify_all();
  });
}

void CpuEvent::wait(Stream& s) {
  int64_t generation;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    generation = recorded_;
  }
  as_cpu(s).enqueue([this, generation] { wait_for(generation); });
}

bool CpuEvent::query() {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_ >= recorded_;
}

void CpuEvent::synchronize() {
  int64_t generation;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    generation = recorded_;
  }
  wait_for(generation);
}

void CpuEvent::wait_for(int64_t generation) {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return completed_ >= generation; });
}

}  // namespace strata::cpu
