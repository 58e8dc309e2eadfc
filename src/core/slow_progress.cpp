#include "core/slow_progress.h"

#include <cstdio>

#include "core/log.h"

namespace strata {

SlowProgress::SlowProgress(std::string what, int64_t total, std::string unit, double every_s)
    : what_(std::move(what)),
      unit_(std::move(unit)),
      total_(total),
      every_s_(every_s),
      start_(std::chrono::steady_clock::now()),
      last_(start_) {}

void SlowProgress::update(int64_t done) {
  const auto now = std::chrono::steady_clock::now();
  if (std::chrono::duration<double>(now - last_).count() < every_s_) return;
  last_ = now;
  char line[96];
  std::snprintf(
      line, sizeof line, ": %lld/%lld %s (%.0f%%), %.0f s", static_cast<long long>(done),
      static_cast<long long>(total_), unit_.c_str(),
      total_ > 0 ? 100.0 * static_cast<double>(done) / static_cast<double>(total_) : 100.0,
      std::chrono::duration<double>(now - start_).count());
  log_info(what_ + line);
}

}  // namespace strata
