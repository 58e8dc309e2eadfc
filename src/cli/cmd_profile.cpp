// strata profile: measures this machine and writes a hardware profile (plan/profile.h) for
// `strata plan` and the simulator (docs/design.md §7).
//
// How: compute, link, optimizer and reduce rates come from short instrumented runs of the real
// offloaded trainer (horizontal schedule, everything on host, no rate limit) for the model of
// the config at micro-batch sizes B = 1, 2, 4 (the compute table's token points): each task's
// duration in the executor's report divided into its bytes or FLOPs. Measuring the tasks the
// planner will later predict, as the executor runs them, keeps the profile honest about
// per-task overheads that op microbenchmarks miss. Storage: one sequential read and one write
// pass per directory with the configured engine (no rate limit; limits are a run setting that
// `strata plan` applies from io.read_bytes_per_s / io.write_bytes_per_s).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "backend/backend.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "core/file_util.h"
#include "core/log.h"
#include "io/configured_engine.h"
#include "io/io_bench.h"
#include "plan/planner.h"
#include "plan/profile.h"
#include "sched/offload_trainer.h"

namespace strata::cli {
namespace {

struct Sums {
  double seconds = 0, amount = 0;
  int64_t n = 0;
  void add(double s, double a) {
    seconds += s;
    amount += a;
    ++n;
  }
  double mean_s() const { return n > 0 ? seconds / static_cast<double>(n) : 0; }
  double rate() const { return seconds > 0 ? amount / seconds : 0; }
};

// Task timings of the last of `steps` steps of cfg (horizontal, all on host).
struct Measured {
  Sums fwd, bwd, loss, embed, zero, h2d, d2h, adamw, reduce;
  double block_fwd_flops = 0, block_bwd_flops = 0, head_flops = 0, tokens = 0;
};

Result<Measured> measure_compute(const TrainConfig& cfg, int steps) {
  auto dev = create_cpu_device();
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<OffloadTrainer> t, OffloadTrainer::create(*dev, cfg));
  const int64_t n = cfg.batch_size * cfg.seq_len * cfg.grad_accum;
  std::vector<int32_t> in(static_cast<size_t>(n)), tg(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    in[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919) % cfg.model.vocab_size);
    tg[static_cast<size_t>(i)] = static_cast<int32_t>((i * 104729 + 1) % cfg.model.vocab_size);
  }
  for (int s = 0; s < steps; ++s) {
    t->set_record_trace(s == steps - 1);
    STRATA_RETURN_IF_ERROR(t->train_step(in.data(), tg.data()).status());
  }
  const Plan& plan = t->last_plan();
  const ExecutionReport& rep = t->last_report();
  const ScheduleSpec spec = offload_schedule_spec(*dev, cfg, false, true);
  Measured m;
  m.block_fwd_flops = spec.block_fwd_flops;
  m.block_bwd_flops = spec.block_bwd_flops;
  m.head_flops = spec.head_flops;
  m.tokens = static_cast<double>(cfg.batch_size * cfg.seq_len);
  for (size_t i = 0; i < plan.tasks.size(); ++i) {
    const Task& k = plan.tasks[i];
    const double d = rep.timings[i].end_s - rep.timings[i].start_s;
    const double bytes = static_cast<double>(k.bytes);
    switch (k.resource) {
      case Resource::compute:
        if (k.kind == TaskKind::embed_forward || k.kind == TaskKind::embed_backward) {
          m.embed.add(d, m.tokens);
        } else if (k.kind == TaskKind::block_forward) {
          m.fwd.add(d, k.flops);
        } else if (k.kind == TaskKind::block_backward) {
          m.bwd.add(d, k.flops);
        } else if (k.kind == TaskKind::head_loss) {
          m.loss.add(d, k.flops);
        } else if (k.kind == TaskKind::grad_zero) {
          double zb = 0;
          for (const SlotUse& u : k.uses) {
            if (u.write) zb += static_cast<double>(plan.slots[static_cast<size_t>(u.slot)].bytes);
          }
          m.zero.add(d, zb);
        }
        break;
      case Resource::h2d:
        m.h2d.add(d, bytes);
        break;
      case Resource::d2h:
        m.d2h.add(d, bytes);
        break;
      case Resource::cpu_optim:
        if (k.kind == TaskKind::block_step) {
          m.adamw.add(d, bytes / 12.0);
        } else if (k.kind == TaskKind::grad_accumulate || k.kind == TaskKind::grad_sumsq) {
          m.reduce.add(d, bytes);
        }
        break;
      default:
        break;
    }
  }
  return m;
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

void add_sums(Sums& into, const Sums& s) {
  into.seconds += s.seconds;
  into.amount += s.amount;
  into.n += s.n;
}

// Compute, link and optimizer rates from instrumented horizontal runs at B = 1, 2, 4 (all state
// on host, nothing throttled).
Status measure_rates(const TrainConfig& base, bool quiet, HardwareProfile& prof) {
  Sums h2d, d2h, adamw, reduce, embed, zero;
  for (int64_t B : {1, 2, 4}) {
    TrainConfig cfg = base;
    cfg.model.n_layer = std::min<int64_t>(base.model.n_layer, 4);
    cfg.schedule = Schedule::horizontal;
    cfg.batch_size = B;
    cfg.grad_accum = 2;
    cfg.offload.params_on_host = cfg.offload.optim_on_host = cfg.offload.checkpoints_on_host =
        cfg.offload.grads_on_host = 1;
    cfg.io.dirs.clear();
    cfg.io.read_bytes_per_s = cfg.io.write_bytes_per_s = 0;
    cfg.optim.grad_clip = 0;
    if (!quiet) {
      log_info("profile: compute at B=" + std::to_string(B) +
               " x T=" + std::to_string(cfg.seq_len));
    }
    STRATA_ASSIGN_OR_RETURN(Measured m, measure_compute(cfg, 3));
    const double fwd_s = m.fwd.mean_s();
    // Backward tasks hold the recompute (a forward) and the backward proper.
    const double bwd_s = std::max(m.bwd.mean_s() - fwd_s, 1e-9);
    prof.block_fwd.emplace_back(m.tokens, m.block_fwd_flops / std::max(fwd_s, 1e-9));
    prof.block_bwd.emplace_back(m.tokens, m.block_bwd_flops / bwd_s);
    prof.head.emplace_back(m.tokens, m.head_flops / std::max(m.loss.mean_s(), 1e-9));
    add_sums(h2d, m.h2d);
    add_sums(d2h, m.d2h);
    add_sums(adamw, m.adamw);
    add_sums(reduce, m.reduce);
    add_sums(embed, m.embed);
    add_sums(zero, m.zero);
  }
  prof.embed_s_per_token = embed.amount > 0 ? embed.seconds / embed.amount : 0;
  prof.memset_bytes_per_s = std::max(zero.rate(), 1e6);
  prof.h2d_bytes_per_s = std::max(h2d.rate(), 1e6);
  prof.d2h_bytes_per_s = std::max(d2h.rate(), 1e6);
  prof.optim_params_per_s = std::max(adamw.rate(), 1.0);
  prof.reduce_bytes_per_s = std::max(reduce.rate(), 1e6);
  prof.device_bytes = prof.host_bytes = mem_total_bytes();
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

const std::vector<FlagSpec> kProfileFlags = {
    {"config", true, false}, {"set", true, true},      {"out", true, false},   {"dir", true, true},
    {"model", true, false},  {"io-size", true, false}, {"quiet", false, false}};

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

  HardwareProfile prof;
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  const std::time_t now = std::time(nullptr);
  char date[64];
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S", std::localtime(&now));
  prof.name = std::string("measured-") + host;
  prof.description = std::string("measured by strata profile on ") + host + " at " + date +
                     " (CPU backend, f32, model " + std::to_string(base->model.n_layer) + " x " +
                     std::to_string(base->model.n_embd) + ", T " + std::to_string(base->seq_len) +
                     ")";
  prof.shared_cores = true;
  prof.shared_speed = 0.5;
  prof.flash_attention = false;
  Status st = measure_rates(*base, quiet, prof);
  if (st.ok()) st = measure_storage(dirs, io_size, quiet, prof);
  if (!st.ok()) return fail("profile: " + st.to_string(), 1);
  const std::string how = std::string("measured by strata profile on ") + host + ", " + date;
  for (const char* k : {"compute", "link", "storage", "cpu_optimizer", "capacity"}) {
    prof.sources[k] = how;
  }
  Status written = write_whole_file(a.get("out"), profile_to_json(prof).dump(2) + "\n", "profile");
  if (!written.ok()) return fail(written.message(), 1);
  if (!quiet) log_info("profile written to " + a.get("out"));
  return 0;
}

}  // namespace strata::cli
