#include "planner/planner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>

#include "backend/backend.h"
#include "core/config_bounds.h"
#include "model/gpt.h"
#include "train/offload_spec.h"

namespace strata {

namespace {

ModelConfig shape(int64_t layers, int64_t embd, int64_t heads, int64_t vocab, int64_t ctx) {
  ModelConfig m;
  m.n_layer = layers;
  m.n_embd = embd;
  m.n_head = heads;
  m.vocab_size = vocab;
  m.context_length = ctx;
  return m;
}

ModelConfig llama_shape(int64_t layers, int64_t embd, int64_t heads, int64_t kv_heads, int64_t ffn,
                        int64_t vocab, int64_t ctx, double theta) {
  ModelConfig m = shape(layers, embd, heads, vocab, ctx);
  m.arch = ModelArch::llama;
  m.n_kv_head = kv_heads;
  m.ffn_hidden = ffn;
  m.rope_theta = theta;
  m.tie_embeddings = false;
  return m;
}

// The device a profile describes, as plans see it: a GPU's fused attention (no T x T scores
// kept) and its own memory, or the CPU backend sharing the host's (cmd_profile).
DeviceTraits profile_device(const HardwareProfile& p) {
  return {.shares_host_memory = p.shared_cores, .fused_attention = p.flash_attention};
}

}  // namespace

const std::vector<ModelPreset>& model_presets() {
  static const std::vector<ModelPreset> presets = {
      {"bench-14m", shape(8, 384, 6, 256, 256), 256,
       "the model of bench/schedules.sh and bench/planner_accuracy.sh (14.4M parameters)"},
      {"gpt2", shape(12, 768, 12, 50257, 1024), 1024, "GPT-2 small, 124M (Radford et al. 2019)"},
      {"gpt2-medium", shape(24, 1024, 16, 50257, 1024), 1024, "GPT-2 medium, 355M"},
      {"gpt2-large", shape(36, 1280, 20, 50257, 1024), 1024, "GPT-2 large, 774M"},
      {"gpt2-xl", shape(48, 1600, 25, 50257, 1024), 1024, "GPT-2 XL, 1.5B"},
      {"gpt-65b", shape(80, 8192, 64, 50257, 2048), 2048,
       "65B class: LLaMA-65B's depth and width (80 x 8192, 64 heads) with GPT-2 blocks (4C MLP): "
       "12 L C^2 = 64.4B in blocks + 0.4B embeddings"},
      {"gpt-175b", shape(96, 12288, 96, 50257, 2048), 2048,
       "175B class: GPT-3 175B (Brown et al. 2020, Table 2.1: 96 x 12288, 96 heads, T 2048)"},
      {"llama3-8b", llama_shape(32, 4096, 32, 8, 14336, 128256, 8192, 500000), 8192,
       "Llama 3 8B (Meta's config.json: 32 x 4096, 32 heads on 8 key/value heads, MLP 14336, "
       "vocabulary 128256, untied): 8.03B"},
      {"llama3-70b", llama_shape(80, 8192, 64, 8, 28672, 128256, 8192, 500000), 8192,
       "Llama 3 70B (Meta's config.json: 80 x 8192, 64 heads on 8 key/value heads, MLP 28672, "
       "vocabulary 128256, untied): 70.55B"},
      {"llama-65b", llama_shape(80, 8192, 64, 64, 22016, 32000, 2048, 10000), 2048,
       "LLaMA-65B itself (Touvron et al. 2023: 80 x 8192, 64 heads, MLP 22016, vocabulary "
       "32000, T 2048): 65.3B"},
  };
  return presets;
}

Result<ModelPreset> find_preset(const std::string& name) {
  std::string names;
  for (const ModelPreset& p : model_presets()) {
    if (p.name == name) return p;
    names += (names.empty() ? "" : ", ") + p.name;
  }
  return not_found("unknown model preset '" + name + "' (known: " + names + ")");
}

TrainConfig apply_choice(const TrainConfig& cfg, const RunChoice& c) {
  TrainConfig out = cfg;
  out.schedule = c.schedule;
  out.batch_size = c.batch_size;
  out.grad_accum = c.micro_batches;
  out.offload.params_on_host = c.params_on_host;
  out.offload.optim_on_host = c.optim_on_host;
  out.offload.checkpoints_on_host = c.checkpoints_on_host;
  out.offload.grads_on_host = c.grads_on_host;
  out.optim.alpha = c.alpha;
  return out;
}

RunChoice choice_of(const TrainConfig& cfg) {
  RunChoice c;
  c.schedule = cfg.schedule;
  c.batch_size = cfg.batch_size;
  c.micro_batches = cfg.grad_accum;
  c.params_on_host = cfg.offload.params_on_host;
  c.optim_on_host = cfg.offload.optim_on_host;
  c.checkpoints_on_host = cfg.offload.checkpoints_on_host;
  c.grads_on_host = cfg.offload.grads_on_host;
  c.alpha = cfg.optim.alpha_or_default();
  return c;
}

ScheduleSpec planner_spec(const TrainConfig& cfg, const HardwareProfile& p) {
  const bool vertical = cfg.schedule == Schedule::vertical;
  ScheduleSpec s = offload_schedule_spec(profile_device(p), cfg, vertical, true);
  const int64_t n = s.block_elems, BT = cfg.batch_size * cfg.seq_len, C = cfg.model.n_embd,
                V = cfg.model.vocab_size;
  // offload_schedule_spec sizes what the CPU backend runs (everything f32); a profile may keep
  // other widths (bf16 working weights and activations on a GPU).
  // train.precision bf16 moves 2-byte working weights whatever the profile's default width.
  const int64_t param_bytes = cfg.precision == Precision::bf16 ? 2 : p.param_bytes;
  s.block_param_bytes = n * param_bytes;
  s.block_grad_bytes = trained_elems(s) * p.grad_bytes;  // Note [Frozen base]
  s.block_optim_bytes = trained_elems(s) * p.optim_bytes;
  const int64_t E = s.embed_elems;
  s.embed_param_bytes = E * p.param_bytes;  // the embed group keeps the device's width
  s.embed_optim_bytes = E * p.optim_bytes;
  s.checkpoint_bytes = BT * C * p.act_bytes;
  // The collectives where the trainer would run them (Note [ZeRO-3 on the device]): a profile of
  // the CPU backend shares its cores (cmd_profile), any other is a GPU's.
  s.device_collectives = s.ranks > 1 && wants_device_collectives(cfg, !p.shared_cores);
  if (p.flash_attention) {
    // One block's saved activations are ~17 C values per token without the T x T scores
    // (Korthikanti et al. 2022, "Reducing activation recomputation", §4.1: 34 s b h bytes at
    // 16 bits), as much again for backward scratch, and the head's logits, probabilities and
    // their gradient (V per token each).
    s.workspace_bytes = BT * (34 * C + 3 * V) * p.act_bytes;
  } else {
    s.workspace_bytes = s.workspace_bytes / 4 * p.act_bytes;
  }
  return s;
}

TierBudgets planner_budgets(const TrainConfig& cfg, const HardwareProfile& p) {
  TierBudgets b;
  b.device = cfg.memory.device_bytes > 0 ? cfg.memory.device_bytes : p.device_bytes;
  b.host = cfg.memory.host_bytes > 0 ? cfg.memory.host_bytes : p.host_bytes;
  b.storage = p.storage_capacity_bytes();
  return b;
}

namespace {

// The simulated iteration of the plan `spec` describes, with the config's storage rates.
Result<SimResult> simulate_spec(const TrainConfig& cfg, const HardwareProfile& profile,
                                const ScheduleSpec& spec, const Plan& plan, bool record_trace) {
  CostContext ctx = cost_context(spec, static_cast<double>(cfg.batch_size * cfg.seq_len));
  ctx.read_bytes_per_s = static_cast<double>(cfg.io.read_bytes_per_s);
  ctx.write_bytes_per_s = static_cast<double>(cfg.io.write_bytes_per_s);
  SimOptions so = sim_options(profile);
  so.record_trace = record_trace;
  return simulate(plan, task_durations(plan, profile, ctx), so);
}

// The simulated seconds of a variant of the steady plan: planner_spec(cfg) changed by `change`.
template <typename Change>
Result<double> simulate_variant(const TrainConfig& cfg, const HardwareProfile& profile,
                                Change&& change) {
  ScheduleSpec spec = planner_spec(cfg, profile);
  change(spec);
  const Plan plan = make_offload_plan(spec, cfg.schedule);
  STRATA_RETURN_IF_ERROR(check_plan(plan, planner_budgets(cfg, profile)));
  STRATA_ASSIGN_OR_RETURN(SimResult sim, simulate_spec(cfg, profile, spec, plan, false));
  return sim.iter_s;
}

}  // namespace

Result<AlphaChoice> choose_alpha(const TrainConfig& cfg, const HardwareProfile& profile,
                                 const std::vector<double>& alphas) {
  AlphaChoice best;
  bool found = false;
  Status last = invalid_argument("planner: no alpha to try");
  for (double alpha : alphas) {
    TrainConfig c = cfg;
    c.optim.alpha = alpha;
    auto p = predict(c, profile);
    if (!p.ok()) {
      last = p.status();
      continue;
    }
    if (alpha == 1.0) best.alpha1_iter_s = p->iter_s;
    if (!found || p->iter_s < best.iter_s) {
      best.alpha = alpha;
      best.iter_s = p->iter_s;
    }
    found = true;
  }
  if (!found) return last;
  if (best.alpha1_iter_s == 0) {
    TrainConfig c = cfg;
    c.optim.alpha = 1.0;
    STRATA_ASSIGN_OR_RETURN(Prediction p1, predict(c, profile));
    best.alpha1_iter_s = p1.iter_s;
  }
  if (cfg.optim.grad_clip > 0 && best.alpha < 1) {
    TrainConfig c = cfg;
    c.optim.alpha = best.alpha;
    // Note [Speculative steps]: the waiting iteration (part 0 deferred, both parts pending) and
    // the repair plan.
    STRATA_ASSIGN_OR_RETURN(best.wait_iter_s, simulate_variant(c, profile, [](ScheduleSpec& s) {
                              s.speculative = false;
                              s.defer_part0 = true;
                              s.pending_part0 = true;
                            }));
    STRATA_ASSIGN_OR_RETURN(best.repair_s, simulate_variant(c, profile, [](ScheduleSpec& s) {
                              s.speculative = false;
                              s.iteration = false;
                              s.repair = true;
                            }));
  }
  return best;
}

Result<Prediction> predict(const TrainConfig& cfg, const HardwareProfile& profile, bool keep_plan) {
  if (!is_offloaded(cfg.schedule)) {
    return invalid_argument(std::string("train.schedule '") + enum_name(cfg.schedule) +
                            "': the planner predicts the offloaded schedules (horizontal, "
                            "vertical)");
  }
  // A candidate's B x M may differ from the config's, so its plan's size is bounded again before
  // it is built (Note [Config bounds]).
  STRATA_RETURN_IF_ERROR(check_config_bounds(cfg));
  const ScheduleSpec spec = planner_spec(cfg, profile);
  Plan plan = make_offload_plan(spec, cfg.schedule);
  STRATA_RETURN_IF_ERROR(check_plan(plan, planner_budgets(cfg, profile)));
  STRATA_ASSIGN_OR_RETURN(SimResult sim, simulate_spec(cfg, profile, spec, plan, keep_plan));
  Prediction pr;
  pr.choice = choice_of(cfg);
  pr.iter_s = sim.iter_s;
  // Every rank's (Note [Data parallel ranks]): each trains B x T x M tokens per step.
  const int64_t tokens = cfg.batch_size * cfg.seq_len * cfg.grad_accum * cfg.ranks;
  pr.tokens_per_s = sim.iter_s > 0 ? static_cast<double>(tokens) / sim.iter_s : 0;
  pr.model_flops_per_s =
      sim.iter_s > 0 ? gpt_train_flops(cfg.model, cfg.seq_len, tokens) / sim.iter_s : 0;
  pr.roofline_s = sim.roofline_s;
  pr.busy_s = sim.report.busy_s;
  pr.work_s = sim.work_s;
  pr.peak_bytes = sim.peak_bytes;
  pr.bound = resource_name(sim.bound);
  if (profile.shared_cores && sim.bound == Resource::compute &&
      sim.work_s[static_cast<size_t>(Resource::cpu_optim)] > 0) {
    pr.bound = "compute+cpu_optim";
  }
  pr.tasks = static_cast<int64_t>(plan.tasks.size());
  if (keep_plan) pr.plan = std::move(plan);
  pr.sim = std::move(sim);
  return pr;
}

Result<SearchResult> search(const TrainConfig& cfg, const HardwareProfile& profile,
                            const SearchOptions& o) {
  const int64_t N =
      o.sequences_per_step > 0 ? o.sequences_per_step : cfg.batch_size * cfg.grad_accum;
  SearchResult res;
  Status last_error = invalid_argument("planner: no configuration to try");
  bool found = false;
  auto try_one = [&](const RunChoice& c) -> Result<Prediction> {
    auto p = predict(apply_choice(cfg, c), profile);
    if (p.ok()) {
      ++res.evaluated;
    } else {
      ++res.rejected;
      last_error = p.status();
    }
    return p;
  };
  for (const Schedule sched : o.schedules) {
    bool sched_found = false;
    Prediction sched_best;
    for (int64_t B = 1; B <= std::min(N, o.max_micro_batch); B *= 2) {
      if (N % B != 0) continue;
      RunChoice c;
      c.schedule = sched;
      c.batch_size = B;
      c.micro_batches = N / B;
      // With clipping on, part 0 speculates (Note [Speculative steps]): the plan simulated is
      // the one of a step whose norm does not clip.
      c.alpha = sched == Schedule::vertical ? 0.5 : 1.0;
      // Placement: more on host never costs time in this model (it only removes transfers), so
      // for each gradient and optimizer fraction take the largest params fraction that fits,
      // checkpoints on host first; the simulator picks among those.
      bool placed = false;
      Prediction best;
      for (double ck : {1.0, 0.0}) {
        for (double gf : {1.0, 0.0}) {
          for (double of : o.fractions) {
            for (double pf : o.fractions) {
              c.checkpoints_on_host = ck;
              c.grads_on_host = gf;
              c.optim_on_host = of;
              c.params_on_host = pf;
              auto p = try_one(c);
              if (!p.ok()) continue;
              if (!placed || p->iter_s < best.iter_s) best = std::move(*p);
              placed = true;
              break;  // smaller params fractions fit too, and are no faster
            }
          }
        }
        if (placed) break;
      }
      if (!placed) continue;
      if (sched == Schedule::vertical) {
        RunChoice a = best.choice;
        for (double al : o.alphas) {
          if (al == best.choice.alpha) continue;
          a.alpha = al;
          auto p = try_one(a);
          if (p.ok() && p->iter_s < best.iter_s) best = std::move(*p);
        }
      }
      if (!sched_found || best.iter_s < sched_best.iter_s) sched_best = best;
      sched_found = true;
    }
    if (!sched_found) continue;
    if (!found || sched_best.iter_s < res.best.iter_s) res.best = sched_best;
    found = true;
    res.per_schedule.push_back(std::move(sched_best));
  }
  if (!found) {
    return invalid_argument("planner: no configuration of " + std::to_string(N) +
                            " sequences per step fits; the last refusal: " + last_error.message());
  }
  return res;
}

std::vector<Sensitivity> sensitivity(const TrainConfig& cfg, const HardwareProfile& profile) {
  std::vector<Sensitivity> out;
  auto base = predict(cfg, profile);
  if (!base.ok()) return out;
  auto faster = [&](const std::string& what, auto&& change) {
    HardwareProfile p = profile;
    TrainConfig c = cfg;
    change(p, c);
    auto r = predict(c, p);
    if (r.ok()) out.push_back({what, r->iter_s, base->iter_s / r->iter_s});
  };
  auto scale = [](RateTable& t) {
    for (auto& pt : t) pt.second *= 2;
  };
  faster("compute 2x faster", [&](HardwareProfile& p, TrainConfig&) {
    scale(p.block_fwd);
    scale(p.block_bwd);
    scale(p.head);
    p.embed_s_per_token /= 2;
    p.task_overhead_s /= 2;
  });
  faster("storage reads 2x faster", [&](HardwareProfile& p, TrainConfig& c) {
    for (StorageDir& d : p.storage_dirs) d.read_bytes_per_s *= 2;
    c.io.read_bytes_per_s *= 2;
  });
  faster("storage writes 2x faster", [&](HardwareProfile& p, TrainConfig& c) {
    for (StorageDir& d : p.storage_dirs) d.write_bytes_per_s *= 2;
    c.io.write_bytes_per_s *= 2;
  });
  faster("host<->device link 2x faster", [&](HardwareProfile& p, TrainConfig&) {
    p.h2d_bytes_per_s *= 2;
    p.d2h_bytes_per_s *= 2;
  });
  faster("CPU optimizer 2x faster", [&](HardwareProfile& p, TrainConfig&) {
    p.optim_params_per_s *= 2;
    p.reduce_bytes_per_s *= 2;
  });
  std::sort(out.begin(), out.end(),
            [](const Sensitivity& a, const Sensitivity& b) { return a.speedup > b.speedup; });
  return out;
}

}  // namespace strata

#include "core/log.h"

namespace strata {

Result<TrainConfig> auto_configure(const TrainConfig& cfg, const std::string& profile_path) {
  if (profile_path.empty()) {
    return invalid_argument(
        "--auto needs --profile HW.json (write one with `strata profile --out HW.json`)");
  }
  STRATA_ASSIGN_OR_RETURN(HardwareProfile prof, load_profile(profile_path));
  STRATA_ASSIGN_OR_RETURN(SearchResult r, search(cfg, prof));
  const RunChoice& c = r.best.choice;
  char line[400];
  std::snprintf(line, sizeof line,
                "--auto (profile %s): schedule %s, B %lld x M %lld, on host params %.2f optim "
                "%.2f checkpoints %.2f, alpha %.2f; predicted %.3f s/iteration, %.4g tokens/s, "
                "%s-bound",
                prof.name.c_str(), enum_name(c.schedule), static_cast<long long>(c.batch_size),
                static_cast<long long>(c.micro_batches), c.params_on_host, c.optim_on_host,
                c.checkpoints_on_host, c.alpha, r.best.iter_s, r.best.tokens_per_s,
                r.best.bound.c_str());
  log_info(line);
  return apply_choice(cfg, c);
}

Result<TrainConfig> resolve_auto_alpha(const TrainConfig& cfg, const std::string& profile_path,
                                       AlphaChoice* costs) {
  if (cfg.optim.alpha.has_value() || cfg.schedule != Schedule::vertical) return cfg;
  TrainConfig out = cfg;
  if (profile_path.empty()) {
    out.optim.alpha = 1.0;
    log_info(
        "optim.alpha auto: 1 (no --profile to simulate this run's plans with; `strata profile "
        "--out HW.json` measures one)");
    return out;
  }
  STRATA_ASSIGN_OR_RETURN(HardwareProfile prof, load_profile(profile_path));
  STRATA_ASSIGN_OR_RETURN(AlphaChoice a, choose_alpha(cfg, prof));
  out.optim.alpha = a.alpha;
  char line[400];
  std::snprintf(line, sizeof line,
                "optim.alpha auto: %.2f from the simulation of this run's plans (profile %s): "
                "predicted %.3f s/iteration against %.3f s at alpha 1",
                a.alpha, prof.name.c_str(), a.iter_s, a.alpha1_iter_s);
  std::string text = line;
  if (a.wait_iter_s > 0) {
    std::snprintf(line, sizeof line,
                  "; with clipping on, part 0 speculates: %.3f s waiting for the norm instead, "
                  "+%.3f s to repair a step that clips",
                  a.wait_iter_s, a.repair_s);
    text += line;
  }
  log_info(text);
  if (costs != nullptr) *costs = a;
  return out;
}

}  // namespace strata
