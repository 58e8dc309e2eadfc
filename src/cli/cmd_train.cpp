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
#include "cli/background_save.h"
#include "cli/commands.h"
#include "cli/progress.h"
#include "cli/stop_signals.h"
#include "core/config.h"
#include "core/dtype.h"
#include "core/file_util.h"
#include "core/format.h"
#include "core/log.h"
#include "data/byte_tokenizer.h"
#include "data/dataloader.h"
#include "data/synthetic_corpus.h"
#include "data/token_file.h"
#include "dist/communicator.h"
#include "formats/checkpoint.h"
#include "formats/checkpoint_lineage.h"
#include "formats/checkpoint_shards.h"
#include "io/configured_engine.h"
#include "io/crc32c.h"
#include "formats/hf_import.h"
#include "model/gpt.h"
#include "model/hf_config.h"
#include "model/sample.h"
#include "planner/planner.h"
#include "sched/executor.h"
#include "train/trainer.h"

namespace strata::cli {

namespace {

// Size of the generated corpus behind the embedded default: enough that a minute of training
// does not see the same text twice.
constexpr int64_t kEmbeddedCorpusBytes = 4 << 20;

// The training tokens: either the generated corpus or a token file, kept alive here.
struct TrainData {
  std::vector<uint16_t> owned;    // embedded corpus
  std::optional<TokenFile> file;  // mmapped token file
  TokenView tokens;               // of either
  int64_t size = 0;
  std::string name;
};

// Size of the generated held-out text behind data.val "embedded" (another seed than the training
// corpus, so no sentence of it was trained on by chance of the generator).
constexpr int64_t kEmbeddedValBytes = 256 << 10;

// The tokens of `source` (data.train or data.val): "embedded" generates `embedded_bytes` of text
// from `seed`; anything else is a token file in data.format.
Result<TrainData> load_token_data(const TrainConfig& cfg, const std::string& source,
                                  int64_t embedded_bytes, uint64_t seed) {
  TrainData d;
  if (source == "embedded") {
    if (cfg.model.vocab_size < 256) {
      return invalid_argument("model.vocab_size " + std::to_string(cfg.model.vocab_size) +
                              " is below 256, which the embedded byte-level corpus needs");
    }
    d.owned = byte_tokenize(synthetic_corpus(embedded_bytes, seed));
    d.size = static_cast<int64_t>(d.owned.size());
    d.tokens = TokenView(d.owned.data(), d.size);
    d.name = "embedded corpus";
    return d;
  }
  STRATA_ASSIGN_OR_RETURN(TokenFile f, TokenFile::open(source, cfg.data_format));
  STRATA_RETURN_IF_ERROR(check_token_range(f, cfg.model.vocab_size));
  d.file.emplace(std::move(f));
  d.tokens = d.file->view();
  d.size = d.file->size();
  d.name = source;
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
  // Note [Asynchronous checkpoints]: checkpoints before the last step are written behind
  // training; --save-sync writes every one at a standstill.
  bool behind = true;
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
  if (a.has("save-sync") && o.save_every == 0) {
    return invalid_argument("--save-sync needs --save-every N");
  }
  o.behind = !a.has("save-sync");
  return o;
}

// A plan that does not fit, a bad placement, a full disk, a device that cannot run here: the
// user's to fix (2); the rest 1.
int exit_code_for(const Status& s) {
  const ErrorCode c = s.code();
  return c == ErrorCode::invalid_argument || c == ErrorCode::no_space || c == ErrorCode::unavailable
             ? 2
             : 1;
}
// A checkpoint that is missing, corrupt or of another model is bad input (2); an I/O failure 1.
int exit_code_for_load(const Status& s) {
  return s.code() == ErrorCode::io_error ? 1 : 2;
}

// A Hugging Face model that is missing, malformed or not one Strata trains is bad input (2);
// a failed read, or a trainer that does not take it, 1.
int exit_code_for_import(const Status& s) {
  const ErrorCode c = s.code();
  return c == ErrorCode::not_found || c == ErrorCode::bad_format || c == ErrorCode::invalid_argument
             ? 2
             : 1;
}

// A checkpoint finished at a step boundary, for the step's metrics line.
struct CheckpointReport {
  int64_t step = 0;     // the boundary it holds
  double stall_s = 0;   // how long training stood still for it
  double write_s = 0;   // the save's wall time
  bool behind = false;  // written behind training (Note [Asynchronous checkpoints])
};

// One step's line in the metrics file (docs/design.md §10).
nlohmann::json metrics_line(const StepStats& st, double tokens_per_s, double flops_per_step,
                            const Device& device, const Trainer& trainer,
                            const std::vector<CheckpointReport>& checkpoints,
                            std::optional<double> val_loss) {
  nlohmann::json line = {
      {"step", st.step},
      {"loss", st.loss},
      {"lr", st.lr},
      {"grad_norm", st.grad_norm},
      {"skipped", st.skipped},
      {"tokens_per_s", tokens_per_s},
      {"iter_s", st.seconds},
      {"model_flops_per_s", flops_per_step / st.seconds},
      {"peak_device_bytes", device.memory_stats().device_peak},
      {"peak_host_bytes", device.memory_stats().host_peak},
  };
  if (device.memory_stats().device_budget > 0) {
    line["device_budget_bytes"] = device.memory_stats().device_budget;
  }
  if (val_loss) line["val_loss"] = *val_loss;
  for (const CheckpointReport& c : checkpoints) {  // finished at this boundary
    line["checkpoints"].push_back(
        {{"step", c.step}, {"stall_s", c.stall_s}, {"write_s", c.write_s}, {"behind", c.behind}});
  }
  trainer.add_step_metrics(line, st.seconds);
  return line;
}

// Everything a run needs before step 1; a failure is a one-line message and an exit code.
struct TrainRun {
  // The ranks (Note [Data parallel ranks]); declared first, so it goes last, after the trainer.
  std::unique_ptr<Communicator> world;
  TrainConfig cfg;
  TrainData data;
  std::unique_ptr<DataLoader> loader;
  TrainData val_data;                      // data.val, when set
  std::unique_ptr<DataLoader> val_loader;  // its batches, from the start at every evaluation
  std::optional<double> last_val_loss;     // for the summary line
  std::ofstream metrics;
  std::string metrics_path, trace_path, report_path;
  CheckpointOptions ckpt;
  std::optional<HfImportPlan> import;  // --init-from: the model's weights, checked
  std::unique_ptr<IoEngine> ckpt_engine;
  std::optional<CheckpointDirLock> ckpt_lock;  // held while training (Note [Checkpoint lineage])
  std::vector<std::string> lineage;            // this run's: the runs it continues, then its id
  std::unique_ptr<Device> device;
  std::unique_ptr<Trainer> trainer;
  // A checkpoint being written behind training; declared after the trainer so that it is joined
  // (abandoned if still running) before the trainer it reads from goes.
  BackgroundSave background;
  bool quiet = false;
};

// Exit code and message of a set-up failure.
struct SetupError {
  std::string message;
  int code = 2;
};

// --init-from DIR: the run's model is DIR/config.json's. The config's layers apply as without it
// (the embedded default, --config, each --set, --device), except that the default's model
// section is DIR's, so a model field the user leaves alone takes DIR's value. A model field the
// user does set must agree with DIR's (compared as hf_canonical forms, so n_kv_head 0 and
// n_kv_head = n_head are the same): otherwise one line naming the field and both values.
Result<TrainConfig> config_over_import(const ParsedArgs& a, const HfImportPlan& plan) {
  TrainConfig imported;
  imported.model = plan.model;
  const nlohmann::json model = config_to_json(imported)["model"];
  nlohmann::json j = default_config_json();
  j["model"] = model;
  if (a.has("config")) {
    STRATA_ASSIGN_OR_RETURN(nlohmann::json file, read_json_file(a.get("config")));
    STRATA_RETURN_IF_ERROR(merge_config(j, file, a.get("config")));
  }
  for (const std::string& assignment : a.all("set")) {
    STRATA_RETURN_IF_ERROR(apply_set(j, assignment));
  }
  auto disagrees = [&](const FieldDifference& d) {
    return invalid_argument("--init-from " + plan.dir + ": the config sets " + d.key + " " + d.a +
                            " but " + plan.config_path + " gives " + d.b +
                            " (the model comes from --init-from; leave " + d.key + " unset)");
  };
  auto cfg = parse_config(j);
  if (!cfg.ok()) {
    // A model setting that made the model invalid (model.arch gpt2 over a Llama): named as the
    // disagreement it is, when the config is valid without the user's model settings.
    nlohmann::json without = j;
    without["model"] = model;
    if (!parse_config(without).ok()) return cfg.status();
    for (const auto& [key, value] : j["model"].items()) {
      if (value != model[key]) return disagrees({"model." + key, value.dump(), model[key].dump()});
    }
    return cfg.status();
  }
  if (auto d = model_difference(hf_canonical(cfg->model), plan.model)) return disagrees(*d);
  cfg->model = plan.model;
  if (a.has("device")) {  // --device overrides the config's device
    STRATA_ASSIGN_OR_RETURN(cfg->device, parse_enum<DeviceKind>("--device", a.get("device")));
  }
  return cfg;
}

// Note [Data parallel ranks]: the config for this rank of the world. Each rank's io.dirs are its
// own ("{rank}" replaced, so a single-process run reads it as 0); rank 0 alone writes metrics,
// traces and reports and logs below warnings; every rank writes its shard of a checkpoint (Note
// [Sharded checkpoints]). What does not work across ranks yet is refused with one line.
std::optional<SetupError> join_world(const ParsedArgs& a, TrainRun& run) {
  Communicator& w = *run.world;
  run.cfg.ranks = w.size();
  for (std::string& dir : run.cfg.io.dirs) dir = substitute_rank(dir, w.rank());
  if (w.size() == 1) return std::nullopt;
  if (a.has("auto")) {
    return SetupError{"--auto plans one process; with " + std::to_string(w.size()) +
                      " ranks set the schedule, batch and placement yourself"};
  }
  // Every rank must train the same model the same way, or the collectives would sum unlike
  // things (or wait forever for a size another rank never sends). The io section is each
  // rank's own (its directories, an injected fault).
  nlohmann::json j = config_to_json(run.cfg);
  j.erase("io");
  const std::string text = j.dump();
  const auto mine = static_cast<int64_t>(crc32c(text.data(), text.size()));
  auto most = w.all_reduce_max(mine), least = w.all_reduce_max(-mine);
  if (!most.ok()) return SetupError{most.status().message(), 1};
  if (!least.ok()) return SetupError{least.status().message(), 1};
  if (*most != mine || -*least != mine) {
    return SetupError{
        "the ranks were given different configs (only the io section may differ "
        "between ranks): give every rank the same --config and --set"};
  }
  return std::nullopt;
}

bool writes_outputs(const TrainRun& run) {
  return run.world->rank() == 0;
}

std::optional<SetupError> set_up(const ParsedArgs& a, TrainRun& run) {
  Result<TrainConfig> cfg = TrainConfig{};
  if (a.has("init-from")) {
    if (a.has("resume")) {
      return SetupError{
          "--init-from and --resume cannot be combined: a resumed run's weights "
          "and optimizer state come from its checkpoint"};
    }
    auto plan = plan_hf_import(a.get("init-from"));
    if (!plan.ok()) return SetupError{plan.status().message(), exit_code_for_import(plan.status())};
    run.import = std::move(*plan);
    cfg = config_over_import(a, *run.import);
  } else {
    cfg = load_config_from_args(a);
  }
  if (!cfg.ok()) return SetupError{cfg.status().message()};
  // --auto: the planner chooses schedule, B x M, placement and alpha (planner/planner.h). Else
  // optim.alpha "auto" is simulated with --profile, when given.
  if (a.has("auto")) {
    cfg = auto_configure(*cfg, a.get("profile"));
    if (!cfg.ok()) return SetupError{cfg.status().message()};
  }
  AlphaChoice predicted;
  cfg = resolve_auto_alpha(*cfg, a.get("profile"), &predicted);
  if (!cfg.ok()) return SetupError{cfg.status().message()};
  run.cfg = *cfg;
  if (auto err = join_world(a, run)) return err;
  const TrainConfig& c = run.cfg;

  auto data = load_token_data(c, c.data_train, kEmbeddedCorpusBytes, 20240520);
  if (!data.ok()) return SetupError{data.status().message()};
  run.data = std::move(*data);
  auto loader = DataLoader::create(run.data.tokens, c.batch_size, c.seq_len, run.data.name);
  if (!loader.ok()) return SetupError{loader.status().message()};
  run.loader = std::make_unique<DataLoader>(std::move(*loader));
  if (!c.data_val.empty()) {
    auto val = load_token_data(c, c.data_val, kEmbeddedValBytes, 20240521);
    if (!val.ok()) return SetupError{"data.val: " + val.status().message()};
    run.val_data = std::move(*val);
    auto val_loader = DataLoader::create(run.val_data.tokens, c.batch_size, c.seq_len,
                                         "validation " + run.val_data.name);
    if (!val_loader.ok()) return SetupError{val_loader.status().message()};
    run.val_loader = std::make_unique<DataLoader>(std::move(*val_loader));
  }

  if (a.has("metrics") && writes_outputs(run)) {
    run.metrics_path = a.get("metrics");
    run.metrics.open(run.metrics_path, std::ios::out | std::ios::trunc);
    if (!run.metrics)
      return SetupError{"cannot open metrics file " + run.metrics_path + " for writing"};
  }
  auto ckpt = checkpoint_options(a);
  if (!ckpt.ok()) return SetupError{ckpt.status().message()};
  run.ckpt = *ckpt;
  // With ranks, every rank writes its shard of each checkpoint and rank 0 publishes it (Note
  // [Sharded checkpoints]): rank 0 alone holds the directory and claims it.
  run.lineage = {new_run_id()};
  if (run.ckpt.save_every > 0 && writes_outputs(run)) {
    auto lock = CheckpointDirLock::acquire(run.ckpt.dir);
    if (!lock.ok()) return SetupError{lock.status().message(), exit_code_for(lock.status())};
    run.ckpt_lock.emplace(std::move(*lock));
    if (run.ckpt.resume.empty()) {  // a resumed run claims the directory once it knows its step
      auto claimed = claim_checkpoint_root(run.ckpt.dir, run.lineage, -1);
      if (!claimed.ok()) return SetupError{claimed.status().message()};
    }
  }
  if (run.ckpt.save_every > 0) {
    // Another rank may get here before rank 0 made the directory.
    std::error_code ec;
    std::filesystem::create_directories(run.ckpt.dir, ec);
    if (ec) {
      return SetupError{"cannot create checkpoint directory " + run.ckpt.dir + ": " + ec.message()};
    }
    auto e = create_configured_engine(c.io, run.ckpt.dir);
    if (!e.ok()) return SetupError{e.status().message()};
    run.ckpt_engine = std::move(*e);
  }
  if (a.has("trace") && !is_offloaded(c.schedule)) {
    return SetupError{
        "--trace needs an offloaded schedule (train.schedule horizontal or vertical)"};
  }
  if (a.has("report") && !a.has("metrics")) {
    return SetupError{"--report needs --metrics FILE: the report is drawn from the metrics"};
  }
  if (writes_outputs(run)) {
    run.trace_path = a.get("trace");
    run.report_path = a.get("report");
  }

  auto device = create_configured_device(c, run.world->local_rank());
  if (!device.ok()) return SetupError{device.status().message(), exit_code_for(device.status())};
  run.device = std::move(*device);
  auto transport = create_configured_transport(c, *run.device, *run.world);
  if (!transport.ok()) {
    return SetupError{transport.status().message(), exit_code_for(transport.status())};
  }
  auto trainer = create_trainer(*run.device, c, *run.world, std::move(*transport));
  if (!trainer.ok()) return SetupError{trainer.status().message(), exit_code_for(trainer.status())};
  run.trainer = std::move(*trainer);
  if (predicted.wait_iter_s > 0) {
    run.trainer->set_speculation_costs(predicted.iter_s, predicted.wait_iter_s, predicted.repair_s,
                                       "simulated");
  }
  run.quiet = a.has("quiet") || !writes_outputs(run);
  return std::nullopt;
}

void log_run(const TrainRun& run) {
  const ModelConfig& m = run.cfg.model;
  const Trainer& t = *run.trainer;
  log_info("model: " + std::to_string(m.n_layer) + " layers, " + std::to_string(m.n_head) +
           " heads, " + std::to_string(m.n_embd) + " channels, vocab " +
           std::to_string(m.vocab_size) + ": " +
           human_count(static_cast<double>(t.layout().parameter_count)) + " parameters");
  log_info("data: " + run.data.name + ", " + human_count(static_cast<double>(run.data.size)) +
           " tokens; batch " + std::to_string(run.cfg.batch_size) + " x " +
           std::to_string(run.cfg.seq_len) + " x " + std::to_string(run.cfg.grad_accum) +
           " micro-batches = " + std::to_string(t.tokens_per_step()) + " tokens/step");
  if (run.cfg.ranks > 1) {
    log_info("ranks: " + run.world->describe() + "; each trains " +
             std::to_string(run.cfg.grad_accum) + " of the step's " +
             std::to_string(run.cfg.grad_accum * run.cfg.ranks) + " micro-batches, " +
             std::to_string(t.tokens_per_step() * run.cfg.ranks) + " tokens/step in all");
  }
  log_info(std::string("device: ") + run.device->name());
  for (const std::string& line : t.describe()) log_info(line);
}

// --resume DIR: the trainer's state, the data position and the step counters from the
// checkpoint. Returns the step to start from.
Result<int64_t> resume(TrainRun& run) {
  STRATA_ASSIGN_OR_RETURN(std::string dir, resolve_checkpoint(run.ckpt.resume));
  auto meta = load_checkpoint(dir, run.cfg, [&](int64_t slab, const SlabPieceFn& fill) {
    return run.trainer->write_slab_pieces(slab, fill);
  });
  if (!meta.ok()) return meta.status();
  Status pos = run.loader->set_position(meta->data_position);
  if (!pos.ok()) return invalid_argument("checkpoint " + dir + ": " + pos.message());
  run.trainer->set_progress(meta->step, meta->adam_steps);
  log_info("resumed from " + dir + " at step " + std::to_string(meta->step));
  // Note [Checkpoint lineage]: this run continues the checkpoint's line.
  std::vector<std::string> lineage = meta->lineage;
  lineage.push_back(run.lineage.back());
  run.lineage = std::move(lineage);
  if (run.ckpt.save_every > 0 && writes_outputs(run)) {
    STRATA_ASSIGN_OR_RETURN(auto moved,
                            claim_checkpoint_root(run.ckpt.dir, run.lineage, meta->step));
    for (const std::string& m : moved) {
      log_info("checkpoint of another line moved aside (Note [Checkpoint lineage]): " + m);
    }
  }
  return meta->step;
}

// --init-from DIR: the trainer's weights from the plan's files, AdamW's moments zero and the step
// counters at 0, so training starts fresh from them (Note [Hugging Face import]).
Status init_from(TrainRun& run) {
  const HfImportPlan& plan = *run.import;
  STRATA_ASSIGN_OR_RETURN(
      HfImportStats st,
      import_hf_weights(plan, run.trainer->layout(), [&](int64_t slab, const SlabPieceFn& fill) {
        return run.trainer->write_slab_pieces(slab, fill);
      }));
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.2f s", st.seconds);
  std::string line = "imported " + plan.dir + " (" + enum_name(plan.model.arch) +
                     "): " + std::to_string(st.tensors) + " tensors, " +
                     human_count(static_cast<double>(st.parameters)) + " parameters, " +
                     plan.dtypes + ", " + format_bytes(st.bytes_read) + " read in " + seconds;
  if (!plan.ignored.empty()) {
    line += "; ignored " + std::to_string(plan.ignored.size()) + " tensors HF's loader ignores too";
  }
  log_info(line + "; the optimizer starts at step 0");
  return Status();
}

// The checkpoint metadata at the boundary after `steps_done` steps.
CheckpointMeta checkpoint_meta(const TrainRun& run, int64_t steps_done) {
  CheckpointMeta meta;
  meta.step = steps_done;
  meta.adam_steps = run.trainer->adam_steps();
  meta.data_position = run.loader->position();
  meta.seed = run.cfg.seed;
  meta.schedule = enum_name(run.cfg.schedule);
  meta.run_id = run.lineage.back();
  meta.lineage = run.lineage;
  return meta;
}

void note_saved(const CheckpointSaveStats& saved, const CheckpointReport& r, Progress& progress) {
  char line[320];
  if (r.behind) {
    std::snprintf(line, sizeof line,
                  "checkpoint %s: %s in %.3f s behind training (training stalled %.3f s)",
                  saved.dir.c_str(), format_bytes(saved.bytes).c_str(), r.write_s, r.stall_s);
  } else {
    std::snprintf(line, sizeof line, "checkpoint %s: %s in %.3f s (training stalled)",
                  saved.dir.c_str(), format_bytes(saved.bytes).c_str(), saved.seconds);
  }
  progress.note(line);
}

// The checkpoint after `steps_done` steps, at a standstill. With ranks, every rank writes its
// share (Note [Sharded checkpoints]).
Result<CheckpointReport> save(TrainRun& run, int64_t steps_done, Progress& progress) {
  Communicator& world = *run.world;
  if (world.size() > 1) {
    const SlabReader share = [&](int64_t slab, const SlabPieceFn& take) {
      return run.trainer->read_shard_pieces(slab, world.rank(), world.size(), take);
    };
    STRATA_ASSIGN_OR_RETURN(
        auto saved,
        save_sharded_checkpoint(*run.ckpt_engine, run.ckpt.dir, run.cfg,
                                checkpoint_meta(run, steps_done), share, run.ckpt.keep, world));
    const CheckpointReport r{steps_done, saved.seconds, saved.seconds, false};
    if (writes_outputs(run)) note_saved(saved, r, progress);
    return r;
  }
  STRATA_ASSIGN_OR_RETURN(
      auto saved, save_checkpoint(
                      *run.ckpt_engine, run.ckpt.dir, run.cfg, checkpoint_meta(run, steps_done),
                      [&](int64_t slab, const SlabPieceFn& take) {
                        return run.trainer->read_slab_pieces(slab, take);
                      },
                      run.ckpt.keep));
  const CheckpointReport r{steps_done, saved.seconds, saved.seconds, false};
  note_saved(saved, r, progress);
  return r;
}

// The checkpoint after `steps_done` steps begun behind training; false when the trainer takes
// no snapshots (the caller saves at a standstill).
Result<bool> start_save_behind(TrainRun& run, int64_t steps_done) {
  if (run.world->size() > 1) return false;  // every rank writes its share, at a standstill
  const auto t0 = std::chrono::steady_clock::now();
  auto snapshot = run.trainer->begin_snapshot();
  if (!snapshot.ok()) {
    if (snapshot.status().code() == ErrorCode::unavailable) return false;
    return snapshot.status();
  }
  const double boundary_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  run.background.start(snapshot->gate, steps_done, boundary_s,
                       [&run, meta = checkpoint_meta(run, steps_done), snap = *snapshot] {
                         return save_checkpoint(*run.ckpt_engine, run.ckpt.dir, run.cfg, meta, snap,
                                                run.ckpt.keep);
                       });
  return true;
}

// The checkpoint being written behind training, waited for.
Result<CheckpointReport> collect_save(TrainRun& run, Progress& progress) {
  STRATA_ASSIGN_OR_RETURN(CollectedSave c, run.background.collect());
  const CheckpointReport r{c.step, c.stall_s, c.stats.seconds, true};
  note_saved(c.stats, r, progress);
  return r;
}

Status write_trace(const Trainer& trainer, const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(nlohmann::json trace, trainer.last_step_trace());
  return write_whole_file(path, trace.dump() + "\n", "trace file");
}

// A checkpoint is due after `done` steps: every --save-every steps, and after the last.
bool checkpoint_due(const TrainRun& run, int64_t done) {
  const int64_t every = run.ckpt.save_every;
  return every > 0 && (done % every == 0 || done == run.cfg.steps);
}

// Validation is due after `done` steps: every train.eval_every steps, and after the last one
// whenever data.val is set.
bool eval_due(const TrainRun& run, int64_t done) {
  if (!run.val_loader) return false;
  const int64_t every = run.cfg.eval_every;
  return (every > 0 && done % every == 0) || done == run.cfg.steps;
}

// The validation loss under the weights after the last step: the first train.eval_batches
// batches of data.val (wrapping around a file shorter than that), the same batches every time.
Result<double> validate(TrainRun& run) {
  const int64_t BT = run.cfg.batch_size * run.cfg.seq_len, n = run.cfg.eval_batches;
  std::vector<int32_t> inputs(static_cast<size_t>(n * BT));  // (eval_batches, B, T)
  std::vector<int32_t> targets(inputs.size());               // (eval_batches, B, T)
  STRATA_RETURN_IF_ERROR(run.val_loader->set_position(0));
  for (int64_t b = 0; b < n; ++b) {
    run.val_loader->next_batch(inputs.data() + b * BT, targets.data() + b * BT);
  }
  return run.trainer->evaluate(inputs.data(), targets.data(), n);
}

// train.sample_every: text from the weights after `done` steps (Note [Sampling]): the working
// weights slab by slab (the master, rounded in bf16 mode: what the model computes with), from a
// newline (token 0 for a vocabulary too small for bytes), temperature 1, seed train.seed.
Result<std::string> sample_now(TrainRun& run) {
  const TrainConfig& c = run.cfg;
  const bool bytes = c.model.vocab_size >= 256;
  SampleOptions o;
  o.new_tokens = c.sample_tokens;
  o.temperature = 1.0;
  o.seed = static_cast<uint64_t>(c.seed);
  auto weights = [&](int64_t slab, float* dst) {
    STRATA_RETURN_IF_ERROR(run.trainer->read_slab_pieces(slab, [&](const SlabPiece& p) {
      std::copy_n(p.master, p.count, dst + p.begin);
      return Status();
    }));
    if (c.precision == Precision::bf16) {
      round_to_bf16(dst, dst, run.trainer->layout().slabs[static_cast<size_t>(slab)].numel);
    }
    return Status();
  };
  STRATA_ASSIGN_OR_RETURN(std::vector<int32_t> out,
                          generate(*run.device, c.model, weights, {bytes ? '\n' : 0}, o));
  std::string text;
  for (size_t i = 1; i < out.size(); ++i) {
    if (!bytes) {
      text += (i > 1 ? " " : "") + std::to_string(out[i]);
    } else if (out[i] >= 32 && out[i] < 127) {
      text += static_cast<char>(out[i]);
    } else {
      char esc[8];
      std::snprintf(esc, sizeof esc, out[i] == '\n' ? "\\n" : "\\x%02x", out[i]);
      text += esc;
    }
  }
  return text;
}

// After a step: a checkpoint written behind training collected once it is done (or waited for
// when the next is due: back-pressure), the checkpoint when one is due (behind training unless it
// is the last step's or --save-sync), then the step's metrics line.
Status after_step(TrainRun& run, const StepStats& st, double tokens_per_s, double flops_per_step,
                  Progress& progress) {
  const int64_t done = st.step + 1;
  std::optional<double> val_loss;
  if (eval_due(run, done)) {
    STRATA_ASSIGN_OR_RETURN(const double v, validate(run));
    val_loss = run.last_val_loss = v;
    char line[96];
    std::snprintf(line, sizeof line, "step %lld: validation loss %.4f",
                  static_cast<long long>(done), v);
    progress.note(line);
  }
  if (run.cfg.sample_every > 0 && done % run.cfg.sample_every == 0) {
    STRATA_ASSIGN_OR_RETURN(const std::string text, sample_now(run));
    progress.note("step " + std::to_string(done) + " sample: " + text);
  }
  const bool due = checkpoint_due(run, done);
  std::vector<CheckpointReport> finished;  // checkpoints finished at this boundary
  if (run.background.running() && (due || run.background.done())) {
    STRATA_ASSIGN_OR_RETURN(CheckpointReport r, collect_save(run, progress));
    finished.push_back(r);
  }
  if (due) {
    bool behind = false;
    if (run.ckpt.behind && done < run.cfg.steps) {
      STRATA_ASSIGN_OR_RETURN(behind, start_save_behind(run, done));
    }
    if (!behind) {
      STRATA_ASSIGN_OR_RETURN(CheckpointReport r, save(run, done, progress));
      finished.push_back(r);
    }
  }
  if (!run.metrics.is_open()) return Status::ok_status();
  const nlohmann::json line =
      metrics_line(st, tokens_per_s, flops_per_step, *run.device, *run.trainer, finished, val_loss);
  run.metrics << line.dump() << '\n';
  run.metrics.flush();
  if (!run.metrics) return io_error("writing metrics file " + run.metrics_path + " failed");
  return Status::ok_status();
}

// Note [Stopping on a signal]: the step boundary after the first SIGINT or SIGTERM, `done`
// steps done. Pending steps applied, a checkpoint when checkpointing is configured (unless this
// step just wrote one), where to resume from; returns 128 + the signal.
int stop_at_boundary(TrainRun& run, int sig, int64_t done, Progress& progress) {
  const std::string stopped = std::string("stopped by ") + signal_name(sig) + " after step " +
                              std::to_string(done) + " of " + std::to_string(run.cfg.steps);
  Status fin = run.trainer->finish();
  if (!fin.ok()) {
    progress.finish();
    return fail(stopped + ", but applying the pending steps failed: " + fin.to_string(), 1);
  }
  if (run.background.running()) {  // the last one due, begun behind training, finished first
    auto collected = collect_save(run, progress);
    if (!collected.ok()) {
      progress.finish();
      return fail(stopped + ", but its checkpoint failed: " + collected.status().to_string(),
                  collected.status().code() == ErrorCode::no_space ? 2 : 1);
    }
  }
  std::string resume_from;
  if (run.ckpt.save_every > 0 && done > 0) {
    if (!checkpoint_due(run, done)) {  // a due one was written after the step
      auto saved = save(run, done, progress);
      if (!saved.ok()) {
        progress.finish();
        return fail(stopped + ", but its checkpoint failed: " + saved.status().to_string(),
                    saved.status().code() == ErrorCode::no_space ? 2 : 1);
      }
    }
    auto dir = resolve_checkpoint(run.ckpt.dir);
    resume_from = dir.ok() ? "; resume with --resume " + *dir : "";
  } else if (!run.ckpt.resume.empty() && done > 0) {
    resume_from = "; no checkpoint is configured (--save-every N --checkpoint-dir DIR), so the " +
                  std::to_string(done) + " steps after " + run.ckpt.resume + " are lost";
  } else {
    resume_from = "; no checkpoint is configured (--save-every N --checkpoint-dir DIR)";
  }
  progress.finish();
  log_info(stopped + resume_from);
  return 128 + sig;
}

// Note [Data parallel ranks]: of the step's ranks x M micro-batches from the data stream, this
// rank's M, (M, B, T) each; the others' are read past, so every rank's loader stays at the
// stream's position.
void next_micro_batches(TrainRun& run, int32_t* inputs, int32_t* targets) {
  const int64_t BT = run.cfg.batch_size * run.cfg.seq_len, M = run.cfg.grad_accum;
  std::vector<int32_t> past_in, past_tg;  // (B, T) each: another rank's micro-batch
  for (int r = 0; r < run.cfg.ranks; ++r) {
    for (int64_t k = 0; k < M; ++k) {
      if (r == run.world->rank()) {
        run.loader->next_batch(inputs + k * BT, targets + k * BT);
        continue;
      }
      past_in.resize(static_cast<size_t>(BT));
      past_tg.resize(static_cast<size_t>(BT));
      run.loader->next_batch(past_in.data(), past_tg.data());
    }
  }
}

// The stop signal every rank acts on at this boundary (Note [Stopping on a signal]): the largest
// any rank has seen, so all ranks stop at the same step (a rank that stopped alone would leave the
// others waiting in a collective).
Result<int> agreed_stop_signal(TrainRun& run) {
  const int sig = stop_signal();
  if (run.world->size() == 1) return sig;
  STRATA_ASSIGN_OR_RETURN(const int64_t any, run.world->all_reduce_max(sig));
  return static_cast<int>(any);
}

const std::vector<FlagSpec> kTrainFlags = {
    {"config", true, false},         {"set", true, true},     {"device", true, false},
    {"metrics", true, false},        {"trace", true, false},  {"save-every", true, false},
    {"checkpoint-dir", true, false}, {"keep", true, false},   {"resume", true, false},
    {"quiet", false, false},         {"auto", false, false},  {"profile", true, false},
    {"save-sync", false, false},     {"report", true, false}, {"init-from", true, false}};

int train(const ParsedArgs& parsed, TrainRun& run) {
  if (auto err = set_up(parsed, run)) return fail(err->message, err->code);
  const TrainConfig& cfg = run.cfg;
  Trainer& trainer = *run.trainer;
  log_run(run);
  install_stop_signals();
  if (!set_scratch_files(trainer.scratch_files())) {
    log_warn("the store's file names are too long or too many to be removed after a crash");
  }

  int64_t start_step = 0;
  if (!run.ckpt.resume.empty()) {
    auto step = resume(run);
    if (!step.ok()) return fail(step.status().message(), exit_code_for_load(step.status()));
    start_step = *step;
  } else if (run.import) {
    Status imported = init_from(run);
    if (!imported.ok()) return fail(imported.message(), exit_code_for_import(imported));
  }

  // ---- The loop ---------------------------------------------------------------------------------
  const int64_t BT = cfg.batch_size * cfg.seq_len;
  std::vector<int32_t> inputs(static_cast<size_t>(BT * cfg.grad_accum));  // (M, B, T)
  std::vector<int32_t> targets(inputs.size());                            // (M, B, T)
  const int64_t step_tokens = trainer.tokens_per_step() * cfg.ranks;      // every rank's
  const double flops_per_step = gpt_train_flops(cfg.model, cfg.seq_len, step_tokens);
  Progress progress(start_step, cfg.steps, cfg.log_every, run.quiet);
  double first_loss = 0, last_loss = 0;
  const auto t_start = std::chrono::steady_clock::now();
  for (int64_t step = start_step; step < cfg.steps; step++) {
    auto sig = agreed_stop_signal(run);
    if (!sig.ok()) return fail("training stopped: " + sig.status().to_string(), 1);
    if (*sig) return stop_at_boundary(run, *sig, step, progress);
    next_micro_batches(run, inputs.data(), targets.data());
    // The trace shows the last step: steady state, with the previous step's pending work.
    if (!run.trace_path.empty()) trainer.set_record_trace(step == cfg.steps - 1);
    auto st = trainer.train_step(inputs.data(), targets.data());
    if (!st.ok()) {
      progress.finish();
      return fail("training stopped: " + st.status().to_string(), 1);
    }
    const double tokens_per_s = static_cast<double>(step_tokens) / st->seconds;
    if (step == start_step) first_loss = st->loss;
    last_loss = st->loss;
    progress.on_step(*st, tokens_per_s);
    Status after = after_step(run, *st, tokens_per_s, flops_per_step, progress);
    if (!after.ok()) {  // a full disk under a checkpoint is the user's to fix (2)
      progress.finish();
      return fail("training stopped: " + after.to_string(),
                  after.code() == ErrorCode::no_space ? 2 : 1);
    }
  }

  auto sig = agreed_stop_signal(run);
  if (!sig.ok()) return fail("training stopped: " + sig.status().to_string(), 1);
  if (*sig) return stop_at_boundary(run, *sig, cfg.steps, progress);

  // ---- The end: pending work, the trace, the summary --------------------------------------------
  Status fin = trainer.finish();
  if (!fin.ok()) {
    progress.finish();
    return fail("training stopped: " + fin.to_string(), 1);
  }
  if (!run.trace_path.empty()) {
    Status traced = write_trace(trainer, run.trace_path);
    if (!traced.ok()) return fail(traced.message(), 1);
  }
  if (!run.report_path.empty()) {
    run.metrics.close();
    Status reported = write_run_report(run.metrics_path, run.trace_path, run.report_path,
                                       "Strata run: " + run.metrics_path);
    if (!reported.ok()) return fail(reported.message(), 1);
    log_info("report written to " + run.report_path);
  }
  progress.finish();
  const double total_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  char summary[200];
  std::snprintf(summary, sizeof summary, "trained %lld steps in %.1f s; loss %.4f -> %.4f",
                static_cast<long long>(cfg.steps), total_s, first_loss, last_loss);
  std::string text = summary;
  if (run.last_val_loss) {
    char val[64];
    std::snprintf(val, sizeof val, "; validation loss %.4f", *run.last_val_loss);
    text += val;
  }
  log_info(text);
  return 0;
}

}  // namespace

int cmd_train(const std::vector<std::string>& args) {
  auto parsed = parse_args(args, kTrainFlags, "train");
  if (!parsed.ok()) return fail(parsed.status().message(), 2);
  TrainRun run;
  auto world = open_world();
  if (!world.ok()) return fail(world.status().message(), 2);
  run.world = std::move(*world);
  if (run.world->size() > 1) {
    set_log_rank(run.world->rank());
    if (run.world->rank() > 0) set_log_level(LogLevel::warn);  // rank 0 logs the run
  }
  const int code = train(*parsed, run);
  // A rank that fails leaves the others waiting in a collective: it ends them all, having said
  // why (its lines name the rank). Stops by signal are agreed (agreed_stop_signal): every rank
  // returns at the same boundary.
  if (code != 0 && code < 128 && run.world->size() > 1) run.world->abort_all(code);
  return code;
}

}  // namespace strata::cli
