// What a user sees while training: on a terminal, one line rewritten in place plus a kept line
// every log_every steps; otherwise (a log file, CI) plain lines every log_every steps.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "train/trainer.h"

namespace strata::cli {

class Progress {
 public:
  // `first_step`: the step this run starts from (a resumed run's), for the ETA.
  Progress(int64_t first_step, int64_t total_steps, int64_t log_every, bool quiet);
  void on_step(const StepStats& st, double tokens_per_s);
  void finish();
  // A log line between steps (a checkpoint written), below any open progress line.
  void note(const std::string& line);

 private:
  std::string format(const StepStats& st, double tokens_per_s) const;
  // "3m12s" to the last step, at the pace of this run's steps so far (checkpoints and validation
  // included).
  std::string eta(int64_t steps_done) const;

  int64_t first_step_;
  int64_t total_steps_;
  std::chrono::steady_clock::time_point start_;
  int64_t log_every_;
  bool quiet_;
  bool terminal_;
  bool line_open_ = false;  // a rewritten line is on screen without its newline
};

}  // namespace strata::cli
