#include "cli/progress.h"

#include <unistd.h>

#include <cstdio>

#include "core/log.h"

namespace strata::cli {

Progress::Progress(int64_t total_steps, int64_t log_every, bool quiet)
    : total_steps_(total_steps),
      log_every_(log_every > 0 ? log_every : 1),
      quiet_(quiet),
      terminal_(isatty(STDERR_FILENO) != 0) {}

std::string Progress::format(const StepStats& st, double tokens_per_s) const {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "step %5lld/%lld  loss %.4f  lr %.2e  grad_norm %.3f  %.0f tok/s  %.3f s/step%s",
                static_cast<long long>(st.step + 1), static_cast<long long>(total_steps_), st.loss,
                st.lr, st.grad_norm, tokens_per_s, st.seconds, st.skipped ? "  (skipped)" : "");
  return buf;
}

void Progress::on_step(const StepStats& st, double tokens_per_s) {
  if (quiet_) return;
  const bool keep = (st.step + 1) % log_every_ == 0 || st.step == 0 || st.step + 1 == total_steps_;
  if (terminal_) {
    std::fprintf(stderr, "\r\033[K%s", format(st, tokens_per_s).c_str());
    line_open_ = true;
    if (keep) {
      std::fputc('\n', stderr);
      line_open_ = false;
    }
    std::fflush(stderr);
  } else if (keep) {
    std::fprintf(stderr, "%s\n", format(st, tokens_per_s).c_str());
    std::fflush(stderr);
  }
}

void Progress::note(const std::string& line) {
  finish();
  log_info(line);
}

void Progress::finish() {
  if (line_open_) std::fputc('\n', stderr);
  line_open_ = false;
}

}  // namespace strata::cli
