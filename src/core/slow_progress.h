// Progress of a long phase outside the training loop (creating and initialising a store of tens
// of GB, verifying and loading a checkpoint): a log line every few seconds while it runs, so a
// user sees work instead of silence, and nothing at all for a phase that ends quickly.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace strata {

class SlowProgress {
 public:
  // `what`: "initializing the store", `unit`: what `total` counts ("blocks", "slabs").
  SlowProgress(std::string what, int64_t total, std::string unit, double every_s = 5.0);
  // `done` of total are done: logs "<what>: 12/48 blocks (25%), 10 s" when every_s have passed
  // since the start or the last line.
  void update(int64_t done);

 private:
  std::string what_, unit_;
  int64_t total_;
  double every_s_;
  std::chrono::steady_clock::time_point start_, last_;
};

}  // namespace strata
