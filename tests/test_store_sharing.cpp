// Two runs given the same io.dirs (Note [One run per store file]): each takes a store file of its
// own, both train concurrently to exactly the results they have alone, and each removes only its
// own file.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "core/config.h"
#include "test_util.h"
#include "train/offload_trainer.h"
#include "train/trainer.h"

namespace strata {
namespace {

constexpr int kSteps = 4;

TrainConfig config_with_seed(int64_t seed, const std::string& dir) {
  TrainConfig c = test::tiny_offload_config("vertical", dir);
  c.grad_accum = 2;
  c.steps = kSteps;
  c.seed = seed;
  c.offload.checkpoints_on_host = 0;  // everything the store can hold is on storage
  c.offload.grads_on_host = 0;
  c.offload.embed_optim_on_host = false;
  return c;
}

struct Outcome {
  std::vector<double> losses;
  std::vector<float> params;
};

// kSteps steps of t on tokens drawn from the seed, then its parameters.
void train(Trainer& t, int64_t seed, Outcome* out) {
  const int64_t n = t.tokens_per_step();
  std::vector<int32_t> in(static_cast<size_t>(n)), tgt(static_cast<size_t>(n));
  for (int s = 0; s < kSteps; ++s) {
    for (int64_t i = 0; i < n; ++i) {
      in[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7 + s * 3 + seed) % 64);
      tgt[static_cast<size_t>(i)] = static_cast<int32_t>((i * 5 + s + seed) % 64);
    }
    auto st = t.train_step(in.data(), tgt.data());
    ASSERT_TRUE(st.ok()) << st.status().to_string();
    out->losses.push_back(st->loss);
  }
  ASSERT_TRUE(t.finish().ok());
  out->params.resize(static_cast<size_t>(t.layout().total_elems));
  ASSERT_TRUE(t.read_params(out->params.data()).ok());
}

Outcome alone(const TrainConfig& c) {
  auto dev = create_cpu_device();
  auto t = create_trainer(*dev, c);
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  Outcome o;
  if (t.ok()) train(**t, c.seed, &o);
  return o;
}

void expect_same(const Outcome& a, const Outcome& b, const std::string& what) {
  ASSERT_EQ(a.losses.size(), static_cast<size_t>(kSteps)) << what;
  EXPECT_EQ(a.losses, b.losses) << what;
  ASSERT_EQ(a.params.size(), b.params.size()) << what;
  EXPECT_EQ(std::memcmp(a.params.data(), b.params.data(), a.params.size() * 4), 0) << what;
}

TEST(StoreSharing, TwoRunsOnOneDirectoryTrainAsTheyWouldAlone) {
  const std::string dir = test::make_temp_dir("store_sharing");
  const TrainConfig c1 = config_with_seed(1, dir), c2 = config_with_seed(2, dir);
  const Outcome want1 = alone(c1), want2 = alone(c2);

  // Both stores exist before either trains, so the runs truly overlap.
  auto dev1 = create_cpu_device(), dev2 = create_cpu_device();
  auto t1 = OffloadTrainer::create(*dev1, c1);
  ASSERT_TRUE(t1.ok()) << t1.status().to_string();
  auto t2 = OffloadTrainer::create(*dev2, c2);
  ASSERT_TRUE(t2.ok()) << t2.status().to_string();
  EXPECT_NE((*t1)->state().store_description(), (*t2)->state().store_description());
  EXPECT_TRUE(std::filesystem::exists(dir + "/strata.store"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/strata.1.store"));

  Outcome got1, got2;
  std::thread a([&] { train(**t1, c1.seed, &got1); });
  std::thread b([&] { train(**t2, c2.seed, &got2); });
  a.join();
  b.join();
  expect_same(got1, want1, "run 1 beside run 2");
  expect_same(got2, want2, "run 2 beside run 1");
  EXPECT_NE(want1.losses, want2.losses) << "the two runs must differ for this to mean anything";

  // Each run removes its own file only.
  t2->reset();
  EXPECT_TRUE(std::filesystem::exists(dir + "/strata.store"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/strata.1.store"));
  t1->reset();
  EXPECT_FALSE(std::filesystem::exists(dir + "/strata.store"));
}

}  // namespace
}  // namespace strata
