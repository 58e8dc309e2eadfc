// SpeculationPolicy (Note [Choosing to speculate] in train/speculation_policy.h): the choice
// between speculating and waiting for the norm, from the recent clip rate and the costs.
#include <gtest/gtest.h>

#include "train/speculation_policy.h"

namespace strata {
namespace {

TEST(SpeculationPolicy, OnAndOffForceTheChoice) {
  SpeculationPolicy on(Speculation::on), off(Speculation::off);
  for (int i = 0; i < 30; ++i) {
    on.record(true, true, 1.0, 5.0);
    off.record(false, false, 1.0, 0.0);
  }
  EXPECT_TRUE(on.speculate());
  EXPECT_FALSE(off.speculate());
  EXPECT_NE(on.why().find("optim.speculation on"), std::string::npos) << on.why();
}

// Without costs: speculate while at most kDefaultRate of the window clipped; the window slides,
// so a run whose clipping stops goes back to speculating.
TEST(SpeculationPolicy, DefaultRateOverASlidingWindow) {
  SpeculationPolicy p(Speculation::automatic, 8);
  EXPECT_TRUE(p.speculate());  // nothing has clipped yet
  p.record(false, true, 1.0, 0.0);
  p.record(false, true, 1.0, 0.0);
  p.record(false, true, 1.0, 0.0);
  p.record(true, true, 1.0, 0.0);  // 1 of 4: 25%
  EXPECT_DOUBLE_EQ(p.clip_rate(), 0.25);
  EXPECT_TRUE(p.speculate());
  p.record(true, true, 1.0, 0.0);  // 2 of 5
  EXPECT_FALSE(p.speculate());
  for (int i = 0; i < 8; ++i) p.record(false, false, 0.0, 0.0);  // the clips slide out
  EXPECT_DOUBLE_EQ(p.clip_rate(), 0.0);
  EXPECT_TRUE(p.speculate());
}

// With costs: speculate while spec + p * repair <= wait.
TEST(SpeculationPolicy, CostsSetTheBreakEven) {
  SpeculationPolicy p(Speculation::automatic, 10);
  p.set_costs(1.0, 1.2, 1.0, "simulated");
  for (int i = 0; i < 8; ++i) p.record(false, false, 0.0, 0.0);
  p.record(true, false, 0.0, 0.0);
  p.record(true, false, 0.0, 0.0);  // p = 0.2: 1.2 <= 1.2
  EXPECT_TRUE(p.speculate()) << p.why();
  p.record(true, false, 0.0, 0.0);  // p = 0.3
  EXPECT_FALSE(p.speculate()) << p.why();
  EXPECT_NE(p.why().find("simulated"), std::string::npos) << p.why();
}

// Measured costs replace the prediction (the median of the last few): here a repair measured
// far dearer than predicted turns a 10% clip rate from speculating to waiting.
TEST(SpeculationPolicy, MeasuredCostsReplaceThePrediction) {
  SpeculationPolicy p(Speculation::automatic, 10);
  p.set_costs(1.0, 1.2, 1.0, "simulated");
  for (int i = 0; i < 9; ++i) p.record(false, true, 1.0, 0.0);
  EXPECT_TRUE(p.speculate());
  p.record(true, true, 1.0, 4.0);  // p = 0.1; 1 + 0.1 * 4 > 1.2
  EXPECT_FALSE(p.speculate()) << p.why();
}

// Near the break-even the choice holds: waiting measured 1% cheaper does not switch a
// speculating run (each switch costs a step doing both), 10% does.
TEST(SpeculationPolicy, SwitchesOnlyForAClearGain) {
  SpeculationPolicy p(Speculation::automatic, 10);
  p.set_costs(1.0, 1.02, 1.0, "simulated");
  EXPECT_TRUE(p.speculate());
  p.record(false, false, 0.99, 0.0);  // waiting measured at 0.99 s
  EXPECT_TRUE(p.speculate()) << p.why();
  for (int i = 0; i < 4; ++i) p.record(false, false, 0.90, 0.0);  // median 0.90
  EXPECT_FALSE(p.speculate()) << p.why();
  // Predicted costs that favour waiting even with no clip: the first step waits.
  SpeculationPolicy q(Speculation::automatic, 10);
  q.set_costs(1.1, 1.0, 1.0, "simulated");
  EXPECT_FALSE(q.speculate()) << q.why();
}

}  // namespace
}  // namespace strata
