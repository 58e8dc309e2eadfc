// Storage faults in the middle of offloaded training (CTest names offload_faults.*): a failed
// read or write stops training with an error that names the task, the tensor and the store file;
// nothing after it reports success. Retryable faults (short transfers) are retried by the engine
// and change no bit.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/config.h"
#include "train/offload_trainer.h"
#include "test_util.h"

namespace strata {
namespace {

TrainConfig faulty_config(const std::string& schedule, const std::string& dir,
                          const std::string& faults) {
  TrainConfig c = test::tiny_offload_config(schedule, dir);
  c.steps = 6;
  c.offload.checkpoints_on_host = 0;
  c.offload.grads_on_host = 1;  // the write counts below are of params, optimizer state and ckpts
  c.io.faults = faults;
  return c;
}

struct Outcome {
  int steps_ok = 0;
  Status error;
  std::vector<double> losses;
  std::vector<float> params;
};

Outcome train(const TrainConfig& c) {
  auto dev = test::make_test_device();
  Outcome o;
  auto t = OffloadTrainer::create(*dev, c);
  if (!t.ok()) {
    o.error = t.status();
    return o;
  }
  const int64_t per = c.grad_accum * c.batch_size * c.seq_len;
  const auto in = test::random_ints(per, 3, 0, 63), tgt = test::random_ints(per, 4, 0, 63);
  for (int s = 0; s < c.steps; ++s) {
    auto st = (*t)->train_step(in.data(), tgt.data());
    if (!st.ok()) {
      o.error = st.status();
      return o;
    }
    o.steps_ok++;
    o.losses.push_back(st->loss);
  }
  o.params.resize(static_cast<size_t>((*t)->layout().total_elems));
  o.error = (*t)->read_params(o.params.data());
  return o;
}

class OffloadFaults : public ::testing::TestWithParam<std::string> {};

TEST_P(OffloadFaults, ReadErrorMidRunStopsWithTensorAndFile) {
  const std::string schedule = GetParam();
  const std::string dir = test::make_temp_dir("faults_read_" + schedule);
  // A read request that lands in the second or third step of this config: horizontal reads
  // every block twice per micro-batch, vertical (alpha = 1, checkpoints pinned on host at M = 3)
  // five times per step.
  const std::string fault = schedule == "horizontal" ? "read:40:eio" : "read:12:eio";
  const Outcome o = train(faulty_config(schedule, dir, fault));
  ASSERT_FALSE(o.error.ok()) << "an injected read error must stop training";
  EXPECT_GE(o.steps_ok, 1) << "the fault should hit mid-run, not at start: " << o.error.to_string();
  EXPECT_LT(o.steps_ok, 6);
  EXPECT_EQ(o.error.code(), ErrorCode::io_error) << o.error.to_string();
  const std::string m = o.error.message();
  std::printf("%s\n", o.error.to_string().c_str());
  EXPECT_NE(m.find("step " + std::to_string(o.steps_ok)), std::string::npos) << m;
  EXPECT_NE(m.find("reading tensor '"), std::string::npos) << m;
  EXPECT_NE(m.find(dir + "/strata.store"), std::string::npos) << m;
  EXPECT_NE(m.find("task '"), std::string::npos) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << "one line: " << m;
}

TEST_P(OffloadFaults, WriteErrorMidRunStopsWithTensorAndFile) {
  const std::string schedule = GetParam();
  const std::string dir = test::make_temp_dir("faults_write_" + schedule);
  // Vertical writes nothing in step 0 (its steps run in the next), then six writes per step.
  const std::string fault = schedule == "horizontal" ? "write:60:enospc" : "write:8:enospc";
  const Outcome o = train(faulty_config(schedule, dir, fault));
  ASSERT_FALSE(o.error.ok()) << "an injected write error must stop training";
  EXPECT_GE(o.steps_ok, 1) << o.error.to_string();
  EXPECT_LT(o.steps_ok, 6);
  const std::string m = o.error.message();
  EXPECT_NE(m.find("writing tensor '"), std::string::npos) << m;
  EXPECT_NE(m.find(dir + "/strata.store"), std::string::npos) << m;
}

// Short transfers are resubmitted by the engine: same losses and parameters, bit for bit.
TEST_P(OffloadFaults, ShortTransfersAreRetriedExactly) {
  const std::string schedule = GetParam();
  const std::string dir = test::make_temp_dir("faults_short_" + schedule);
  const Outcome clean = train(faulty_config(schedule, dir, ""));
  const Outcome shorted = train(faulty_config(schedule, dir, "any:p0.3:short,seed=5"));
  ASSERT_TRUE(clean.error.ok()) << clean.error.to_string();
  ASSERT_TRUE(shorted.error.ok()) << shorted.error.to_string();
  EXPECT_EQ(shorted.losses, clean.losses);
  ASSERT_EQ(shorted.params.size(), clean.params.size());
  EXPECT_EQ(std::memcmp(shorted.params.data(), clean.params.data(), clean.params.size() * 4), 0);
}

// A failed read of offloaded activations in backward stops training with the tensor named; it
// never turns into a silently wrong gradient.
TEST(offload_faults, ActivationReadErrorStopsTraining) {
  const std::string dir = test::make_temp_dir("faults_acts");
  TrainConfig c = faulty_config("vertical", dir, "read:5:eio");
  c.grad_accum = 6;              // middle micro-batches of the early blocks go through storage
  c.offload.params_on_host = 1;  // so every storage read is an activation read
  c.offload.optim_on_host = 1;
  c.offload.checkpoints_on_host = 1;
  c.offload.grads_on_host = 1;
  c.activations.policy = ActsMode::offload;
  c.activations.tier = ActsTier::storage;
  const Outcome o = train(c);
  ASSERT_FALSE(o.error.ok()) << "an injected activation read error must stop training";
  EXPECT_EQ(o.steps_ok, 0);
  const std::string m = o.error.message();
  EXPECT_NE(m.find("task 'acts.read blk."), std::string::npos) << m;
  EXPECT_NE(m.find("reading tensor 'acts.blk"), std::string::npos) << m;
}

INSTANTIATE_TEST_SUITE_P(offload_faults, OffloadFaults,
                         ::testing::Values("horizontal", "vertical"));

}  // namespace
}  // namespace strata
