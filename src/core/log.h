// Logging: plain lines on stderr, "strata: <level>: message". Errors the user must act on are
// one line each (the CLI prints Status::to_string()).
#pragma once

#include <string>

namespace strata {

enum class LogLevel { debug = 0, info = 1, warn = 2, error = 3 };

void set_log_level(LogLevel level);
// One rank of a data-parallel run (Note [Data parallel ranks] in dist/communicator.h): its lines
// read "strata[rank 1]: error: ...", so a failure names the rank it happened on.
void set_log_rank(int rank);
LogLevel log_level();
void log_message(LogLevel level, const std::string& message);
// `text` on stderr, flushed: how log lines and train's progress are written. A write that fails
// with EPIPE (the reader of our pipe is gone) is remembered for stderr_closed(), so training
// stops at the next step boundary even where SIGPIPE was set to be ignored (Note [Stopping on a
// signal] in cli/stop_signals.h).
void write_stderr(const std::string& text);
bool stderr_closed();

inline void log_debug(const std::string& m) {
  log_message(LogLevel::debug, m);
}
inline void log_info(const std::string& m) {
  log_message(LogLevel::info, m);
}
inline void log_warn(const std::string& m) {
  log_message(LogLevel::warn, m);
}
inline void log_error(const std::string& m) {
  log_message(LogLevel::error, m);
}

}  // namespace strata
