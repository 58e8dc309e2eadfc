// Whether the next vertical step speculates (steps part 0 in backward before the norm is known)
// or waits for the norm (both parts in the next forward): Note [Choosing to speculate].
#pragma once

#include <cstdint>
#include <deque>
#include <string>

#include "core/config_enums.h"

namespace strata {

// Note [Choosing to speculate]
// A speculative step (Note [Speculative steps] in schedule_spec.h) costs spec_s when the norm
// does not clip, and spec_s + repair_s when it does; a waiting step costs wait_s either way. With
// p the fraction of recent steps whose norm clipped (or was non-finite: both need the repair),
// speculating pays while spec_s + p * repair_s <= wait_s. p is counted over the last `window`
// steps whatever they did, since a waiting step learns from its norm whether it would have
// clipped. The costs come from the planner's simulation of the run's own plans when a profile
// was given (set_costs), and from the run's own measured times as they arrive (each the median
// of its last few measurements); until all three are known, the rule is p <= kDefaultRate.
// The first step speculates: nothing has clipped yet. "on" and "off" (optim.speculation) force
// the choice; whichever is made, the result is bit-identical.
class SpeculationPolicy {
 public:
  static constexpr double kDefaultRate = 0.25;
  explicit SpeculationPolicy(Speculation mode, int32_t window = 20);

  // Predicted costs in seconds of a step that speculates with a valid norm, one that waits, and
  // the repair a clipped speculative step adds; `source` says where they come from, for the log.
  void set_costs(double spec_s, double wait_s, double repair_s, const std::string& source);
  // After a step: whether its norm clipped or was non-finite, whether it speculated, the seconds
  // of its iteration and of its repair (0: none ran).
  void record(bool clipped, bool speculated, double iteration_s, double repair_s);

  bool speculate() const;
  // The fraction of the recent steps whose norm clipped (0 before any).
  double clip_rate() const;
  // One line: the choice for the next step and why.
  std::string why() const;

 private:
  struct Cost {
    double predicted = 0;     // 0: none
    std::deque<double> seen;  // the last few measurements
    double value() const;     // the median seen, else the prediction (0: unknown)
    void add(double s);
  };
  Speculation mode_;
  int32_t window_;
  std::deque<bool> clipped_;
  Cost spec_, wait_, repair_;
  std::string source_;
};

}  // namespace strata
