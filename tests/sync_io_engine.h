// A minimal synchronous IoEngine for tests: submit() runs the whole pread/pwrite inline and
// keeps the Status under the ticket. It follows the interface's rules (refusals at submit, one
// consumption per ticket) but has no queue, threads or fault hook, so store and wrapper tests
// have a third engine whose behaviour is obvious. Header-only: shared by several test binaries.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "io/io_engine.h"

namespace strata::test {

class SyncIoEngine final : public IoEngine {
 public:
  const char* name() const override { return "sync"; }

  Result<Ticket> submit(const IoRequest& r) override {
    if (r.file == nullptr || r.buffer == nullptr || r.length == 0) {
      return invalid_argument("sync engine: malformed request");
    }
    if (r.file->direct &&
        (reinterpret_cast<uintptr_t>(r.buffer) % kDirectIoAlignment != 0 ||
         r.offset % kDirectIoAlignment != 0 || r.length % kDirectIoAlignment != 0)) {
      return invalid_argument("sync engine: misaligned O_DIRECT request on " + r.file->path);
    }
    Status s = transfer(r);
    std::lock_guard<std::mutex> lock(mu_);
    Ticket t = next_++;
    done_.emplace(t, std::move(s));
    submitted_++;
    return t;
  }
  Status wait(Ticket t) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = done_.find(t);
    if (it == done_.end()) return invalid_argument("sync engine: unknown ticket");
    Status s = std::move(it->second);
    done_.erase(it);
    return s;
  }
  std::optional<Status> poll(Ticket t) override { return wait(t); }
  Status wait_all() override {
    std::lock_guard<std::mutex> lock(mu_);
    Status first;
    for (auto& [t, s] : done_) {
      if (first.ok() && !s.ok()) first = s;
    }
    done_.clear();
    return first;
  }
  int64_t in_flight() const override { return 0; }
  uint64_t submitted() const {
    std::lock_guard<std::mutex> lock(mu_);
    return submitted_;
  }

 private:
  static Status transfer(const IoRequest& r) {
    uint64_t done = 0;
    auto* p = static_cast<char*>(r.buffer);
    while (done < r.length) {
      ssize_t n = r.op == IoOp::read
                      ? ::pread(r.file->fd, p + done, r.length - done, r.offset + done)
                      : ::pwrite(r.file->fd, p + done, r.length - done, r.offset + done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        return io_error(std::string(r.op == IoOp::read ? "pread " : "pwrite ") + r.file->path +
                        ": " + std::strerror(errno));
      }
      if (n == 0) return io_error("sync engine: end of file in " + r.file->path);
      done += static_cast<uint64_t>(n);
    }
    return Status();
  }

  mutable std::mutex mu_;
  std::map<Ticket, Status> done_;
  Ticket next_ = 1;
  uint64_t submitted_ = 0;
};

}  // namespace strata::test
