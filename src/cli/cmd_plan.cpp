// strata plan: predicts a run from a hardware profile and chooses its configuration (micro-batch
// size and count, schedule, placement fractions, alpha) for the best predicted throughput within
// the tier budgets; says what bounds it and what must change to go faster. docs/design.md §7,
// docs/planner.md.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/file_util.h"
#include "core/format.h"
#include "core/output_file.h"
#include "model/layout.h"
#include "planner/planner.h"
#include "sched/executor.h"
#include "train/offload_spec.h"

namespace strata::cli {
namespace {

using nlohmann::json;

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

std::string pct(double f) {
  return fmt("%.0f%%", 100 * f);
}

json choice_json(const RunChoice& c) {
  return {{"schedule", enum_name(c.schedule)}, {"batch_size", c.batch_size},
          {"micro_batches", c.micro_batches},  {"params_on_host", c.params_on_host},
          {"optim_on_host", c.optim_on_host},  {"checkpoints_on_host", c.checkpoints_on_host},
          {"grads_on_host", c.grads_on_host},  {"alpha", c.alpha}};
}

json prediction_json(const Prediction& p, const TierBudgets& b) {
  json busy = json::object(), work = json::object();
  for (int r = 0; r < kResourceCount; ++r) {
    busy[resource_name(static_cast<Resource>(r))] = p.busy_s[static_cast<size_t>(r)];
    work[resource_name(static_cast<Resource>(r))] = p.work_s[static_cast<size_t>(r)];
  }
  return {{"choice", choice_json(p.choice)},
          {"iter_s", p.iter_s},
          {"tokens_per_s", p.tokens_per_s},
          {"model_flops_per_s", p.model_flops_per_s},
          {"roofline_s", p.roofline_s},
          {"bound", p.bound},
          {"busy_s", busy},
          {"work_s", work},
          {"peak_bytes",
           {{"device", p.peak_bytes[0]}, {"host", p.peak_bytes[1]}, {"storage", p.peak_bytes[2]}}},
          {"budget_bytes", {{"device", b.device}, {"host", b.host}, {"storage", b.storage}}},
          {"tasks", p.tasks}};
}

std::string describe_choice(const RunChoice& c, int64_t T) {
  std::ostringstream o;
  o << "schedule " << enum_name(c.schedule) << ", micro-batch " << c.batch_size << " x " << T
    << " tokens, " << c.micro_batches << " micro-batches (" << c.batch_size * T * c.micro_batches
    << " tokens/step); on host: params " << pct(c.params_on_host) << ", optimizer state "
    << pct(c.optim_on_host) << ", checkpoints " << pct(c.checkpoints_on_host) << ", gradients "
    << pct(c.grads_on_host);
  if (c.schedule == Schedule::vertical) o << "; alpha " << c.alpha;
  return o.str();
}

std::string set_flags(const RunChoice& c) {
  std::ostringstream o;
  o << "--set train.schedule=" << enum_name(c.schedule)
    << " --set train.batch_size=" << c.batch_size << " --set train.grad_accum=" << c.micro_batches
    << " --set offload.params_on_host=" << c.params_on_host
    << " --set offload.optim_on_host=" << c.optim_on_host
    << " --set offload.checkpoints_on_host=" << c.checkpoints_on_host
    << " --set offload.grads_on_host=" << c.grads_on_host;
  if (c.schedule == Schedule::vertical) o << " --set optim.alpha=" << c.alpha;
  return o.str();
}

void print_prediction(const Prediction& p, const TierBudgets& b) {
  std::printf(
      "prediction: iteration %.4g s, %.4g tokens/s, model %.4g TFLOP/s; roofline %.4g s "
      "(%.2fx of it)\n",
      p.iter_s, p.tokens_per_s, p.model_flops_per_s / 1e12, p.roofline_s,
      p.iter_s / std::max(p.roofline_s, 1e-12));
  std::printf("  busy per resource:");
  for (int r = 0; r < kResourceCount; ++r) {
    const double s = p.busy_s[static_cast<size_t>(r)];
    if (s > 0) {
      std::printf(" %s %.3g s (%s)", resource_name(static_cast<Resource>(r)), s,
                  pct(s / p.iter_s).c_str());
    }
  }
  std::printf("\n  peak memory:");
  const int64_t budget[3] = {b.device, b.host, b.storage};
  for (int t = 0; t < kTierCount; ++t) {
    std::printf(" %s %s", tier_name(static_cast<Tier>(t)),
                format_bytes(p.peak_bytes[static_cast<size_t>(t)]).c_str());
    if (budget[t] > 0) std::printf(" of %s", format_bytes(budget[t]).c_str());
    std::printf(t + 1 < kTierCount ? "," : "\n");
  }
  std::printf("bound by: %s\n", p.bound.c_str());
}

std::vector<int64_t> parse_list(const std::string& s, bool& ok) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  std::string item;
  ok = true;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 1) ok = false;
    out.push_back(v);
  }
  ok = ok && !out.empty();
  return out;
}

constexpr int64_t kMaxRanks = 4096;

// The config (embedded default, --config, --set), then --model PRESET's shape and sequence length.
Result<TrainConfig> plan_config_from_args(const ParsedArgs& a) {
  STRATA_ASSIGN_OR_RETURN(TrainConfig cfg, load_config_and_preset(a));
  if (cfg.schedule == Schedule::in_memory) cfg.schedule = Schedule::vertical;
  // --ranks N: a run of N data-parallel ranks (docs/design.md §12), each as planned here (its
  // sequences, its storage and host from the profile) plus a gradient all-reduce per block over
  // the profile's network; tokens/s are the whole run's.
  if (a.has("ranks")) {
    bool ok = false;
    const auto v = parse_list(a.get("ranks"), ok);
    if (!ok || v.size() != 1 || v[0] > kMaxRanks) {
      return invalid_argument("--ranks must be an integer from 1 to " + std::to_string(kMaxRanks) +
                              ", got '" + a.get("ranks") + "'");
    }
    cfg.ranks = static_cast<int32_t>(v[0]);
  }
  return cfg;
}

// --schedule, --sequences, --max-micro-batch: what the search may choose.
Result<SearchOptions> search_options(const ParsedArgs& a) {
  SearchOptions so;
  if (a.has("schedule")) {
    auto s = parse_enum<Schedule>("--schedule", a.get("schedule"));
    if (!s.ok() || !is_offloaded(*s)) {
      return invalid_argument("--schedule must be horizontal or vertical, got '" +
                              a.get("schedule") + "'");
    }
    so.schedules = {*s};
  }
  for (auto [flag, out] : {std::pair{"sequences", &so.sequences_per_step},
                           std::pair{"max-micro-batch", &so.max_micro_batch}}) {
    if (!a.has(flag)) continue;
    bool ok = false;
    const auto v = parse_list(a.get(flag), ok);
    if (!ok || v.size() != 1) {
      return invalid_argument(std::string("--") + flag + " must be a positive integer");
    }
    *out = v[0];
  }
  return so;
}

// --sweep N1,N2,...: the best of each schedule at several batch sizes, one row each.
int run_sweep(const ParsedArgs& a, const TrainConfig& cfg, const HardwareProfile& prof,
              const SearchOptions& so, bool as_json) {
  bool ok = false;
  const auto ns = parse_list(a.get("sweep"), ok);
  if (!ok) return fail("--sweep must be a comma-separated list of positive integers", 2);
  const TierBudgets budgets = planner_budgets(cfg, prof);
  json rows = json::array();
  if (!as_json) {
    std::printf("%10s %12s %14s %10s  %s\n", "sequences", "schedule", "tokens/s", "bound",
                "choice");
  }
  for (int64_t n : ns) {
    for (const Schedule s : so.schedules) {
      SearchOptions one = so;
      one.schedules = {s};
      one.sequences_per_step = n;
      auto r = search(cfg, prof, one);
      json row = {{"sequences", n}, {"schedule", enum_name(s)}};
      if (r.ok()) {
        row["prediction"] = prediction_json(r->best, budgets);
        if (!as_json) {
          std::printf("%10lld %12s %14.4g %10s  %s\n", static_cast<long long>(n), enum_name(s),
                      r->best.tokens_per_s, r->best.bound.c_str(),
                      describe_choice(r->best.choice, cfg.seq_len).c_str());
        }
      } else {
        row["error"] = r.status().message();
        if (!as_json) {
          std::printf("%10lld %12s  does not fit: %s\n", static_cast<long long>(n), enum_name(s),
                      r.status().message().c_str());
        }
      }
      rows.push_back(row);
    }
  }
  const int64_t params = make_param_layout(cfg.model, cfg.lora).parameter_count;
  if (as_json) std::printf("%s\n", json({{"params", params}, {"rows", rows}}).dump().c_str());
  return 0;
}

// The searched configuration, with what the search saw in `extra` (and printed unless JSON).
Result<Prediction> search_best(const TrainConfig& cfg, const HardwareProfile& prof,
                               const SearchOptions& so, bool keep_plan, bool as_json, json& extra) {
  STRATA_ASSIGN_OR_RETURN(SearchResult r, search(cfg, prof, so));
  const TierBudgets budgets = planner_budgets(cfg, prof);
  extra["evaluated"] = r.evaluated;
  extra["rejected"] = r.rejected;
  json per = json::array();
  for (const Prediction& p : r.per_schedule) per.push_back(prediction_json(p, budgets));
  extra["per_schedule"] = per;
  if (!as_json) {
    std::printf("searched %lld configurations (%lld refused by the plan checker or budgets)\n",
                static_cast<long long>(r.evaluated + r.rejected),
                static_cast<long long>(r.rejected));
    for (const Prediction& p : r.per_schedule) {
      std::printf("  best %-10s %.4g tokens/s (%s-bound): %s\n", enum_name(p.choice.schedule),
                  p.tokens_per_s, p.bound.c_str(), describe_choice(p.choice, cfg.seq_len).c_str());
    }
  }
  // Re-run the winner keeping its plan, for the trace.
  return predict(apply_choice(cfg, r.best.choice), prof, keep_plan);
}

// A memory tier: would more host memory (everything on host) be faster? null when it already is.
json all_on_host(const TrainConfig& chosen, const HardwareProfile& prof, const Prediction& best) {
  const RunChoice& c = best.choice;
  if (c.params_on_host >= 1 && c.optim_on_host >= 1 && c.checkpoints_on_host >= 1 &&
      c.grads_on_host >= 1) {
    return nullptr;
  }
  TrainConfig all = chosen;
  all.offload.params_on_host = all.offload.optim_on_host = all.offload.checkpoints_on_host =
      all.offload.grads_on_host = 1;
  all.memory.host_bytes = 0;
  HardwareProfile roomy = prof;
  roomy.host_bytes = 0;
  auto p = predict(all, roomy);
  if (!p.ok()) return nullptr;
  return {{"host_bytes_needed", p->peak_bytes[static_cast<size_t>(Tier::host)]},
          {"iter_s", p->iter_s},
          {"speedup", best.iter_s / p->iter_s}};
}

// What a person reads: the model, the choice, the prediction, what would make it faster.
void print_report(const TrainConfig& cfg, const HardwareProfile& prof, const Prediction& best,
                  const std::vector<Sensitivity>& sens, const json& memory, bool simulated) {
  std::printf("model: %lld layers x %lld (%lld heads), vocab %lld, T %lld: %.4g parameters\n",
              static_cast<long long>(cfg.model.n_layer), static_cast<long long>(cfg.model.n_embd),
              static_cast<long long>(cfg.model.n_head),
              static_cast<long long>(cfg.model.vocab_size), static_cast<long long>(cfg.seq_len),
              static_cast<double>(make_param_layout(cfg.model, cfg.lora).parameter_count));
  if (cfg.lora.enabled()) {
    // Note [Frozen base]: with one rank the base is read-only in the plans; with several it is
    // still planned (and moved) as trainable.
    const bool frozen = frozen_elems_for(cfg, make_param_layout(cfg.model, cfg.lora)) > 0;
    std::printf("%s; %s\n", describe_lora(make_param_layout(cfg.model, cfg.lora)).c_str(),
                frozen ? "the base is read-only: no gradient, master or moments move for it"
                       : "planned as full training (with several ranks the base still moves)");
  }
  std::printf("profile: %s\n", prof.name.c_str());
  std::printf("%s: %s\n", simulated ? "configuration" : "chosen",
              describe_choice(best.choice, cfg.seq_len).c_str());
  print_prediction(best, planner_budgets(cfg, prof));
  std::printf("to go faster:");
  for (const Sensitivity& s : sens) std::printf(" %s -> %.2fx;", s.what.c_str(), s.speedup);
  std::printf("\n");
  if (!memory.is_null()) {
    std::printf(
        "  a memory tier: with %s of host memory (everything on host): iteration "
        "%.4g s, %.2fx\n",
        format_bytes(memory["host_bytes_needed"].get<int64_t>()).c_str(),
        memory["iter_s"].get<double>(), memory["speedup"].get<double>());
  }
  std::printf("to run it: strata train %s\n", set_flags(best.choice).c_str());
}

json report_json(const TrainConfig& cfg, const HardwareProfile& prof, const Prediction& best,
                 const std::vector<Sensitivity>& sens, const json& memory, const json& extra) {
  json sj = json::array();
  for (const Sensitivity& s : sens) {
    sj.push_back({{"what", s.what}, {"iter_s", s.iter_s}, {"speedup", s.speedup}});
  }
  json out = prediction_json(best, planner_budgets(cfg, prof));
  out["params"] = make_param_layout(cfg.model, cfg.lora).parameter_count;
  out["profile"] = prof.name;
  out["sensitivity"] = sj;
  out["all_on_host"] = memory;
  out["set_flags"] = set_flags(best.choice);
  for (auto it = extra.begin(); it != extra.end(); ++it) out[it.key()] = it.value();
  return out;
}

const std::vector<FlagSpec> kPlanFlags = {
    {"config", true, false},          {"set", true, true},
    {"profile", true, false},         {"model", true, false},
    {"sequences", true, false},       {"schedule", true, false},
    {"simulate", false, false},       {"json", false, false},
    {"trace", true, false},           {"sweep", true, false},
    {"max-micro-batch", true, false}, {"ranks", true, false}};

int plan_main(const ParsedArgs& a) {
  auto cfg_or = plan_config_from_args(a);
  if (!cfg_or.ok()) return fail(cfg_or.status().message(), 2);
  const TrainConfig cfg = *cfg_or;
  if (!a.has("profile")) {
    return fail(
        "strata plan: --profile HW.json is required (write one with `strata profile "
        "--out HW.json`, or use profiles/a100-80gb-4nvme.json)",
        2);
  }
  auto prof = load_profile(a.get("profile"));
  if (!prof.ok()) return fail(prof.status().message(), 2);
  auto so = search_options(a);
  if (!so.ok()) return fail(so.status().message(), 2);
  const bool as_json = a.has("json");
  if (a.has("sweep")) return run_sweep(a, cfg, *prof, *so, as_json);

  // One configuration: as given (--simulate) or searched.
  json extra = json::object();
  auto best = a.has("simulate") ? predict(cfg, *prof, a.has("trace"))
                                : search_best(cfg, *prof, *so, a.has("trace"), as_json, extra);
  if (!best.ok()) return fail(best.status().message(), 2);
  const TrainConfig chosen = apply_choice(cfg, best->choice);
  const auto sens = sensitivity(chosen, *prof);
  const json memory = all_on_host(chosen, *prof, *best);
  if (as_json) {
    std::printf("%s\n", report_json(cfg, *prof, *best, sens, memory, extra).dump().c_str());
  } else {
    print_report(cfg, *prof, *best, sens, memory, a.has("simulate"));
  }
  if (a.has("trace")) {
    const std::string trace = execution_trace_json(best->plan, best->sim.report).dump() + "\n";
    Status written = write_output_file(a.get("trace"), trace, "trace file");
    if (!written.ok()) {
      return fail(written.message(), written.code() == ErrorCode::invalid_argument ? 2 : 1);
    }
  }
  return 0;
}

}  // namespace

int cmd_plan(const std::vector<std::string>& args) {
  return run_command(args, kPlanFlags, "plan", plan_main);
}

}  // namespace strata::cli
