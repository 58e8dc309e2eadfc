// strata profile: measures this machine and writes a hardware profile (planner/profile.h) for
// `strata plan` and the simulator (docs/design.md §7).
//
// How: compute, link, optimizer and reduce rates come from short instrumented runs of the real
// offloaded trainer for the model of the config (at most 4 blocks, everything on host, nothing
// throttled) at micro-batch sizes B = 1, 2, 4 (the compute table's token points), in both orders:
// horizontal (each block task with weights it did not just use) and vertical (M = 4: the same
// weights over the micro-batches, Note [Weights reused] in planner/simulator.h), and one more
// vertical run per round with its state on storage. The runs repeat in rounds; how their task
// timings become the profile's figures is planner/profile_pool.h's. Storage: one sequential read
// and one write pass per directory with the configured engine (no rate limit; limits are a run
// setting that `strata plan` applies from io.read_bytes_per_s / io.write_bytes_per_s).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "core/file_util.h"
#include "core/log.h"
#include "core/output_file.h"
#include "core/scratch_files.h"
#include "io/configured_engine.h"
#include "io/io_bench.h"
#include "planner/planner.h"
#include "planner/profile.h"
#include "planner/profile_measure.h"
#include "planner/profile_pool.h"
#include "planner/simulator.h"
#include "train/offload_trainer.h"

namespace strata::cli {
namespace {

TrainConfig run_config(const TrainConfig& base, ProfileRunKind kind, int64_t B,
                       const std::string& dir) {
  TrainConfig cfg = base;
  cfg.model.n_layer = std::min<int64_t>(base.model.n_layer, 4);
  cfg.schedule = kind == ProfileRunKind::horizontal ? Schedule::horizontal : Schedule::vertical;
  cfg.batch_size = B;
  cfg.grad_accum = kind == ProfileRunKind::horizontal ? 2 : 4;
  const double host = kind == ProfileRunKind::vertical_storage ? 0 : 1;
  cfg.offload.params_on_host = cfg.offload.optim_on_host = cfg.offload.checkpoints_on_host = host;
  cfg.offload.grads_on_host = 1;
  cfg.activations.policy = ActsMode::recompute;
  cfg.io.dirs.clear();
  if (kind == ProfileRunKind::vertical_storage) cfg.io.dirs = {dir};
  cfg.io.read_bytes_per_s = cfg.io.write_bytes_per_s = 0;
  cfg.optim.grad_clip = 0;
  // Vertical: half of each step in the backward, half in the next forward, so that optimizer
  // tasks overlap compute in both phases (the shared-core paces).
  cfg.optim.alpha = kind == ProfileRunKind::horizontal ? 1.0 : 0.5;
  return cfg;
}

// `steps` steps of cfg; every step after the first recorded.
// On the config's device (`--set device=cuda` profiles a GPU), each device task timed as its work
// (OffloadActions::set_time_device_tasks).
Result<ProfileRunTimings> instrumented_run(const TrainConfig& cfg, ProfileRunKind kind, int steps) {
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Device> dev, create_configured_device(cfg));
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<OffloadTrainer> t, OffloadTrainer::create(*dev, cfg));
  t->actions().set_time_device_tasks(true);
  const int64_t n = cfg.batch_size * cfg.seq_len * cfg.grad_accum;
  std::vector<int32_t> in(static_cast<size_t>(n)), tg(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    in[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919) % cfg.model.vocab_size);
    tg[static_cast<size_t>(i)] = static_cast<int32_t>((i * 104729 + 1) % cfg.model.vocab_size);
  }
  ProfileRunTimings r;
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
// the accuracy benchmark runs, as with --model bench-14m.
Result<TrainConfig> profile_config(const ParsedArgs& a) {
  if (a.has("model") || a.has("config") || !a.all("set").empty()) {
    return load_config_and_preset(a);
  }
  ParsedArgs bench = a;
  bench.values["model"] = {"bench-14m"};
  return load_config_and_preset(bench);
}

// ---- Measuring ----------------------------------------------------------------------------------

Status run_rounds(const TrainConfig& base, const std::string& dir, int rounds, bool quiet,
                  ProfileRuns& m) {
  m.rounds = rounds;
  for (int round = 0; round < rounds; ++round) {
    if (!quiet) {
      log_info("profile: round " + std::to_string(round + 1) + " of " + std::to_string(rounds) +
               ": both orders at B = 1, 2, 4, then state on storage");
    }
    for (int64_t B : kProfileMicroBatchSizes) {
      for (ProfileRunKind kind : {ProfileRunKind::horizontal, ProfileRunKind::vertical}) {
        STRATA_ASSIGN_OR_RETURN(ProfileRunTimings r,
                                instrumented_run(run_config(base, kind, B, dir), kind, 3));
        m.runs.push_back(std::move(r));
        m.round_of.push_back(round);
      }
    }
    const ProfileRunKind st = ProfileRunKind::vertical_storage;
    STRATA_ASSIGN_OR_RETURN(ProfileRunTimings r,
                            instrumented_run(run_config(base, st, 1, dir), st, 3));
    m.runs.push_back(std::move(r));
    m.round_of.push_back(round);
  }
  return Status::ok_status();
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
  ProfileRuns m;
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
    // Note [Scratch files]: a signal during the measurement removes the file too.
    const ScratchFile scratch((std::filesystem::path(dir) / "strata-profile.tmp").string());
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

int profile_main(const ParsedArgs& a) {
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
  Status written = write_output_file(a.get("out"), profile_to_json(prof).dump(2) + "\n", "profile");
  if (!written.ok()) {
    return fail(written.message(), written.code() == ErrorCode::invalid_argument ? 2 : 1);
  }
  if (!quiet) log_info("profile written to " + a.get("out"));
  return 0;
}

}  // namespace

int cmd_profile(const std::vector<std::string>& args) {
  return run_command(args, kProfileFlags, "profile", profile_main);
}

}  // namespace strata::cli
