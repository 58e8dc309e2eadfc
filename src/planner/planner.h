// The planner: predicts a configuration's iteration from a hardware profile (build the exact
// plan the trainer would run, give its tasks durations, simulate), and searches configurations
// for the best predicted throughput within the tier budgets (docs/design.md §7).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/status.h"
#include "planner/profile.h"
#include "planner/simulator.h"
#include "sched/plan.h"
#include "sched/plan_checker.h"
#include "sched/schedule_spec.h"

namespace strata {

// A model shape the planner knows by name. docs/design.md §7 / docs/planner.md say where the shapes
// come from.
struct ModelPreset {
  std::string name;
  ModelConfig model;
  int64_t seq_len = 0;  // the sequence length the shape is usually trained at
  std::string note;
};
const std::vector<ModelPreset>& model_presets();
// not_found listing the names when `name` is not one.
Result<ModelPreset> find_preset(const std::string& name);

// What the planner chooses; the rest of the run (model, T, optimizer) comes from the config.
struct RunChoice {
  Schedule schedule = Schedule::vertical;  // horizontal | vertical
  int64_t batch_size = 1;                  // B, sequences per micro-batch
  int64_t micro_batches = 1;               // M
  double params_on_host = 0, optim_on_host = 0, checkpoints_on_host = 1, grads_on_host = 1;
  double alpha = 1;  // vertical: part of each step deferred to the next forward
};
// Applies a choice to a config (train.*, offload.*, optim.alpha).
TrainConfig apply_choice(const TrainConfig& cfg, const RunChoice& c);
RunChoice choice_of(const TrainConfig& cfg);

// The plan inputs for cfg on `profile`: offload_schedule_spec's, with byte sizes following the
// profile's dtypes (a GPU profile keeps bf16 working weights and activations) and, for a flash-
// attention profile, a device workspace without T x T scores. Vertical: the steady iteration
// (part-1 steps of the previous iteration pending).
ScheduleSpec planner_spec(const TrainConfig& cfg, const HardwareProfile& profile);

// Budgets: the config's memory.* where set, else the profile's capacities; storage from the
// profile's directories.
TierBudgets planner_budgets(const TrainConfig& cfg, const HardwareProfile& profile);

struct Prediction {
  RunChoice choice;
  double iter_s = 0, tokens_per_s = 0, model_flops_per_s = 0, roofline_s = 0;
  std::array<double, kResourceCount> busy_s{}, work_s{};
  std::array<int64_t, kTierCount> peak_bytes{};
  std::string bound;  // "compute", "storage_read", ... ("compute+cpu_optim" with shared cores)
  int64_t tasks = 0;
  Plan plan;  // kept only when asked (trace)
  SimResult sim;
};

// Simulates cfg as given. The plan is checked against the budgets first: a configuration that
// does not fit is invalid_argument with the checker's message. Storage rates: the config's
// io.read_bytes_per_s / io.write_bytes_per_s when set (the rate limiter), else the profile's.
Result<Prediction> predict(const TrainConfig& cfg, const HardwareProfile& profile,
                           bool keep_plan = false);

struct SearchOptions {
  std::vector<Schedule> schedules = {Schedule::horizontal, Schedule::vertical};
  // Sequences per optimizer step (B x M), kept fixed since it is part of the optimisation
  // problem, not of the machine; 0: the config's batch_size x grad_accum.
  int64_t sequences_per_step = 0;
  int64_t max_micro_batch = 64;  // largest B tried
  std::vector<double> fractions = {1.0, 0.75, 0.5, 0.25, 0.0};
  std::vector<double> alphas = {0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0};
};

struct SearchResult {
  Prediction best;
  int64_t evaluated = 0, rejected = 0;   // simulated / refused by the checker or budgets
  std::vector<Prediction> per_schedule;  // the best of each schedule that had a fitting config
};
// invalid_argument when no configuration fits (names the smallest shortfall's message).
Result<SearchResult> search(const TrainConfig& cfg, const HardwareProfile& profile,
                            const SearchOptions& options = {});

// "What would have to change to go faster": each resource made 2x faster in turn, and the
// predicted iteration time. Sorted by gain, largest first.
struct Sensitivity {
  std::string what;
  double iter_s = 0;
  double speedup = 1;
};
std::vector<Sensitivity> sensitivity(const TrainConfig& cfg, const HardwareProfile& profile);

// optim.alpha "auto" for a vertical run (docs/design.md §5.7): of `alphas`, the alpha whose
// steady iteration the simulator predicts fastest (the first of equals), and its prediction
// beside alpha 1's. With clipping on, also what the speculation policy weighs (Note [Choosing to
// speculate] in train/speculation_policy.h): the steady iteration when part 0 waits for the
// norm, and the repair a clipped speculative step adds.
struct AlphaChoice {
  double alpha = 1;
  double iter_s = 0, alpha1_iter_s = 0;
  double wait_iter_s = 0, repair_s = 0;  // 0 without clipping (no speculation)
};
Result<AlphaChoice> choose_alpha(const TrainConfig& cfg, const HardwareProfile& profile,
                                 const std::vector<double>& alphas = SearchOptions{}.alphas);

}  // namespace strata

namespace strata {
// `strata train --auto --profile HW.json`: the searched configuration (schedule, B and M for the
// config's sequences per step, placement, alpha) applied to cfg, with a one-line log of the choice
// and its prediction. invalid_argument when the profile is missing or bad, or nothing fits.
Result<TrainConfig> auto_configure(const TrainConfig& cfg, const std::string& profile_path);

// `strata train` with optim.alpha "auto": for the vertical schedule with a profile, choose_alpha's
// alpha, logged with its prediction (and the step costs the speculation policy starts from,
// into `costs` when not null); without a profile alpha 1, logged with how to get one. Other
// schedules: unchanged.
Result<TrainConfig> resolve_auto_alpha(const TrainConfig& cfg, const std::string& profile_path,
                                       AlphaChoice* costs);
}  // namespace strata
