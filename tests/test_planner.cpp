// The planner (docs/design.md §7): auto-configuration never returns a configuration that the plan
// checker or the budgets reject, picks the fastest of what it tried, explains its bound; presets.
#include <gtest/gtest.h>

#include <string>

#include "model/layout.h"
#include "planner/planner.h"
#include "sched/plan_checker.h"
#include "train/offload_spec.h"

namespace strata {
namespace {

TrainConfig small_config() {
  TrainConfig c;
  c.model.n_layer = 4;
  c.model.n_embd = 64;
  c.model.n_head = 4;
  c.model.vocab_size = 256;
  c.model.context_length = 32;
  c.seq_len = 32;
  c.batch_size = 2;
  c.grad_accum = 4;
  c.schedule = Schedule::vertical;
  c.optim.grad_clip = 0;
  return c;
}

// Storage-heavy: slow storage so that placement matters.
HardwareProfile small_profile() {
  HardwareProfile p;
  p.name = "test";
  p.block_fwd = {{32, 1e9}, {256, 4e9}};
  p.block_bwd = p.block_fwd;
  p.head = p.block_fwd;
  p.h2d_bytes_per_s = p.d2h_bytes_per_s = 1e9;
  p.storage_dirs = {{"/s", 20e6, 10e6, 0}};
  p.optim_params_per_s = 1e8;
  p.reduce_bytes_per_s = 1e9;
  return p;
}

// What the trainer would build for cfg, checked the way `strata train` checks it.
Status check_like_trainer(const TrainConfig& cfg, const HardwareProfile& p) {
  const ScheduleSpec s = planner_spec(cfg, p);
  return check_plan(make_offload_plan(s, cfg.schedule), planner_budgets(cfg, p));
}

TEST(Planner, SearchNeverReturnsARejectedConfiguration) {
  const TrainConfig base = small_config();
  HardwareProfile p = small_profile();
  // Unlimited, then host budgets from roomy to tight, and a tight device budget.
  const int64_t host_budgets[] = {0, 8 << 20, 4 << 20, 3 << 20, 2 << 20};
  for (int64_t host : host_budgets) {
    for (int64_t device : {int64_t{0}, int64_t{3} << 20}) {
      TrainConfig cfg = base;
      cfg.memory.host_bytes = host;
      cfg.memory.device_bytes = device;
      auto r = search(cfg, p);
      if (!r.ok()) {
        EXPECT_EQ(r.status().code(), ErrorCode::invalid_argument);
        continue;
      }
      const TrainConfig chosen = apply_choice(cfg, r->best.choice);
      EXPECT_TRUE(check_like_trainer(chosen, p).ok())
          << "host " << host << " device " << device << ": "
          << check_like_trainer(chosen, p).to_string();
      EXPECT_EQ(chosen.batch_size * chosen.grad_accum, base.batch_size * base.grad_accum);
      EXPECT_GT(r->evaluated, 0);
      for (const Prediction& s : r->per_schedule) {
        EXPECT_TRUE(check_like_trainer(apply_choice(cfg, s.choice), p).ok());
        EXPECT_LE(r->best.iter_s, s.iter_s);
      }
    }
  }
}

TEST(Planner, NothingFitsIsAnErrorNamingTheBudget) {
  TrainConfig cfg = small_config();
  cfg.memory.device_bytes = 1024;
  auto r = search(cfg, small_profile());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::invalid_argument);
  EXPECT_NE(r.status().message().find("device"), std::string::npos) << r.status().message();
}

// Note [Config bounds]: a candidate's B x M is bounded before its plan is built; 2^40 sequences
// per step used to reach the plan builder with 2^34 micro-batches.
TEST(Planner, CandidatesBeyondTheConfigBoundsAreRefusedBeforeTheirPlan) {
  SearchOptions o;
  o.sequences_per_step = int64_t{1} << 40;
  auto r = search(small_config(), small_profile(), o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::invalid_argument);
  EXPECT_NE(r.status().message().find("train.grad_accum must be in [1, 268435456"),
            std::string::npos)
      << r.status().message();
  EXPECT_EQ(r.status().message().find('\n'), std::string::npos);
}

// With clipping on the vertical schedule's part 0 speculates (Note [Speculative steps]), so the
// search weighs the same alphas with clipping on as off. Where gradients stay on host (as the
// search places them here) the speculative plan moves the same bytes as the unclipped one, so
// the predictions agree: a clip that does not trigger costs nothing.
TEST(Planner, ClippingSearchesAlphaThroughSpeculation) {
  TrainConfig cfg = small_config();
  cfg.optim.grad_clip = 1;
  auto clipped = search(cfg, small_profile());
  ASSERT_TRUE(clipped.ok()) << clipped.status().to_string();
  cfg.optim.grad_clip = 0;
  auto unclipped = search(cfg, small_profile());
  ASSERT_TRUE(unclipped.ok()) << unclipped.status().to_string();
  ASSERT_EQ(clipped->per_schedule.size(), unclipped->per_schedule.size());
  bool below_one = false;
  for (size_t i = 0; i < clipped->per_schedule.size(); ++i) {
    const Prediction &c = clipped->per_schedule[i], &u = unclipped->per_schedule[i];
    EXPECT_EQ(c.choice.alpha, u.choice.alpha);
    EXPECT_NEAR(c.iter_s, u.iter_s, 1e-9 * u.iter_s);
    below_one = below_one || c.choice.alpha < 1;
  }
  EXPECT_TRUE(below_one) << "the profile favours no split: the test says nothing";
}

TEST(Planner, MoreHostMemoryIsNeverSlowerAndPredictsTheBound) {
  TrainConfig cfg = small_config();
  const HardwareProfile p = small_profile();
  cfg.schedule = Schedule::horizontal;
  cfg.offload.params_on_host = cfg.offload.optim_on_host = 0;
  cfg.offload.grads_on_host = 1;
  auto on_storage = predict(cfg, p);
  ASSERT_TRUE(on_storage.ok()) << on_storage.status().to_string();
  EXPECT_EQ(on_storage->bound, "storage_read");
  cfg.offload.params_on_host = cfg.offload.optim_on_host = 1;
  auto on_host = predict(cfg, p);
  ASSERT_TRUE(on_host.ok());
  EXPECT_LT(on_host->iter_s, on_storage->iter_s);
  EXPECT_NE(on_host->bound, "storage_read");
  // The iteration is never shorter than its roofline.
  EXPECT_GE(on_storage->iter_s, on_storage->roofline_s * (1 - 1e-9));
  const auto sens = sensitivity(apply_choice(cfg, on_storage->choice), p);
  ASSERT_FALSE(sens.empty());
}

// Ranks (docs/design.md §12): each rank's plan gains its all-reduces on the net queue, which a
// slow network makes the bound; tokens/s count every rank's tokens.
TEST(Planner, RanksAddAllReducesAndCountEveryRanksTokens) {
  TrainConfig cfg = small_config();
  HardwareProfile p = small_profile();
  cfg.offload.params_on_host = cfg.offload.optim_on_host = cfg.offload.grads_on_host = 1;
  auto one = predict(cfg, p);
  ASSERT_TRUE(one.ok()) << one.status().to_string();
  EXPECT_EQ(one->busy_s[static_cast<size_t>(Resource::net)], 0);
  cfg.ranks = 4;
  auto four = predict(cfg, p);
  ASSERT_TRUE(four.ok()) << four.status().to_string();
  EXPECT_GT(four->busy_s[static_cast<size_t>(Resource::net)], 0);
  const double tokens = static_cast<double>(cfg.batch_size * cfg.seq_len * cfg.grad_accum * 4);
  EXPECT_NEAR(four->tokens_per_s, tokens / four->iter_s, 1e-9 * four->tokens_per_s);
  p.net_bytes_per_s = 1e3;  // a network far slower than anything else
  auto slow = predict(cfg, p);
  ASSERT_TRUE(slow.ok());
  EXPECT_EQ(slow->bound, "net");
  EXPECT_GT(slow->iter_s, four->iter_s);
}

TEST(Planner, PresetsHaveThePapersSizes) {
  auto p65 = find_preset("gpt-65b");
  ASSERT_TRUE(p65.ok());
  const double n65 = static_cast<double>(make_param_layout(p65->model).parameter_count);
  EXPECT_NEAR(n65 / 1e9, 65, 1.5);
  auto p175 = find_preset("gpt-175b");
  ASSERT_TRUE(p175.ok());
  const double n175 = static_cast<double>(make_param_layout(p175->model).parameter_count);
  EXPECT_NEAR(n175 / 1e9, 175, 2);
  auto gpt2 = find_preset("gpt2");
  ASSERT_TRUE(gpt2.ok());
  EXPECT_NEAR(static_cast<double>(make_param_layout(gpt2->model).parameter_count) / 1e6, 124, 1);
  auto bad = find_preset("gpt-9000");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("gpt2-xl"), std::string::npos);
}

TEST(Planner, GpuProfileSizesFollowItsDtypes) {
  TrainConfig cfg = small_config();
  HardwareProfile p = small_profile();
  p.param_bytes = 2;
  p.act_bytes = 2;
  p.optim_bytes = 16;
  const ScheduleSpec s = planner_spec(cfg, p);
  EXPECT_EQ(s.block_param_bytes, 2 * s.block_elems);
  EXPECT_EQ(s.block_optim_bytes, 16 * s.block_elems);
  EXPECT_EQ(s.checkpoint_bytes, cfg.batch_size * cfg.seq_len * cfg.model.n_embd * 2);
}

}  // namespace
}  // namespace strata
