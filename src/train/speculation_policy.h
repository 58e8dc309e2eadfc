// Whether the next vertical step speculates (steps part 0 in backward before the norm is known)
// or waits for the norm (both parts in the next forward): Note [Choosing to speculate].
#pragma once

#include <cstdint>
#include <deque>
#include <string>

#include "core/config_enums.h"

namespace strata {

// Note [Choosing to speculate]
// A speculative step (Note [Speculative steps]) costs spec_s when the norm does not clip and
// spec_s + repair_s when it does; a waiting step costs wait_s either way. With p the share of the
// last `window` steps whose norm clipped or was non-finite (a waiting step learns that too),
// speculating pays while spec_s + p * repair_s <= wait_s. The costs come from the planner's
// simulation of the run's plans (set_costs, with a profile) and from the run's measured times
// (each the median of its last few, from steady steps only: a switching step does both kinds of
// part-0 work); until all three are known the rule is p <= kDefaultRate. Then a choice changes
// only for a gain above kSwitchMargin of a step, so measurement noise cannot flip it back and
// forth (each switch costs a step doing both). The first step speculates unless the predicted
// costs say waiting is cheaper even when nothing clips. optim.speculation "on" and "off" force
// the choice; whichever is made, the result is bit-identical.
class SpeculationPolicy {
 public:
  static constexpr double kDefaultRate = 0.25;
  static constexpr double kSwitchMargin = 0.05;
  explicit SpeculationPolicy(Speculation mode, int32_t window = 20);

  // Predicted costs in seconds of a step that speculates with a valid norm, one that waits, and
  // the repair a clipped speculative step adds; `source` says where they come from, for the log.
  void set_costs(double spec_s, double wait_s, double repair_s, const std::string& source);
  // After a step: whether its norm clipped or was non-finite, whether it speculated, the seconds
  // of its iteration and of its repair (0: not a cost to weigh, e.g. a switching step, or none).
  void record(bool clipped, bool speculated, double iteration_s, double repair_s);

  bool speculate() const { return choice_; }
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
  // Re-evaluates choice_ from the rate and the costs, with the margin unless `fresh`.
  void decide(bool fresh);
  Speculation mode_;
  int32_t window_;
  bool choice_ = true;
  std::deque<bool> clipped_;
  Cost spec_, wait_, repair_;
  std::string source_;
};

}  // namespace strata
