#include "core/log.h"

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <mutex>

#include "core/check.h"

namespace strata {

namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::info)};
std::mutex g_log_mutex;           // one line at a time, whatever thread logs
std::string g_source = "strata";  // set before any thread logs (set_log_rank)
std::atomic<bool> g_stderr_closed{false};

const char* level_name(LogLevel level) {
  switch (level) {
    case LogLevel::debug:
      return "debug";
    case LogLevel::info:
      return "info";
    case LogLevel::warn:
      return "warning";
    case LogLevel::error:
      return "error";
  }
  return "?";
}
}  // namespace

void set_log_level(LogLevel level) {
  g_level = static_cast<int>(level);
}
void set_log_rank(int rank) {
  std::lock_guard<std::mutex> lock(g_log_mutex);
  g_source = "strata[rank " + std::to_string(rank) + "]";
}
LogLevel log_level() {
  return static_cast<LogLevel>(g_level.load());
}

void write_stderr(const std::string& text) {
  errno = 0;
  const bool written = std::fwrite(text.data(), 1, text.size(), stderr) == text.size();
  if (std::fflush(stderr) != 0 || !written) {
    if (errno == EPIPE) g_stderr_closed.store(true);
    std::clearerr(stderr);  // nothing else to do: stderr is where errors would go
  }
}

bool stderr_closed() {
  return g_stderr_closed.load();
}

void log_message(LogLevel level, const std::string& message) {
  if (static_cast<int>(level) < g_level.load()) return;
  std::lock_guard<std::mutex> lock(g_log_mutex);
  write_stderr(g_source + ": " + level_name(level) + ": " + message + "\n");
}

namespace detail {
void check_failed(const char* file, int line, const char* expr, const char* msg) {
  std::fprintf(stderr, "strata: internal error at %s:%d: check failed: %s %s\n", file, line, expr,
               msg);
  std::fflush(stderr);
  std::abort();
}
}  // namespace detail

}  // namespace strata
