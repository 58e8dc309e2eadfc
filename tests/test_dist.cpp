// The arithmetic behind the ranks of a data-parallel run (Note [Data parallel ranks], Note
// [Deterministic all-reduce] in src/dist/communicator.h), tested without a transport; the MPI
// transport itself runs under mpirun in tests/dist_mpi.sh.
#include <gtest/gtest.h>

#include <vector>

#include "backend/backend.h"
#include "dist/communicator.h"
#include "train/trainer.h"
#include "test_util.h"

namespace strata {
namespace {

TEST(Dist, ShardsAreContiguousCoverEverythingAndDifferByAtMostOne) {
  for (int64_t n : {0, 1, 2, 7, 64, 1001}) {
    for (int ranks : {1, 2, 3, 8}) {
      int64_t next = 0, smallest = n, largest = 0;
      for (int r = 0; r < ranks; ++r) {
        const Range s = shard_range(n, ranks, r);
        EXPECT_EQ(s.begin, next) << "n=" << n << " ranks=" << ranks << " r=" << r;
        EXPECT_LE(s.begin, s.end);
        smallest = std::min(smallest, s.end - s.begin);
        largest = std::max(largest, s.end - s.begin);
        next = s.end;
      }
      EXPECT_EQ(next, n) << "n=" << n << " ranks=" << ranks;
      EXPECT_LE(largest - smallest, 1) << "n=" << n << " ranks=" << ranks;
    }
  }
}

// The sum is taken in rank order, left to right: with values where order matters in f32, the
// result is ((a + b) + c), not a + (b + c). (b and c are half an ulp of a: alone each rounds
// away, together they make one ulp.)
TEST(Dist, SumsInRankOrder) {
  const float a = 1.0f, b = 0x1p-24f, c = 0x1p-24f;
  const std::vector<float> parts = {a, 0, b, 0, c, 0};  // 3 rows of stride 2, n = 1
  float out = -7;
  sum_in_rank_order(&out, parts.data(), 3, 2, 1);
  EXPECT_EQ(out, (a + b) + c);
  EXPECT_NE((a + b) + c, a + (b + c));  // the check above can tell the two orders apart
  const std::vector<double> d = {1, 2, 3, 4, 5, 6};  // 3 rows of stride 2, n = 2
  std::vector<double> dout(2);
  sum_in_rank_order(dout.data(), d.data(), 3, 2, 2);
  EXPECT_EQ(dout, (std::vector<double>{9, 12}));
}

TEST(Dist, RankInPathsIsReplacedEverywhere) {
  EXPECT_EQ(substitute_rank("/nvme{rank}/strata", 3), "/nvme3/strata");
  EXPECT_EQ(substitute_rank("/a/{rank}/b{rank}", 12), "/a/12/b12");
  EXPECT_EQ(substitute_rank("/plain", 1), "/plain");
  EXPECT_EQ(substitute_rank("{rank", 1), "{rank");
}

TEST(Dist, TheWorldOfOneIsTheIdentity) {
  Communicator& w = single_process_world();
  EXPECT_EQ(w.rank(), 0);
  EXPECT_EQ(w.size(), 1);
  std::vector<float> g = {1.5f, -2.0f};
  ASSERT_TRUE(w.all_reduce_sum(g.data(), 2).ok());
  EXPECT_EQ(g, (std::vector<float>{1.5f, -2.0f}));
  auto most = w.all_reduce_max(42);
  ASSERT_TRUE(most.ok());
  EXPECT_EQ(*most, 42);
}

// A trainer refuses a config made for another number of ranks, naming both.
TEST(Dist, TrainersRefuseAConfigForAnotherWorld) {
  auto dev = test::make_test_device();
  TrainConfig cfg = test::tiny_offload_config("vertical", "/strata-test-never-created");
  cfg.ranks = 2;
  for (Schedule s : {Schedule::in_memory, Schedule::vertical}) {
    cfg.schedule = s;
    auto t = create_trainer(*dev, cfg);
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), ErrorCode::invalid_argument);
    EXPECT_NE(t.status().message().find("the config is for 2 ranks but the run has 1"),
              std::string::npos)
        << t.status().message();
  }
}

}  // namespace
}  // namespace strata
