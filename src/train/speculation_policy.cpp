#include "train/speculation_policy.h"

#include <algorithm>
#include <cstdio>
#include <vector>

namespace strata {

namespace {
constexpr size_t kSeen = 5;  // measurements kept per cost
}  // namespace

double SpeculationPolicy::Cost::value() const {
  if (seen.empty()) return predicted;
  std::vector<double> v(seen.begin(), seen.end());
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

void SpeculationPolicy::Cost::add(double s) {
  if (s <= 0) return;
  seen.push_back(s);
  if (seen.size() > kSeen) seen.pop_front();
}

SpeculationPolicy::SpeculationPolicy(Speculation mode, int32_t window)
    : mode_(mode), window_(std::max<int32_t>(window, 1)) {
  decide(true);
}

void SpeculationPolicy::set_costs(double spec_s, double wait_s, double repair_s,
                                  const std::string& source) {
  spec_.predicted = spec_s;
  wait_.predicted = wait_s;
  repair_.predicted = repair_s;
  source_ = source;
  decide(true);
}

void SpeculationPolicy::record(bool clipped, bool speculated, double iteration_s, double repair_s) {
  clipped_.push_back(clipped);
  if (static_cast<int32_t>(clipped_.size()) > window_) clipped_.pop_front();
  (speculated ? spec_ : wait_).add(iteration_s);
  if (speculated && clipped) repair_.add(repair_s);
  decide(false);
}

double SpeculationPolicy::clip_rate() const {
  if (clipped_.empty()) return 0;
  const auto n = std::count(clipped_.begin(), clipped_.end(), true);
  return static_cast<double>(n) / static_cast<double>(clipped_.size());
}

void SpeculationPolicy::decide(bool fresh) {
  if (mode_ != Speculation::automatic) {
    choice_ = mode_ == Speculation::on;
    return;
  }
  const double p = clip_rate();
  const double s = spec_.value(), w = wait_.value(), r = repair_.value();
  if (!(s > 0 && w > 0 && r > 0)) {
    choice_ = p <= kDefaultRate;
    return;
  }
  const double gain = w - (s + p * r);  // > 0: speculating is cheaper
  if (fresh) {
    choice_ = gain >= 0;
  } else if (choice_ ? gain < -kSwitchMargin * w : gain > kSwitchMargin * w) {
    choice_ = !choice_;
  }
}

std::string SpeculationPolicy::why() const {
  const char* choice = speculate() ? "speculate" : "wait for the norm";
  char line[320];
  if (mode_ != Speculation::automatic) {
    std::snprintf(line, sizeof line, "optim.speculation %s: %s", enum_name(mode_), choice);
    return line;
  }
  const double p = clip_rate();
  const double s = spec_.value(), w = wait_.value(), r = repair_.value();
  if (s > 0 && w > 0 && r > 0) {
    std::snprintf(line, sizeof line,
                  "speculation (auto): %s: %.0f%% of the last %zu steps clipped; a step costs "
                  "%.3f s speculating (+%.3f s repair when it clips) against %.3f s waiting (%s)",
                  choice, 100 * p, clipped_.size(), s, r, w,
                  source_.empty() ? "measured" : source_.c_str());
  } else {
    std::snprintf(line, sizeof line,
                  "speculation (auto): %s: %.0f%% of the last %zu steps clipped (speculating "
                  "while at most %.0f%% until the costs are known)",
                  choice, 100 * p, clipped_.size(), 100 * kDefaultRate);
  }
  return line;
}

}  // namespace strata
