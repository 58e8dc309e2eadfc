// SlowProgress (core/slow_progress.h): silent for a phase shorter than its period, one line per
// period otherwise, naming the phase, the count and the share done.
#include <gtest/gtest.h>

#include <string>

#include "core/slow_progress.h"

namespace strata {
namespace {

TEST(SlowProgress, QuietWhenQuickAndCountsWhenSlow) {
  testing::internal::CaptureStderr();
  SlowProgress quick("loading", 10, "slabs", 3600);
  for (int i = 0; i < 10; ++i) quick.update(i);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");

  testing::internal::CaptureStderr();
  SlowProgress slow("initializing the store", 4, "blocks", 0);
  slow.update(1);
  slow.update(3);
  const std::string out = testing::internal::GetCapturedStderr();
  EXPECT_NE(out.find("initializing the store: 1/4 blocks (25%)"), std::string::npos) << out;
  EXPECT_NE(out.find("initializing the store: 3/4 blocks (75%)"), std::string::npos) << out;
}

}  // namespace
}  // namespace strata
