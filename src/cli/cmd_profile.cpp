// strata profile: measures this machine and writes a hardware profile (planner/profile.h) for
// `strata plan` and the simulator (docs/design.md §7).
//
// How: compute, link, optimizer and reduce rates come from short instrumented runs of the real
// offloaded trainer for the model of the config (at most 4 blocks, everything on host, nothing
// throttled) at micro-batch sizes B = 1, 2, 4 (the compute table's token points), in both orders:
// horizontal (each block task with weights it did not just use) and vertical (M = 4: the same
// weights over the micro-batches, Note [Weights reused] in planner/simulator.h). Each task's duration
// in the executor's report is divided into its bytes or FLOPs: measuring the tasks the planner
// will later predict, as the executor runs them, keeps the profile honest about per-task costs
// that op microbenchmarks miss. The runs repeat in rounds and every class of task is summarised
// robustly (Note [Robust timings] in planner/profile_measure.h); tasks that overlapped the CPU
// optimizer give the shared-core paces, and one more vertical run per round with its state on
// storage gives the compute time storage traffic takes (Note [Shared cores]). Storage: one
// sequential read and one write pass per directory with the configured engine (no rate limit;
// limits are a run setting that `strata plan` applies from io.read_bytes_per_s /
// io.write_bytes_per_s).
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "core/file_util.h"
#include "core/log.h"
#include "io/configured_engine.h"
#include "io/io_bench.h"
#include "planner/planner.h"
#include "planner/profile.h"
#include "planner/profile_measure.h"
#include "planner/simulator.h"
#include "train/offload_trainer.h"

namespace strata::cli {
namespace {

// The instrumented runs: which order, and whether the state lives on storage.
enum class RunKind { horizontal, vertical, vertical_storage };
constexpr std::array<int64_t, 3> kMicroBatchSizes = {1, 2, 4};

// The timings of one instrumented run: its plan and, per recorded step, every task's sample.
struct RunTimings {
  RunKind kind = RunKind::horizontal;
  int64_t B = 1;
  ScheduleSpec spec;
  Plan plan;
  std::vector<bool> reused;  // weights_reused(plan)
  std::vector<std::vector<TaskSample>> steps;
};

TrainConfig run_config(const TrainConfig& base, RunKind kind, int64_t B, const std::string& dir) {
  TrainConfig cfg = base;
  cfg.model.n_layer = std::min<int64_t>(base.model.n_layer, 4);
  cfg.schedule = kind == RunKind::horizontal ? Schedule::horizontal : Schedule::vertical;
  cfg.batch_size = B;
  cfg.grad_accum = kind == RunKind::horizontal ? 2 : 4;
  const double host = kind == RunKind::vertical_storage ? 0 : 1;
  cfg.offload.params_on_host = cfg.offload.optim_on_host = cfg.offload.checkpoints_on_host = host;
  cfg.offload.grads_on_host = 1;
  cfg.activations.policy = ActsMode::recompute;
  cfg.io.dirs.clear();
  if (kind == RunKind::vertical_storage) cfg.io.dirs = {dir};
  cfg.io.read_bytes_per_s = cfg.io.write_bytes_per_s = 0;
  cfg.optim.grad_clip = 0;
  // Vertical: half of each step in the backward, half in the next forward, so that optimizer
  // tasks overlap compute in both phases (the shared-core paces).
  cfg.optim.alpha = kind == RunKind::horizontal ? 1.0 : 0.5;
  return cfg;
}

// `steps` steps of cfg; every step after the first recorded.
// On the config's device (`--set device=cuda` profiles a GPU), each device task timed as its work
// (OffloadTrainer::set_time_device_tasks).
Result<RunTimings> instrumented_run(const TrainConfig& cfg, RunKind kind, int steps) {
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Device> dev, create_configured_device(cfg));
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<OffloadTrainer> t, OffloadTrainer::create(*dev, cfg));
  t->set_time_device_tasks(true);
  const int64_t n = cfg.batch_size * cfg.seq_len * cfg.grad_accum;
  std::vector<int32_t> in(static_cast<size_t>(n)), tg(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    in[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919) % cfg.model.vocab_size);
    tg[static_cast<size_t>(i)] = static_cast<int32_t>((i * 104729 + 1) % cfg.model.vocab_size);
  }
  RunTimings r;
  r.kind = kind;
  r.B = cfg.batch_size;
  for (int s = 0; s < steps; ++s) {
    t->set_record_trace(s > 0);
    STRATA_RETURN_IF_ERROR(t->train_step(in.data(), tg.data()).status());
    if (s > 0) r.steps.push_back(task_samples(t->last_plan(), t->last_report()));
  }
  r.plan = t->last_plan();
  r.reused = weights_reused(r.plan);
  r.spec = offload_schedule_spec(*dev, cfg, cfg.schedule == Schedule::vertical, true);
  return r;
}

Result<IoBenchResult> bench_dir(const std::string& dir, IoOp op, uint64_t size) {
  IoConfig io;
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<IoEngine> engine, create_configured_engine(io, dir));
  IoBenchOptions o;
  o.path = (std::filesystem::path(dir) / "strata-profile.tmp").string();
  o.size = size;
  o.op = op;
  auto r = run_io_bench(*engine, o);
  if (!r.ok()) {  // a file system without O_DIRECT (tmpfs): buffered
    o.direct = false;
    r = run_io_bench(*engine, o);
  }
  return r;
}

int64_t mem_total_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (f >> key >> kb >> unit) {
    if (key == "MemTotal:") return kb * 1024;
  }
  return 0;
}

// The model to measure: --model PRESET, the config's, or (bare) the benchmark model whose shapes
// the accuracy benchmark runs.
Result<TrainConfig> profile_config(const ParsedArgs& a) {
  STRATA_ASSIGN_OR_RETURN(TrainConfig base, load_config_from_args(a));
  if (a.has("model")) {
    STRATA_ASSIGN_OR_RETURN(ModelPreset p, find_preset(a.get("model")));
    base.model = p.model;
    base.seq_len = p.seq_len;
  } else if (!a.has("config") && a.all("set").empty()) {
    const ModelPreset p = *find_preset("bench-14m");
    base.model = p.model;
    base.seq_len = p.seq_len;
  }
  return base;
}

// ---- Classes of timed tasks --------------------------------------------------------------------

// What a timing measures: compute classes in seconds per task (their work is fixed per run),
// the others as a rate (their bytes vary from task to task).
enum class Cls { fwd, bwd, fused_bwd, head, embed, zero, h2d, d2h, step, reduce };

std::optional<Cls> class_of(const Task& t) {
  switch (t.kind) {
    case TaskKind::block_forward:
      return Cls::fwd;
    case TaskKind::block_backward:
      return t.fused ? Cls::fused_bwd : Cls::bwd;
    case TaskKind::head_loss:
      return Cls::head;
    case TaskKind::embed_forward:
    case TaskKind::embed_backward:
      return Cls::embed;
    case TaskKind::grad_zero:  // a block's gradient: the embed group's is too small to time
      return t.block >= 0 ? std::optional<Cls>(Cls::zero) : std::nullopt;
    case TaskKind::block_step:
    case TaskKind::embed_step:
      return Cls::step;
    case TaskKind::grad_accumulate:
    case TaskKind::grad_sumsq:
      return Cls::reduce;
    default:
      break;
  }
  if (t.bytes > 0 && t.resource == Resource::h2d) return Cls::h2d;
  if (t.bytes > 0 && t.resource == Resource::d2h) return Cls::d2h;
  return std::nullopt;
}

bool is_compute(Cls c) {
  return c == Cls::fwd || c == Cls::bwd || c == Cls::fused_bwd || c == Cls::head;
}

// Bytes of the slots a task writes.
double written_bytes(const Plan& plan, const Task& t) {
  double b = 0;
  for (const SlotUse& u : t.uses) {
    if (u.write) b += static_cast<double>(plan.slots[static_cast<size_t>(u.slot)].bytes);
  }
  return b;
}

// A timing's value for its class: seconds for compute, seconds per token for the embedding,
// bytes or parameters per second for the rest.
double value_of(Cls c, const RunTimings& r, const Task& t, double seconds, double tokens) {
  const double s = std::max(seconds, 1e-9);
  switch (c) {
    case Cls::embed:
      return s / tokens;
    case Cls::zero:
      return written_bytes(r.plan, t) / s;
    case Cls::step:
      return static_cast<double>(t.bytes) * static_cast<double>(r.spec.block_elems) /
             static_cast<double>(std::max<int64_t>(r.spec.block_optim_bytes, 1)) / s;
    case Cls::h2d:
    case Cls::d2h:
    case Cls::reduce:
      return static_cast<double>(t.bytes) / s;
    default:
      return seconds;
  }
}

// Whether a sample ran alone: compute beside no optimizer task and no storage traffic, an
// optimizer task beside no compute (Note [Shared cores]).
bool alone(Cls c, const TaskSample& s) {
  const double tol = 0.02 * s.seconds;
  if (c == Cls::step || c == Cls::reduce) return s.beside_compute_s <= tol;
  return s.beside_optim_s <= tol && s.storage_bytes == 0;
}

struct Key {
  RunKind kind = RunKind::horizontal;
  int64_t B = 1;
  Cls cls = Cls::fwd;
  bool reused = false;
  auto operator<=>(const Key&) const = default;
};

// Timings of tasks that ran alone, per class and per round (Note [Robust timings]).
class Pools {
 public:
  void add(const Key& k, int round, double v) {
    auto& rounds = pools_[k];
    if (rounds.size() <= static_cast<size_t>(round)) rounds.resize(static_cast<size_t>(round) + 1);
    rounds[static_cast<size_t>(round)].push_back(v);
  }
  // Over every round.
  TimingSummary summary(const Key& k) const { return summarize_timings(values(k, -1)); }
  // Over every run kind and B of a class (the rates that do not depend on them).
  TimingSummary summary_of(Cls c) const {
    std::vector<double> all;
    for (const auto& [k, rounds] : pools_) {
      if (k.cls != c || k.kind == RunKind::vertical_storage) continue;
      for (const auto& r : rounds) all.insert(all.end(), r.begin(), r.end());
    }
    return summarize_timings(std::move(all));
  }
  // The mean of one round's timings (0 without any).
  double round_mean(const Key& k, int round) const {
    return summarize_timings(values(k, round)).mean;
  }
  void totals(int64_t& kept, int64_t& rejected) const {
    kept = rejected = 0;
    for (const auto& [k, rounds] : pools_) {
      const TimingSummary s = summary(k);
      kept += s.kept;
      rejected += s.rejected;
    }
  }

 private:
  std::vector<double> values(const Key& k, int round) const {
    std::vector<double> all;
    auto it = pools_.find(k);
    if (it == pools_.end()) return all;
    for (size_t r = 0; r < it->second.size(); ++r) {
      if (round < 0 || static_cast<int>(r) == round) {
        all.insert(all.end(), it->second[r].begin(), it->second[r].end());
      }
    }
    return all;
  }
  std::map<Key, std::vector<std::vector<double>>> pools_;
};

Key key_of(const RunTimings& r, Cls c, const TaskSample& s) {
  return {r.kind, r.B, c, r.reused[static_cast<size_t>(s.task)]};
}

void pool_run(const RunTimings& r, int round, double seq_len, Pools& pools) {
  const double tokens = static_cast<double>(r.B) * seq_len;
  for (const std::vector<TaskSample>& step : r.steps) {
    for (const TaskSample& s : step) {
      const Task& t = r.plan.tasks[static_cast<size_t>(s.task)];
      const std::optional<Cls> c = class_of(t);
      if (!c || !alone(*c, s)) continue;
      pools.add(key_of(r, *c, s), round, value_of(*c, r, t, s.seconds, tokens));
    }
  }
}

// ---- Contention
// ----------------------------------------------------------------------------------

// Compute tasks beside the optimizer against their time alone, and optimizer steps beside
// compute against theirs (Note [Shared cores]).
void shared_pace_samples(const RunTimings& r, const Pools& pools, std::vector<Contended>& compute,
                         std::vector<Contended>& optim) {
  const double step_rate = pools.summary_of(Cls::step).mean;
  for (const std::vector<TaskSample>& step : r.steps) {
    for (const TaskSample& s : step) {
      const Task& t = r.plan.tasks[static_cast<size_t>(s.task)];
      const std::optional<Cls> c = class_of(t);
      if (!c || s.storage_bytes > 0) continue;
      if (is_compute(*c) && s.beside_optim_s > 0) {
        const double a = pools.summary(key_of(r, *c, s)).mean;
        if (a > 0) compute.push_back({s.seconds, a, s.beside_optim_s});
      } else if (*c == Cls::step && s.beside_compute_s > 0 && step_rate > 0) {
        const double a = value_of(*c, r, t, 1.0, 1.0) / step_rate;  // parameters / rate
        optim.push_back({s.seconds, a, s.beside_compute_s});
      }
    }
  }
}

// Compute tasks of the run with state on storage against the same tasks of the run on host
// (their optimizer contention taken off at the fitted pace): the time storage traffic took.
void io_cost_samples(const RunTimings& r, const Pools& pools, double compute_pace,
                     std::vector<Contended>& out) {
  for (const std::vector<TaskSample>& step : r.steps) {
    for (const TaskSample& s : step) {
      const Task& t = r.plan.tasks[static_cast<size_t>(s.task)];
      const std::optional<Cls> c = class_of(t);
      if (!c || !is_compute(*c)) continue;
      Key k = key_of(r, *c, s);
      k.kind = RunKind::vertical;
      const double a = pools.summary(k).mean;
      if (a <= 0) continue;
      out.push_back({s.seconds, a + (1 - compute_pace) * s.beside_optim_s, s.storage_bytes});
    }
  }
}

// ---- The profile's figures ----------------------------------------------------------------------

// The compute tables at micro-batch size B from a horizontal run: block tasks with weights not
// just used; a backward there also zeroes its fresh gradient, taken off at the memset rate.
void compute_tables(const Pools& pools, const RunTimings& h, double tokens, HardwareProfile& prof) {
  const auto mean = [&](Cls c) { return pools.summary({RunKind::horizontal, h.B, c, false}).mean; };
  const double f = mean(Cls::fwd);
  const double zero = static_cast<double>(h.spec.block_grad_bytes) / prof.memset_bytes_per_s;
  const double b = std::max(mean(Cls::bwd) - f - zero, 1e-9);
  prof.block_fwd.emplace_back(tokens, h.spec.block_fwd_flops / std::max(f, 1e-9));
  prof.block_bwd.emplace_back(tokens, h.spec.block_bwd_flops / b);
  prof.head.emplace_back(tokens, h.spec.head_flops / std::max(mean(Cls::head), 1e-9));
}

// The speed-ups of block tasks with weights just used (Note [Weights reused]), measured within
// one vertical run: its tasks with weights just used against its others (each block's first
// micro-batch), so that the machine's speed, which drifts between runs by as much as the effect,
// cancels out. A speed-up the timings cannot tell from 1 is recorded as 1; a disturbed one is
// left out (the table interpolates over it).
void reuse_speedups(const Pools& pools, const RunTimings& v, double tokens, HardwareProfile& prof) {
  const auto s = [&](Cls c, bool reused) {
    return pools.summary({RunKind::vertical, v.B, c, reused});
  };
  const TimingSummary fc = s(Cls::fwd, false), fr = s(Cls::fwd, true);
  const TimingSummary bc = s(Cls::bwd, false), br = s(Cls::bwd, true);
  if (fc.kept < 2 || fr.kept < 2 || bc.kept < 2 || br.kept < 2) return;
  const double fwd = significant_speedup(fc.mean, fc.sem, fr.mean, fr.sem);
  // The backward proper: the backward task less its recompute (a forward of the same kind).
  const double bwd = significant_speedup(bc.mean - fc.mean, std::hypot(bc.sem, fc.sem),
                                         br.mean - fr.mean, std::hypot(br.sem, fr.sem));
  if (fwd <= 0 || bwd <= 0) return;
  prof.block_fwd_reuse.emplace_back(tokens, fwd);
  prof.block_bwd_reuse.emplace_back(tokens, bwd);
}

// Rates that do not depend on B, pooled over every run.
void pooled_rates(const Pools& pools, HardwareProfile& prof) {
  const auto rate = [&pools](Cls c, double fallback) {
    const double m = pools.summary_of(c).mean;
    return m > 0 ? m : fallback;
  };
  prof.embed_s_per_token = pools.summary_of(Cls::embed).mean;
  prof.memset_bytes_per_s = rate(Cls::zero, 1e10);
  prof.h2d_bytes_per_s = rate(Cls::h2d, 1e10);
  prof.d2h_bytes_per_s = rate(Cls::d2h, 1e10);
  prof.optim_params_per_s = rate(Cls::step, 1e8);
  prof.reduce_bytes_per_s = rate(Cls::reduce, 1e10);
}

// ---- Measuring
// -----------------------------------------------------------------------------------

struct Measurement {
  int rounds = 0;
  std::vector<RunTimings> runs;  // every round's
  std::vector<int> round_of;
};

Status run_rounds(const TrainConfig& base, const std::string& dir, int rounds, bool quiet,
                  Measurement& m) {
  m.rounds = rounds;
  for (int round = 0; round < rounds; ++round) {
    if (!quiet) {
      log_info("profile: round " + std::to_string(round + 1) + " of " + std::to_string(rounds) +
               ": both orders at B = 1, 2, 4, then state on storage");
    }
    for (int64_t B : kMicroBatchSizes) {
      for (RunKind kind : {RunKind::horizontal, RunKind::vertical}) {
        STRATA_ASSIGN_OR_RETURN(RunTimings r,
                                instrumented_run(run_config(base, kind, B, dir), kind, 3));
        m.runs.push_back(std::move(r));
        m.round_of.push_back(round);
      }
    }
    const RunKind st = RunKind::vertical_storage;
    STRATA_ASSIGN_OR_RETURN(RunTimings r, instrumented_run(run_config(base, st, 1, dir), st, 3));
    m.runs.push_back(std::move(r));
    m.round_of.push_back(round);
  }
  return Status::ok_status();
}

const RunTimings* find_run(const Measurement& m, RunKind kind, int64_t B) {
  for (const RunTimings& r : m.runs) {
    if (r.kind == kind && r.B == B) return &r;
  }
  return nullptr;
}

// How far apart the rounds were: each round's time for one task of every block class (both
// orders, every B), the slowest round's over the fastest's, minus 1.
double round_spread(const Pools& pools, int rounds) {
  double lo = 0, hi = 0;
  for (int round = 0; round < rounds; ++round) {
    double total = 0;
    for (int64_t B : kMicroBatchSizes) {
      for (Cls c : {Cls::fwd, Cls::bwd}) {
        total += pools.round_mean({RunKind::horizontal, B, c, false}, round) +
                 pools.round_mean({RunKind::vertical, B, c, true}, round);
      }
    }
    lo = round == 0 ? total : std::min(lo, total);
    hi = round == 0 ? total : std::max(hi, total);
  }
  return lo > 0 ? hi / lo - 1 : 0;
}

void fill_profile(const Measurement& m, double seq_len, HardwareProfile& prof) {
  Pools pools;
  for (size_t i = 0; i < m.runs.size(); ++i) {
    if (m.runs[i].kind != RunKind::vertical_storage)
      pool_run(m.runs[i], m.round_of[i], seq_len, pools);
  }
  pooled_rates(pools, prof);
  for (int64_t B : kMicroBatchSizes) {
    const double tokens = static_cast<double>(B) * seq_len;
    if (const RunTimings* h = find_run(m, RunKind::horizontal, B)) {
      compute_tables(pools, *h, tokens, prof);
    }
    if (const RunTimings* v = find_run(m, RunKind::vertical, B)) {
      reuse_speedups(pools, *v, tokens, prof);
    }
  }
  std::vector<Contended> compute, optim, io;
  for (const RunTimings& r : m.runs) {
    if (r.kind != RunKind::vertical_storage) shared_pace_samples(r, pools, compute, optim);
  }
  prof.compute_shared_speed = fitted_pace(compute, 0.5);
  prof.optim_shared_speed = fitted_pace(optim, 0.5);
  for (const RunTimings& r : m.runs) {
    if (r.kind == RunKind::vertical_storage) {
      io_cost_samples(r, pools, prof.compute_shared_speed, io);
    }
  }
  prof.io_s_per_byte = fitted_cost(io);
  pools.totals(prof.measurement.samples, prof.measurement.rejected);
  prof.measurement.round_spread = round_spread(pools, m.rounds);
}

// One warning line when the machine was not quiet while measuring.
void warn_if_busy(const ProfileMeasurement& m, int cores) {
  std::string why;
  auto add = [&why](const std::string& s) { why += (why.empty() ? "" : "; ") + s; };
  char buf[160];
  if (m.load_before > 0.25 * cores) {
    std::snprintf(buf, sizeof buf, "load average %.2f on %d cores at the start", m.load_before,
                  cores);
    add(buf);
  }
  if (m.other_cpu > 0.1 || m.steal > 0.05) {
    std::snprintf(buf, sizeof buf,
                  "other processes took %.0f%% and the hypervisor %.0f%% of the CPU",
                  100 * m.other_cpu, 100 * m.steal);
    add(buf);
  }
  if (m.round_spread > 0.1) {
    std::snprintf(buf, sizeof buf, "the slowest round took %.0f%% longer than the fastest",
                  100 * m.round_spread);
    add(buf);
  }
  if (m.samples > 0 && m.rejected > 0.1 * static_cast<double>(m.samples + m.rejected)) {
    std::snprintf(buf, sizeof buf, "%lld of %lld task timings rejected as outliers",
                  static_cast<long long>(m.rejected),
                  static_cast<long long>(m.samples + m.rejected));
    add(buf);
  }
  if (!why.empty())
    log_warn("profile: the machine was busy (" + why +
             "): rates may be off; measure on a quiet machine");
}

// Compute, link, optimizer and contention figures from `rounds` rounds of instrumented runs
// (nothing throttled; the storage run in dir).
Status measure_rates(const TrainConfig& base, const std::string& dir, int rounds, bool quiet,
                     HardwareProfile& prof) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  prof.measurement.rounds = rounds;
  prof.measurement.load_before = std::max(load_average(), 0.0);
  const CpuSnapshot before = cpu_snapshot();
  Measurement m;
  STRATA_RETURN_IF_ERROR(run_rounds(base, dir, rounds, quiet, m));
  const MachineLoad load = machine_load(before, cpu_snapshot(), cores);
  prof.measurement.other_cpu = load.other_cpu;
  prof.measurement.steal = load.steal;
  fill_profile(m, static_cast<double>(base.seq_len), prof);
  // Capacities are the hardware's: a GPU's own memory, else the host's (the CPU devices' memory
  // is the host's). A run's budgets (memory.*_bytes) are applied by the planner over them.
  prof.device_bytes = prof.host_bytes = mem_total_bytes();
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Device> dev, create_configured_device(base));
  if (dev->memory_stats().device_total > 0) prof.device_bytes = dev->memory_stats().device_total;
  warn_if_busy(prof.measurement, cores);
  return Status::ok_status();
}

// A write pass then a read pass of io_size bytes per directory.
Status measure_storage(const std::vector<std::string>& dirs, uint64_t io_size, bool quiet,
                       HardwareProfile& prof) {
  for (const std::string& dir : dirs) {
    if (!quiet) log_info("profile: storage " + dir);
    auto w = bench_dir(dir, IoOp::write, io_size);
    if (!w.ok()) return Status(w.status().code(), "storage " + dir + ": " + w.status().message());
    auto r = bench_dir(dir, IoOp::read, io_size);
    std::error_code ec;
    std::filesystem::remove(std::filesystem::path(dir) / "strata-profile.tmp", ec);
    if (!r.ok()) return Status(r.status().code(), "storage " + dir + ": " + r.status().message());
    StorageDir d;
    d.path = dir;
    d.read_bytes_per_s = r->gb_per_s * 1e9;
    d.write_bytes_per_s = w->gb_per_s * 1e9;
    d.capacity_bytes = static_cast<int64_t>(std::filesystem::space(dir, ec).available);
    prof.storage_dirs.push_back(d);
  }
  return Status::ok_status();
}

const std::vector<FlagSpec> kProfileFlags = {{"config", true, false}, {"set", true, true},
                                             {"out", true, false},    {"dir", true, true},
                                             {"model", true, false},  {"io-size", true, false},
                                             {"quiet", false, false}, {"rounds", true, false}};

}  // namespace

int cmd_profile(const std::vector<std::string>& args) {
  auto parsed = parse_args(args, kProfileFlags, "profile");
  if (!parsed.ok()) return fail(parsed.status().message(), 2);
  const ParsedArgs& a = *parsed;
  if (!a.has("out")) return fail("strata profile: --out FILE is required", 2);
  auto base = profile_config(a);
  if (!base.ok()) return fail(base.status().message(), 2);
  uint64_t io_size = 256ull << 20;
  if (a.has("io-size")) {
    const long long v = std::atoll(a.get("io-size").c_str());
    if (v < (1 << 20)) return fail("--io-size must be at least 1048576 bytes", 2);
    io_size = static_cast<uint64_t>(v);
  }
  std::vector<std::string> dirs = a.all("dir");
  if (dirs.empty()) dirs = base->io.dirs;
  if (dirs.empty()) dirs = {std::filesystem::temp_directory_path().string()};
  const bool quiet = a.has("quiet");
  int rounds = 3;
  if (a.has("rounds")) {
    rounds = std::atoi(a.get("rounds").c_str());
    if (rounds < 1 || rounds > 100) return fail("--rounds must be in 1..100", 2);
  }

  HardwareProfile prof;
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  const std::time_t now = std::time(nullptr);
  char date[64];
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S", std::localtime(&now));
  prof.name = std::string("measured-") + host;
  prof.description =
      std::string("measured by strata profile on ") + host + " at " + date + " (" +
      enum_name(base->device) + " device, weights " + enum_name(base->precision) + ", GEMMs " +
      enum_name(base->matmul) + ", model " + std::to_string(base->model.n_layer) + " x " +
      std::to_string(base->model.n_embd) + ", T " + std::to_string(base->seq_len) + ")";
  // Compute shares the CPU's cores on the CPU devices, not on a GPU, whose attention keeps only
  // row statistics (Device::attention_saved_floats).
  prof.shared_cores = base->device != DeviceKind::cuda;
  prof.flash_attention = base->device == DeviceKind::cuda;
  Status st = measure_rates(*base, dirs.front(), rounds, quiet, prof);
  if (st.ok()) st = measure_storage(dirs, io_size, quiet, prof);
  if (!st.ok()) return fail("profile: " + st.to_string(), 1);
  const std::string how = std::string("measured by strata profile on ") + host + ", " + date;
  for (const char* k : {"compute", "link", "storage", "cpu_optimizer", "cores", "capacity"}) {
    prof.sources[k] = how;
  }
  Status written = write_whole_file(a.get("out"), profile_to_json(prof).dump(2) + "\n", "profile");
  if (!written.ok()) return fail(written.message(), 1);
  if (!quiet) log_info("profile written to " + a.get("out"));
  return 0;
}

}  // namespace strata::cli
