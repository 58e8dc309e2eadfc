// Validation loss (Trainer::evaluate, docs/design.md §10):
//  - the same bits on the initial weights for the in-memory trainer and both offloaded
//    schedules, state on host or storage, f32 and bf16 (the same kernels on the same shapes);
//  - after training, the same bits across placements of a schedule, and within the schedules'
//    own training differences (1e-5, test_offload_equiv) of the in-memory reference;
//  - evaluating does not change training: a run that evaluates after some steps has the same
//    losses and final master weights, bit for bit, as one that does not (the vertical schedule's
//    pending steps included).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "train/trainer.h"
#include "test_util.h"

namespace strata {
namespace {

constexpr int64_t kEvalBatches = 3;

struct Batches {
  std::vector<int32_t> inputs, targets;
};
Batches batches(const TrainConfig& c, int64_t n, uint64_t seed) {
  const int64_t count = n * c.batch_size * c.seq_len;
  const auto v = static_cast<int32_t>(c.model.vocab_size);
  return {test::random_ints(count, seed, 0, v), test::random_ints(count, seed + 1, 0, v)};
}

struct EvalRun {
  std::vector<double> losses;  // per training step
  std::vector<double> evals;   // after the steps asked for
  std::vector<float> master;   // every slab's master weights, in layout order
};

// Trains `steps` steps, evaluating after each step listed in `eval_after` (0: before step 1).
EvalRun run(const TrainConfig& c, int64_t steps, const std::vector<int64_t>& eval_after) {
  auto dev = create_cpu_device();
  auto t = create_trainer(*dev, c);
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  EvalRun r;
  const Batches val = batches(c, kEvalBatches, 900);
  auto eval_if_due = [&](int64_t done) {
    for (int64_t e : eval_after) {
      if (e != done) continue;
      auto loss = (*t)->evaluate(val.inputs.data(), val.targets.data(), kEvalBatches);
      EXPECT_TRUE(loss.ok()) << loss.status().to_string();
      r.evals.push_back(loss.ok() ? *loss : NAN);
    }
  };
  eval_if_due(0);
  for (int64_t s = 0; s < steps; ++s) {
    const Batches b = batches(c, c.grad_accum, 100 + 2 * static_cast<uint64_t>(s));
    auto st = (*t)->train_step(b.inputs.data(), b.targets.data());
    EXPECT_TRUE(st.ok()) << st.status().to_string();
    r.losses.push_back(st.ok() ? st->loss : NAN);
    eval_if_due(s + 1);
  }
  const ParamLayout& layout = (*t)->layout();
  r.master.resize(static_cast<size_t>(layout.total_elems));
  for (size_t i = 0; i < layout.slabs.size(); ++i) {
    const Slab& s = layout.slabs[i];
    std::vector<float> m(static_cast<size_t>(s.numel)), v(m.size());
    EXPECT_TRUE((*t)->read_slab_state(static_cast<int64_t>(i), r.master.data() + s.offset, m.data(),
                                      v.data())
                    .ok());
  }
  return r;
}

TrainConfig config(const std::string& schedule, const std::string& name, bool on_storage) {
  TrainConfig c = test::tiny_offload_config(schedule, test::make_temp_dir(name));
  if (!on_storage) {
    c.offload.params_on_host = 1;
    c.offload.optim_on_host = 1;
  }
  return c;
}

TEST(Evaluate, InitialWeightsGiveTheSameBitsOnEverySchedule) {
  for (Precision p : {Precision::f32, Precision::bf16}) {
    TrainConfig ref = config("in_memory", "eval_mem", false);
    ref.precision = p;
    const double want = run(ref, 0, {0}).evals.at(0);
    EXPECT_TRUE(std::isfinite(want));
    for (const auto& [schedule, storage] : std::vector<std::pair<std::string, bool>>{
             {"horizontal", true}, {"vertical", true}, {"vertical", false}}) {
      TrainConfig c = config(schedule, "eval_" + schedule, storage);
      c.precision = p;
      EXPECT_EQ(run(c, 0, {0}).evals.at(0), want)
          << schedule << (storage ? " on storage" : " on host") << ", " << enum_name(p);
    }
  }
}

TEST(Evaluate, AfterTrainingPlacementsAgreeBitForBitAndSchedulesAsTheirTraining) {
  const EvalRun mem = run(config("in_memory", "eval_mem", false), 3, {3});
  for (const char* schedule : {"horizontal", "vertical"}) {
    const EvalRun host = run(config(schedule, std::string("eval_h_") + schedule, false), 3, {3});
    const EvalRun storage = run(config(schedule, std::string("eval_s_") + schedule, true), 3, {3});
    EXPECT_EQ(host.evals.at(0), storage.evals.at(0)) << schedule;
    EXPECT_NEAR(host.evals.at(0), mem.evals.at(0), 1e-5 * std::abs(mem.evals.at(0))) << schedule;
  }
}

TEST(Evaluate, EvaluatingDoesNotChangeTraining) {
  for (const char* schedule : {"in_memory", "horizontal", "vertical"}) {
    const TrainConfig c = config(schedule, std::string("eval_train_") + schedule, true);
    const EvalRun plain = run(c, 4, {});
    const EvalRun evaluated = run(c, 4, {1, 3});
    ASSERT_EQ(evaluated.evals.size(), 2u) << schedule;
    EXPECT_NE(evaluated.evals[0], evaluated.evals[1]) << schedule << ": the weights moved";
    EXPECT_EQ(plain.losses, evaluated.losses) << schedule;
    EXPECT_TRUE(plain.master == evaluated.master) << schedule;
  }
}

}  // namespace
}  // namespace strata
