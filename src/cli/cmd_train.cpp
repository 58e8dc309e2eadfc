// strata train: config -> data -> trainer -> steps, with progress and per-step metrics.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "backend/backend.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/progress.h"
#include "core/config.h"
#include "core/format.h"
#include "core/log.h"
#include "data/byte_tokenizer.h"
#include "data/dataloader.h"
#include "data/synthetic_corpus.h"
#include "data/token_file.h"
#include "io/checkpoint.h"
#include "io/configured_engine.h"
#include "model/gpt.h"
#include "plan/planner.h"
#include "sched/executor.h"
#include "sched/in_memory_trainer.h"
#include "sched/offload_trainer.h"

namespace strata::cli {

namespace {

// Size of the generated corpus behind the embedded default: enough that a minute of training
// does not see the same text twice.
constexpr int64_t kEmbeddedCorpusBytes = 4 << 20;

// The training tokens: either the generated corpus or a token file, kept alive here.
struct TrainData {
  std::vector<uint16_t> owned;    // embedded corpus
  std::optional<TokenFile> file;  // mmapped token file
  const uint16_t* tokens = nullptr;
  int64_t size = 0;
  std::string name;
};

Result<TrainData> load_train_data(const TrainConfig& cfg) {
  TrainData d;
  if (cfg.data_train == "embedded") {
    if (cfg.model.vocab_size < 256) {
      return invalid_argument("model.vocab_size " + std::to_string(cfg.model.vocab_size) +
                              " is below 256, which the embedded byte-level corpus needs");
    }
    d.owned = byte_tokenize(synthetic_corpus(kEmbeddedCorpusBytes, 20240520));
    d.tokens = d.owned.data();
    d.size = static_cast<int64_t>(d.owned.size());
    d.name = "embedded corpus";
    return d;
  }
  STRATA_ASSIGN_OR_RETURN(TokenFormat fmt, parse_token_format(cfg.data_format));
  STRATA_ASSIGN_OR_RETURN(TokenFile f, TokenFile::open(cfg.data_train, fmt));
  STRATA_RETURN_IF_ERROR(check_token_range(f, cfg.model.vocab_size));
  d.file.emplace(std::move(f));
  d.tokens = d.file->tokens();
  d.size = d.file->size();
  d.name = cfg.data_train;
  return d;
}

std::string human_count(double n) {
  char buf[32];
  if (n >= 1e9)
    std::snprintf(buf, sizeof buf, "%.2fB", n / 1e9);
  else if (n >= 1e6)
    std::snprintf(buf, sizeof buf, "%.2fM", n / 1e6);
  else if (n >= 1e3)
    std::snprintf(buf, sizeof buf, "%.1fK", n / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.0f", n);
  return buf;
}

// One of the two trainers, behind the calls the loop makes.
struct Trainer {
  std::unique_ptr<InMemoryTrainer> in_memory;
  std::unique_ptr<OffloadTrainer> offload;

  const ParamLayout& layout() const { return offload ? offload->layout() : in_memory->layout(); }
  int64_t tokens_per_step() const {
    return offload ? offload->tokens_per_step() : in_memory->tokens_per_step();
  }
  Result<StepStats> train_step(const int32_t* inputs, const int32_t* targets) {
    if (offload) return offload->train_step(inputs, targets);
    return in_memory->train_step(inputs, targets);
  }
  Status read_slab_state(int64_t slab, float* master, float* m, float* v) {
    return offload ? offload->read_slab_state(slab, master, m, v)
                   : in_memory->read_slab_state(slab, master, m, v);
  }
  Status write_slab_state(int64_t slab, const float* master, const float* m, const float* v) {
    return offload ? offload->write_slab_state(slab, master, m, v)
                   : in_memory->write_slab_state(slab, master, m, v);
  }
  int64_t adam_steps() const { return offload ? offload->adam_steps() : in_memory->adam_steps(); }
  void set_progress(int64_t steps, int64_t adam_steps) {
    if (offload) {
      offload->set_progress(steps, adam_steps);
    } else {
      in_memory->set_progress(steps, adam_steps);
    }
  }
};

// A positive (or, with allow_zero, non-negative) integer flag.
Result<int64_t> int_flag(const ParsedArgs& a, const std::string& flag, bool allow_zero) {
  const std::string text = a.get(flag);
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || v < (allow_zero ? 0 : 1)) {
    return invalid_argument("--" + flag + " must be " +
                            (allow_zero ? "a non-negative" : "a positive") + " integer, got '" +
                            text + "'");
  }
  return static_cast<int64_t>(v);
}

// The checkpoint flags: --save-every N --checkpoint-dir DIR [--keep K] [--resume DIR].
struct CheckpointOptions {
  int64_t save_every = 0;  // 0: no checkpoints
  std::string dir;
  int64_t keep = 3;
  std::string resume;
};
Result<CheckpointOptions> checkpoint_options(const ParsedArgs& a) {
  CheckpointOptions o;
  if (a.has("save-every")) {
    STRATA_ASSIGN_OR_RETURN(o.save_every, int_flag(a, "save-every", false));
    if (!a.has("checkpoint-dir")) return invalid_argument("--save-every needs --checkpoint-dir");
  } else if (a.has("checkpoint-dir") || a.has("keep")) {
    return invalid_argument("--checkpoint-dir and --keep need --save-every N");
  }
  o.dir = a.get("checkpoint-dir");
  if (a.has("keep")) {
    STRATA_ASSIGN_OR_RETURN(o.keep, int_flag(a, "keep", true));
  }
  o.resume = a.get("resume");
  return o;
}

// A plan that does not fit, a bad placement, a full disk: the user's to fix (2); the rest 1.
int exit_code_for(const Status& s) {
  return s.code() == ErrorCode::invalid_argument || s.code() == ErrorCode::no_space ? 2 : 1;
}
// A checkpoint that is missing, corrupt or of another model is bad input (2); an I/O failure 1.
int exit_code_for_load(const Status& s) {
  return s.code() == ErrorCode::io_error ? 1 : 2;
}

void log_offload_plan(const TrainConfig& cfg, const OffloadTrainer& t) {
  const auto bytes = t.planned_bytes();
  std::string line = "schedule " + cfg.schedule + ": plan holds " +
                     format_bytes(bytes[static_cast<size_t>(Tier::device)]) + " device, " +
                     format_bytes(bytes[static_cast<size_t>(Tier::host)]) + " host, " +
                     format_bytes(bytes[static_cast<size_t>(Tier::storage)]) + " storage";
  if (cfg.schedule == "vertical") {
    char alpha[64];
    std::snprintf(alpha, sizeof alpha, "; optimizer alpha %.3g", cfg.optim.alpha);
    line += alpha;
  }
  log_info(line);
  if (!t.store_description().empty()) log_info("store: " + t.store_description());
}

// DESIGN §9: per-step bytes per direction, busy seconds per resource, and the roofline (the
// busiest resource, compute and the CPU optimizer counted as one since they share the cores).
void add_offload_metrics(nlohmann::json& line, const OffloadTrainer& t,
                         const OffloadTraffic& before, double iter_s) {
  const OffloadTraffic& now = t.traffic();
  line["storage_read_bytes"] = now.storage_read_bytes - before.storage_read_bytes;
  line["storage_write_bytes"] = now.storage_write_bytes - before.storage_write_bytes;
  line["h2d_bytes"] = now.h2d_bytes - before.h2d_bytes;
  line["d2h_bytes"] = now.d2h_bytes - before.d2h_bytes;
  line["acts_storage_read_bytes"] = now.acts_storage_read_bytes - before.acts_storage_read_bytes;
  line["acts_storage_write_bytes"] = now.acts_storage_write_bytes - before.acts_storage_write_bytes;
  line["acts_forwarded_sets"] = now.acts_forwarded_sets - before.acts_forwarded_sets;
  nlohmann::json busy = nlohmann::json::object();
  const auto& b = t.last_report().busy_s;
  double roofline = 0;
  for (int r = 0; r < kResourceCount; ++r) {
    busy[resource_name(static_cast<Resource>(r))] = b[static_cast<size_t>(r)];
    if (static_cast<Resource>(r) != Resource::cpu_optim) {
      roofline = std::max(roofline, b[static_cast<size_t>(r)]);
    }
  }
  const double cores =
      b[static_cast<size_t>(Resource::compute)] + b[static_cast<size_t>(Resource::cpu_optim)];
  line["busy_s"] = busy;
  line["roofline_s"] = std::max(roofline, cores);
  line["over_roofline"] = iter_s / std::max(std::max(roofline, cores), 1e-12);
}

}  // namespace

int cmd_train(const std::vector<std::string>& args) {
  auto parsed = parse_args(args,
                           {{"config", true, false},
                            {"set", true, true},
                            {"metrics", true, false},
                            {"trace", true, false},
                            {"save-every", true, false},
                            {"checkpoint-dir", true, false},
                            {"keep", true, false},
                            {"resume", true, false},
                            {"quiet", false, false},
                            {"auto", false, false},
                            {"profile", true, false}},
                           "train");
  if (!parsed.ok()) return fail(parsed.status().message(), 2);
  const ParsedArgs& a = parsed.value();

  auto cfg_or = load_config_from_args(a);
  if (!cfg_or.ok()) return fail(cfg_or.status().message(), 2);
  // --auto: the planner chooses schedule, B x M, placement and alpha (plan/planner.h).
  if (a.has("profile") && !a.has("auto")) return fail("--profile is only used with --auto", 2);
  if (a.has("auto")) {
    cfg_or = auto_configure(*cfg_or, a.get("profile"));
    if (!cfg_or.ok()) return fail(cfg_or.status().message(), 2);
  }
  const TrainConfig cfg = cfg_or.value();

  auto data = load_train_data(cfg);
  if (!data.ok()) return fail(data.status().message(), 2);
  auto loader =
      DataLoader::create(data->tokens, data->size, cfg.batch_size, cfg.seq_len, data->name);
  if (!loader.ok()) return fail(loader.status().message(), 2);

  std::ofstream metrics;
  if (a.has("metrics")) {
    metrics.open(a.get("metrics"), std::ios::out | std::ios::trunc);
    if (!metrics) return fail("cannot open metrics file " + a.get("metrics") + " for writing", 2);
  }

  auto ckpt_or = checkpoint_options(a);
  if (!ckpt_or.ok()) return fail(ckpt_or.status().message(), 2);
  const CheckpointOptions ckpt = *ckpt_or;
  std::unique_ptr<IoEngine> ckpt_engine;
  if (ckpt.save_every > 0) {
    std::error_code ec;
    std::filesystem::create_directories(ckpt.dir, ec);
    if (ec) return fail("cannot create --checkpoint-dir " + ckpt.dir + ": " + ec.message(), 2);
    auto e = create_configured_engine(cfg.io, ckpt.dir);
    if (!e.ok()) return fail(e.status().message(), 2);
    ckpt_engine = std::move(*e);
  }

  if (a.has("trace") && cfg.schedule == "in_memory") {
    return fail("--trace needs an offloaded schedule (train.schedule horizontal or vertical)", 2);
  }

  CpuDeviceOptions device_options;
  device_options.device_budget_bytes = cfg.memory.device_bytes;
  auto device = create_cpu_device(device_options);
  Trainer trainer;
  if (cfg.schedule == "in_memory") {
    auto t = InMemoryTrainer::create(*device, cfg);
    if (!t.ok()) return fail(t.status().message(), exit_code_for(t.status()));
    trainer.in_memory = std::move(*t);
  } else {
    auto t = OffloadTrainer::create(*device, cfg);
    if (!t.ok()) return fail(t.status().message(), exit_code_for(t.status()));
    trainer.offload = std::move(*t);
  }

  const ModelConfig& m = cfg.model;
  log_info("model: " + std::to_string(m.n_layer) + " layers, " + std::to_string(m.n_head) +
           " heads, " + std::to_string(m.n_embd) + " channels, vocab " +
           std::to_string(m.vocab_size) + ": " +
           human_count(static_cast<double>(trainer.layout().parameter_count)) + " parameters");
  log_info("data: " + data->name + ", " + human_count(static_cast<double>(data->size)) +
           " tokens; batch " + std::to_string(cfg.batch_size) + " x " +
           std::to_string(cfg.seq_len) + " x " + std::to_string(cfg.grad_accum) +
           " micro-batches = " + std::to_string(trainer.tokens_per_step()) + " tokens/step");
  if (trainer.offload) log_offload_plan(cfg, *trainer.offload);

  const int64_t BT = cfg.batch_size * cfg.seq_len;
  std::vector<int32_t> inputs(static_cast<size_t>(BT * cfg.grad_accum));
  std::vector<int32_t> targets(inputs.size());
  const double flops_per_step = gpt_train_flops(m, cfg.seq_len, trainer.tokens_per_step());
  Progress progress(cfg.steps, cfg.log_every, a.has("quiet"));
  double first_loss = 0, last_loss = 0;
  const auto t_start = std::chrono::steady_clock::now();
  OffloadTraffic traffic_before;

  int64_t start_step = 0;
  if (!ckpt.resume.empty()) {
    auto dir = resolve_checkpoint(ckpt.resume);
    if (!dir.ok()) return fail(dir.status().message(), 2);
    auto meta = load_checkpoint(*dir, cfg,
                                [&](int64_t slab, const float* w, const float* mm, const float* v) {
                                  return trainer.write_slab_state(slab, w, mm, v);
                                });
    if (!meta.ok()) return fail(meta.status().message(), exit_code_for_load(meta.status()));
    Status pos = loader->set_position(meta->data_position);
    if (!pos.ok()) return fail("checkpoint " + *dir + ": " + pos.message(), 2);
    trainer.set_progress(meta->step, meta->adam_steps);
    start_step = meta->step;
    log_info("resumed from " + *dir + " at step " + std::to_string(start_step));
  }

  for (int64_t step = start_step; step < cfg.steps; step++) {
    for (int64_t k = 0; k < cfg.grad_accum; k++) {
      loader->next_batch(inputs.data() + k * BT, targets.data() + k * BT);
    }
    // The trace shows the last step: steady state, with the previous step's pending work.
    if (trainer.offload && a.has("trace")) trainer.offload->set_record_trace(step == cfg.steps - 1);
    auto st_or = trainer.train_step(inputs.data(), targets.data());
    if (!st_or.ok()) {
      progress.finish();
      return fail("training stopped: " + st_or.status().to_string(), 1);
    }
    const StepStats& st = *st_or;
    const double tokens_per_s = static_cast<double>(trainer.tokens_per_step()) / st.seconds;
    if (step == 0) first_loss = st.loss;
    last_loss = st.loss;
    progress.on_step(st, tokens_per_s);
    double stall_s = -1;  // a checkpoint after this step: how long training stood still
    if (ckpt.save_every > 0 && ((step + 1) % ckpt.save_every == 0 || step + 1 == cfg.steps)) {
      CheckpointMeta meta;
      meta.step = step + 1;
      meta.adam_steps = trainer.adam_steps();
      meta.data_position = loader->position();
      meta.seed = cfg.seed;
      meta.schedule = cfg.schedule;
      auto saved = save_checkpoint(
          *ckpt_engine, ckpt.dir, cfg, meta,
          [&](int64_t slab, float* w, float* mm, float* v) {
            return trainer.read_slab_state(slab, w, mm, v);
          },
          ckpt.keep);
      if (!saved.ok()) {
        progress.finish();
        return fail("training stopped: " + saved.status().to_string(), 1);
      }
      stall_s = saved->seconds;
      char line[256];
      std::snprintf(line, sizeof line, "checkpoint %s: %s in %.3f s (training stalled)",
                    saved->dir.c_str(), format_bytes(saved->bytes).c_str(), saved->seconds);
      progress.note(line);
    }
    if (metrics.is_open()) {
      nlohmann::json line = {
          {"step", st.step},
          {"loss", st.loss},
          {"lr", st.lr},
          {"grad_norm", st.grad_norm},
          {"skipped", st.skipped},
          {"tokens_per_s", tokens_per_s},
          {"iter_s", st.seconds},
          {"model_flops_per_s", flops_per_step / st.seconds},
          {"peak_device_bytes", device->memory_stats().device_peak},
          {"peak_host_bytes", device->memory_stats().host_peak},
      };
      if (stall_s >= 0) line["checkpoint_stall_s"] = stall_s;
      if (trainer.offload) {
        add_offload_metrics(line, *trainer.offload, traffic_before, st.seconds);
        traffic_before = trainer.offload->traffic();
      }
      metrics << line.dump() << '\n';
      metrics.flush();
      if (!metrics) return fail("writing metrics file " + a.get("metrics") + " failed", 1);
    }
  }
  if (trainer.offload) {
    Status fin = trainer.offload->finish();
    if (!fin.ok()) {
      progress.finish();
      return fail("training stopped: " + fin.to_string(), 1);
    }
    if (a.has("trace")) {
      const nlohmann::json trace =
          execution_trace_json(trainer.offload->last_plan(), trainer.offload->last_report());
      std::ofstream out(a.get("trace"), std::ios::out | std::ios::trunc);
      out << trace.dump() << '\n';
      out.flush();
      if (!out) return fail("cannot write trace file " + a.get("trace"), 1);
    }
  }
  progress.finish();
  const double total_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  char summary[200];
  std::snprintf(summary, sizeof summary, "trained %lld steps in %.1f s; loss %.4f -> %.4f",
                static_cast<long long>(cfg.steps), total_s, first_loss, last_loss);
  log_info(summary);
  return 0;
}

}  // namespace strata::cli
