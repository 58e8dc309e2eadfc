// CPU streams and events: each stream is one worker thread draining an in-order queue, so that
// copies and compute enqueued on different streams really overlap (Note [Asynchronous by
// contract] in backend/backend.h).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "backend/backend.h"

namespace strata::cpu {

class CpuStream final : public Stream {
 public:
  explicit CpuStream(std::string name);
  ~CpuStream() override;  // drains the queue, then joins the worker

  const std::string& name() const override { return name_; }
  void synchronize() override;
  void enqueue(std::function<void()> task);

 private:
  void worker_loop();

  std::string name_;
  std::mutex mutex_;
  std::condition_variable work_cv_;  // new task or shutdown
  std::condition_variable idle_cv_;  // a task finished
  std::deque<std::function<void()>> queue_;
  int64_t enqueued_ = 0;  // tasks ever enqueued
  int64_t finished_ = 0;  // tasks ever finished
  bool stopping_ = false;
  std::thread worker_;
};

// Generation counting: record() bumps `recorded_` on the host and enqueues a marker that raises
// `completed_` to that generation when the stream reaches it. A waiter captures the generation
// current at its call, so a later re-record does not move what it waits for.
class CpuEvent final : public Event {
 public:
  void record(Stream& s) override;
  void wait(Stream& s) override;
  bool query() override;
  void synchronize() override;

 private:
  void wait_for(int64_t generation);

  std::mutex mutex_;
  std::condition_variable cv_;
  int64_t recorded_ = 0;
  int64_t completed_ = 0;
};

CpuStream& as_cpu(Stream& s);

}  // namespace strata::cpu
