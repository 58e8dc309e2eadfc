#include "cli/progress.h"

#include <unistd.h>

#include <cstdio>

#include "core/log.h"

namespace strata::cli {

Progress::Progress(int64_t first_step, int64_t total_steps, int64_t log_every, bool quiet)
    : first_step_(first_step),
      total_steps_(total_steps),
      start_(std::chrono::steady_clock::now()),
      log_every_(log_every > 0 ? log_every : 1),
      quiet_(quiet),
      terminal_(isatty(STDERR_FILENO) != 0) {}

std::string Progress::eta(int64_t steps_done) const {
  const int64_t ran = steps_done - first_step_, left = total_steps_ - steps_done;
  if (ran <= 0 || left <= 0) return "0s";
  const double s_per_step =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count() /
      static_cast<double>(ran);
  const auto secs = static_cast<int64_t>(s_per_step * static_cast<double>(left) + 0.5);
  char buf[48];
  if (secs >= 3600) {
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", static_cast<long long>(secs / 3600),
                  static_cast<long long>(secs / 60 % 60));
  } else if (secs >= 60) {
    std::snprintf(buf, sizeof buf, "%lldm%02llds", static_cast<long long>(secs / 60),
                  static_cast<long long>(secs % 60));
  } else {
    std::snprintf(buf, sizeof buf, "%llds", static_cast<long long>(secs));
  }
  return buf;
}

std::string Progress::format(const StepStats& st, double tokens_per_s) const {
  char buf[320];
  int n =
      std::snprintf(buf, sizeof buf,
                    "step %5lld/%lld  loss %.4f  lr %.2e  grad_norm %.3f  %.0f tok/s  %.3f s/step",
                    static_cast<long long>(st.step + 1), static_cast<long long>(total_steps_),
                    st.loss, st.lr, st.grad_norm, tokens_per_s, st.seconds);
  std::string line(buf, static_cast<size_t>(n));
  if (st.storage_read_bytes + st.storage_write_bytes > 0 && st.seconds > 0) {
    n = std::snprintf(buf, sizeof buf, "  storage r %.2f w %.2f GB/s",
                      static_cast<double>(st.storage_read_bytes) / st.seconds / 1e9,
                      static_cast<double>(st.storage_write_bytes) / st.seconds / 1e9);
    line.append(buf, static_cast<size_t>(n));
  }
  line += "  ETA " + eta(st.step + 1);
  if (st.skipped) line += "  (skipped)";
  return line;
}

void Progress::on_step(const StepStats& st, double tokens_per_s) {
  if (quiet_) return;
  const bool keep = (st.step + 1) % log_every_ == 0 || st.step == 0 || st.step + 1 == total_steps_;
  if (terminal_) {
    write_stderr("\r\033[K" + format(st, tokens_per_s) + (keep ? "\n" : ""));
    line_open_ = !keep;
  } else if (keep) {
    write_stderr(format(st, tokens_per_s) + "\n");
  }
}

void Progress::note(const std::string& line) {
  finish();
  log_info(line);
}

void Progress::finish() {
  if (line_open_) write_stderr("\n");
  line_open_ = false;
}

}  // namespace strata::cli
